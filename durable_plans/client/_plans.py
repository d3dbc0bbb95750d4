"""The client side of a plan: connect, start, wait for the report, ask for live status.

Every way a PlanWorkflow can end is turned into a ``PlanReport`` here, so the CLI and
other callers deal with one type: a completed run returns it, a failed run carries it in
its ``PlanFailed`` error, and a cancelled or terminated run is asked for it through the
``status`` query. Only a plan that never ran (``InvalidPlan``) is an exception.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import Priority, WorkflowIDConflictPolicy
from temporalio.exceptions import (
    ApplicationError,
    CancelledError,
    TerminatedError,
    WorkflowAlreadyStartedError,
)
from temporalio.exceptions import TimeoutError as WorkflowTimeoutError
from temporalio.service import RPCError, RPCStatusCode

from durable_plans._errors import (
    DurablePlansError,
    InvalidInput,
    InvalidPlan,
    MalformedDetails,
    PlanAlreadyRunning,
    PlanDataError,
    PlanNotFound,
    StatusUnavailable,
)
from durable_plans.activities.plan_data import put_data
from durable_plans.connection import QUERY_RPC_TIMEOUT
from durable_plans.domain.agents import AgentCatalog
from durable_plans.domain.contracts import PLAN_TASK_TIMEOUT, PLAN_WORKFLOW, PlanInput
from durable_plans.domain.failures import FailureType, read_plan_report
from durable_plans.domain.inputs import plan_input_from_value
from durable_plans.domain.models import DeliveryOutcome, Plan, PlanReport, SubtaskStatus
from durable_plans.domain.plan_data import (
    INLINE_PLAN_BYTES,
    PACKED_FIELD,
    input_size,
    lean_plan,
    pack,
    plan_bytes,
    size_problems,
    with_carried_subtasks,
)
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.domain.webhook import NOTIFY_MEMO_KEY
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings

__all__ = [
    "PLAN_WORKFLOW",
    "STATUS_QUERY",
    "PlanRun",
    "notification_outcome",
    "plan_run",
    "plan_status",
    "query_status",
    "settle_stopped",
    "start_plan",
    "wait_for_report",
    "worker_count",
]

STATUS_QUERY = "status"

# A query needs a worker to answer it; without one the server holds the call open. A
# bounded wait turns "hangs forever" into a message that says what is missing.
_QUERY_TIMEOUT = QUERY_RPC_TIMEOUT
_GOAL_SUMMARY_CHARS = 200


T = TypeVar("T")


def plan_priority(plan: Plan) -> Priority:
    """The plan's Temporal priority: its ``priority`` as the key and its ``tenant`` as the
    fairness key; its subtasks and their activities inherit it from the plan's run."""
    return Priority(priority_key=plan.priority, fairness_key=plan.tenant)


def with_default_budget(plan: Plan, settings: Settings) -> Plan:
    """A plan without a budget gets the operator's defaults (``DPLAN_MAX_TOKENS``,
    ``DPLAN_MAX_COST_USD``), fixed at start so every worker enforces the same limits."""
    if plan.budget is not None or settings.default_budget is None:
        return plan
    return plan.model_copy(update={"budget": settings.default_budget})


async def start_plan(
    client: Client,
    plan: Plan,
    settings: Settings,
    *,
    catalog: AgentCatalog | None = None,
    store: SessionStore | None = None,
) -> WorkflowHandle[Any, PlanReport]:
    """Start ``PlanWorkflow`` with workflow id = plan id.

    The agent catalog (built-ins plus ``DPLAN_AGENTS``) travels in the input: the agents a
    plan runs with are fixed when it starts, whichever worker picks it up.

    The memo and summary show the goal and size in Temporal Web; they are scrubbed and
    short, since memos are stored with the history and readable by anyone with UI access.
    A finished plan with the same id may be run again; a running one may not.

    A plan too big for one payload goes by reference (``plan_input_arg``); ``store``, the
    workers' session store when this process can reach it, takes it whatever its size.
    """
    goal = scrub_secrets(plan.goal)[:_GOAL_SUMMARY_CHARS]
    inp = PlanInput(
        plan=with_default_budget(plan, settings),
        agents=catalog.agents if catalog is not None else (),
    )
    arg = await plan_input_arg(inp, store)
    try:
        handle: WorkflowHandle[Any, PlanReport] = await client.start_workflow(
            PLAN_WORKFLOW,
            arg,
            id=plan.id,
            task_queue=settings.task_queue,
            result_type=PlanReport,
            task_timeout=PLAN_TASK_TIMEOUT,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            memo={"goal": goal, "subtask_count": len(plan.subtasks)},
            static_summary=goal or None,
            priority=plan_priority(plan),
        )
    except WorkflowAlreadyStartedError as err:
        raise PlanAlreadyRunning(plan.id) from err
    return handle


async def plan_input_arg(
    inp: PlanInput, store: SessionStore | None = None
) -> PlanInput | dict[str, Any]:
    """What a plan's first input travels as (``domain.plan_data``): the input itself up to
    ``INLINE_PLAN_BYTES``; past that, with ``store``, the lean plan and a reference to the
    whole one put there; without, packed, for the workflow to store in its first task.
    ``InvalidPlan`` (one line) when it is too big to send packed."""
    wrapper = inp.model_dump(mode="json", exclude_defaults=True)
    if input_size(wrapper) <= INLINE_PLAN_BYTES:
        return inp
    if store is not None:
        ref = await put_data(store, plan_bytes(inp.plan))
        return inp.model_copy(update={"plan": lean_plan(inp.plan), "plan_data": ref})
    problems = size_problems(inp.plan, packed=True)
    if problems:
        raise InvalidPlan(f"invalid plan: {inp.plan.id}", problems)
    return {PACKED_FIELD: pack(wrapper).model_dump()}


async def wait_for_report(handle: WorkflowHandle[Any, PlanReport]) -> PlanReport:
    """Block until the plan ends and return its report, however it ended."""
    try:
        return await handle.result()
    except WorkflowFailureError as err:
        return await _report_from_failure(handle, err.cause)


async def _report_from_failure(
    handle: WorkflowHandle[Any, PlanReport], cause: BaseException
) -> PlanReport:
    if isinstance(cause, ApplicationError):
        if cause.type == FailureType.PLAN_FAILED and cause.details:
            try:
                return read_plan_report(cause)
            except MalformedDetails as bad:
                raise DurablePlansError(
                    f"plan '{handle.id}' failed, but its report is unreadable: {bad}"
                ) from cause
        if cause.type == FailureType.INVALID_PLAN:
            raise InvalidPlan(f"plan '{handle.id}' is invalid: {cause.message}") from cause
    if isinstance(cause, CancelledError | TerminatedError | WorkflowTimeoutError):
        return await _report_after_stop(handle)
    raise DurablePlansError(f"plan '{handle.id}' failed unexpectedly: {cause}") from cause


async def _report_after_stop(handle: WorkflowHandle[Any, PlanReport]) -> PlanReport:
    """The state a stopped plan reached, with nothing left pending or running.

    The query replays the closed workflow on a worker; when none answers, the report is
    synthesized from the id alone rather than leaving the caller without an outcome.
    """
    try:
        report = await query_status(handle)
    except (StatusUnavailable, RPCError):
        return PlanReport.build(handle.id, [], cancelled=True)
    return settle_stopped(report)


def settle_stopped(report: PlanReport) -> PlanReport:
    """A stopped plan's report: subtasks that never finished become ``cancelled``."""
    results = [
        r if r.status.is_terminal else r.model_copy(update={"status": SubtaskStatus.CANCELLED})
        for r in report.subtasks
    ]
    return PlanReport.build(
        report.plan_id,
        results,
        duration_s=report.duration_s,
        started_at_s=report.started_at_s,
        cancelled=True,
        workspace=report.workspace,
        checks=report.checks,
        error=report.error,
        log=report.log,
        log_omitted=report.log_omitted,
    )


async def query_status(handle: WorkflowHandle[Any, Any]) -> PlanReport:
    """The live report from the running workflow (or a replay of a closed one)."""
    return await query_plan(handle, STATUS_QUERY, PlanReport)


async def query_plan(handle: WorkflowHandle[Any, Any], name: str, result_type: type[T]) -> T:
    """Query ``name`` of a plan, bounded in time (a query needs a worker to answer it, and
    one of a closed plan replays it); a plan that cannot answer is ``StatusUnavailable``."""
    try:
        result: T = await handle.query(name, result_type=result_type, rpc_timeout=_QUERY_TIMEOUT)
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as err:
        raise StatusUnavailable(f"plan '{handle.id}' did not answer: {err}") from err
    except RPCError as err:
        if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
            raise StatusUnavailable(
                f"plan '{handle.id}' did not answer within {_QUERY_TIMEOUT.seconds}s; "
                "is a worker running (dplan-worker)?"
            ) from err
        raise
    return result


@dataclass(frozen=True)
class PlanRun:
    """The plan a plan's latest run runs, read from that run's input."""

    plan: Plan
    run_id: str
    first_run_id: str
    """The first run of its chain of runs (retries): names the plan's branches."""


async def plan_run(
    client: Client,
    plan_id: str,
    known: Mapping[tuple[str, str], Plan] | None = None,
    run: str | None = None,
) -> PlanRun:
    """The plan ``plan_id``'s latest run runs (or execution ``run``: an earlier run's);
    ``known`` holds plans already read by ``(plan_id, run_id)`` (a run's input never
    changes), so only a new run's first event is fetched. ``PlanNotFound`` for an unknown
    id or run."""
    description = await describe_plan(client, plan_id, run)
    info = description.raw_description.workflow_execution_info
    first_run = info.first_run_id or description.run_id
    cached = (known or {}).get((plan_id, description.run_id))
    if cached is not None:
        return PlanRun(cached, description.run_id, first_run)
    handle = client.get_workflow_handle(plan_id, run_id=description.run_id)
    async for event in handle.fetch_history_events():
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            break
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        if not payloads:
            break
        values = await client.data_converter.decode(list(payloads))
        try:
            value = with_carried_subtasks(values[0])
            plan = plan_input_from_value(value, workflow_id=plan_id).plan
        except (InvalidInput, PlanDataError) as err:
            problems = err.problems if isinstance(err, InvalidInput) else [str(err)]
            raise DurablePlansError(
                f"plan '{plan_id}' has an invalid input: {'; '.join(problems)}"
            ) from None
        return PlanRun(plan, description.run_id, first_run)
    raise DurablePlansError(f"plan '{plan_id}' has no input to read its subtasks from")


def _not_found(err: RPCError, run: str | None) -> bool:
    """Whether Temporal's refusal says there is no such plan (or run: a run id that is not
    a run id at all is refused as an invalid argument)."""
    return err.status == RPCStatusCode.NOT_FOUND or (
        run is not None and err.status == RPCStatusCode.INVALID_ARGUMENT
    )


async def describe_plan(
    client: Client, plan_id: str, run: str | None = None
) -> WorkflowExecutionDescription:
    """The plan's latest run (or execution ``run``) as Temporal describes it;
    ``PlanNotFound`` when there is none."""
    try:
        return await client.get_workflow_handle(plan_id, run_id=run).describe()
    except RPCError as err:
        if _not_found(err, run):
            raise PlanNotFound(plan_id, client.namespace, run=run) from err
        raise


async def plan_status(client: Client, plan_id: str, run: str | None = None) -> PlanReport:
    """The plan's report now: live while it runs, final once it has ended; ``run`` reads
    an earlier run's (the last execution of that run, ``RunSummary.run_id``).

    A finished plan is read from its result or failure, which needs no worker; only a
    running one is queried.
    """
    handle: WorkflowHandle[Any, PlanReport] = client.get_workflow_handle(
        plan_id, run_id=run, result_type=PlanReport
    )
    try:
        description = await handle.describe()
        if description.status == WorkflowExecutionStatus.RUNNING:
            return (await query_status(handle)).running_for(time.time())
        return await wait_for_report(handle)
    except RPCError as err:
        if _not_found(err, run):
            raise PlanNotFound(plan_id, client.namespace, run=run) from err
        raise


async def notification_outcome(client: Client, plan_id: str) -> DeliveryOutcome | None:
    """How the plan's webhook went (``notify`` in the plan), from the memo the workflow
    keeps; None for a plan without one, or a memo another version wrote differently.

    Read from the memo rather than a query, so a closed plan answers without a worker.
    """
    description = await describe_plan(client, plan_id)
    try:
        raw: Any = await description.memo_value(NOTIFY_MEMO_KEY, None)
        return None if raw is None else DeliveryOutcome.model_validate(raw)
    except Exception:  # undecodable here (another key, another version): nothing to show
        return None


async def worker_count(
    client: Client, task_queue: str, *, seen_within: timedelta = timedelta(minutes=2)
) -> int:
    """How many workers recently polled ``task_queue`` for workflow tasks.

    The server remembers pollers for a while after they die, hence the freshness window;
    a worker long-polls about once a minute, so a live one is always within it.
    """
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    cutoff = datetime.now(UTC) - seen_within
    return sum(
        1 for poller in response.pollers if poller.last_access_time.ToDatetime(UTC) >= cutoff
    )
