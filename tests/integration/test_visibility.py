"""Finding plans: search attributes, memo, ``dplan list`` and ``dplan setup`` on real servers.

Visibility is eventually consistent: every read of it polls with a bounded wait for the
rows it expects (``_eventually``), never sleeps and asserts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_plans.cli.main import main
from durable_plans.client import Client as PlansClient
from durable_plans.dev_server import dynamic_config_args
from durable_plans.domain import search_attributes as sa
from durable_plans.domain.models import Plan, PlanStatus
from durable_plans.embedded import DEV_SERVER_STARTUP
from durable_plans.namespace_setup import check_search_attributes
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.testing import FakeProvider
from durable_plans.ui import UiSecurity, running_ui
from durable_plans.workflows.visibility import PROGRESS_INTERVAL
from tests.integration.conftest import (
    Harness,
    provider_settings,
    running_worker,
    temporal_binary,
)
from tests.integration.plans import make_plan, run_plan
from tests.integration.replay import assert_replays

pytestmark = pytest.mark.integration

T = TypeVar("T")
UPSERT = EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
VISIBILITY_WAIT_S = 20.0

FAILING = [
    ("deps", "Add dependencies [fail:400]", []),
    ("ui", "Write the UI", ["deps"]),
    ("docs", "Write the docs", []),
]
DIAMOND = [
    ("deps", "Add http and provider", []),
    ("api", "Write the API client", ["deps"]),
    ("home", "Write the home screen", ["deps"]),
    ("settings", "Write the settings screen", ["deps"]),
    ("wire", "Wire screens to the API client", ["api", "home", "settings"]),
    ("docs", "Document the architecture", []),
]


async def _eventually(read: Callable[[], Awaitable[T]], ok: Callable[[T], bool], *, what: str) -> T:
    """Read until ``ok``; a bounded wait for visibility to catch up with the history."""
    deadline = time.monotonic() + VISIBILITY_WAIT_S
    while True:
        value = await read()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"visibility never showed {what}; last read: {value!r}")
        await asyncio.sleep(0.1)


def _address(client: Client) -> str:
    return client.service_client.config.target_host


def _dplan(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, client: Client, *args: str
) -> tuple[int, str, str]:
    """``dplan ARGS`` in process against ``client``'s server."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", _address(client))
    monkeypatch.setenv("TEMPORAL_NAMESPACE", client.namespace)
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def _dplan_async(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, client: Client, *args: str
) -> tuple[int, str, str]:
    # main() runs its own event loop (asyncio.run): give it a thread of its own.
    return await asyncio.to_thread(_dplan, capsys, monkeypatch, client, *args)


async def _upserts(client: Client, workflow_id: str) -> int:
    """Upserts of our attributes in a workflow's history. The SDK makes upserts of its own
    (``TemporalChangeVersion``, for ``workflow.patched``, which no workflow asks since
    0.2.0); not ours."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    upserts = (
        event.upsert_workflow_search_attributes_event_attributes.search_attributes
        for event in history.events
        if event.event_type == UPSERT
    )
    return sum(1 for attrs in upserts if any(n.startswith("Dplan") for n in attrs.indexed_fields))


def _temporal_list(client: Client, query: str) -> list[dict[str, Any]]:
    """The real ``temporal workflow list --query`` against the test server."""
    done = subprocess.run(
        [
            temporal_binary(),
            "workflow",
            "list",
            "--address",
            _address(client),
            "--namespace",
            client.namespace,
            "--query",
            query,
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    text = done.stdout.strip()
    if not text:
        return []
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = [json.loads(line) for line in text.splitlines() if line.strip()]
    return parsed if isinstance(parsed, list) else [parsed]


async def test_failed_plan_is_found_by_temporal_cli_and_dplan_list(
    harness: Harness, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = Plan.model_validate(
        {**make_plan(FAILING, prefix="vis-failed").model_dump(), "tenant": "team-a"}
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is not None and report.status is PlanStatus.FAILED
    # A plan of no tenant, which --tenant must leave out.
    other = make_plan(FAILING[2:], prefix="vis-untenanted")
    other_report, _ = await run_plan(harness.client, other, harness.task_queue)
    assert other_report.status is PlanStatus.COMPLETED

    query = (
        f'{sa.STATUS.name}="failed" AND {sa.PLAN_ID.name}="{plan.id}" AND {sa.TENANT.name}="team-a"'
    )
    rows = await _eventually(
        lambda: asyncio.to_thread(_temporal_list, harness.client, query),
        lambda rows: len(rows) == 1,
        what=f"plan {plan.id} under {query}",
    )
    assert rows[0]["execution"]["workflowId"] == plan.id

    async def listed() -> list[dict[str, Any]]:
        code, out, err = await _dplan_async(
            capsys,
            monkeypatch,
            harness.client,
            "list",
            "--status",
            "failed",
            "--tenant",
            "team-a",
            "--json",
        )
        assert code == 0, err
        return [row for row in json.loads(out) if row["plan_id"] == plan.id]

    (row,) = await _eventually(listed, lambda rows: len(rows) == 1, what="dplan list --status")
    assert row["status"] == "failed" and row["tenant"] == "team-a"
    assert (row["completed"], row["total"]) == (report.counts.completed, len(plan.subtasks))
    assert row["tokens"] == report.usage.total_tokens > 0
    assert row["goal"] == plan.goal

    # The memo was set by the workflow: run_plan starts it without one. When the plan
    # ended it added where its work is (the report's workspace).
    description = await harness.client.get_workflow_handle(plan.id).describe()
    assert report.workspace is not None
    assert await description.memo() == {
        "goal": plan.goal,
        "subtask_count": 3,
        "tenant": "team-a",
        "workspace": report.workspace.model_dump(mode="json"),
    }

    # By tenant: the plan of no tenant, visible with its attributes, is not listed.
    plans = PlansClient(harness.client, harness.settings)
    (untenanted,), _ = await _eventually(
        lambda: plans.list_plans(query=f'{sa.PLAN_ID.name}="{other.id}"', status="completed"),
        lambda found: len(found[0]) == 1,
        what=f"plan {other.id}",
    )
    assert untenanted.tenant is None
    by_tenant, with_attributes = await plans.list_plans(tenant="team-a")
    assert with_attributes and {r.tenant for r in by_tenant} == {"team-a"}
    assert plan.id in {r.plan_id for r in by_tenant}
    assert other.id not in {r.plan_id for r in by_tenant}
    monkeypatch.setenv("COLUMNS", "200")  # rich's width: one line per plan
    code, out, _ = await _dplan_async(
        capsys, monkeypatch, harness.client, "list", "--tenant", "team-a"
    )
    assert code == 0 and out.splitlines()[0].split()[:3] == ["PLAN", "TENANT", "STATUS"]
    (line,) = [ln for ln in out.splitlines() if ln.startswith(plan.id)]
    assert line.split()[:3] == [plan.id, "team-a", "failed"]

    # The failed child carries its plan and agent from its start on.
    child = await harness.client.get_workflow_handle(f"{plan.id}/deps").describe()
    assert child.typed_search_attributes.get(sa.PLAN_ID) == plan.id
    assert child.typed_search_attributes.get(sa.AGENT) == "coder"
    assert await _upserts(harness.client, f"{plan.id}/deps") == 0
    await assert_replays(harness.client, [plan.id, f"{plan.id}/deps", f"{plan.id}/docs"])


async def test_attributes_of_a_finished_plan_equal_its_report_and_upserts_are_bounded(
    harness: Harness,
) -> None:
    plan = make_plan(DIAMOND, prefix="vis-done")
    report, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is None and report.status is PlanStatus.COMPLETED
    handle = harness.client.get_workflow_handle(plan.id)

    async def attributes() -> dict[str, Any]:
        found = (await handle.describe()).typed_search_attributes
        return {key.name: found.get(key) for key in sa.PLAN_ATTRIBUTES}

    expected = {
        sa.PLAN_ID.name: plan.id,
        sa.STATUS.name: "completed",
        sa.GOAL.name: plan.goal,
        sa.COMPLETED.name: report.counts.completed,
        sa.FAILED.name: report.counts.failed,
        sa.TOKENS.name: report.usage.total_tokens,
        sa.COST_USD.name: pytest.approx(report.usage.cost_usd),
        sa.TENANT.name: None,  # set only on a plan that has one
    }
    await _eventually(attributes, lambda found: found == expected, what=f"{expected}")

    # One upsert when the run starts, one when it ends, and at most one progress upsert
    # per PROGRESS_INTERVAL of its duration; never one per subtask or per event.
    bound = 2 + int(report.duration_s // PROGRESS_INTERVAL.total_seconds()) + 1
    upserts = await _upserts(harness.client, plan.id)
    assert 2 <= upserts <= bound, (upserts, report.duration_s)
    for st in plan.subtasks:
        assert await _upserts(harness.client, f"{plan.id}/{st.id}") == 0
    # Histories that set attributes replay on a Replayer, which knows nothing of them.
    await assert_replays(harness.client, [plan.id, f"{plan.id}/wire"])


async def test_dplan_list_rejects_a_bad_query_in_one_line(
    harness: Harness, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = await _dplan_async(
        capsys, monkeypatch, harness.client, "list", "--query", "DplanStatus = = 'x"
    )
    assert code == 2 and out == ""
    assert err.startswith("error: invalid query:") and len(err.strip().splitlines()) == 1
    code, _, err = await _dplan_async(
        capsys, monkeypatch, harness.client, "list", "--status", "sleeping"
    )
    assert code == 2 and "unknown status 'sleeping'" in err


async def test_without_registered_attributes_plans_run_with_one_warning_then_setup(
    tmp_path: Path,
    provider: FakeProvider,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_startup_timeout=DEV_SERVER_STARTUP,
        dev_server_existing_path=temporal_binary(),
        plugins=[DurablePlansPlugin()],
        dev_server_log_level="error",
        dev_server_extra_args=dynamic_config_args(),
    )
    try:
        client = env.client
        settings = provider_settings(client, provider, tmp_path)
        caplog.set_level(logging.WARNING)
        async with running_worker(client, settings):
            plan = make_plan([*FAILING[2:], ("more", "Write more docs", ["docs"])])
            report, failure = await run_plan(client, plan, settings.task_queue)
        assert failure is None and report.status is PlanStatus.COMPLETED
        warnings = [r for r in caplog.records if r.name == "dplan" and r.levelno >= logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        line = warnings[0].getMessage()
        assert "search_attributes_missing" in line and "dplan setup" in line
        assert await _upserts(client, plan.id) == 0
        description = await client.get_workflow_handle(plan.id).describe()
        assert report.workspace is not None
        assert await description.memo() == {
            "goal": plan.goal,
            "subtask_count": 2,
            "workspace": report.workspace.model_dump(mode="json"),
        }
        await assert_replays(client, [plan.id])

        # dplan list still works: from execution status and memo, fewer columns.
        async def listed() -> list[dict[str, Any]]:
            code, out, err = await _dplan_async(
                capsys, monkeypatch, client, "list", "--status", "completed", "--json"
            )
            assert code == 0, err
            return json.loads(out)  # type: ignore[no-any-return]

        (row,) = await _eventually(listed, lambda rows: len(rows) == 1, what="the plan")
        assert (row["plan_id"], row["status"], row["total"]) == (plan.id, "completed", 2)
        assert row["tokens"] is None and row["completed"] is None
        # The plan page's list says why its columns are dashes, and what fills them.
        plans = PlansClient(client, settings)
        async with (
            running_ui(plans, UiSecurity(), port=0) as ui,
            aiohttp.ClientSession() as web,
            web.get(f"{ui.url}api/plans") as resp,
        ):
            listing = await resp.json()
        assert [r["plan_id"] for r in listing["plans"]] == [plan.id]
        assert "`dplan setup` registers them" in listing["note"]

        code, out, _ = await _dplan_async(capsys, monkeypatch, client, "setup")
        assert code == 0 and out.startswith(f"added {len(sa.ALL)} search attributes")
        assert all(key.name in out for key in sa.ALL)
        code, out, _ = await _dplan_async(capsys, monkeypatch, client, "setup")
        assert code == 0 and out.startswith("nothing to add")
        assert await check_search_attributes(client) is True
    finally:
        await env.shutdown()
