"""``dplan retry``, ``resume``, ``skip`` and ``budget``: an operator steps into a plan.

``resume``, ``skip`` and ``budget`` are Updates of the running PlanWorkflow: its
validators refuse what cannot be done (an unknown subtask, one that is not paused, a
budget naming no limit) before anything is written, and the caller gets that sentence.
``retry`` starts a new run of a finished plan (same workflow id) from the state the last
run reached, read through the ``carried_state`` query: what completed is kept, what
failed, was skipped or cancelled runs again.

Exit codes (as ``dplan approve``/``reject``): 0 done (retry: the plan completed), 1 the
request was refused (nothing changed), Temporal could not be used or the retried plan
failed, 2 the arguments are invalid.
"""

from __future__ import annotations

import contextlib
import getpass
import socket
import sys
from collections.abc import Awaitable
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from durable_plans.activities.log import ensure_logging
from durable_plans.cli.run_command import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    _CannotNoWait,
    follow_to_report,
    open_connection,
    resolve_settings,
    unreachable_message,
)
from durable_plans.client._plans import (
    PlanClientError,
    TemporalUnreachable,
    connect,
    describe_plan,
    query_plan,
    web_url,
)
from durable_plans.domain.contracts import PLAN_WORKFLOW, PlanInput
from durable_plans.domain.failures import describe_failure
from durable_plans.domain.models import PlanReport
from durable_plans.domain.operations import (
    CARRIED_STATE_QUERY,
    RAISE_BUDGET_UPDATE,
    RESUME_UPDATE,
    SKIP_UPDATE,
    BudgetRequest,
    OperatorError,
    SubtaskRequest,
    retry_input,
)
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.settings import Settings

__all__ = ["budget_command", "operator_identity", "retry_command", "subtask_command"]


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def operator_identity() -> str:
    """Who is asking, as the workflow logs it: ``user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class Refused(PlanClientError):
    """The workflow (or the rules before it) refused the request; nothing changed."""


async def _describe_status(client: Client, plan_id: str) -> WorkflowExecutionStatus:
    status = (await describe_plan(client, plan_id)).status
    assert status is not None
    return status


async def _update(client: Client, plan_id: str, name: str, arg: Any, result_type: type) -> Any:
    """Run update ``name`` on a running plan; a refusal becomes ``Refused``."""
    status = await _describe_status(client, plan_id)
    if status != WorkflowExecutionStatus.RUNNING:
        raise Refused(
            f"plan '{plan_id}' is not running (it is {status.name.lower()}): "
            f"use `dplan retry {plan_id}` to run what did not complete"
        )
    handle = client.get_workflow_handle(plan_id)
    try:
        return await handle.execute_update(name, arg, result_type=result_type)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        if isinstance(cause, ApplicationError):
            raise Refused(describe_failure(cause)[1]) from err
        raise Refused(str(cause)) from err


async def _with_client(settings: Settings | None, body: Any) -> int:
    resolved = resolve_settings(settings)
    if resolved is None:
        return EXIT_INVALID

    async def connected() -> int:
        return int(await body(await connect(resolved)))

    return await _reported(connected())


async def _reported(body: Awaitable[int], *, suggest_embedded: bool = False) -> int:
    """``body``'s exit code; Temporal out of reach, a refusal (``Refused``) or another
    client error is said in one line on stderr, exit 1."""
    try:
        return await body
    except TemporalUnreachable as err:
        _err(unreachable_message(err, suggest_embedded=suggest_embedded))
    except (PlanClientError, RPCError) as err:
        _err(f"error: {err}")
    return EXIT_FAILED


async def subtask_command(
    action: str,
    plan_id: str,
    subtask: str,
    *,
    by: str | None = None,
    settings: Settings | None = None,
) -> int:
    """``dplan resume|skip PLAN SUBTASK``."""
    ensure_logging(json=False, level="WARNING")
    name = {"resume": RESUME_UPDATE, "skip": SKIP_UPDATE}[action]
    request = SubtaskRequest(subtask=subtask, by=by or operator_identity())

    async def body(client: Client) -> int:
        print(await _update(client, plan_id, name, request, str))
        return EXIT_OK

    return await _with_client(settings, body)


async def budget_command(
    plan_id: str,
    *,
    max_tokens: int | None,
    max_cost_usd: float | None,
    by: str | None = None,
    settings: Settings | None = None,
) -> int:
    """``dplan budget PLAN --max-tokens N --max-cost-usd X``."""
    ensure_logging(json=False, level="WARNING")
    if max_tokens is None and max_cost_usd is None:
        _err("error: name a new limit: --max-tokens N and/or --max-cost-usd X")
        return EXIT_INVALID
    try:
        request = BudgetRequest(
            max_tokens=max_tokens, max_cost_usd=max_cost_usd, by=by or operator_identity()
        )
    except ValueError as err:
        _err(f"error: invalid budget: {err}")
        return EXIT_INVALID

    async def body(client: Client) -> int:
        resumed: list[str] = await _update(client, plan_id, RAISE_BUDGET_UPDATE, request, list)
        limits = [f"max_tokens={max_tokens}"] if max_tokens is not None else []
        limits += [f"max_cost_usd={max_cost_usd:g}"] if max_cost_usd is not None else []
        print(f"budget of plan '{plan_id}' set ({', '.join(limits)})")
        print(f"resumed: {', '.join(resumed)}" if resumed else "no subtask was paused on it")
        return EXIT_OK

    return await _with_client(settings, body)


async def read_carried_state(client: Client, plan_id: str) -> PlanInput:
    """What the plan's last run reached; the plan must have ended.

    The query replays the closed run on a worker, so one must be polling the task queue.
    """
    if await _describe_status(client, plan_id) == WorkflowExecutionStatus.RUNNING:
        raise Refused(
            f"plan '{plan_id}' is still running: a paused subtask is resumed with "
            f"`dplan resume {plan_id} SUBTASK`; cancel the plan first to retry it whole"
        )
    return await query_plan(client.get_workflow_handle(plan_id), CARRIED_STATE_QUERY, PlanInput)


async def retry_command(
    plan_id: str,
    *,
    subtasks: list[str],
    embedded: bool,
    json_output: bool,
    no_wait: bool,
    settings: Settings | None = None,
) -> int:
    """``dplan retry PLAN [--subtask ID ...]``: a new run keeping what completed."""
    ensure_logging(json=False, level="WARNING")
    resolved = resolve_settings(settings)
    if resolved is None:
        return EXIT_INVALID

    async def retry() -> int:
        async with contextlib.AsyncExitStack() as stack:
            try:
                conn = await open_connection(
                    stack, resolved, embedded=embedded, no_wait=no_wait, waiting="the retry waits"
                )
            except _CannotNoWait as err:
                _err(str(err))
                return EXIT_INVALID
            state = await read_carried_state(conn.client, plan_id)
            try:
                new_input, rerun = retry_input(state, subtasks)
            except OperatorError as err:
                raise Refused(str(err)) from err
            plan = new_input.plan
            _err(f"retrying plan '{plan_id}': {', '.join(rerun)} (the rest is kept)")
            handle = await conn.client.start_workflow(
                PLAN_WORKFLOW,
                new_input,
                id=plan_id,
                task_queue=conn.settings.task_queue,
                result_type=PlanReport,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                static_summary=f"retry: {scrub_secrets(plan.goal)[:100]}" if plan.goal else None,
            )
            url = (
                web_url(conn.ui_base, conn.settings.temporal_namespace, plan_id)
                if conn.ui_base
                else None
            )
            if no_wait:
                print(plan_id)
                return EXIT_OK
            return await follow_to_report(conn, handle, plan, url, json_output=json_output)

    return await _reported(retry(), suggest_embedded=not embedded)
