"""Plans on a real Temporal dev server, with the LLM reached through litellm over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import CancelledError
from temporalio.service import RPCError, RPCStatusCode

from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.ids import branch_session_id, message_id
from durable_plans.domain.models import Message, PlanReport, PlanStatus, SessionMeta, SubtaskStatus
from durable_plans.session_store import SessionNotFound
from tests.integration.chaos_support import plan_run_id, wait_until
from tests.integration.conftest import Harness, provider_settings, running_worker
from tests.integration.gates import GatedProvider, any_of, first_call_of
from tests.integration.plans import by_id, make_plan, run_plan, workflow_status
from tests.integration.replay import assert_replays
from tests.integration.stored import subtask_messages

pytestmark = pytest.mark.integration

DIAMOND_FANOUT = [
    ("deps", "Add http and provider to pubspec.yaml", []),
    ("api", "Write the weather API client", ["deps"]),
    ("home", "Write the home screen", ["deps"]),
    ("settings", "Write the settings screen", ["deps"]),
    ("wire", "Wire screens to the API client", ["api", "home", "settings"]),
    ("docs", "Document the architecture", []),
]


@pytest.fixture
async def provider() -> AsyncIterator[GatedProvider]:
    """The fake provider, able to hold requests at gates (no gate: no difference)."""
    p = GatedProvider(latency_ms=0)
    async with p:
        yield p


def task_of(sid: str) -> str:
    return next(desc for s, desc, _ in DIAMOND_FANOUT if s == sid)


async def test_diamond_and_fanout_completes_with_overlap(harness: Harness) -> None:
    assert isinstance(harness.provider, GatedProvider)
    # Overlap proven, not measured: each gate holds the first LLM calls of independent
    # subtasks until all of them are in flight at the same time.
    roots = harness.provider.gate(
        "deps+docs", 2, any_of(first_call_of(task_of("deps")), first_call_of(task_of("docs")))
    )
    fanout = harness.provider.gate(
        "api+home+settings",
        3,
        any_of(*(first_call_of(task_of(s)) for s in ("api", "home", "settings"))),
    )
    plan = make_plan(DIAMOND_FANOUT)
    report, failure = await run_plan(harness.client, plan, harness.task_queue)

    assert failure is None
    assert report.status is PlanStatus.COMPLETED
    assert report.counts.completed == len(DIAMOND_FANOUT)
    assert report.counts.total == len(DIAMOND_FANOUT)
    for result in report.subtasks:
        assert result.status is SubtaskStatus.COMPLETED
        assert result.result and result.result.startswith("Done:")
        # The fake agent calls one tool then answers: two calls per subtask.
        assert result.llm_calls == 2
        assert result.usage.total_tokens > 0
    assert report.usage.total_tokens == sum(r.usage.total_tokens for r in report.subtasks)
    # The two roots ran at once, and so did the three subtasks that wait only for deps.
    assert roots.opened.is_set(), roots
    assert fanout.opened.is_set(), fanout
    assert harness.provider.rejections == []
    ids = [plan.id, *(f"{plan.id}/{sid}" for sid, _, _ in DIAMOND_FANOUT)]
    assert await assert_replays(harness.client, ids) == len(ids)


async def test_bad_request_fails_once_skips_dependents_and_finishes_independent(
    harness: Harness,
) -> None:
    plan = make_plan(
        [
            ("deps", "Add dependencies [fail:400]", []),
            ("ui", "Write the UI", ["deps"]),
            ("tests", "Write tests for the UI", ["ui"]),
            ("docs", "Write the docs", []),
        ]
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)

    assert failure is not None and failure.non_retryable
    assert report.status is PlanStatus.FAILED
    results = by_id(report)
    assert results["deps"].status is SubtaskStatus.FAILED
    assert results["deps"].error.type == "BadRequest"
    assert results["deps"].llm_calls == 1
    assert results["deps"].result is None
    assert results["ui"].status is SubtaskStatus.SKIPPED
    assert results["ui"].error.type == "DependencyFailed"
    assert "deps" in results["ui"].error.message
    assert results["tests"].status is SubtaskStatus.SKIPPED
    assert results["docs"].status is SubtaskStatus.COMPLETED
    assert (report.counts.completed, report.counts.failed, report.counts.skipped) == (1, 1, 2)
    assert report.counts.total == 4
    # Exactly one request was answered 400: the bad request was never retried.
    assert [r.status for r in harness.provider.requests].count(400) == 1

    failed = WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_FAILED
    assert await workflow_status(harness.client, plan.id) == failed
    assert await workflow_status(harness.client, f"{plan.id}/deps") == failed
    completed = WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_COMPLETED
    assert await workflow_status(harness.client, f"{plan.id}/docs") == completed
    await assert_replays(harness.client, [plan.id, f"{plan.id}/deps", f"{plan.id}/docs"])


async def test_server_errors_and_rate_limits_are_retried(harness: Harness) -> None:
    plan = make_plan(
        [
            ("a", "Flaky server [flaky:500x2]", []),
            ("b", "Rate limited [flaky:429x1:retry-after=1]", []),
        ]
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)

    assert failure is None, failure
    assert report.status is PlanStatus.COMPLETED
    statuses = [r.status for r in harness.provider.requests]
    assert statuses.count(500) == 2
    assert statuses.count(429) == 1
    # Logical calls stay 2 per subtask: retries are attempts of the same call.
    assert all(r.llm_calls == 2 for r in report.subtasks)
    # The 429 asked for a second's wait, and the report says so; a 500's backoff is no
    # rate limit.
    rows = by_id(report)
    assert (rows["a"].usage.rate_limited_s, rows["b"].usage.rate_limited_s) == (0.0, 1.0)
    assert report.usage.rate_limited_s == 1.0


async def test_sequential_subtasks_with_id_reusing_model_are_never_rejected(
    harness: Harness,
) -> None:
    plan = make_plan(
        [
            ("one", "Inspect the project", []),
            ("two", "Change the project [turns:2]", ["one"]),
            ("three", "Review the change", ["two"]),
            ("four", "Summarise", ["three"]),
        ],
        session_id="shared-session",
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)

    assert failure is None
    assert report.counts.completed == 4
    assert harness.provider.rejections == []
    # Every tool call id the model sent back was "call_abc123"; none reached the session.
    ids = [
        c.id
        for m in await subtask_messages(harness.store, report, "two")
        for c in (m.tool_calls or ())
    ]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert "call_abc123" not in ids


async def test_failed_subtask_leaves_session_exactly_as_before(harness: Harness) -> None:
    store = harness.store
    await store.create_session(SessionMeta(session_id="s-rollback"))
    before = [
        Message(id="u1", role="user", content="Build a weather app"),
        Message(id="a1", role="assistant", content="Sure: I will plan it."),
    ]
    await store.append("s-rollback", before)
    plan = make_plan([("only", "Do it [fail:400]", [])], session_id="s-rollback")

    report, failure = await run_plan(harness.client, plan, harness.task_queue)

    assert failure is not None
    assert report.counts.failed == 1
    assert await store.read("s-rollback") == before


async def test_parallel_subtasks_are_isolated_and_merge_in_plan_order(harness: Harness) -> None:
    harness.provider.latency_ms = 100
    store = harness.store
    plan = make_plan(
        [
            ("left", "Write the left half [turns:3]", []),
            ("right", "Write the right half", []),
        ],
        session_id="s-parallel",
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)

    assert failure is None
    left = await subtask_messages(store, report, "left")
    right = await subtask_messages(store, report, "right")
    left_ids = {m.id for m in left}
    right_ids = {m.id for m in right}
    assert left_ids.isdisjoint(right_ids)
    assert not any("right half" in (m.content or "") for m in left)
    assert not any("left half" in (m.content or "") for m in right)

    base = await store.read("s-parallel")
    # "right" finishes first (fewer turns) but "left" is declared first: plan order wins.
    assert [m.content for m in base] == [
        by_id(report)["left"].result,
        by_id(report)["right"].result,
    ]
    assert all(not m.is_tool_traffic for m in base)


async def children_per_run(client: Client, workflow_id: str) -> list[tuple[int, int]]:
    """(children started, children completed) in each run of ``workflow_id``, first run first."""
    runs: list[tuple[int, int]] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        started = sum(
            e.HasField("child_workflow_execution_started_event_attributes") for e in history.events
        )
        completed = sum(
            e.HasField("child_workflow_execution_completed_event_attributes")
            for e in history.events
        )
        runs.append((started, completed))
        first = history.events[0].workflow_execution_started_event_attributes
        run_id = first.continued_execution_run_id or None
        if run_id is None:
            return runs[::-1]


async def memo_at_start_per_run(client: Client, workflow_id: str) -> list[dict[str, Any]]:
    """The memo each run of ``workflow_id`` started with (its started event), first first."""
    converter = client.data_converter.payload_converter
    memos: list[dict[str, Any]] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        first = history.events[0].workflow_execution_started_event_attributes
        fields = first.memo.fields
        memos.append({key: converter.from_payload(fields[key]) for key in fields})
        run_id = first.continued_execution_run_id or None
        if run_id is None:
            return memos[::-1]


async def test_continue_as_new_carries_progress_and_loses_nothing(harness: Harness) -> None:
    subtasks = [(f"s{i}", f"Step {i}", [f"s{i - 1}"] if i % 3 else []) for i in range(9)]
    plan = make_plan(subtasks, session_id="s-can", max_parallel=2)
    limit = 2
    report, failure = await run_plan(
        harness.client, plan, harness.task_queue, max_completions_per_run=limit
    )

    assert failure is None
    assert report.counts.completed == 9
    assert [r.id for r in report.subtasks] == [sid for sid, _, _ in subtasks]
    assert all(r.llm_calls == 2 and r.result for r in report.subtasks)
    # Each subtask ran exactly once across all runs: two calls each, nothing repeated.
    assert len(harness.provider.completions()) == 18
    assert max(harness.provider.identical_request_counts(completed_only=True).values()) == 1
    base = await harness.store.read("s-can")
    assert [m.content for m in base] == [r.result for r in report.subtasks]
    runs = await children_per_run(harness.client, plan.id)
    assert await assert_replays(harness.client, [plan.id]) == len(runs)
    # How many runs depends on how completions fall into workflow tasks (two children may
    # finish in one), so the count is not fixed; what each run did is. A run continues as
    # new once ``limit`` of its children completed, after the ones still running finish:
    # no child is carried across runs, every run but the last completed at least
    # ``limit``, and together they ran every subtask exactly once.
    assert len(runs) >= 2, runs
    assert all(started == completed for started, completed in runs), runs
    assert all(completed >= limit for _, completed in runs[:-1]), runs
    assert runs[-1][1] >= 1, runs
    assert sum(completed for _, completed in runs) == len(subtasks), runs
    # Every continued run starts with the plan's memo, so Temporal Web and ``dplan list``
    # never show a run of the plan without its goal and size.
    continued = (await memo_at_start_per_run(harness.client, plan.id))[1:]
    assert len(continued) == len(runs) - 1
    assert all(m == {"goal": plan.goal, "subtask_count": 9} for m in continued), continued


async def child_exists(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


@asynccontextmanager
async def harness_with(
    client: Client, provider: GatedProvider, tmp_path: Path, *, llm_local: bool
) -> AsyncIterator[Harness]:
    """conftest's ``harness``, its subtasks' LLM calls local activities or regular ones."""
    settings = provider_settings(client, provider, tmp_path, llm_local=llm_local)
    (settings.workspace / "README.md").write_text("# demo workspace\n")
    async with running_worker(client, settings) as (worker, store):
        yield Harness(client, settings, store, provider, worker)


# A child cancelled mid-call whose calls are local activities learns of it only when its
# in-flight workflow task is next completed (80 % of the 10 s workflow task timeout,
# workflows/llm_call.py); the last case cancels a child whose call is a regular activity
# (``DPLAN_LLM_LOCAL=0``), which learns of it at once.
@pytest.mark.parametrize(
    ("cancel_after_s", "llm_local"),
    [(0.0, True), (0.1, True), (0.3, True), (0.8, False)],
    ids=["0.0", "0.1", "0.3", "0.8-regular"],
)
async def test_cancelled_plan_reports_cancelled_and_cancels_children(
    client: Client,
    provider: GatedProvider,
    tmp_path: Path,
    cancel_after_s: float,
    llm_local: bool,
) -> None:
    async with harness_with(client, provider, tmp_path, llm_local=llm_local) as harness:
        await cancel_plan_and_check(harness, cancel_after_s)


async def cancel_plan_and_check(harness: Harness, cancel_after_s: float) -> None:
    assert isinstance(harness.provider, GatedProvider)
    # The slow subtask's first call is held until the plan was cancelled: it can never
    # finish first, however slow the machine (a gate of two that one call never opens).
    held = harness.provider.gate("slow", 2, first_call_of("Think slowly"))
    plan = make_plan([("slow", "Think slowly", []), ("after", "Then this", ["slow"])])
    handle = await harness.client.start_workflow(
        "PlanWorkflow", PlanInput(plan=plan), id=plan.id, task_queue=harness.task_queue
    )
    await asyncio.sleep(cancel_after_s)
    child_in_call = cancel_after_s >= 0.3
    if child_in_call:  # these cases cancel a child that is surely running, mid-call
        await wait_until(lambda: held.arrived > 0, timeout_s=60, what="the child's first call")
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    held.release()
    assert isinstance(info.value.cause, CancelledError)

    report = await handle.query("status", result_type=PlanReport)
    assert report.status is PlanStatus.CANCELLED, report.subtasks
    assert report.counts.cancelled == 2 and report.counts.total == 2
    cancelled = WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_CANCELED
    assert await workflow_status(harness.client, plan.id) == cancelled
    ids = [plan.id]
    child = f"{plan.id}/slow"
    if child_in_call:  # cancelled mid-call: the child must be Cancelled too
        assert await workflow_status(harness.client, child) == cancelled
        ids.append(child)
    elif await child_exists(harness.client, child):
        # An early cancel may come before the child was started, or while its start was
        # under way: then the parent-close policy ends it. Either way it never ran on.
        terminated = WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_TERMINATED
        assert await workflow_status(harness.client, child) in (cancelled, terminated)
        ids.append(child)
    await assert_replays(harness.client, ids)


async def test_a_cancelled_subtask_reports_the_calls_it_made(harness: Harness) -> None:
    """Cancelled after its first answer was stored: the report counts that call, its usage
    and names the branch, instead of 0 calls and no session (which would be a lie)."""
    harness.provider.latency_ms = 400
    plan = make_plan([("work", "Look at the workspace", [])], session_id="s-cancel-spend")
    handle = await harness.client.start_workflow(
        "PlanWorkflow", PlanInput(plan=plan), id=plan.id, task_queue=harness.task_queue
    )
    run_id = plan_run_id(plan, handle.first_execution_run_id)
    branch = branch_session_id("s-cancel-spend", run_id, "work")
    first_answer = message_id(f"{run_id}/work", 0)

    async def answered() -> None:
        while True:
            try:
                if any(m.id == first_answer for m in await harness.store.read(branch)):
                    return
            except SessionNotFound:
                pass
            await asyncio.sleep(0.01)

    await asyncio.wait_for(answered(), timeout=30)
    await handle.cancel()  # the second call (after the tool) is in flight or about to be
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    [row] = (await handle.query("status", result_type=PlanReport)).subtasks
    assert row.status is SubtaskStatus.CANCELLED
    assert row.session_id == branch
    assert row.llm_calls in (1, 2)  # the second answer may have been stored before the cancel
    assert row.usage.total_tokens > 0
    stored = [m for m in await harness.store.read(branch) if m.role == "assistant" and m.usage]
    # The report counts what was stored when the cancel was handled. A call in flight then
    # (one at most: the loop makes one call at a time) may still store its answer after
    # the report was written, if its cancellation reached it late (a loaded machine).
    assert row.llm_calls <= len(stored) <= row.llm_calls + 1
    await assert_replays(harness.client, [plan.id])


async def test_running_the_same_plan_again_runs_it_again(harness: Harness) -> None:
    plan = make_plan([("only", "Count the files", [])], session_id="s-again")
    first, _ = await run_plan(harness.client, plan, harness.task_queue)
    # The server treats a start within a second of the previous run's close as a
    # duplicate request of that run; a person re-running a plan is slower than that.
    await asyncio.sleep(1.5)
    second, _ = await run_plan(harness.client, plan, harness.task_queue)

    assert first.status is second.status is PlanStatus.COMPLETED
    # A fresh run never finds (and silently reuses) the earlier run's conversation.
    assert first.subtasks[0].session_id != second.subtasks[0].session_id
    assert len(harness.provider.completions()) == 4
    assert len(await harness.store.read("s-again")) == 2
