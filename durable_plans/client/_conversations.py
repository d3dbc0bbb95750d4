"""The client side of a conversation: start or attach to its ``SessionWorkflow``, run its
updates, read its queries, decide the tool calls its turn waits on, end it.

Every way a call can fail (the workflow refused it, no worker answered in time, the
conversation is gone) becomes one ``SessionCommandError`` with a type and a message, so a
front end (``dplan chat``, ``dplan plan``) shows ``error: <type>: <message>`` and goes on.
The workflow's own failures are read with ``domain.failures``, like every other client's.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, Final, TypeVar

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

from durable_plans._errors import SessionCommandError, SessionEnded
from durable_plans.client._approvals import decide_in, pending_in_tree
from durable_plans.domain.agents import AgentCatalog
from durable_plans.domain.approval_rules import ApprovalDecision, PendingApproval, WorkflowApprovals
from durable_plans.domain.failures import FailureType, describe_failure
from durable_plans.domain.ids import session_workflow_id
from durable_plans.domain.models import Budget, Message
from durable_plans.domain.plan_loader import ID_PATTERN, ID_RULE
from durable_plans.domain.session_contracts import (
    QUERY_EVENTS,
    QUERY_STATE,
    SESSION_WORKFLOW,
    SIGNAL_END,
    UPDATE_HISTORY,
    UPDATE_PLAN_GOAL,
    UPDATE_SEND_MESSAGE,
    UPDATE_SWITCH_AGENT,
    UPDATE_UNDO,
    AgentSwitchEvent,
    AgentSwitchResult,
    HistoryInput,
    PlanGoalInput,
    SendMessageInput,
    SendMessageResult,
    SessionInput,
    SessionState,
    SwitchAgentInput,
    UndoInput,
    UndoResult,
)

__all__ = ["Conversation", "check_session_id", "new_session_id", "open_conversation"]

T = TypeVar("T")

_QUERY_TIMEOUT: Final = timedelta(seconds=10)


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


async def _is_running(client: Client, workflow_id: str) -> bool:
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return description.status == WorkflowExecutionStatus.RUNNING


async def open_conversation(
    client: Client,
    session_id: str,
    *,
    catalog: AgentCatalog,
    budget: Budget | None,
    task_queue: str,
    operator: str,
    agent: str | None = None,
) -> Conversation:
    """Attach to the running conversation ``session_id``, or start it.

    A running conversation is attached to (``USE_EXISTING``: its input, including
    ``agent``, is then ignored). A finished one is not restarted under the same id
    (``ALLOW_DUPLICATE_FAILED_ONLY``): ``/end`` means for good (``SessionEnded``), while a
    conversation that failed or was terminated may be started again on the same stored
    history.
    """
    workflow_id = session_workflow_id(session_id)
    existed = await _is_running(client, workflow_id)
    session_input = SessionInput(
        session_id=session_id,
        agents=catalog.agents,
        budget=budget,
        **({"agent": agent} if agent else {}),
    )
    try:
        handle: WorkflowHandle[Any, Any] = await client.start_workflow(
            SESSION_WORKFLOW,
            session_input,
            id=workflow_id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            static_summary=f"conversation {session_id}",
        )
    except WorkflowAlreadyStartedError as err:
        raise SessionEnded(session_id) from err
    return Conversation(client, session_id, handle, started=not existed, operator=operator)


class Conversation:
    """One conversation (workflow ``session/{id}``), as ``Client.conversation`` opened it.

    Every method raises ``SessionCommandError`` (a ``DurablePlansError`` with the
    workflow's failure ``type``) when the conversation refuses or cannot answer.
    """

    def __init__(
        self,
        temporal: Client,
        session_id: str,
        handle: WorkflowHandle[Any, Any],
        *,
        started: bool,
        operator: str,
    ) -> None:
        self._temporal = temporal
        self._handle = handle
        self._operator = operator
        self.session_id = session_id
        self.started = started
        """Whether opening it started the workflow (False: attached to a running one)."""

    @property
    def workflow_id(self) -> str:
        """The conversation's workflow id (``session/{id}``): the root its turns, tools
        and sub-agents run under, and what its streamed text is published on."""
        return self._handle.id

    async def send(self, text: str) -> SendMessageResult:
        """One turn: the message, and the agent's answer once it is complete."""
        return await self._update(
            UPDATE_SEND_MESSAGE, SendMessageInput(text=text), SendMessageResult
        )

    async def plan(self, goal: str) -> SendMessageResult:
        """Ask the agent to plan ``goal`` and start the plans it writes (``/plan``)."""
        return await self._update(UPDATE_PLAN_GOAL, PlanGoalInput(goal=goal), SendMessageResult)

    async def switch_agent(self, target: str, reason: str = "") -> AgentSwitchResult:
        """Hand the conversation to agent ``target`` (``/switch``)."""
        request = SwitchAgentInput(target=target, reason=reason)
        return await self._update(UPDATE_SWITCH_AGENT, request, AgentSwitchResult)

    async def undo(self) -> UndoResult:
        """Take back the last turn, its messages and its file changes (``/undo``)."""
        return await self._update(UPDATE_UNDO, UndoInput(), UndoResult)

    async def history(self, limit: int) -> list[Message]:
        """The last ``limit`` messages, oldest first (``/history``)."""
        return await self._update(UPDATE_HISTORY, HistoryInput(limit=limit), list[Message])

    async def state(self) -> SessionState:
        """Where the conversation stands: agent, usage, plans, files (``/status``)."""
        return await self._query(QUERY_STATE, SessionState)

    async def events(self) -> list[AgentSwitchEvent]:
        """The agent switches so far, oldest first (``/events``)."""
        return await self._query(QUERY_EVENTS, list[AgentSwitchEvent])

    async def end(self) -> None:
        """Finish the conversation for good (``/end``): its workflow returns when idle."""
        try:
            await self._handle.signal(SIGNAL_END)
        except RPCError as err:
            raise _rpc_error(err, self._handle) from err

    async def waiting_calls(self) -> list[tuple[WorkflowApprovals, PendingApproval]]:
        """Tool calls the current turn waits on, in the conversation and the sub-agents
        it runs, each with the answer of the workflow that holds it."""
        return await pending_in_tree(self._temporal, [self._handle.id])

    async def decide(
        self,
        workflow_id: str,
        call_id: str,
        *,
        approve: bool,
        reason: str = "",
        arguments: str | None = None,
    ) -> ApprovalDecision:
        """Approve or reject a waiting call (as ``waiting_calls`` named it) under the
        client's operator; ``Refused`` when it was decided first or has timed out."""
        return await decide_in(
            self._temporal,
            workflow_id,
            call_id,
            approve=approve,
            who=self._operator,
            reason=reason,
            arguments=arguments,
        )

    async def _update(self, name: str, arg: Any, result_type: type[T]) -> T:
        try:
            result: T = await self._handle.execute_update(name, arg, result_type=result_type)
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError):
                raise SessionCommandError(*describe_failure(cause)) from err
            raise SessionCommandError(type(cause).__name__, str(cause)) from err
        except WorkflowUpdateRPCTimeoutOrCancelledError as err:
            raise SessionCommandError(
                FailureType.TIMEOUT.value, f"no answer to '{name}': {err}"
            ) from err
        except RPCError as err:
            raise _rpc_error(err, self._handle) from err
        return result

    async def _query(self, name: str, result_type: type[T]) -> T:
        """A query with a bounded wait (a query needs a worker to answer it)."""
        try:
            result: T = await self._handle.query(
                name, result_type=result_type, rpc_timeout=_QUERY_TIMEOUT
            )
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as err:
            raise SessionCommandError("QueryFailed", str(err)) from err
        except RPCError as err:
            if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                raise SessionCommandError(
                    FailureType.TIMEOUT.value,
                    f"the conversation did not answer within {_QUERY_TIMEOUT.seconds}s; "
                    "is a worker running (dplan-worker)?",
                ) from err
            raise _rpc_error(err, self._handle) from err
        return result


def _rpc_error(err: RPCError, handle: WorkflowHandle[Any, Any]) -> SessionCommandError:
    if err.status == RPCStatusCode.NOT_FOUND:
        return SessionCommandError(
            "SessionEnded", f"the conversation ({handle.id}) is no longer running: {err.message}"
        )
    return SessionCommandError("RPCError", err.message)
