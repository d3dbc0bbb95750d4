"""Tool calls waiting for a person: finding them in a plan's workflows, deciding them.

A call waits in the workflow that made it: a plan's SubtaskWorkflow (``PLAN/SUBTASK``) or a
sub-agent it spawned (``PLAN/SUBTASK/AGENT-TURN-INDEX``). Listing walks that tree with
queries (strongly consistent, unlike visibility): the plan's running subtasks, then each
one's running sub-agents. A call's id, ``SUBTASK:TURN.INDEX``, names the workflow below the
plan, so a decision goes straight there as an Update; the workflow's validator refuses an
unknown or already decided call, with the reason.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from temporalio.client import Client, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_plans._errors import InvalidArgument, Refused
from durable_plans.connection import QUERY_RPC_TIMEOUT
from durable_plans.domain.approval_rules import (
    QUERY_APPROVALS,
    UPDATE_APPROVE,
    UPDATE_REJECT,
    ApprovalDecision,
    ApproveInput,
    PendingApproval,
    RejectInput,
    WorkflowApprovals,
    edited_arguments_problem,
    split_call_id,
)
from durable_plans.domain.contracts import PLAN_WORKFLOW
from durable_plans.domain.ids import subtask_workflow_id
from durable_plans.domain.models import PlanReport, SubtaskStatus

__all__ = [
    "PendingCall",
    "check_decision",
    "decide",
    "decide_in",
    "pending_calls",
    "pending_calls_everywhere",
    "pending_in_tree",
    "running_plan_ids",
]

# A closed workflow answers a query only through a worker replaying it: bounded, so a
# missing worker costs a sentence, not a hang.
_QUERY_TIMEOUT = QUERY_RPC_TIMEOUT
_RUNNING_PLANS = f"WorkflowType = '{PLAN_WORKFLOW}' AND ExecutionStatus = 'Running'"


@dataclass(frozen=True)
class PendingCall:
    """A tool call waiting for a person: what ``approvals`` lists and ``approve`` takes."""

    plan: str
    call: str  # SUBTASK:TURN.INDEX, what `dplan approve PLAN CALL` takes
    subtask: str
    agent: str
    tool: str
    arguments: str
    since: str
    timeout_s: float | None
    workflow_id: str


# --------------------------------------------------------------------------- reading


async def _snapshot(
    client: Client, workflow_id: str, *, rpc_timeout: timedelta | None = None
) -> WorkflowApprovals | None:
    """A workflow's approvals, or None when it cannot say (gone, or an older worker)."""
    try:
        result: WorkflowApprovals = await client.get_workflow_handle(workflow_id).query(
            QUERY_APPROVALS, result_type=WorkflowApprovals, rpc_timeout=rpc_timeout
        )
        return result
    except (WorkflowQueryFailedError, RPCError):
        return None


async def pending_in_tree(
    client: Client, workflow_ids: list[str]
) -> list[tuple[WorkflowApprovals, PendingApproval]]:
    """Every waiting call in the workflows named and the sub-agents they run, with the
    answer of the workflow that holds it."""
    found: list[tuple[WorkflowApprovals, PendingApproval]] = []
    queue = list(workflow_ids)
    while queue:
        snaps = await asyncio.gather(*(_snapshot(client, wid) for wid in queue))
        queue = []
        for snap in snaps:
            if snap is None:
                continue
            found.extend((snap, p) for p in snap.pending)
            queue.extend(snap.children)
    return found


async def pending_calls(
    client: Client, plan_id: str, report: PlanReport | None = None
) -> list[PendingCall]:
    """The calls of plan ``plan_id`` waiting for a decision, oldest first; ``report`` is
    the plan's status when the caller has just read it.

    Raises RPCError when the plan does not exist (``NOT_FOUND``)."""
    if report is None:
        report = await client.get_workflow_handle(plan_id).query("status", result_type=PlanReport)
    running = [
        subtask_workflow_id(plan_id, r.id)
        for r in report.subtasks
        if r.status is SubtaskStatus.RUNNING
    ]
    prefix = f"{plan_id}/"
    calls = [
        PendingCall(
            plan=plan_id,
            call=f"{snap.workflow_id.removeprefix(prefix)}:{p.call_id}",
            subtask=snap.workflow_id.removeprefix(prefix),
            agent=p.agent,
            tool=p.tool,
            arguments=p.arguments,
            since=p.since,
            timeout_s=p.timeout_s,
            workflow_id=snap.workflow_id,
        )
        for snap, p in await pending_in_tree(client, running)
        if snap.workflow_id.startswith(prefix)
    ]
    calls.sort(key=lambda c: (c.since, c.call))
    return calls


async def running_plan_ids(client: Client, limit: int = 200) -> list[str]:
    ids = [e.id async for e in client.list_workflows(_RUNNING_PLANS, limit=limit)]
    return sorted(set(ids))


async def pending_calls_everywhere(
    client: Client, *, rpc_timeout: timedelta = QUERY_RPC_TIMEOUT
) -> list[PendingCall]:
    """The waiting calls of every running plan, the plans asked at once.

    A plan that cannot answer in ``rpc_timeout`` (no worker polls its queue, or it ended
    between the listing and the question) has nothing to decide now and is left out: one
    such plan must not hold up the list, nor several add their waits up."""

    async def of(plan_id: str) -> list[PendingCall]:
        try:
            report = await client.get_workflow_handle(plan_id).query(
                "status", result_type=PlanReport, rpc_timeout=rpc_timeout
            )
            return await pending_calls(client, plan_id, report)
        except (WorkflowQueryFailedError, RPCError):
            return []

    found = await asyncio.gather(*(of(pid) for pid in await running_plan_ids(client)))
    return [call for calls in found for call in calls]


# --------------------------------------------------------------------------- deciding


def check_decision(call: str, arguments: str | None) -> tuple[str, str]:
    """The call id split into (subtask path, local id), after checking it and any
    replacement arguments can be right; raises ``InvalidArgument`` naming the problem."""
    try:
        path, local = split_call_id(call)
    except ValueError as err:
        raise InvalidArgument(str(err)) from None
    if arguments is not None and (problem := edited_arguments_problem(arguments)):
        raise InvalidArgument(problem)
    return path, local


async def decide(
    client: Client,
    plan_id: str,
    call: str,
    *,
    approve: bool,
    who: str,
    reason: str = "",
    arguments: str | None = None,
) -> ApprovalDecision:
    """Approve or reject ``call`` of ``plan_id`` (an Update); raises ``Refused`` (saying
    who decided first, when someone did) or ``InvalidArgument``."""
    path, local = check_decision(call, arguments)
    workflow_id = subtask_workflow_id(plan_id, path)
    try:
        return await decide_in(
            client,
            workflow_id,
            local,
            approve=approve,
            who=who,
            reason=reason,
            arguments=arguments,
        )
    except Refused as err:
        raise Refused(f"call {call} of plan {plan_id}: {err}") from None
    except RPCError as err:
        if err.status is not RPCStatusCode.NOT_FOUND:
            raise
    raise Refused(f"call {call} of plan {plan_id}: {await _why_closed(client, workflow_id, local)}")


async def _why_closed(client: Client, workflow_id: str, call_id: str) -> str:
    """Why an Update found no running workflow. The usual reason is a race another
    operator won: their decision let the subtask finish a moment earlier. Its closed
    workflow still answers the ``approvals`` query, so the loser is told who won."""
    snap = await _snapshot(client, workflow_id, rpc_timeout=_QUERY_TIMEOUT)
    if snap is None:
        return (
            f"no workflow {workflow_id} answers (the subtask is not running, or the plan "
            "does not exist)"
        )
    for decision in snap.decided:
        if decision.call_id == call_id:
            verb = "approved" if decision.approved else "rejected"
            return (
                f"the subtask is not running: the call ({decision.tool}) was already {verb} "
                f"by {decision.who} at {decision.at}"
            )
    return "the subtask is not running, and it left that call undecided"


async def decide_in(
    client: Client,
    workflow_id: str,
    call_id: str,
    *,
    approve: bool,
    who: str,
    reason: str = "",
    arguments: str | None = None,
) -> ApprovalDecision:
    """The Update itself, to the workflow holding the call (its own, local call id)."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        if approve:
            result: ApprovalDecision = await handle.execute_update(
                UPDATE_APPROVE,
                ApproveInput(call_id=call_id, who=who, arguments=arguments),
                result_type=ApprovalDecision,
            )
        else:
            result = await handle.execute_update(
                UPDATE_REJECT,
                RejectInput(call_id=call_id, who=who, reason=reason),
                result_type=ApprovalDecision,
            )
        return result
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause)
        raise Refused(message) from None
