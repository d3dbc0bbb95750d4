"""``revise_plan`` for a plan's subtask: the agent changes the plan it is part of.

The call's arguments stay in the session; one activity reads them, sends the revision to
the plan as an Update (``REVISE_UPDATE``) and writes the plan's answer (the revision, or
every problem of a refusal) as the tool result. Its key is the call's own: a worker killed
after the Update and before the answer runs the activity again, and the plan answers with
the revision it already made instead of adding the subtasks twice.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from durable_plans.domain.contracts import SubtaskInput, ToolCallRef
    from durable_plans.domain.revisions import ACT_REVISE_PLAN, RevisePlanCallInput

from durable_plans.workflows import policies
from durable_plans.workflows.agent_loop import CustomTool

__all__ = ["revise_plan_tool"]


def revise_plan_tool(inp: SubtaskInput, session_id: str, scope: str) -> CustomTool | None:
    """The tool for a plan's own subtask whose agent lists it; None for anything else (a
    sub-agent, a subtask that does not know its plan)."""
    plan_workflow_id = inp.report_to
    if inp.depth or not plan_workflow_id:
        return None

    async def handle(message_id: str, turn: int, index: int, ref: ToolCallRef) -> str | None:
        await workflow.execute_activity(
            ACT_REVISE_PLAN,
            RevisePlanCallInput(
                session_id=session_id,
                message_id=message_id,
                call_index=index,
                scope=scope,
                turn=turn,
                plan_workflow_id=plan_workflow_id,
                subtask=inp.subtask.id,
                agent=inp.subtask.agent,
            ),
            start_to_close_timeout=policies.REVISE_TIMEOUT,
            heartbeat_timeout=policies.SHORT_HEARTBEAT,  # a dead worker's is retried soon
            retry_policy=policies.REVISE_RETRY,
            summary=f"revise_plan by {inp.subtask.id}",
        )
        return None

    return handle
