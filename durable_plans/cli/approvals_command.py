"""``dplan approvals``, ``dplan approve`` and ``dplan reject``: tool calls waiting for a person.

A call waits in the workflow that made it: a plan's SubtaskWorkflow (``PLAN/SUBTASK``) or a
sub-agent it spawned (``PLAN/SUBTASK/AGENT-TURN-INDEX``). Listing walks that tree with
queries (strongly consistent, unlike visibility): the plan's running subtasks, then each
one's running sub-agents. A call's id, ``SUBTASK:TURN.INDEX``, names the workflow below the
plan, so ``dplan approve PLAN CALL`` sends its Update straight there; the workflow's
validator refuses an unknown or already decided call, with the reason.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import socket
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from temporalio.client import (
    Client,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_plans.activities.log import ensure_logging
from durable_plans.cli.run_command import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    resolve_settings,
    unreachable_message,
)
from durable_plans.client._plans import TemporalUnreachable, connect
from durable_plans.domain.approvals import (
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
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.settings import Settings

__all__ = [
    "ApprovalRefused",
    "PendingRow",
    "approvals_command",
    "decide",
    "decide_command",
    "decide_in",
    "default_operator",
    "pending_calls",
    "pending_in_tree",
]

_RUNNING_PLANS = f"WorkflowType = '{PLAN_WORKFLOW}' AND ExecutionStatus = 'Running'"


def default_operator() -> str:
    """``user@host``: who decided, when ``--who`` does not say."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name (a container without one): still say the host
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class ApprovalRefused(Exception):
    """A decision that was not taken, with a message naming why."""


@dataclass(frozen=True)
class PendingRow:
    """One waiting call as the listing shows it."""

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


async def _snapshot(client: Client, workflow_id: str) -> WorkflowApprovals | None:
    """A workflow's approvals, or None when it cannot say (gone, or an older worker)."""
    try:
        result: WorkflowApprovals = await client.get_workflow_handle(workflow_id).query(
            QUERY_APPROVALS, result_type=WorkflowApprovals
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


async def pending_calls(client: Client, plan_id: str) -> list[PendingRow]:
    """The calls of plan ``plan_id`` waiting for a decision, oldest first.

    Raises RPCError when the plan does not exist (``NOT_FOUND``)."""
    report: PlanReport = await client.get_workflow_handle(plan_id).query(
        "status", result_type=PlanReport
    )
    running = [
        subtask_workflow_id(plan_id, r.id)
        for r in report.subtasks
        if r.status is SubtaskStatus.RUNNING
    ]
    prefix = f"{plan_id}/"
    rows = [
        PendingRow(
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
    rows.sort(key=lambda r: (r.since, r.call))
    return rows


async def running_plan_ids(client: Client, limit: int = 200) -> list[str]:
    ids = [e.id async for e in client.list_workflows(_RUNNING_PLANS, limit=limit)]
    return sorted(set(ids))


# --------------------------------------------------------------------------- deciding


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
    """Approve or reject ``call`` of ``plan_id`` (an Update); raises ApprovalRefused or
    ValueError (a call id or arguments that cannot be right)."""
    path, local = split_call_id(call)
    if arguments is not None and (problem := edited_arguments_problem(arguments)):
        raise ValueError(problem)
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
    except ApprovalRefused as err:
        raise ApprovalRefused(f"call {call} of plan {plan_id}: {err}") from None
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            raise ApprovalRefused(
                f"call {call} of plan {plan_id}: no running workflow {workflow_id} "
                f"(the subtask {path!r} is not running, or the plan does not exist)"
            ) from None
        raise


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
        raise ApprovalRefused(message) from None


# --------------------------------------------------------------------------- commands


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _age(since: str, now: datetime) -> str:
    try:
        seconds = max(0, int((now - datetime.fromisoformat(since)).total_seconds()))
    except ValueError:
        return "?"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _print_rows(rows: list[PendingRow]) -> None:
    if not rows:
        print("no tool calls are waiting for approval")
        return
    now = datetime.now(UTC)
    for r in rows:
        timeout = f", rejected after {r.timeout_s:g}s" if r.timeout_s is not None else ""
        print(
            f"{r.plan}  {r.call}  {r.agent}  {r.tool}  waiting {_age(r.since, now)} "
            f"(since {r.since}{timeout})"
        )
        print(f"    arguments: {scrub_secrets(r.arguments)}")
    print(
        "\napprove: dplan approve PLAN CALL [--args JSON]; reject: dplan reject PLAN CALL "
        "--reason TEXT"
    )


async def approvals_command(
    plan_id: str | None, *, json_output: bool = False, settings: Settings | None = None
) -> int:
    """List waiting calls of one plan (or of every running plan). 0 listed, 1 not."""
    ensure_logging(json=False, level="WARNING")
    resolved = resolve_settings(settings)
    if resolved is None:
        return EXIT_INVALID
    try:
        client = await connect(resolved)
        plan_ids = [plan_id] if plan_id else await running_plan_ids(client)
        rows: list[PendingRow] = []
        for pid in plan_ids:
            try:
                rows.extend(await pending_calls(client, pid))
            except RPCError as err:
                if plan_id is None:  # ended between the listing and the query
                    continue
                if err.status is RPCStatusCode.NOT_FOUND:
                    _err(f"error: no plan {pid!r} (no workflow with that id)")
                    return EXIT_FAILED
                raise
            except WorkflowQueryFailedError as err:
                if plan_id is None:
                    continue
                _err(f"error: plan {pid!r} cannot be asked: {err}")
                return EXIT_FAILED
    except TemporalUnreachable as err:
        _err(unreachable_message(err, suggest_embedded=False))
        return EXIT_FAILED
    if json_output:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        _print_rows(rows)
    return EXIT_OK


async def decide_command(
    plan_id: str,
    call: str,
    *,
    approve: bool,
    who: str | None,
    reason: str = "",
    arguments: str | None = None,
    json_output: bool = False,
    settings: Settings | None = None,
) -> int:
    """Approve or reject one call. 0 decided, 1 refused or unreachable, 2 bad input."""
    ensure_logging(json=False, level="WARNING")
    resolved = resolve_settings(settings)
    if resolved is None:
        return EXIT_INVALID
    operator = who or default_operator()
    try:
        split_call_id(call)
        if arguments is not None and (problem := edited_arguments_problem(arguments)):
            raise ValueError(problem)
    except ValueError as err:
        _err(f"error: {err}")
        return EXIT_INVALID
    try:
        client = await connect(resolved, identity=operator)
        decision = await decide(
            client,
            plan_id,
            call,
            approve=approve,
            who=operator,
            reason=reason,
            arguments=arguments,
        )
    except TemporalUnreachable as err:
        _err(unreachable_message(err, suggest_embedded=False))
        return EXIT_FAILED
    except ApprovalRefused as err:
        _err(f"error: {err}")
        return EXIT_FAILED
    if json_output:
        print(decision.model_dump_json(indent=2))
    elif decision.approved:
        edited = " with the given arguments" if decision.arguments is not None else ""
        print(f"approved {decision.tool} call {call} of plan {plan_id}{edited} (by {operator})")
    else:
        print(f"rejected {decision.tool} call {call} of plan {plan_id} (by {operator})")
    return EXIT_OK
