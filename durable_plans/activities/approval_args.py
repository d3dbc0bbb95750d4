"""The store side of tool approval: what a waiting call asks, and a rejection's answer.

The workflow sees only a call's id and tool name (arguments stay in the session store), so
before a call waits for a person an activity reads its arguments, scrubbed of secrets and
capped, for ``dplan approvals`` to show. A rejected call is answered like any other call:
one tool message with the deterministic id the call's answer always has, so a retried
activity never answers twice and the model reads the rejection as the tool result.
"""

from __future__ import annotations

from temporalio import activity

from durable_plans.activities.heartbeat import heartbeating
from durable_plans.domain.approval_rules import MAX_ARGUMENTS_CHARS
from durable_plans.domain.contracts import (
    ACT_ANSWER_CALL,
    ACT_DESCRIBE_CALL,
    AnswerCallInput,
    DescribeCallInput,
    DescribeCallOutput,
)
from durable_plans.domain.ids import tool_message_id
from durable_plans.domain.models import Message, ToolCall
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.session_store import SessionStore


def _capped(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit} more characters]"


class ApprovalActivities:
    def __init__(self, store: SessionStore) -> None:
        self._store = store

    async def _call(self, session_id: str, message_id: str, call_index: int) -> ToolCall:
        for m in await self._store.read(session_id):
            if m.id == message_id and m.tool_calls and call_index < len(m.tool_calls):
                return m.tool_calls[call_index]
        raise ValueError(f"no tool call {call_index} in message {message_id} of {session_id}")

    @activity.defn(name=ACT_DESCRIBE_CALL)
    async def describe_tool_call(self, inp: DescribeCallInput) -> DescribeCallOutput:
        async with heartbeating():
            call = await self._call(inp.session_id, inp.message_id, inp.call_index)
            return DescribeCallOutput(
                tool=call.function.name,
                arguments=_capped(scrub_secrets(call.function.arguments), MAX_ARGUMENTS_CHARS),
            )

    @activity.defn(name=ACT_ANSWER_CALL)
    async def answer_tool_call_with(self, inp: AnswerCallInput) -> None:
        async with heartbeating():
            call = await self._call(inp.session_id, inp.message_id, inp.call_index)
            await self._store.append(
                inp.session_id,
                [
                    Message(
                        id=tool_message_id(inp.scope, inp.turn, inp.call_index),
                        role="tool",
                        tool_call_id=call.id,
                        name=call.function.name,
                        content=scrub_secrets(inp.text),
                    )
                ],
            )
