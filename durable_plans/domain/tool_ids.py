"""Tool-call id hygiene: what strict providers reject, and how we never send it.

Models reuse old ``tool_call_id`` values; a history holding two assistant calls with
one id is rejected whole by OpenAI and Anthropic (through LiteLLM). Three defences live
here, all pure:

* ``strict_violations`` states the providers' rules, so the test fake can reject like
  a real provider and callers can check a request before sending it;
* ``assign_tool_call_ids`` replaces whatever ids a model returned with our own, derived
  from the message's deterministic id, so ids are unique per session by construction;
* ``repair_tool_pairing`` turns any history (a crash between a call and its result,
  legacy data, a buggy writer) into one a strict provider accepts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from durable_plans.domain.ids import missing_result_message_id, repair_tool_call_id, tool_call_id
from durable_plans.domain.models import Message, ToolCall

__all__ = [
    "MISSING_RESULT",
    "assign_tool_call_ids",
    "missing_result_message_id",
    "repair_tool_pairing",
    "strict_violations",
]

MISSING_RESULT = "error: no result was recorded for this tool call (interrupted)"


def _calls_of(message: Mapping[str, Any]) -> list[Any] | None:
    """The assistant's tool calls, or None when it makes none.

    Only assistant messages can call tools; ``tool_calls`` on other roles is not pairing
    traffic and is ignored here.
    """
    if message.get("role") != "assistant":
        return None
    calls = message.get("tool_calls")
    if calls is None:
        return None
    return list(calls) if isinstance(calls, list | tuple) else [calls]


def _call_id(call: Any) -> str | None:
    if isinstance(call, Mapping):
        cid = call.get("id")
        if isinstance(cid, str) and cid:
            return cid
    return None


class _Block:
    """The open run of tool answers after one assistant ``tool_calls`` message."""

    def __init__(self, index: int, ids: list[str]) -> None:
        self.index = index
        self.expected = ids
        self.answered: set[str] = set()

    def unanswered(self) -> list[str]:
        seen: set[str] = set()
        out = []
        for cid in self.expected:
            if cid not in self.answered and cid not in seen:
                seen.add(cid)
                out.append(cid)
        return out


def strict_violations(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every reason a strict provider would reject ``messages``; ``[]`` means acceptable.

    ``messages`` are OpenAI-format dicts exactly as a provider receives them. The rules:
    tool messages form one contiguous block directly after an assistant ``tool_calls``
    message and answer only that message's calls, each exactly once, before any other
    message; a call id is unique within its message and across the whole request; a
    tool message always names the call it answers. One line per problem, prefixed with
    the index of the offending message.
    """
    problems: list[str] = []
    block: _Block | None = None
    first_use: dict[str, int] = {}

    def close(before: int | None) -> None:
        if block is None:
            return
        where = f"before messages[{before}]" if before is not None else "before the end"
        for cid in block.unanswered():
            problems.append(
                f"messages[{block.index}]: tool call {cid!r} is not answered by a tool "
                f"message {where}"
            )

    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            cid = message.get("tool_call_id")
            if not isinstance(cid, str) or not cid:
                problems.append(f"messages[{i}]: tool message has no tool_call_id")
            elif block is None:
                problems.append(
                    f"messages[{i}]: tool message answers {cid!r} but does not follow an "
                    "assistant message with tool_calls"
                )
            elif cid not in block.expected:
                problems.append(
                    f"messages[{i}]: tool message answers {cid!r} but the preceding "
                    "assistant message did not call it"
                )
            elif cid in block.answered:
                problems.append(f"messages[{i}]: tool message answers {cid!r} a second time")
            else:
                block.answered.add(cid)
            continue

        close(i)
        block = None
        calls = _calls_of(message)
        if calls is None:
            continue
        if not calls:
            problems.append(f"messages[{i}]: assistant message has an empty tool_calls list")
            continue
        ids: list[str] = []
        for k, call in enumerate(calls):
            cid = _call_id(call)
            if cid is None:
                problems.append(f"messages[{i}]: tool call #{k} has no id")
                continue
            if cid in ids:
                problems.append(f"messages[{i}]: tool call id {cid!r} appears twice in one message")
                continue
            if cid in first_use:
                problems.append(
                    f"messages[{i}]: tool call id {cid!r} was already used by "
                    f"messages[{first_use[cid]}]"
                )
            else:
                first_use[cid] = i
            ids.append(cid)
        block = _Block(i, ids)
    close(None)
    return problems


# --------------------------------------------------------------------------- our own ids


def assign_tool_call_ids(message: Message, *, salt: str) -> tuple[Message, list[tuple[str, str]]]:
    """Replace every tool-call id of ``message`` with ``ids.tool_call_id(salt, index)``.

    Model-chosen ids are never trusted: a model may repeat ``call_abc123`` from an older
    turn or return two calls with one id. Ours are unique per session as long as ``salt``
    is unique per assistant message (pass the message's own deterministic id, or
    something that contains it), and they are deterministic, so a retried activity
    rewrites to the same ids.

    Returns the rewritten message and one ``(old_id, new_id)`` pair per call, in call
    order. It is a list, not a dict, because old ids may collide: position, not old id,
    is what identifies a call. A message without tool calls comes back unchanged with
    no pairs.
    """
    if not salt:
        raise ValueError("assign_tool_call_ids needs a non-empty salt (the message id)")
    if not message.tool_calls:
        return message, []
    pairs: list[tuple[str, str]] = []
    calls: list[ToolCall] = []
    for index, call in enumerate(message.tool_calls):
        new_id = tool_call_id(salt, index)
        pairs.append((call.id, new_id))
        calls.append(call.model_copy(update={"id": new_id}))
    return message.model_copy(update={"tool_calls": tuple(calls)}), pairs


# --------------------------------------------------------------------------- repair


class _OpenCalls:
    """Calls of the last assistant ``tool_calls`` message still waiting for an answer."""

    def __init__(self, calls: Sequence[tuple[str, ToolCall]]) -> None:
        # Old id -> new ids in call order: the n-th answer naming a duplicated old id
        # answers the n-th call that carried it.
        self.pending: dict[str, deque[str]] = {}
        self.order = [new_call.id for _, new_call in calls]
        self.answered: set[str] = set()
        for old_id, new_call in calls:
            self.pending.setdefault(old_id, deque()).append(new_call.id)

    def claim(self, old_id: str | None) -> str | None:
        queue = self.pending.get(old_id) if old_id else None
        if not queue:
            return None
        new_id = queue.popleft()
        self.answered.add(new_id)
        return new_id

    def unanswered(self) -> list[str]:
        return [cid for cid in self.order if cid not in self.answered]


def _fresh_id(message: Message, position: int, used: set[str]) -> str:
    attempt = 0
    while True:
        candidate = repair_tool_call_id(message.id, position, attempt)
        if candidate not in used:
            return candidate
        attempt += 1


def repair_tool_pairing(
    messages: Sequence[Message], *, missing_result: str = MISSING_RESULT
) -> list[Message]:
    """Make any history acceptable to a strict provider, losing nothing but tool noise.

    A worker can die between an assistant ``tool_calls`` message and its results, old
    data may hold reused ids, a buggy writer may append an answer twice. Rather than let
    the next LLM request fail, this deterministically:

    * keeps every non-tool message, in order;
    * rewrites a call id already used by an earlier call (or empty, or repeated within
      its message) to a fresh deterministic id, and the answer to it with it;
    * drops tool messages that answer no open call, and second answers;
    * adds a tool message saying ``missing_result`` for every call left unanswered,
      right after the answers its block does have (id from
      ``missing_result_message_id``).

    ``strict_violations`` of the output (as OpenAI dicts) is always empty, and repairing
    a repaired history changes nothing.
    """
    out: list[Message] = []
    used: set[str] = set()
    block: _OpenCalls | None = None

    def close() -> None:
        if block is None:
            return
        for cid in block.unanswered():
            out.append(
                Message(
                    id=missing_result_message_id(cid),
                    role="tool",
                    content=missing_result,
                    tool_call_id=cid,
                )
            )

    for message in messages:
        if message.role == "tool":
            new_id = block.claim(message.tool_call_id) if block is not None else None
            if new_id is None:
                continue  # orphan, duplicate, or names no call at all
            if new_id != message.tool_call_id:
                message = message.model_copy(update={"tool_call_id": new_id})
            out.append(message)
            continue

        close()
        block = None
        if message.role != "assistant" or not message.tool_calls:
            out.append(message)
            continue

        calls: list[tuple[str, ToolCall]] = []
        changed = False
        for position, call in enumerate(message.tool_calls):
            new_call = call
            if not call.id or call.id in used:
                new_call = call.model_copy(update={"id": _fresh_id(message, position, used)})
                changed = True
            used.add(new_call.id)
            calls.append((call.id, new_call))
        if changed:
            message = message.model_copy(update={"tool_calls": tuple(c for _, c in calls)})
        out.append(message)
        block = _OpenCalls(calls)
    close()
    return out
