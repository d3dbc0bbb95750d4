"""Compaction, the pure part: what is sent once a history is folded, and where to fold.

A conversation or a long subtask grows until the model refuses it. Compaction folds the
older part of what is sent into a summary (written by the cheap sub-agent model, in
``activities/compaction.py``) without losing anything: every original message stays in
the session store, and a *compaction record* is appended after them: a system message
whose content is the summary and whose ``compaction`` field lists the earlier messages
still sent verbatim (``models.Compaction``). ``visible_history`` turns a stored history
into the one the model sees: the leading system messages, then the kept messages in
their order with the summary standing where the last folded message stood, then every
message written after the record.

``plan_fold`` decides what to fold. It works on *units*: a plain message, or an
assistant ``tool_calls`` message with the tool messages answering it. A unit is folded
or kept whole, so no tool message loses its call and no call its answer (the rules of
``tool_ids.strict_violations``). Kept verbatim: the leading system messages, the last
turns (as many units from the end as fit ``keep_tokens``, at least the last one), the
last user message (a subtask's task, a chat turn's question) and every unit with an
unanswered call.

Token counts here are estimates (about four characters per token of the JSON a provider
receives): the thresholds keep a margin, and a provider that still refuses the request
triggers one more compaction (``workflows/agent_loop.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, NonNegativeInt

from durable_plans.domain.ids import message_id
from durable_plans.domain.models import Budget, Compaction, Message, Usage
from durable_plans.domain.tool_ids import repair_tool_pairing
from durable_plans.domain.tools_config import ToolSchema

__all__ = [
    "ACT_COMPACT_HISTORY",
    "REASON_EXCEEDED",
    "REASON_THRESHOLD",
    "CompactInput",
    "CompactOutput",
    "Fold",
    "WindowCheck",
    "compaction_record_id",
    "estimate_tokens",
    "keep_budget",
    "plan_fold",
    "record_message",
    "sent_messages",
    "summary_budget",
    "summary_request",
    "transcript",
    "visible_history",
]

ACT_COMPACT_HISTORY = "compact_history"

REASON_THRESHOLD = "threshold"
REASON_EXCEEDED = "context window exceeded"

# Per message, on top of its JSON: role markers and separators a provider adds.
_MESSAGE_OVERHEAD_TOKENS = 3

SUMMARY_SYSTEM_PROMPT = (
    "You compress the earlier part of a conversation between a user, an AI assistant and "
    "its tools so that the assistant can carry on without it. Write a faithful, dense "
    "summary: the user's goals and requests, decisions taken, facts learned (file names, "
    "paths, values, errors), tool results that still matter, and what was left to do. "
    "Keep identifiers exactly. No preamble, no commentary: only the summary."
)
# How a summary's content starts (the rest of its first line says how many were folded).
SUMMARY_HEADER_START = "[Summary of "
# The last user message of a summary request: short, and free of brackets, so a provider
# (or the test fake, which reads directives there) sees one plain instruction.
SUMMARY_ASK = "Summarise the conversation above for the assistant that continues it."


# --------------------------------------------------------------------------- contracts


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WindowCheck(_Payload):
    """Why an LLM call was not sent: its prompt would pass the compaction threshold."""

    estimated_tokens: NonNegativeInt
    threshold_tokens: NonNegativeInt
    context_window: NonNegativeInt


class CompactInput(_Payload):
    """Fold the history of ``session_id`` before the LLM call its fields describe.

    Temporal Web shows this input: which session, why (``reason``), and the call's
    scope and turn; the record's id is derived from them and ``index``, so an attempt run
    again after a crash finds the record the first one stored.
    """

    session_id: str
    scope: str
    turn: int
    index: int = 0  # compactions before this call in this turn
    reason: str = REASON_THRESHOLD
    agent: str = ""
    model: str | None = None  # the agent's model (its window sizes the fold)
    context_window: int | None = None  # the agent's ``context_window``, if it set one
    system_prompt: str | None = None
    tools: tuple[str, ...] = ()
    extra_tools: tuple[ToolSchema, ...] = ()
    budget: Budget | None = None  # checked before the summary is asked for
    root_session_id: str = ""  # whose budget pays for the summary
    tenant: str | None = None  # whose daily cap the summary must fit


class CompactOutput(_Payload):
    """What a compaction did (Temporal Web shows it as the activity's result)."""

    record_id: str
    compacted: bool  # False: nothing could be folded (the history is all kept)
    folded_messages: NonNegativeInt = 0
    kept_messages: NonNegativeInt = 0
    tokens_before: NonNegativeInt = 0
    tokens_after: NonNegativeInt = 0
    summary_chars: NonNegativeInt = 0
    summary_excerpt: str = ""
    model: str = ""
    usage: Usage = Usage()
    replayed: bool = False  # found stored by an earlier attempt


def compaction_record_id(scope: str, turn: int, index: int) -> str:
    """The record's id: one per compaction of a turn, the same on every attempt."""
    return message_id(scope, turn, f"compaction-{index}")


# --------------------------------------------------------------------------- estimates


def estimate_tokens(messages: Sequence[Message], extra_chars: int = 0) -> int:
    """About four characters per token of what a provider receives, plus ``extra_chars``
    (the tools' schemas) the same way."""
    chars = sum(len(json.dumps(m.to_openai())) for m in messages)
    return (chars + extra_chars + 3) // 4 + _MESSAGE_OVERHEAD_TOKENS * len(messages)


def _tokens(message: Message) -> int:
    return estimate_tokens([message])


def keep_budget(threshold_tokens: int, overhead_tokens: int) -> int:
    """Tokens of recent messages kept verbatim: a third of the room the prompt leaves,
    so a compaction frees about two thirds of it for the turns that follow."""
    return max(0, (threshold_tokens - overhead_tokens) // 3)


def summary_budget(threshold_tokens: int, overhead_tokens: int) -> int:
    """The longest summary asked for (tokens): a third of the room, 128 to 2,000."""
    return max(128, min(2_000, (threshold_tokens - overhead_tokens) // 3))


# --------------------------------------------------------------------------- the view


def visible_history(history: Sequence[Message]) -> list[Message]:
    """The messages a model is shown: ``history`` as stored, with its last compaction
    record applied (earlier records were folded into the last one's summary, or kept).
    Records keep their ``compaction`` field here (it is never sent), so a later fold
    knows a summary from a system prompt."""
    last = next((i for i in range(len(history) - 1, -1, -1) if history[i].compaction), None)
    if last is None:
        return list(history)
    record = history[last]
    assert record.compaction is not None
    kept = set(record.compaction.kept)
    lead = _leading_systems(history[:last])
    folded = [i for i in range(lead, last) if history[i].id not in kept]
    out = list(history[:lead])
    for i in range(lead, last):
        if history[i].id in kept:
            out.append(history[i])
        if folded and i == folded[-1]:
            out.append(record)
    if not folded:
        out.append(record)
    out.extend(history[last + 1 :])
    return out


def sent_messages(history: Sequence[Message], system_prompt: str | None) -> list[Message]:
    """What an LLM call sends: the agent's prompt, then the visible history repaired for
    a strict provider (``tool_ids.repair_tool_pairing``)."""
    messages = repair_tool_pairing(visible_history(history))
    if system_prompt:
        messages = [Message(id="system", role="system", content=system_prompt), *messages]
    return messages


def _leading_systems(messages: Sequence[Message]) -> int:
    n = 0
    while n < len(messages) and messages[n].role == "system" and not messages[n].compaction:
        n += 1
    return n


# --------------------------------------------------------------------------- the fold


@dataclass(frozen=True)
class Fold:
    """A decision: ``folded`` go into the summary, ``kept`` ids are still sent."""

    folded: tuple[Message, ...]
    kept: tuple[str, ...]
    kept_tokens: int


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int  # exclusive
    open: bool  # a call of it has no answer


def _units(view: Sequence[Message], start: int) -> list[_Unit]:
    units: list[_Unit] = []
    i = start
    while i < len(view):
        message = view[i]
        j = i + 1
        if message.role == "assistant" and message.tool_calls:
            while j < len(view) and view[j].role == "tool":
                j += 1
            answered = {m.tool_call_id for m in view[i + 1 : j]}
            is_open = any(c.id not in answered for c in message.tool_calls)
            units.append(_Unit(i, j, is_open))
        else:
            units.append(_Unit(i, j, False))
        i = j
    return units


def plan_fold(view: Sequence[Message], keep_tokens: int) -> Fold | None:
    """Where to fold ``view`` (a visible history, system prompt not included); None when
    nothing can be folded.

    The tail is the longest run of units from the end whose estimate fits
    ``keep_tokens`` (the last unit always); before it, the last user message's unit and
    open units are kept too; everything else, a previous summary included, is folded.
    """
    lead = _leading_systems(view)
    units = _units(view, lead)
    if not units:
        return None
    tail_from = len(units) - 1
    used = sum(_tokens(m) for m in view[units[-1].start : units[-1].end])
    while tail_from > 0:
        unit = units[tail_from - 1]
        cost = sum(_tokens(m) for m in view[unit.start : unit.end])
        if used + cost > keep_tokens:
            break
        used += cost
        tail_from -= 1
    last_user = next((i for i in range(len(view) - 1, -1, -1) if view[i].role == "user"), None)
    folded: list[Message] = []
    kept: list[str] = [m.id for m in view[:lead]]
    for n, unit in enumerate(units):
        members = view[unit.start : unit.end]
        pinned = (
            n >= tail_from
            or unit.open
            or (last_user is not None and unit.start <= last_user < unit.end)
        )
        if pinned:
            kept.extend(m.id for m in members)
            if n < tail_from:
                used += sum(_tokens(m) for m in members)
        else:
            folded.extend(members)
    if not folded:
        return None
    return Fold(folded=tuple(folded), kept=tuple(kept), kept_tokens=used)


# --------------------------------------------------------------------------- the request


def _describe(message: Message, cap: int) -> str:
    if message.compaction is not None:
        head = "earlier summary"
    elif message.role == "tool":
        head = f"tool result ({message.name})" if message.name else "tool result"
    else:
        head = message.role
    parts = [message.content or ""]
    for call in message.tool_calls or ():
        parts.append(f"[calls {call.function.name} {call.function.arguments}]")
    text = " ".join(p for p in parts if p).strip() or "(empty)"
    if len(text) > cap:
        text = text[:cap] + f" … [{len(text) - cap:,} more chars]"
    return f"{head}: {text}"


def transcript(folded: Sequence[Message], max_chars: int) -> str:
    """The folded messages as one text for the summariser, never longer than
    ``max_chars``: each message is cut to a fair share first, and when even that does not
    fit, the oldest ones (after an earlier summary, which is kept) are left out, said so."""
    if not folded:
        return ""
    cap = max(200, max_chars // len(folded))
    lines = [_describe(m, cap) for m in folded]
    keep_first = 1 if folded[0].role == "system" else 0
    dropped = 0
    while sum(len(line) + 1 for line in lines) > max_chars and len(lines) > keep_first + 1:
        del lines[keep_first]
        dropped += 1
    if dropped:
        lines.insert(keep_first, f"[{dropped} older messages left out]")
    text = "\n".join(lines)
    return text[:max_chars]


def summary_request(text: str) -> list[dict[str, str]]:
    """The summariser's messages: its instructions, the transcript, then a short ask."""
    return [
        {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
        {"role": "user", "content": "The conversation so far:\n\n" + text},
        {"role": "user", "content": SUMMARY_ASK},
    ]


def record_message(
    record_id: str,
    summary: str,
    fold: Fold,
    *,
    tokens_before: int,
    tokens_after: int,
    reason: str,
    model: str,
    usage: Usage,
) -> Message:
    """The compaction record stored after the messages it folds."""
    content = (
        f"{SUMMARY_HEADER_START}{len(fold.folded)} earlier messages, folded to fit the "
        "model's context window; the full messages are kept in the session store]\n" + summary
    )
    return Message(
        id=record_id,
        role="system",
        content=content,
        usage=usage,
        compaction=Compaction(
            kept=fold.kept,
            folded=len(fold.folded),
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            reason=reason,
            model=model,
        ),
    )
