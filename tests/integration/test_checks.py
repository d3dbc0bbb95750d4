"""Checks end to end on a real Temporal server, the real git workspace and the fake
provider: a subtask is ``completed`` only once its check passes on its tree.

The agent (``scenario``) writes ``answer.txt`` and answers; ``{fixes}`` in its task makes
it write the right content once a check's failure came back to it as a user message, and
``{right}`` from the start; otherwise it writes the wrong content every round. The check
reads ``answer.txt`` on a throwaway copy of the subtask's last commit.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from durable_plans.domain.checks import ACT_RUN_CHECK
from durable_plans.domain.ids import subtask_workflow_id
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, Subtask, SubtaskStatus
from durable_plans.domain.operations import SKIP_UPDATE, SubtaskRequest
from durable_plans.testing import (
    ChatRequest,
    Completion,
    FakeProvider,
    FakeProviderProcess,
    Reply,
    ToolCallSpec,
)
from tests.integration.chaos_support import since_last_user
from tests.integration.conftest import Harness, provider_settings, running_worker
from tests.integration.plans import by_id, run_plan, start_plan_workflow
from tests.integration.replay import assert_replays
from tests.integration.workers import WorkerProcess, new_workspace, worker_env
from tests.integration.workspace_files import result_text
from tests.integration.workspace_steps import eventually

pytestmark = pytest.mark.integration

TOLD = "Your work is not done"
# Passes when answer.txt holds "right"; says what it found otherwise.
CHECK = [
    "python",
    "-c",
    "import sys; text = open('answer.txt').read(); print('answer.txt holds', repr(text)); "
    "sys.exit(0 if text == 'right' else 1)",
]


def _user_texts(request: ChatRequest) -> list[str]:
    return [str(m.get("content") or "") for m in request.messages if m.get("role") == "user"]


def scenario(request: ChatRequest) -> Reply:
    users = _user_texts(request)
    task = next((t for t in users if "{" in t), users[0] if users else "")
    told = sum(1 for t in users if t.startswith(TOLD))
    right = "{right}" in task or ("{fixes}" in task and told > 0)
    since = since_last_user(request.messages)
    if not any(m.get("role") == "assistant" and m.get("tool_calls") for m in since):
        content = "right" if right else "wrong"
        args = json.dumps({"path": "answer.txt", "content": content})
        return Completion(tool_calls=(ToolCallSpec("write_file", args),), id_policy="unique")
    return Completion(content=f"Done (round {told + 1}): answer.txt written.")


@pytest.fixture
async def harness(client: Client, tmp_path: Path) -> AsyncIterator[Harness]:
    async with FakeProvider(scenario, latency_ms=0) as provider:
        settings = provider_settings(client, provider, tmp_path, prefix="checks")
        (settings.workspace / "README.md").write_text("# checks\n")
        async with running_worker(client, settings) as (worker, store):
            yield Harness(client, settings, store, provider, worker)


def _plan(prefix: str, *subtasks: Subtask, **fields: Any) -> Plan:
    return Plan(id=f"{prefix}-{uuid.uuid4().hex[:8]}", goal="checks", subtasks=subtasks, **fields)


def _told(harness: Harness) -> list[str]:
    """Every distinct check failure the model was told, in order."""
    seen: dict[str, None] = {}
    for request in harness.provider.requests:
        for m in request.messages:
            text = str(m.get("content") or "")
            if m.get("role") == "user" and text.startswith(TOLD):
                seen[text] = None
    return list(seen)


async def test_a_failed_check_is_told_to_the_model_which_fixes_the_work(harness: Harness) -> None:
    plan = _plan(
        "fixes",
        Subtask(id="fix", description="Write the answer {fixes}", check=(tuple(CHECK),)),
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is None and report.status is PlanStatus.COMPLETED
    row = by_id(report)["fix"]
    assert row.status is SubtaskStatus.COMPLETED
    assert [(c.round, c.exit_code) for c in row.checks] == [(1, 1), (2, 0)]
    assert row.checks[0].argv == tuple(CHECK)
    assert "answer.txt holds 'wrong'" in row.checks[0].output
    assert row.result is not None and "round 2" in row.result
    [told] = _told(harness)
    assert "exited with code 1" in told and "answer.txt holds 'wrong'" in told
    assert "python -c" in told
    # The fixed work is what the plan publishes; what the check ran on was a copy.
    assert result_text(harness.settings.workspace, plan.id, "answer.txt") == "right"
    ids = [plan.id, subtask_workflow_id(plan.id, "fix")]
    assert await assert_replays(harness.client, ids) == 2


async def test_a_check_that_never_passes_fails_the_subtask_and_merges_nothing(
    harness: Harness,
) -> None:
    plan = _plan(
        "never",
        Subtask(id="ok", description="Write the answer {right}", check=(tuple(CHECK),)),
        Subtask(id="bad", description="Write the answer", check=(tuple(CHECK),), check_rounds=2),
        Subtask(id="after", description="Use it {right}", depends_on=("bad",)),
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is not None and report.status is PlanStatus.FAILED
    rows = by_id(report)
    assert rows["ok"].status is SubtaskStatus.COMPLETED
    assert [c.exit_code for c in rows["ok"].checks] == [0]
    bad = rows["bad"]
    assert bad.status is SubtaskStatus.FAILED and bad.error is not None
    assert bad.error.type == "CheckFailed"
    assert "exited with code 1" in bad.error.message and "2 of 2 round(s)" in bad.error.message
    assert "answer.txt holds 'wrong'" in bad.error.message
    assert [(c.round, c.exit_code) for c in bad.checks] == [(1, 1), (2, 1)]
    assert len(_told(harness)) == 1  # told after round 1; round 2 was the last
    assert rows["after"].status is SubtaskStatus.SKIPPED
    # Nothing of the failed subtask is in the plan's result: "ok" wrote it, "bad" did not.
    assert result_text(harness.settings.workspace, plan.id, "answer.txt") == "right"
    assert report.workspace is not None
    child = harness.client.get_workflow_handle(subtask_workflow_id(plan.id, "bad"))
    with pytest.raises(WorkflowFailureError) as failed:
        await child.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "CheckFailed"


async def test_a_plan_whose_check_fails_on_the_merge_ends_failed(harness: Harness) -> None:
    plan = _plan(
        "plancheck",
        Subtask(id="a", description="Write the answer"),  # no check of its own: completed
        check=(tuple(CHECK),),
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is not None and failure.type == "PlanFailed"  # Failed in Temporal
    assert "its check failed on the merged result" in failure.message
    assert report.status is PlanStatus.FAILED and report.counts.completed == 1
    assert report.error is not None and report.error.type == "CheckFailed"
    [run] = report.checks
    assert run.exit_code == 1 and "answer.txt holds 'wrong'" in run.output
    assert by_id(report)["a"].checks == ()


async def test_a_plan_whose_check_passes_on_the_merge_completes(harness: Harness) -> None:
    plan = _plan(
        "planok",
        Subtask(id="a", description="Write the answer {right}"),
        check=(tuple(CHECK),),
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is None and report.status is PlanStatus.COMPLETED
    assert [c.exit_code for c in report.checks] == [0] and report.error is None
    assert await assert_replays(harness.client, [plan.id]) == 1


async def test_a_worker_killed_mid_check_has_it_run_again_once_by_the_next(
    client: Client, tmp_path: Path
) -> None:
    new_workspace(tmp_path, "# crash mid-check\n")
    tq = f"checkcrash-{uuid.uuid4().hex[:8]}"
    # Long enough to be seen running and killed; it passes when it runs to its end.
    slow = ("python", "-c", "import time; time.sleep(4); print('checked')")
    plan = _plan("checkcrash", Subtask(id="a", description="Inspect the repository", check=(slow,)))
    child_id = subtask_workflow_id(plan.id, "a")
    with FakeProviderProcess(tmp_path / "requests.jsonl") as provider:
        env = worker_env(client, tmp_path, provider, tq)
        first = WorkerProcess(env, tmp_path / "worker-1.log").start()
        second: WorkerProcess | None = None
        try:
            first.wait_ready()
            handle = await start_plan_workflow(client, plan, tq)

            async def check_running() -> bool:
                try:
                    described = await client.get_workflow_handle(child_id).describe()
                except RPCError:
                    return False  # not started yet
                return any(
                    a.activity_type.name == ACT_RUN_CHECK
                    and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                    and a.attempt == 1
                    for a in described.raw_description.pending_activities
                )

            deadline = time.monotonic() + 90
            while not await check_running():
                assert time.monotonic() < deadline, "the check never started"
                await asyncio.sleep(0.05)
            first.kill()
            second = WorkerProcess(env, tmp_path / "worker-2.log").start()
            second.wait_ready()
            report = await asyncio.wait_for(handle.result(), timeout=120)
        finally:
            first.stop()
            if second is not None:
                second.stop()

    assert report.status is PlanStatus.COMPLETED
    [run] = by_id(report)["a"].checks  # one result, from the run that completed
    assert run.exit_code == 0 and "checked" in run.output and run.round == 1
    history = await client.get_workflow_handle(child_id).fetch_history()
    scheduled = [
        e
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == ACT_RUN_CHECK
    ]
    assert len(scheduled) == 1  # one check, never scheduled again
    # The check's one recorded start is a later attempt than the killed one.
    check_started = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
        and e.activity_task_started_event_attributes.scheduled_event_id == scheduled[0].event_id
    ]
    assert len(check_started) == 1 and check_started[0] >= 2, check_started


async def test_a_check_failure_pauses_a_plan_that_pauses_on_failure(harness: Harness) -> None:
    plan = _plan(
        "pause",
        Subtask(id="bad", description="Write the answer", check=(tuple(CHECK),), check_rounds=1),
        on_failure="pause",
    )
    handle = await harness.start(plan)

    async def paused() -> PlanReport | None:
        report = await handle.query("status", result_type=PlanReport)
        return report if report.status is PlanStatus.PAUSED else None

    report = await eventually(paused, "the plan to pause on its failed check")
    row = by_id(report)["bad"]
    assert row.status is SubtaskStatus.PAUSED and row.error is not None
    assert row.error.type == "CheckFailed" and "1 of 1 round(s)" in row.error.message
    assert [(c.round, c.exit_code) for c in row.checks] == [(1, 1)]
    assert _told(harness) == []  # one round: nothing told, the subtask failed at once
    await handle.execute_update(SKIP_UPDATE, SubtaskRequest(subtask="bad"))
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    # Skipped by the operator: it stays failed, as it was, its check runs kept.
    final = by_id(await handle.query("status", result_type=PlanReport))["bad"]
    assert final.status is SubtaskStatus.FAILED and final.error is not None
    assert final.error.type == "CheckFailed" and len(final.checks) == 1
