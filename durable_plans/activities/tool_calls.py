"""Read a model's tool call from the session and store its answer, exactly once.

Shared by every tool activity (workspace tools, MCP, run_command, the workflow's own error
answers). The answer's message id is derived from the call's place, so a retried or
repeated activity finds the answer already stored and returns it instead of running the
tool again.
"""

from __future__ import annotations

from temporalio import activity

from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.tool_registry import ToolResult
from durable_plans.domain.contracts import ToolCallOutput
from durable_plans.domain.ids import tool_message_id
from durable_plans.domain.models import Message, ToolCall
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.domain.tool_contracts import ACT_ANSWER_TOOL_ERROR, ToolCallAt, ToolErrorInput
from durable_plans.session_store import SessionStore

SUMMARY_CHARS = 160
MAX_RESULT_CHARS = 64_000


async def pending_call(store: SessionStore, at: ToolCallAt) -> ToolCall | ToolCallOutput:
    """The call to carry out, or the output of its answer when one is stored already."""
    own_id = tool_message_id(at.scope, at.turn, at.call_index)
    assistant: Message | None = None
    for m in await store.read(at.session_id):
        if m.id == own_id:
            return ToolCallOutput(
                tool_call_id=m.tool_call_id or "",
                name=m.name or "",
                ok=not (m.content or "").startswith("error:"),
                summary=(m.content or "")[:SUMMARY_CHARS],
            )
        if m.id == at.message_id:
            assistant = m
    if assistant is None or not assistant.tool_calls:
        raise ValueError(f"no assistant tool call {at.message_id} in {at.session_id}")
    return assistant.tool_calls[at.call_index]


def capped(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [truncated {len(text) - limit} chars]"


async def store_answer(
    store: SessionStore, at: ToolCallAt, call: ToolCall, result: ToolResult
) -> ToolCallOutput:
    """Scrub, cap and store ``result`` as the call's tool message (idempotent)."""
    content = capped(scrub_secrets(result.content))
    own_id = tool_message_id(at.scope, at.turn, at.call_index)
    await store.append(
        at.session_id,
        [
            Message(
                id=own_id,
                role="tool",
                tool_call_id=call.id,
                name=call.function.name,
                content=content,
            )
        ],
    )
    return ToolCallOutput(
        tool_call_id=call.id, name=call.function.name, ok=result.ok, summary=content[:SUMMARY_CHARS]
    )


class ToolErrorActivities:
    def __init__(self, store: SessionStore) -> None:
        self._store = store

    @activity.defn(name=ACT_ANSWER_TOOL_ERROR)
    async def answer_tool_error(self, inp: ToolErrorInput) -> ToolCallOutput:
        """Store the workflow's own error answer for a call (unless one is stored)."""
        async with heartbeating():
            call = await pending_call(self._store, inp.call)
            if isinstance(call, ToolCallOutput):
                return call
            return await store_answer(self._store, inp.call, call, ToolResult.error(inp.text))
