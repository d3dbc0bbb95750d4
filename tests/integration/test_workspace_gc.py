"""State with a lifetime: a finished plan's trees leave the worker's state directory after
the retention, by ``dplan gc`` and on the worker's own schedule, while its commits, refs
and result branch stay; a running or paused plan's trees, and everything while Temporal
cannot be reached, are kept (``durable_plans/workspace_gc.py``)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import temporalio.client
from temporalio.client import WorkflowHandle

from durable_plans.cli.main import main
from durable_plans.client import Client
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, Subtask, SubtaskStatus
from durable_plans.workspace_gc import collect, run_periodically
from tests.conftest import closed_port
from tests.integration.conftest import Harness
from tests.integration.plans import run_plan
from tests.integration.workspace_files import git

pytestmark = pytest.mark.integration


def _write(path: str, content: str) -> str:
    return f"<<write_file {json.dumps({'path': path, 'content': content})}>>"


def _plan(harness: Harness, name: str, *extra: Subtask, **fields: Any) -> Plan:
    return Plan(
        id=f"{name}-{uuid.uuid4().hex[:8]}",
        goal="trees with a lifetime",
        subtasks=(
            Subtask(id="api", description="Write the API " + _write("api.txt", "api\n")),
            Subtask(
                id="doc",
                description="Document it " + _write("doc.txt", "doc\n"),
                depends_on=("api",),
            ),
            *extra,
        ),
        **fields,
    )


def _files_of(state: Path, plan_id: str) -> list[Path]:
    """Everything in the state directory that belongs to the plan (by its folder)."""
    folder = state / "trees" / plan_id
    return sorted(folder.rglob("*")) if folder.exists() else []


def _dplan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``dplan ARGS`` in this process: exit code, standard output, standard error."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _env(monkeypatch: pytest.MonkeyPatch, harness: Harness, address: str | None = None) -> None:
    s = harness.settings
    monkeypatch.setenv("TEMPORAL_ADDRESS", address or s.temporal_address)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", s.temporal_namespace)
    monkeypatch.setenv("DPLAN_STATE_DIR", str(s.state_dir))
    monkeypatch.delenv("DPLAN_TREE_RETENTION", raising=False)


async def test_dplan_gc_removes_a_finished_plans_trees_and_keeps_its_commits(
    harness: Harness, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _plan(harness, "gc-done")
    report, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is None and report.status is PlanStatus.COMPLETED
    state, workspace = harness.settings.state_dir, harness.settings.workspace
    made = _files_of(state, plan.id)
    trees = [p for p in made if p.is_dir() and p.parent.name == plan.id]
    assert len(trees) == 2  # one per subtask, each with its index, state and lock
    assert {p.suffix for p in made if p.parent.name == plan.id} >= {".index", ".state", ".lock"}
    refs = git(workspace, "for-each-ref", "--format=%(refname) %(objectname)").stdout
    _env(monkeypatch, harness)

    # The default retention (a day) keeps a plan that has just ended.
    code, out, _ = await asyncio.to_thread(_dplan, capsys, "gc", "--json")
    assert code == 0
    (row,) = [r for r in json.loads(out)["plans"] if r["plan_id"] == plan.id]
    assert (row["status"], row["action"]) == ("closed", "kept")
    assert row["kept"]["trees"] == 2 and "closed less than 1d ago" in row["reason"]

    # A dry run says what would go and removes nothing.
    code, out, _ = await asyncio.to_thread(
        _dplan, capsys, "gc", "--older-than", "0", "--dry-run", "--json"
    )
    assert code == 0
    dry = json.loads(out)
    (row,) = [r for r in dry["plans"] if r["plan_id"] == plan.id]
    assert row["action"] == "would remove" and row["removed"]["trees"] == 2
    assert row["removed"]["files"] >= 6 and row["removed"]["bytes"] > 0
    assert _files_of(state, plan.id) == made

    code, out, _ = await asyncio.to_thread(_dplan, capsys, "gc", "--older-than", "0")
    assert code == 0
    assert f"{plan.id}  closed  removed 2 trees" in out
    # Nothing of the plan is left in the state directory ...
    assert not (state / "trees" / plan.id).exists()
    assert [p for p in state.rglob("*") if plan.id in str(p)] == []
    # ... while its result and every ref stay, naming commits that are still there.
    assert git(workspace, "for-each-ref", "--format=%(refname) %(objectname)").stdout == refs
    ws = report.workspace
    assert ws is not None and ws.result is not None
    assert git(workspace, "rev-parse", f"dplan/{plan.id}").stdout.strip() == ws.result
    assert git(workspace, "show", f"{ws.result}:doc.txt").stdout == "doc\n"
    assert git(workspace, "fsck", "--no-dangling", "--connectivity-only").returncode == 0

    # A second pass has nothing left to do.
    code, out, _ = await asyncio.to_thread(_dplan, capsys, "gc", "--older-than", "0", "--json")
    assert code == 0 and plan.id not in out


async def _paused(handle: WorkflowHandle[Any, PlanReport], subtask: str) -> None:
    """Until the plan says ``subtask`` is paused (the test's own timeout bounds it)."""
    while True:
        report = await handle.query("status", result_type=PlanReport)
        rows = {r.id: r for r in report.subtasks}
        if rows[subtask].status is SubtaskStatus.PAUSED and rows["doc"].commit:
            return
        await asyncio.sleep(0.1)


async def _gone(path: Path) -> None:
    """Until ``path`` no longer exists (the test's own timeout bounds it)."""
    while await asyncio.to_thread(path.exists):  # noqa: ASYNC110 - no event to wait on
        await asyncio.sleep(0.1)


async def test_a_paused_plans_trees_are_kept_until_it_ends_then_the_worker_removes_them(
    harness: Harness,
) -> None:
    plan = _plan(
        harness,
        "gc-paused",
        Subtask(id="broken", description="Call the API [fail:400]"),
        on_failure="pause",
    )
    handle = await harness.start(plan)
    await _paused(handle, "broken")
    state = harness.settings.state_dir
    made = _files_of(state, plan.id)
    assert made
    client = Client(harness.client, harness.settings)

    # Paused on a failure is Running to Temporal: nothing is touched, whatever the age.
    report = await client.gc(older_than=timedelta(0))
    (row,) = [r for r in report.plans if r.plan_id == plan.id]
    assert (row.status, row.action, row.trees_removed) == ("running", "kept", 0)
    assert "running" in row.reason
    assert _files_of(state, plan.id) == made

    # Once it ends, the worker's own schedule removes its trees.
    await client.cancel(plan.id)
    with pytest.raises(temporalio.client.WorkflowFailureError):
        await handle.result()
    collecting = asyncio.create_task(
        run_periodically(harness.client, state, timedelta(0), interval=timedelta(seconds=0.2))
    )
    try:
        await _gone(state / "trees" / plan.id)
    finally:
        collecting.cancel()
        await asyncio.gather(collecting, return_exceptions=True)
    assert git(harness.settings.workspace, "for-each-ref", f"refs/dplan/{plan.id}/").stdout


async def test_nothing_is_removed_when_temporal_cannot_be_reached_or_does_not_know_the_plan(
    harness: Harness, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _plan(harness, "gc-offline")
    report, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is None and report.status is PlanStatus.COMPLETED
    state = harness.settings.state_dir
    made = _files_of(state, plan.id)
    # Trees of a plan Temporal has never heard of (another namespace's, say).
    ghost = state / "trees" / "ghost-plan" / "0123456789%2Fa"
    ghost.mkdir(parents=True)
    (ghost / "notes.txt").write_text("kept\n")

    nowhere = f"127.0.0.1:{closed_port()}"
    offline = await temporalio.client.Client.connect(nowhere, lazy=True)
    gone = await collect(offline, state, timedelta(0))
    assert not gone.temporal_reachable and gone.trees_removed == 0
    assert {r.status for r in gone.plans} == {"unreachable"}
    assert all("Temporal cannot be reached" in r.reason for r in gone.plans)
    assert _files_of(state, plan.id) == made

    _env(monkeypatch, harness, address=nowhere)
    code, _, err = await asyncio.to_thread(_dplan, capsys, "gc", "--older-than", "0")
    assert code == 1 and "cannot reach a Temporal server" in err
    assert _files_of(state, plan.id) == made

    _env(monkeypatch, harness)
    code, out, _ = await asyncio.to_thread(_dplan, capsys, "gc", "--older-than", "0", "--json")
    assert code == 0
    rows = {r["plan_id"]: r for r in json.loads(out)["plans"]}
    assert rows["ghost-plan"]["status"] == "unknown" and rows["ghost-plan"]["action"] == "kept"
    assert "unknown to Temporal" in rows["ghost-plan"]["reason"]
    assert (ghost / "notes.txt").read_text() == "kept\n"
    assert rows[plan.id]["action"] == "removed" and not (state / "trees" / plan.id).exists()

    code, _, err = await asyncio.to_thread(_dplan, capsys, "gc", "--older-than", "two days")
    assert code == 2 and "--older-than: 'two days' is not a duration" in err
