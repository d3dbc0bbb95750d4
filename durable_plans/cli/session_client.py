"""The client side of a conversation: start or attach to its ``SessionWorkflow``, run its
updates, read its queries, end it.

Every way a call can fail (the workflow refused it, no worker answered in time, the
conversation is gone) becomes one ``SessionCommandError`` with a type and a message, so a
front end (``dplan chat``, ``dplan plan``) shows ``error: <type>: <message>`` and goes on.
The workflow's own failures are read with ``domain.failures``, like every other client's.
"""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durable_plans.cli.run_command import Connection
from durable_plans.client import DurablePlansError
from durable_plans.connection import QUERY_RPC_TIMEOUT
from durable_plans.domain.agents import AgentCatalog
from durable_plans.domain.failures import describe_failure
from durable_plans.domain.ids import session_workflow_id
from durable_plans.domain.plan_loader import ID_PATTERN, ID_RULE
from durable_plans.domain.session_contracts import SESSION_WORKFLOW, SIGNAL_END, SessionInput

__all__ = [
    "SessionCommandError",
    "SessionEnded",
    "attach_session",
    "check_session_id",
    "end_session",
    "new_session_id",
    "session_query",
    "session_update",
]

T = TypeVar("T")

_QUERY_TIMEOUT = QUERY_RPC_TIMEOUT


# --------------------------------------------------------------------------- session ids


def new_session_id() -> str:
    """A fresh conversation id, short enough to type when resuming."""
    return f"chat-{uuid.uuid4().hex[:8]}"


def check_session_id(value: str) -> str | None:
    """The problem with ``value`` as a session id, or None when it is usable.

    Session ids become workflow ids (``session/{id}``) and parts of snapshot ids, so they
    follow the plan-id rule (no separators, no whitespace).
    """
    if ID_PATTERN.fullmatch(value) is None:
        return f"invalid session id {value!r}: {ID_RULE}"
    return None


# --------------------------------------------------------------------------- the workflow


class SessionEnded(DurablePlansError):
    """The conversation was finished (``/end``); its id cannot be reused."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"conversation '{session_id}' has ended (/end) and cannot be resumed; "
            "start a new one with `dplan chat`"
        )
        self.session_id = session_id


class SessionCommandError(Exception):
    """An update or query the session workflow refused or could not answer.

    ``type`` is the workflow's ApplicationError type (``InvalidAgentSwitch``,
    ``BudgetExceeded``, ``BadRequest`` …) or a name for what failed on the way.
    """

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(f"{type_}: {message}")
        self.type = type_
        self.message = message


async def _is_running(client: Client, workflow_id: str) -> bool:
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return description.status == WorkflowExecutionStatus.RUNNING


async def attach_session(
    conn: Connection,
    catalog: AgentCatalog,
    session_id: str,
    *,
    agent: str | None = None,
) -> tuple[WorkflowHandle[Any, Any], bool]:
    """The conversation's workflow handle, and whether this call started it.

    A running conversation is attached to (``USE_EXISTING``: its input, including
    ``agent``, is then ignored). A finished one is not restarted under the same id
    (``ALLOW_DUPLICATE_FAILED_ONLY``): ``/end`` means for good, while a conversation
    that failed or was terminated may be started again on the same stored history.
    """
    workflow_id = session_workflow_id(session_id)
    existed = await _is_running(conn.plans.temporal, workflow_id)
    session_input = SessionInput(
        session_id=session_id,
        agents=catalog.agents,
        budget=conn.settings.default_budget,
        **({"agent": agent} if agent else {}),
    )
    try:
        handle: WorkflowHandle[Any, Any] = await conn.plans.temporal.start_workflow(
            SESSION_WORKFLOW,
            session_input,
            id=workflow_id,
            task_queue=conn.settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            static_summary=f"conversation {session_id}",
        )
    except WorkflowAlreadyStartedError as err:
        raise SessionEnded(session_id) from err
    return handle, not existed


async def session_update(
    conn: Connection,
    handle: WorkflowHandle[Any, Any],
    name: str,
    arg: Any,
    result_type: type[T],
) -> T:
    """Run update ``name``; every way it can fail becomes a ``SessionCommandError``."""
    try:
        result: T = await conn.watch(handle.execute_update(name, arg, result_type=result_type))
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        if isinstance(cause, ApplicationError):
            raise SessionCommandError(*describe_failure(cause)) from err
        raise SessionCommandError(type(cause).__name__, str(cause)) from err
    except WorkflowUpdateRPCTimeoutOrCancelledError as err:
        raise SessionCommandError("Timeout", f"no answer to '{name}': {err}") from err
    except RPCError as err:
        raise _rpc_error(err, handle) from err
    return result


async def session_query(handle: WorkflowHandle[Any, Any], name: str, result_type: type[T]) -> T:
    """Run query ``name`` with a bounded wait (a query needs a worker to answer it);
    every way it can fail becomes a ``SessionCommandError``."""
    try:
        result: T = await handle.query(name, result_type=result_type, rpc_timeout=_QUERY_TIMEOUT)
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as err:
        raise SessionCommandError("QueryFailed", str(err)) from err
    except RPCError as err:
        if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
            raise SessionCommandError(
                "Timeout",
                f"the conversation did not answer within {_QUERY_TIMEOUT.seconds}s; "
                "is a worker running (dplan-worker)?",
            ) from err
        raise _rpc_error(err, handle) from err
    return result


def _rpc_error(err: RPCError, handle: WorkflowHandle[Any, Any]) -> SessionCommandError:
    if err.status == RPCStatusCode.NOT_FOUND:
        return SessionCommandError(
            "SessionEnded", f"the conversation ({handle.id}) is no longer running: {err.message}"
        )
    return SessionCommandError("RPCError", err.message)


async def end_session(handle: WorkflowHandle[Any, Any]) -> None:
    """Finish the conversation for good (``/end``): its workflow returns when idle."""
    try:
        await handle.signal(SIGNAL_END)
    except RPCError as err:
        raise _rpc_error(err, handle) from err
