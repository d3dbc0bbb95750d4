"""An agent's ``revise_plan`` call, sent to its plan (``workflows/revise_tool.py``).

The call is read from the session, where the model wrote it; the revision goes to the plan
as an Update, whose validator judges it against the plan as it stands; the plan's answer
is written back as the tool result: the revision made, or every problem of a refusal, one
per line, for the model to fix. Retried after a crash, the activity finds its answer
already written and stops, or sends the request again under the same key and gets the
revision the plan made the first time.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.orchestration_tools import ORCHESTRATION_REGISTRY, RevisePlanArgs
from durable_plans.activities.tool_calls import pending_call
from durable_plans.activities.tool_registry import ToolResult
from durable_plans.domain.agents import REVISE_PLAN_TOOL
from durable_plans.domain.ids import tool_message_id
from durable_plans.domain.models import Message, Subtask, ToolCall
from durable_plans.domain.revision_record import Revision
from durable_plans.domain.revisions import (
    ACT_REVISE_PLAN,
    REVISE_UPDATE,
    RevisePlanCallInput,
    RevisionRequest,
)
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.domain.tool_contracts import ToolCallAt
from durable_plans.session_store import SessionStore

__all__ = ["PlanRevisionActivities"]


class PlanRevisionActivities:
    def __init__(self, store: SessionStore) -> None:
        self._store = store

    @activity.defn(name=ACT_REVISE_PLAN)
    async def revise_plan_call(self, inp: RevisePlanCallInput) -> None:
        """Send one ``revise_plan`` call to the plan and write its answer."""
        async with heartbeating():
            at = ToolCallAt.of(inp)
            call = await pending_call(self._store, at)
            if not isinstance(call, ToolCall):
                return  # answered before a crash: the plan has its answer already
            own_id = tool_message_id(inp.scope, inp.turn, inp.call_index)
            parsed = ORCHESTRATION_REGISTRY.parse(REVISE_PLAN_TOOL, call.function.arguments)
            if isinstance(parsed, ToolResult):
                answer = parsed.content
            else:
                assert isinstance(parsed, RevisePlanArgs)
                answer = await _send(inp, parsed, key=f"{inp.session_id}/{own_id}")
            await self._store.append(
                inp.session_id,
                [
                    Message(
                        id=own_id,
                        role="tool",
                        tool_call_id=call.id,
                        name=REVISE_PLAN_TOOL,
                        content=scrub_secrets(answer),
                    )
                ],
            )


async def _send(inp: RevisePlanCallInput, args: RevisePlanArgs, *, key: str) -> str:
    """The plan's answer to the revision, as the model reads it."""
    if not args.add and not args.remove:
        return "error: the revision adds no subtask and removes none"
    request = RevisionRequest(
        add=tuple(
            Subtask(
                id=s.id, description=s.description, agent=s.agent, depends_on=tuple(s.depends_on)
            )
            for s in args.add
        ),
        remove=tuple(args.remove),
        by=f"agent {inp.agent}",
        subtask=inp.subtask,
        reason=args.reason,
        key=key,
    )
    handle = activity.client().get_workflow_handle(inp.plan_workflow_id)
    try:
        revision = await handle.execute_update(
            REVISE_UPDATE, request, id=_update_id(key), result_type=Revision
        )
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        if not isinstance(cause, ApplicationError):
            raise
        problems = _problems(cause.details)
        lines = problems or [cause.message]
        return (
            "error: the revision was refused, nothing changed:\n"
            + "\n".join(f"- {p}" for p in lines)
            + f"\nFix them and call {REVISE_PLAN_TOOL} again."
        )
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:  # the plan ended: nothing to revise
            return "error: the plan has ended; it can no longer be revised"
        raise
    return (
        f"revision {revision.number} made: {revision.describe()}. The subtasks added start "
        "once what they depend on completed; their results are in the plan's report."
    )


def _update_id(key: str) -> str:
    """Temporal's id for the Update: a retry within the same run gets the same outcome."""
    return key[-400:]


def _problems(details: Any) -> list[str]:
    first = details[0] if details else None
    return [str(p) for p in first] if isinstance(first, list) else []
