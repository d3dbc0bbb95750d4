"""The fault matrix: every LLM failure mode, end to end, retried or failed as classified.

Each case runs a two-subtask plan on a real Temporal dev server: ``healthy`` (no fault)
and ``faulty`` (a fault directive of ``durable_plans.testing`` in its description),
independent of each other. The worker reaches the fake provider through litellm over
HTTP, so the fault travels the real path: HTTP → litellm exception → classification →
Temporal retry policy → subtask outcome → plan report. A worker interceptor records what
every LLM activity attempt ended with (the ``ApplicationError`` type, its retryability and
requested delay), which is the classification Temporal acted on.

The outcome table lives in docs/fault-matrix.md; keep the two in step.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.client import Client, WorkflowFailureError
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
)
from temporalio.worker import Interceptor as WorkerInterceptor

from durable_plans.activities.llm import import_litellm
from durable_plans.domain.agents import BUILTIN_CATALOG
from durable_plans.domain.contracts import ACT_CALL_LLM, PlanInput
from durable_plans.domain.models import (
    Message,
    Plan,
    PlanReport,
    PlanStatus,
    Subtask,
    SubtaskStatus,
)
from durable_plans.domain.tool_ids import strict_violations
from durable_plans.session_store import SessionStore
from durable_plans.settings import SCRIPTED_MODEL, Settings
from durable_plans.testing import FakeProvider, RecordedRequest
from durable_plans.workflows import policies
from tests.integration.chaos_support import bounded, in_background, selected_params
from tests.integration.conftest import TimeSkipping, provider_settings, running_worker
from tests.integration.plans import by_id, run_plan, workflow_status

pytestmark = pytest.mark.integration

# Far above what a normal answer takes even on a loaded machine (a healthy call timing out
# would change what the matrix sees), and far below SLOW_ANSWER_MS, the answer that must
# time out.
LLM_TIMEOUT_S = 5.0
SLOW_ANSWER_MS = 9000
HEALTHY_TASK = "Write the docs"
FAULTY_TASK = "Fix the build"
# A completed subtask of the fake agent: one tool-call turn, then the final answer.
TURNS_TO_COMPLETE = 2


# --------------------------------------------------------------------------- attempt log


@dataclass(frozen=True)
class Attempt:
    """How one LLM activity attempt ended, as Temporal saw it."""

    workflow_id: str
    attempt: int
    outcome: str  # "ok", or the ApplicationError type
    retryable: bool | None = None
    next_retry_delay: timedelta | None = None


class AttemptRecorder(ClientInterceptor, WorkerInterceptor):
    """On the client, so a worker built on that client runs it around every activity."""

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _RecordingActivity(next, self.attempts)

    def of(self, workflow_id: str) -> list[Attempt]:
        return [a for a in self.attempts if a.workflow_id == workflow_id]


class _RecordingActivity(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, log: list[Attempt]) -> None:
        super().__init__(next)
        self._log = log

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.activity_type != ACT_CALL_LLM:
            return await super().execute_activity(input)
        wid = info.workflow_id or ""
        try:
            result = await super().execute_activity(input)
        except ApplicationError as err:
            self._log.append(
                Attempt(
                    wid, info.attempt, err.type or "", not err.non_retryable, err.next_retry_delay
                )
            )
            raise
        except BaseException as err:
            self._log.append(Attempt(wid, info.attempt, f"unclassified {type(err).__name__}"))
            raise
        self._log.append(Attempt(wid, info.attempt, "ok"))
        return result


# --------------------------------------------------------------------------- harness


@dataclass
class FaultHarness:
    client: Client
    settings: Settings
    store: SessionStore
    provider: FakeProvider
    recorder: AttemptRecorder

    @property
    def task_queue(self) -> str:
        return self.settings.task_queue


@asynccontextmanager
async def fault_harness(
    client: Client,
    provider: FakeProvider,
    tmp_path: Path,
    *,
    api_base: str | None = None,
    llm_local: bool = True,
) -> AsyncIterator[FaultHarness]:
    """conftest's ``harness`` with a short LLM timeout and an attempt recorder; subtasks'
    LLM calls as local activities (the default) unless ``llm_local`` is False."""
    recorder = AttemptRecorder()
    config = client.config()
    config["interceptors"] = [*config["interceptors"], recorder]
    recording = Client(**config)
    settings = provider_settings(
        recording,
        provider,
        tmp_path,
        api_base=api_base or provider.base_url,
        llm_timeout_s=LLM_TIMEOUT_S,
    ).with_overrides(llm_local=llm_local)
    (settings.workspace / "README.md").write_text("# demo workspace\n")
    async with running_worker(recording, settings) as (_, store):
        yield FaultHarness(recording, settings, store, provider, recorder)


@pytest.fixture(scope="module", autouse=True)
def litellm_imported() -> None:
    """Import litellm before any worker runs.

    The LLM activity imports it on first use, synchronously: on a loaded machine that
    blocks the worker's event loop for 5-15 s, longer than the LLM heartbeat timeout
    (8 s), and the first attempts then end "cancelled" (heartbeat timeout) instead of
    with the fault under test. Cold start is not what this matrix measures.
    """
    import_litellm()


def two_subtask_plan(directive: str, *, faulty_agent: str = "coder") -> Plan:
    """``healthy`` first, so its result merges into the base session whatever ``faulty`` does."""
    return Plan(
        id=f"fault-{uuid.uuid4().hex[:10]}",
        goal="fault matrix",
        session_id=f"s-{uuid.uuid4().hex[:8]}",
        subtasks=(
            Subtask(id="healthy", description=HEALTHY_TASK, agent="coder"),
            Subtask(id="faulty", description=f"{FAULTY_TASK} {directive}", agent=faulty_agent),
        ),
    )


# --------------------------------------------------------------------------- provider view


def last_user_text(r: RecordedRequest) -> str:
    users = [m for m in r.messages if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    return content if isinstance(content, str) else str(content)


def requests_for(provider: FakeProvider, task: str) -> list[RecordedRequest]:
    return sorted((r for r in provider.requests if task in last_user_text(r)), key=lambda r: r.seq)


def seen(r: RecordedRequest) -> str:
    """What the client got: "ok", "late" (answered after the client gave up), "http 429",
    "dropped", "raw 200" (an unreadable 200 body)."""
    if r.kind == "completion":
        return "ok" if r.delivered else "late"
    if r.kind == "http_error":
        return f"http {r.status}"
    if r.kind == "raw":
        return f"raw {r.status}"
    return r.kind


async def settled(provider: FakeProvider, timeout_s: float = 60.0) -> None:
    """Wait for answers still in flight (a slow answer outlives the client's timeout)."""
    deadline = time.monotonic() + timeout_s
    while any(r.finished is None for r in provider.requests):
        assert time.monotonic() < deadline, "the fake provider never finished a request"
        await asyncio.sleep(0.05)


def assert_session_clean(branch: list[Message]) -> None:
    ids = [m.id for m in branch]
    assert len(ids) == len(set(ids)), f"duplicated message ids: {ids}"
    assert strict_violations([m.to_openai() for m in branch]) == []


# --------------------------------------------------------------------------- the matrix


@dataclass(frozen=True)
class Fault:
    name: str
    directive: str
    # What the provider answered the faulty subtask, request by request.
    provider_saw: tuple[str, ...]
    # How each LLM activity attempt of the faulty subtask ended: "ok" or the error type.
    attempts: tuple[str, ...]
    # None: the subtask completes; else the error type it fails with (non-retryable).
    fails_with: str | None = None
    # The tool result the model was shown instead of a crash (tool-level faults).
    tool_error: str | None = None
    retry_after_s: float | None = None
    duplicate_ids: bool = False
    # Retryable on every attempt, until the retry policy's attempts run out.
    exhausted: bool = False


RECOVERS = ("ok", "ok")
MATRIX = [
    Fault(
        "429-retry-after",
        "[flaky:429x1:retry-after=2]",
        ("http 429", *RECOVERS),
        ("RateLimit", *RECOVERS),
        retry_after_s=2.0,
    ),
    Fault(
        "500",
        "[flaky:500x2]",
        ("http 500", "http 500", *RECOVERS),
        ("ServerError", "ServerError", *RECOVERS),
    ),
    Fault("503", "[flaky:503x1]", ("http 503", *RECOVERS), ("ServerError", *RECOVERS)),
    Fault(
        "dropped-connection", "[flaky:dropx1]", ("dropped", *RECOVERS), ("Connection", *RECOVERS)
    ),
    Fault(
        "slow-beyond-timeout",
        f"[slow:{SLOW_ANSWER_MS}x1]",
        ("late", *RECOVERS),
        ("Timeout", *RECOVERS),
    ),
    Fault(
        "truncated-json",
        "[flaky:bad-jsonx1]",
        ("raw 200", *RECOVERS),
        ("InvalidResponse", *RECOVERS),
    ),
    Fault(
        "empty-choices",
        "[flaky:empty-choicesx1]",
        ("raw 200", *RECOVERS),
        ("InvalidResponse", *RECOVERS),
    ),
    Fault(
        "invalid-tool-arguments",
        "[bad-args]",
        RECOVERS,
        RECOVERS,
        tool_error="error: arguments for list_dir are not valid JSON",
    ),
    Fault(
        "unknown-tool",
        "[unknown-tool]",
        RECOVERS,
        RECOVERS,
        tool_error="error: unknown tool 'no_such_tool'",
    ),
    Fault("duplicate-tool-call-ids", "[dup-ids]", RECOVERS, RECOVERS, duplicate_ids=True),
    Fault(
        "400-context-window",
        "[fail:400:context]",
        ("http 400",),
        ("ContextWindowExceeded",),
        fails_with="ContextWindowExceeded",
    ),
    Fault("401", "[fail:401]", ("http 401",), ("Authentication",), fails_with="Authentication"),
    Fault("400", "[fail:400]", ("http 400",), ("BadRequest",), fails_with="BadRequest"),
    # Every attempt a 500: the retry policy's backoff (1+2+4+8+16 s) runs out, then the
    # subtask fails with the last attempt's classification (that attempt, the sixth that
    # was not a rate-limit refusal, fails non-retryable). On the time-skipping server
    # (see ``fh``): the 31 s of backoff are skipped.
    Fault(
        "500-until-attempts-run-out",
        "[fail:500]",
        ("http 500",) * policies.DEFAULT_PARAMETERS.llm_max_attempts,
        ("ServerError",) * policies.DEFAULT_PARAMETERS.llm_max_attempts,
        fails_with="ServerError",
        exhausted=True,
    ),
]


def attempt_numbers(outcomes: tuple[str, ...]) -> list[int]:
    """Temporal's attempt counter: +1 after a failure, back to 1 for the next call."""
    numbers, n = [], 1
    for outcome in outcomes:
        numbers.append(n)
        n = 1 if outcome == "ok" else n + 1
    return numbers


async def fault_case(client: Client, time_skipping: TimeSkipping, tmp: Path, fault: Fault) -> None:
    """One row of the matrix, on its own provider, worker, task queue and store: on the
    shared dev server; a fault that runs the retry policy out runs on the time-skipping
    test server instead, which skips the backoff timers (1+2+4+8+16 s) instead of waiting
    them out. Time never skips while an activity or a workflow task is in flight there, so
    no timeout of a call in progress can fire early."""
    if fault.exhausted:
        client = await time_skipping.client()
    async with FakeProvider(latency_ms=0) as provider, fault_harness(client, provider, tmp) as fh:
        await check_fault(fh, fault)


async def check_fault(fh: FaultHarness, fault: Fault) -> None:
    plan = two_subtask_plan(fault.directive)
    report, failure = await run_plan(fh.client, plan, fh.task_queue)
    await settled(fh.provider)
    results = by_id(report)
    healthy, faulty = results["healthy"], results["faulty"]

    # The report: statuses, error type, logical LLM calls, counts that add up.
    assert healthy.status is SubtaskStatus.COMPLETED
    assert healthy.llm_calls == TURNS_TO_COMPLETE
    assert report.counts.total == len(plan.subtasks) == len(report.subtasks)
    if fault.fails_with is None:
        assert failure is None, failure
        assert report.status is PlanStatus.COMPLETED
        assert faulty.status is SubtaskStatus.COMPLETED and faulty.error is None
        # Retries are attempts of one call, not extra calls.
        assert faulty.llm_calls == TURNS_TO_COMPLETE
        assert (report.counts.completed, report.counts.failed) == (2, 0)
    else:
        assert failure is not None and failure.non_retryable
        assert report.status is PlanStatus.FAILED
        assert faulty.status is SubtaskStatus.FAILED and faulty.result is None
        assert faulty.error is not None and faulty.error.type == fault.fails_with
        assert faulty.error.message
        assert faulty.llm_calls == 1
        assert (report.counts.completed, report.counts.failed) == (1, 1)
        # Temporal Web shows the same truth: the child failed with the classified type.
        child = fh.client.get_workflow_handle(f"{plan.id}/faulty")
        with pytest.raises(WorkflowFailureError) as info:
            await child.result()
        assert isinstance(info.value.cause, ApplicationError)
        assert info.value.cause.type == fault.fails_with
        failed = WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_FAILED
        assert await workflow_status(fh.client, plan.id) == failed

    # The provider: how many requests the faulty subtask cost, and what each got.
    assert tuple(seen(r) for r in requests_for(fh.provider, FAULTY_TASK)) == fault.provider_saw
    assert [seen(r) for r in requests_for(fh.provider, HEALTHY_TASK)] == list(RECOVERS)
    assert fh.provider.rejections == []

    # Temporal: each attempt's classification, retried only while retryable.
    attempts = fh.recorder.of(f"{plan.id}/faulty")
    assert tuple(a.outcome for a in attempts) == fault.attempts
    assert [a.attempt for a in attempts] == attempt_numbers(fault.attempts)
    for n, a in enumerate(attempts, start=1):
        if a.outcome != "ok":
            # Attempts running out: the last one is failed for good by the activity itself,
            # which counts the attempts that were not rate-limit refusals (llm_patience).
            last = fault.exhausted and n == len(attempts)
            assert a.retryable is (fault.fails_with is None or (fault.exhausted and not last)), a
    assert all(a.outcome == "ok" for a in fh.recorder.of(f"{plan.id}/healthy"))
    if fault.retry_after_s is not None:
        assert attempts[0].next_retry_delay == timedelta(seconds=fault.retry_after_s)
        first, retry = requests_for(fh.provider, FAULTY_TASK)[:2]
        assert first.finished is not None
        # Retry-After (2 s) was honoured over the policy's 1 s first backoff.
        assert retry.arrived - first.finished >= fault.retry_after_s - 0.1

    # Nothing lost: clean branches, and exactly the completed results in the base session.
    branches = {sid: await fh.store.read(r.session_id or "") for sid, r in results.items()}
    for branch in branches.values():
        assert_session_clean(branch)
    faulty_branch = branches["faulty"]
    expected_base = [healthy.result]
    if fault.fails_with is None:
        expected_base.append(faulty.result)
        assert faulty_branch[-1].role == "assistant" and faulty_branch[-1].content == faulty.result
    else:
        assert not any(m.role == "assistant" for m in faulty_branch)
    assert [m.content for m in await fh.store.read(plan.session_id or "")] == expected_base

    tool_messages = [m for m in faulty_branch if m.role == "tool"]
    if fault.tool_error is not None:
        # The tool error went back to the model as the call's result: the next request
        # carried it, and the model's answer is built on it.
        assert len(tool_messages) == 1
        assert (tool_messages[0].content or "").startswith(fault.tool_error)
        final_request = requests_for(fh.provider, FAULTY_TASK)[-1]
        sent = [m for m in final_request.messages if m.get("role") == "tool"]
        assert [m.get("content") for m in sent] == [tool_messages[0].content]
        assert faulty.result is not None and fault.tool_error in faulty.result
    if fault.duplicate_ids:
        calls = [c for m in faulty_branch for c in (m.tool_calls or ())]
        assert len(calls) == 2
        assert len({c.id for c in calls}) == 2 and "call_abc123" not in {c.id for c in calls}
        assert sorted(m.tool_call_id or "" for m in tool_messages) == sorted(c.id for c in calls)
        # The model answered with one id twice; what went back to it carries two.
        final_request = requests_for(fh.provider, FAULTY_TASK)[-1]
        sent_ids: list[str] = [
            str(c["id"]) for m in final_request.messages for c in m.get("tool_calls") or []
        ]
        assert sorted(sent_ids) == sorted(c.id for c in calls)


# --------------------------------------------------------------------------- refused


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: connecting is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def eventually(check: Callable[[], Awaitable[Any]], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def connection_refused_case(client: Client, tmp: Path, llm_local: bool) -> None:
    """Exhausting the fixed budget (6 attempts, 1+2+4+8+16 s of backoff) takes 31 s, so
    this case observes the retries and their classification, then cancels the plan: with
    the calls as local activities (retried by the worker, between workflow-task
    heartbeats) and as regular ones (retried by the server, shown as a pending activity)."""
    refused = f"http://127.0.0.1:{closed_port()}/v1"
    coder = BUILTIN_CATALOG.get("coder")
    # The healthy subtask runs on the in-process scripted model, which needs no network.
    offline = coder.model_copy(update={"name": "offline", "model": SCRIPTED_MODEL})
    async with (
        FakeProvider(latency_ms=0) as provider,
        fault_harness(client, provider, tmp, api_base=refused, llm_local=llm_local) as h,
    ):
        plan = two_subtask_plan("")
        plan = plan.model_copy(
            update={
                "subtasks": (
                    plan.subtasks[0].model_copy(update={"agent": "offline"}),
                    plan.subtasks[1],
                )
            }
        )
        handle = await h.client.start_workflow(
            "PlanWorkflow",
            PlanInput(plan=plan, agents=(offline, coder)),
            id=plan.id,
            task_queue=h.task_queue,
        )
        faulty = h.client.get_workflow_handle(f"{plan.id}/faulty")

        async def third_attempt_pending() -> Any:
            pending = (await faulty.describe()).raw_description.pending_activities
            if pending and pending[0].attempt >= 3:
                return pending[0]
            return None

        async def healthy_done() -> bool:
            status = await handle.query("status", result_type=PlanReport)
            return by_id(status)["healthy"].status is SubtaskStatus.COMPLETED

        async def third_attempt_ran() -> bool:
            return len(h.recorder.of(f"{plan.id}/faulty")) >= 3

        await eventually(healthy_done, 60, "the healthy subtask to complete")
        if llm_local:
            # A local activity is no pending activity: its attempts are the worker's.
            await eventually(third_attempt_ran, 60, "a third LLM attempt")
        else:
            # Pending attempt 3 = attempts 1 and 2 failed (about 1 s apart: the first backoff).
            pending = await eventually(third_attempt_pending, 60, "a third LLM attempt")
            assert pending.activity_type.name == ACT_CALL_LLM
            # Temporal's own count is the backstop past the 6 attempts and the refusals
            # the patience allows (the activity stops a connection error at 6).
            assert policies.DEFAULT_PARAMETERS.llm_max_attempts == 6
            assert (
                pending.maximum_attempts == policies.DEFAULT_PARAMETERS.llm_retry.maximum_attempts
            )
            last = pending.last_failure.application_failure_info
            assert last.type == "Connection" and not last.non_retryable
            # litellm calls it an InternalServerError; the cause chain says what it was.
            assert "Connection error" in pending.last_failure.message

        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
        assert isinstance(info.value.cause, CancelledError)

        report = await handle.query("status", result_type=PlanReport)
        results = by_id(report)
        assert report.status is PlanStatus.CANCELLED
        assert results["healthy"].status is SubtaskStatus.COMPLETED
        assert results["faulty"].status is SubtaskStatus.CANCELLED
        assert (report.counts.completed, report.counts.cancelled) == (1, 1)
        assert report.counts.total == 2
        # Nothing reached the fake provider: the connection was refused before HTTP.
        assert h.provider.requests == []
        attempts = h.recorder.of(f"{plan.id}/faulty")
        failed = [a for a in attempts if a.outcome != "ok"]
        assert len(failed) >= 2
        assert all(a.outcome == "Connection" and a.retryable for a in failed), attempts
        assert [a.attempt for a in failed] == list(range(1, len(failed) + 1))
        # Nothing lost: the healthy result merged; the cancelled subtask's branch (named
        # in the report, with no answer stored: 0 calls, no usage) is closed, holds no
        # answer, and is still a request a strict provider would accept.
        base = await h.store.read(plan.session_id or "")
        assert [m.content for m in base] == [results["healthy"].result]
        healthy_branch = results["healthy"].session_id or ""
        assert_session_clean(await h.store.read(healthy_branch))
        faulty_branch = healthy_branch.replace(":healthy:", ":faulty:")
        assert results["faulty"].session_id == faulty_branch
        assert results["faulty"].llm_calls == 0 and results["faulty"].usage.total_tokens == 0
        assert (await h.store.get_session(faulty_branch)).ended
        branch = await h.store.read(faulty_branch)
        assert branch and not any(m.role == "assistant" for m in branch)
        assert_session_clean(branch)


# --------------------------------------------------------------------------- all at once

# Each case mostly waits (on a slow answer, on retry backoffs, on Temporal's round trips),
# so the module's cases run side by side in the background from its first test, this many
# at a time, the longest waits first; each test awaits its own case. A case has its own
# provider, worker, task queue and store, as it had when the cases ran one by one.
CASES_AT_ONCE = 4
# Longest first: a slow answer waited out (SLOW_ANSWER_MS), retries waited out (the 1 s
# and 2 s first backoffs, a 2 s Retry-After); the order only changes the module's wall time.
LONGEST_FIRST = ("slow-beyond-timeout", "refused-local", "500", "429-retry-after")
# A bound on a case, never a timing claim: far above one, below pytest's timeout.
CASE_BOUND_S = 240.0
LOCALITY = {True: "local", False: "regular"}  # the connection-refused case's ids


@pytest.fixture(scope="module")
async def cases(
    request: pytest.FixtureRequest,
    litellm_imported: None,
    temporal_env: WorkflowEnvironment,
    time_skipping: TimeSkipping,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    """The selected tests' cases, running in the background, by test id."""
    client = temporal_env.client
    runs: dict[str, Callable[[Path], Awaitable[None]]] = {}
    for fault in selected_params(request, __file__, "test_fault_is_retried_or_failed_", "fault"):
        runs[fault.name] = partial(fault_case, client, time_skipping, fault=fault)
    refused = "test_connection_refused_is_retried_"
    for llm_local in selected_params(request, __file__, refused, "llm_local"):
        runs[f"refused-{LOCALITY[llm_local]}"] = partial(
            connection_refused_case, client, llm_local=llm_local
        )
    gate = asyncio.Semaphore(CASES_AT_ONCE)

    async def one(name: str, run: Callable[[Path], Awaitable[None]]) -> None:
        async with gate:
            await run(tmp_path_factory.mktemp(f"fault-{name}"))

    order = sorted(runs, key=lambda n: LONGEST_FIRST.index(n) if n in LONGEST_FIRST else 99)
    tasks = {n: asyncio.create_task(one(n, runs[n]), name=f"fault-{n}") for n in order}
    async with in_background(tasks):
        yield tasks


async def case_done(cases: dict[str, asyncio.Task[None]], name: str) -> None:
    await bounded(asyncio.shield(cases[name]), CASE_BOUND_S, f"fault case {name}")


@pytest.mark.parametrize("fault", MATRIX, ids=[f.name for f in MATRIX])
async def test_fault_is_retried_or_failed_as_classified(
    cases: dict[str, asyncio.Task[None]], fault: Fault
) -> None:
    await case_done(cases, fault.name)


@pytest.mark.parametrize("llm_local", list(LOCALITY), ids=list(LOCALITY.values()))
async def test_connection_refused_is_retried_as_connection_until_cancelled(
    cases: dict[str, asyncio.Task[None]], llm_local: bool
) -> None:
    await case_done(cases, f"refused-{LOCALITY[llm_local]}")
