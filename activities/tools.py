"""Tool execution as an activity: one call in, one tool message appended to the branch.

A tool's failure is an answer for the model, not a crashed workflow: anything the model
can cause (bad arguments, an unknown tool, a refused path) comes back as an ``error:``
tool result. The tool message id is deterministic, so a retried activity never answers a
call twice, which would make the next request invalid for a strict provider.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.orchestration_tools import ALL_TOOL_SPECS
from durable_plans.activities.tool_registry import ToolResult, execute_workspace_tool
from durable_plans.activities.workspace import Workspace
from durable_plans.domain.contracts import ACT_RUN_TOOL, ToolCallInput, ToolCallOutput
from durable_plans.domain.ids import tool_message_id
from durable_plans.domain.models import Message
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings

SUMMARY_CHARS = 160
MAX_TOOL_RESULT_CHARS = 64_000


class ToolActivities:
    def __init__(self, store: SessionStore, settings: Settings) -> None:
        self._store = store
        self._settings = settings

    @activity.defn(name=ACT_RUN_TOOL)
    async def run_tool(self, inp: ToolCallInput) -> ToolCallOutput:
        async with heartbeating():
            return await self._run_tool(inp)

    async def _run_tool(self, inp: ToolCallInput) -> ToolCallOutput:
        history = await self._store.read(inp.session_id)
        own_id = tool_message_id(inp.scope, inp.turn, inp.call_index)
        assistant: Message | None = None
        for m in history:
            if m.id == own_id:
                return ToolCallOutput(
                    tool_call_id=m.tool_call_id or "",
                    name=m.name or "",
                    ok=not (m.content or "").startswith("error:"),
                    summary=(m.content or "")[:SUMMARY_CHARS],
                )
            if m.id == inp.message_id:
                assistant = m
        if assistant is None or not assistant.tool_calls:
            raise ValueError(f"no assistant tool call {inp.message_id} in {inp.session_id}")
        call = assistant.tool_calls[inp.call_index]
        name = call.function.name

        allowed = inp.allowed_tools
        if name not in ALL_TOOL_SPECS:
            result = ToolResult(
                False,
                f"error: unknown tool {name[:80]!r}; available tools: "
                f"{', '.join(allowed) or 'none'}",
            )
        elif name not in allowed:
            result = ToolResult(
                False,
                f"error: tool {name!r} is not available to this agent; "
                f"available tools: {', '.join(allowed) or 'none'}",
            )
        else:
            workspace = Workspace(self._settings.workspace)
            result = await asyncio.to_thread(
                execute_workspace_tool, name, call.function.arguments, workspace
            )
        content = scrub_secrets(result.content)
        if len(content) > MAX_TOOL_RESULT_CHARS:
            omitted = len(content) - MAX_TOOL_RESULT_CHARS
            content = content[:MAX_TOOL_RESULT_CHARS] + f"\n… [truncated {omitted} chars]"
        await self._store.append(
            inp.session_id,
            [Message(id=own_id, role="tool", tool_call_id=call.id, name=name, content=content)],
        )
        return ToolCallOutput(
            tool_call_id=call.id, name=name, ok=result.ok, summary=content[:SUMMARY_CHARS]
        )
