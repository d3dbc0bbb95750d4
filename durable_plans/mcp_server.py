"""``dplan mcp``: durable plans as MCP tools, for agents that take their tools over MCP.

An IDE agent or a chat assistant hands a long job to a plan and follows it: each tool is
one call of ``Client`` (the CLI's and the page's door), each refusal an MCP tool error of
one line, in the CLI's words. ``start_plan`` takes a plan object, or a goal the
orchestrator plans first; with ``wait`` it reports progress as subtasks end (MCP progress
notifications) and returns the report. A plan's report and each subtask's conversation
are resources.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from temporalio.service import RPCError

from durable_plans.client import (
    Client,
    DurablePlansError,
    InvalidArgument,
    PlanEnded,
    SubtaskChanged,
    new_session_id,
)
from durable_plans.domain.models import PlanReport, SubtaskStatus

__all__ = ["build_mcp_server"]

T = TypeVar("T")

INSTRUCTIONS = (
    "Durable multi-agent plans on Temporal: a plan is subtasks with dependencies, each run "
    "by an agent; it survives crashes and reports truthfully. Start one with start_plan "
    "(a plan object, or a goal the orchestrator plans), follow it with plan_status, read "
    "the result with plan_report; tool calls that wait for a person are decided with "
    "approve_call and reject_call."
)
_TERMINAL = frozenset(
    {SubtaskStatus.COMPLETED, SubtaskStatus.FAILED, SubtaskStatus.SKIPPED, SubtaskStatus.CANCELLED}
)


def _line(error: BaseException) -> str:
    """One line, as the CLI says it."""
    if isinstance(error, InvalidArgument) and error.problems:
        return f"{error.header}: " + "; ".join(error.problems)
    if isinstance(error, RPCError):
        return f"the Temporal server refused a request: {error.status.name}: {error.message}"
    return " ".join(str(error).split())


async def _call(action: Awaitable[T]) -> T:
    """``action``, its refusal an MCP tool error of one line."""
    try:
        return await action
    except (DurablePlansError, RPCError, ValueError) as error:
        raise ToolError(_line(error)) from None


def _report(report: PlanReport) -> dict[str, Any]:
    return report.model_dump(mode="json", exclude_none=True)


def build_mcp_server(client: Client) -> MCPServer:
    """The server, its tools and resources bound to ``client``."""
    server: MCPServer = MCPServer("durable-plans", instructions=INSTRUCTIONS, log_level="WARNING")

    async def follow(plan_id: str, ctx: Context | None) -> dict[str, Any]:
        done = 0
        total: int | None = None
        async for event in client.watch(plan_id):
            if isinstance(event, SubtaskChanged) and event.status in _TERMINAL:
                done += 1
                if ctx is not None:
                    await ctx.report_progress(done, total, f"{event.subtask}: {event.status.value}")
            elif isinstance(event, PlanEnded):
                return _report(event.report)
        return _report(await client.report(plan_id))

    @server.tool(
        description="Start a plan: `plan` is a plan object as a plan file writes it (id, "
        "goal, subtasks with id, description, agent, depends_on), or give `goal` and the "
        "orchestrator plans it first. With `wait`, progress comes as subtasks end and the "
        "result is the report; without, the plan ids."
    )
    async def start_plan(
        ctx: Context,
        plan: dict[str, Any] | None = None,
        goal: str | None = None,
        wait: bool = False,
    ) -> dict[str, Any]:
        if (plan is None) == (goal is None or not goal.strip()):
            raise ToolError("give either `plan` (a plan object) or `goal` (text), not both")
        if plan is not None:
            plan_ids = [await _call(client.start(plan))]
        else:
            assert goal is not None
            conversation = await _call(client.conversation(new_session_id()))
            result = await _call(conversation.plan(goal.strip()))
            if not result.plan_ids:
                raise ToolError(f"the orchestrator started no plan for this goal: {result.answer}")
            plan_ids = list(result.plan_ids)
        if not wait:
            return {"plan_ids": plan_ids}
        reports = [await _call(follow(plan_id, ctx)) for plan_id in plan_ids]
        return reports[0] if len(reports) == 1 else {"reports": reports}

    @server.tool(
        description="Where a plan stands now: its status, counts and each subtask, and the "
        "tool calls waiting for a person (`waiting`: decide them with approve_call or "
        "reject_call)."
    )
    async def plan_status(plan_id: str) -> dict[str, Any]:
        report = await _call(client.status(plan_id))
        waiting = []
        if any(r.status is SubtaskStatus.RUNNING for r in report.subtasks):
            waiting = await _call(client.approvals(plan_id))
        return {
            **_report(report),
            "waiting": [
                {"call": c.call, "subtask": c.subtask, "tool": c.tool, "arguments": c.arguments}
                for c in waiting
            ],
        }

    @server.tool(description="A plan's report, waiting for the plan to end.")
    async def plan_report(plan_id: str) -> dict[str, Any]:
        return _report(await _call(client.report(plan_id)))

    @server.tool(
        description="Plans, newest first; `status` (running, failed...) and `tenant` filter."
    )
    async def list_plans(
        status: str | None = None, limit: int = 20, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        bounded = max(1, min(limit, 200))
        plans = await _call(client.list(status=status, limit=bounded, tenant=tenant))
        return [p.to_json() for p in plans]

    @server.tool(description="Let a tool call that waits for a person run (`arguments`: JSON).")
    async def approve_call(plan_id: str, call: str, arguments: str | None = None) -> str:
        decision = await _call(client.approve(plan_id, call, arguments=arguments))
        return f"{call}: approved by {decision.who}"

    @server.tool(description="Refuse a waiting tool call; the reason is its tool result.")
    async def reject_call(plan_id: str, call: str, reason: str) -> str:
        decision = await _call(client.reject(plan_id, call, reason=reason))
        return f"{call}: rejected by {decision.who}"

    @server.tool(description="Stop a running plan; what completed is kept.")
    async def cancel_plan(plan_id: str) -> str:
        await _call(client.cancel(plan_id))
        return f"plan '{plan_id}' asked to stop"

    @server.tool(
        description="Run a finished plan again, keeping what completed: its failed, skipped "
        "and cancelled subtasks run again, and `subtasks` with what depends on them."
    )
    async def retry_plan(plan_id: str, subtasks: list[str] | None = None) -> dict[str, Any]:
        rerun = await _call(client.retry(plan_id, subtasks or None))
        return {"plan_id": plan_id, "rerun": rerun}

    @server.resource(
        "dplan://plans/{plan_id}/report",
        description="The plan's report as it stands (JSON).",
        mime_type="application/json",
    )
    async def report_resource(plan_id: str) -> str:
        return json.dumps(_report(await _call(client.status(plan_id))))

    @server.resource(
        "dplan://plans/{plan_id}/subtasks/{subtask}/conversation",
        description="A subtask's conversation: its prompt, the model's turns, tool results.",
        mime_type="application/json",
    )
    async def conversation_resource(plan_id: str, subtask: str) -> str:
        report = await _call(client.status(plan_id))
        row = next((r for r in report.subtasks if r.id == subtask), None)
        if row is None or row.session_id is None:
            raise ToolError(f"plan '{plan_id}' has no conversation for subtask '{subtask}'")
        messages = await _call(client.messages(row.session_id))
        return json.dumps([m.model_dump(mode="json", exclude_none=True) for m in messages])

    return server
