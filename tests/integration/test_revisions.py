"""A running plan revised by an operator (``Client.revise``, ``dplan add``), on a real dev
server with the fake provider: subtasks added after one that is running wait for it and
run; a subtask not yet started is removed; a revision that breaks a rule is refused with
each problem, and changes nothing; every revision survives continue-as-new, and is in the
report, the log and the history (which replays)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from durable_plans.client import Client, Refused
from durable_plans.client._operator import default_operator
from durable_plans.domain.models import PlanStatus, Subtask, SubtaskStatus
from tests.integration.conftest import Harness
from tests.integration.gates import GatedProvider, first_call_of
from tests.integration.plans import by_id, make_plan
from tests.integration.replay import assert_replays
from tests.integration.test_ui import ui_for

pytestmark = pytest.mark.integration

DPLAN = Path(sys.executable).parent / "dplan"
WAIT_S = 60.0  # a bound on waiting for the plan, never asserted


@pytest.fixture
async def provider() -> AsyncIterator[GatedProvider]:
    async with GatedProvider(latency_ms=0, hold_s=40.0) as p:
        yield p


def dplan_env(harness: Harness) -> dict[str, str]:
    import os

    return {
        **os.environ,
        "TEMPORAL_ADDRESS": harness.settings.temporal_address,
        "TEMPORAL_NAMESPACE": harness.settings.temporal_namespace,
        "DPLAN_TASK_QUEUE": harness.settings.task_queue,
    }


async def test_subtasks_added_while_one_runs_wait_for_it_and_a_pending_one_is_removed(
    harness: Harness, tmp_path: Path
) -> None:
    assert isinstance(harness.provider, GatedProvider)
    held = harness.provider.gate("lead", 99, first_call_of("Survey the modules"))
    plan = make_plan(
        [
            ("lead", "Survey the modules", []),
            ("guess", "Write the three modules the plan guessed", ["lead"]),
            ("docs", "Document them", ["guess"]),
        ],
        prefix="revise",
    )
    # Continue-as-new after every two completions: the revision is carried across runs.
    handle = await harness.start(plan, max_completions_per_run=2)
    client = Client(harness.client, harness.settings)
    try:
        deadline = time.monotonic() + WAIT_S
        while held.arrived < 1:  # lead's first call is held: lead is running
            assert time.monotonic() < deadline, "lead never called the model"
            await asyncio.sleep(0.05)

        # One refusal naming every problem; nothing changes.
        bad = [
            Subtask(id="guess", description="again", depends_on=("lead",)),
            Subtask(id="x", description="x", agent="wizard", depends_on=("lead",)),
            Subtask(id="y", description="y", depends_on=("z",)),
            Subtask(id="z", description="z", depends_on=("y",)),
        ]
        with pytest.raises(Refused) as refused:
            await client.revise(plan.id, add=bad, remove=["lead"])
        problems = refused.value.problems
        assert len(problems) == 4, problems
        assert any("'lead' is running" in p for p in problems), problems
        assert any("duplicate id 'guess'" in p and p.startswith("add[0]") for p in problems)
        assert any("unknown agent 'wizard'" in p and p.startswith("add[1]") for p in problems)
        assert any(p.startswith("cycle:") for p in problems), problems
        assert [r.id for r in (await client.status(plan.id)).subtasks] == ["lead", "guess", "docs"]

        # From the CLI, as an operator would: ten modules found, the guessed docs dropped.
        added = [
            {"id": f"m{i}", "description": f"Write module {i}", "depends_on": ["lead"]}
            for i in range(10)
        ]
        path = tmp_path / "add.json"
        path.write_text(json.dumps({"subtasks": added}))
        done = await asyncio.to_thread(
            subprocess.run,
            [DPLAN, "add", plan.id, str(path), "--remove", "docs", "--reason", "eleven modules"],
            env=dplan_env(harness),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().startswith(f"revision 1 of plan '{plan.id}': added m0, m1")
        now = await client.status(plan.id)
        rows = by_id(now)
        assert "docs" not in rows
        assert {rows[f"m{i}"].status for i in range(10)} == {SubtaskStatus.PENDING}
        assert rows["lead"].status is SubtaskStatus.RUNNING
        # The page's data draws the revised plan: the added subtasks, with their
        # dependencies and definitions, not the plan the run started with.
        async with ui_for(harness) as ui, aiohttp.ClientSession() as http:
            async with http.get(f"{ui.url}api/plans/{plan.id}") as resp:
                assert resp.status == 200
                page = await resp.json()
            async with http.get(f"{ui.url}api/plans/{plan.id}/subtasks/m3") as resp:
                assert resp.status == 200, await resp.text()
        drawn = {s["id"]: s for s in page["plan"]["subtasks"]}
        assert list(drawn) == ["lead", "guess", *(f"m{i}" for i in range(10))]
        assert drawn["m3"]["depends_on"] == ["lead"]
        assert page["report"]["revisions"][0]["removed"] == ["docs"]
    finally:
        held.release()
    report = await handle.result()

    assert report.status is PlanStatus.COMPLETED
    assert [r.id for r in report.subtasks] == ["lead", "guess", *(f"m{i}" for i in range(10))]
    assert report.counts.completed == 12
    (revision,) = report.revisions
    assert revision.added == tuple(f"m{i}" for i in range(10))
    assert revision.removed == ("docs",)
    assert (revision.number, revision.reason) == (1, "eleven modules")
    assert revision.by == default_operator()
    revised = [e for e in report.log if e.kind == "revised"]
    assert len(revised) == 1 and revised[0].detail.endswith("removed docs (eleven modules)")
    # It continued as new after the revision (the runs after the first carried it), and
    # every run replays.
    assert await assert_replays(harness.client, [plan.id]) >= 2


async def test_a_revision_of_an_ended_plan_is_refused(harness: Harness) -> None:
    plan = make_plan([("only", "Do the one thing", [])], prefix="revise-ended")
    await (await harness.start(plan)).result()
    client = Client(harness.client, harness.settings)
    with pytest.raises(Refused, match="is not running"):
        await client.revise(plan.id, add=[Subtask(id="more", description="more")])
