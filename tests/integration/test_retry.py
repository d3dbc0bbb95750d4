"""Retrying a finished plan without paying twice: ``dplan retry`` and Temporal Web's Reset.

A five-subtask plan whose middle subtask gets 401 until the key is fixed (``KeyGate``).
Every assertion counts what reached the provider per subtask: a completed subtask that
is asked again is a call paid twice.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from durable_plans.cli.operate_command import retry_command
from durable_plans.client._plans import plan_status
from durable_plans.domain.models import PlanReport, PlanStatus, SubtaskStatus, Usage
from tests.integration.plans import by_id, make_plan, run_plan
from tests.integration.step_in_support import DOWN, NEEDS_KEY, KeyGate, Rig, gated_rig

pytestmark = pytest.mark.integration

# a, b, e independent; c needs the key and d needs c.
PLAN = [
    ("a", "task-a Inspect the repository", []),
    ("b", "task-b Write the docs", []),
    ("c", f"task-c Call the weather API {NEEDS_KEY}", ["a"]),
    ("d", "task-d Render the forecast", ["c"]),
    ("e", "task-e Write the changelog", []),
]
MARKERS = ("task-a", "task-b", "task-c", "task-d", "task-e")
TURNS = 2  # a completed subtask of the fake agent: one tool turn, then the answer


@pytest.fixture
async def rig(client: Client, tmp_path: Path) -> AsyncIterator[Rig]:
    async with gated_rig(client, tmp_path, "retry") as rig:
        yield rig


def new_requests(gate: KeyGate, before: dict[str, int]) -> dict[str, int]:
    now = gate.count(*MARKERS)
    return {m: now[m] - before[m] for m in MARKERS if now[m] != before[m]}


async def first_run_fails(rig: Rig, **fields: Any) -> tuple[str, PlanReport, str]:
    plan = make_plan(PLAN, prefix="retry")
    handle = await rig.start(plan, **fields)
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    report = await plan_status(rig.client, plan.id)
    rows = by_id(report)
    assert rows["c"].status is SubtaskStatus.FAILED
    assert rows["c"].error.type == "Authentication"
    assert rows["d"].status is SubtaskStatus.SKIPPED
    assert {s for s in "abe" if rows[s].status is SubtaskStatus.COMPLETED} == set("abe")
    # Every completed subtask asked exactly its two turns; c was refused once (401 is not
    # retried); d never ran.
    assert rig.gate.count(*MARKERS) == {
        "task-a": TURNS,
        "task-b": TURNS,
        "task-c": 1,
        "task-d": 0,
        "task-e": TURNS,
    }
    return plan.id, report, handle.first_execution_run_id or ""


async def test_retry_reruns_only_what_failed_after_continue_as_new(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two completions per run: the first run continues as new before it fails.
    plan_id, failed, first_run = await first_run_fails(rig, max_completions_per_run=2)
    first = await rig.client.get_workflow_handle(plan_id, run_id=first_run).describe()
    assert first.status == WorkflowExecutionStatus.CONTINUED_AS_NEW

    rig.gate.fix()
    before = rig.gate.count(*MARKERS)
    code = await retry_command(
        plan_id,
        subtasks=[],
        embedded=False,
        json_output=True,
        no_wait=False,
        settings=rig.settings,
    )
    out = capsys.readouterr().out
    assert code == 0, out
    report = PlanReport.model_validate_json(out)
    # Only the failed and the skipped subtask reached the provider again.
    assert new_requests(rig.gate, before) == {"task-c": TURNS, "task-d": TURNS}

    rows = by_id(report)
    assert report.status is PlanStatus.COMPLETED
    assert report.counts.completed == 5
    # The kept ones are the first run's, unchanged (result, branch, usage, calls).
    for sid in "abe":
        assert rows[sid] == by_id(failed)[sid]
    # c counts its failed attempt too; d ran once.
    assert rows["c"].retries == 1 and rows["c"].llm_calls == 1 + TURNS
    assert rows["d"].retries == 0 and rows["d"].llm_calls == TURNS
    assert report.usage == sum_usage(report)
    # The new run is the plan's latest, and it completed.
    described = await rig.client.get_workflow_handle(plan_id).describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED


def sum_usage(report: PlanReport) -> Usage:
    return Usage.total(r.usage for r in report.subtasks)


async def test_retry_after_cancel_and_of_named_completed_subtasks(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = [("a", "task-a Inspect the repository", []), ("b", f"task-b Deploy {DOWN}", ["a"])]
    steps += [("e", "task-e Write the changelog", ["a"])]
    plan = make_plan(steps, prefix="retry-cancel")
    handle = await rig.start(plan)
    # b keeps getting 503 (retried with backoff); cancel once a and e are done.
    while True:
        report = await rig.client.get_workflow_handle(plan.id).query(
            "status", result_type=PlanReport
        )
        rows = by_id(report)
        if rows["a"].status is rows["e"].status is SubtaskStatus.COMPLETED and (
            rig.gate.count("task-b")["task-b"] >= 1
        ):
            break
        await asyncio.sleep(0.1)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    rig.gate.fix()
    before = rig.gate.count(*MARKERS)
    # Also run e again (a completed subtask; it has no dependents).
    code = await retry_command(
        plan.id,
        subtasks=["e"],
        embedded=False,
        json_output=True,
        no_wait=False,
        settings=rig.settings,
    )
    out = capsys.readouterr().out
    assert code == 0, out
    report = PlanReport.model_validate_json(out)
    assert report.status is PlanStatus.COMPLETED
    assert new_requests(rig.gate, before) == {"task-b": TURNS, "task-e": TURNS}
    rows = by_id(report)
    assert rows["b"].retries == 1 and rows["e"].retries == 1
    assert rows["e"].llm_calls == 2 * TURNS  # both runs of e are in the report


async def test_retry_refuses_what_it_cannot_do(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = make_plan([("a", "task-a Inspect the repository", [])], prefix="retry-done")
    report, _ = await run_plan(rig.client, plan, rig.settings.task_queue)
    assert report.status is PlanStatus.COMPLETED

    async def retry(*subtasks: str) -> tuple[int, str]:
        code = await retry_command(
            plan.id,
            subtasks=list(subtasks),
            embedded=False,
            json_output=True,
            no_wait=True,
            settings=rig.settings,
        )
        return code, capsys.readouterr().err

    code, err = await retry()
    assert code == 1 and "nothing to retry" in err
    code, err = await retry("nope")
    assert code == 1 and "has no subtask 'nope'" in err
    code = await retry_command(
        "no-such-plan",
        subtasks=[],
        embedded=False,
        json_output=True,
        no_wait=True,
        settings=rig.settings,
    )
    assert code == 1
    assert "no plan with id 'no-such-plan'" in capsys.readouterr().err


async def reset_to(client: Client, plan_id: str, which: str) -> str:
    """Temporal Web's "Reset" to the first or the last completed workflow task; returns the
    new run's id."""
    handle = client.get_workflow_handle(plan_id)
    events = [e async for e in handle.fetch_history_events()]
    completed = [
        e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]
    event_id = completed[0] if which == "first" else completed[-1]
    described = await handle.describe()
    response = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=plan_id, run_id=described.run_id),
            reason=f"test: reset to the {which} workflow task",
            workflow_task_finish_event_id=event_id,
            request_id=str(uuid.uuid4()),
        )
    )
    return response.run_id


async def test_temporal_web_reset_points(rig: Rig) -> None:
    plan_id, _, _ = await first_run_fails(rig)
    rig.gate.fix()

    # Last workflow task: the failures are before it in the history; nothing runs again.
    before = rig.gate.count(*MARKERS)
    run_id = await reset_to(rig.client, plan_id, "last")
    with pytest.raises(WorkflowFailureError):
        await rig.client.get_workflow_handle(plan_id, run_id=run_id).result()
    assert new_requests(rig.gate, before) == {}

    # First workflow task: every subtask starts again under the same plan run id, so the
    # completed ones find their stored answers; only c and d reach the provider.
    before = rig.gate.count(*MARKERS)
    run_id = await reset_to(rig.client, plan_id, "first")
    reset = rig.client.get_workflow_handle(plan_id, run_id=run_id, result_type=PlanReport)
    result = await reset.result()
    assert result.status is PlanStatus.COMPLETED
    assert new_requests(rig.gate, before) == {"task-c": TURNS, "task-d": TURNS}
