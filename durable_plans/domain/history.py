"""Pure history transforms: subtask isolation, agent switch, snapshot restore.

Tool traffic left over from an earlier subtask or agent makes strict providers reject
requests (a reused ``tool_call_id``) and confuses the next agent. These functions
say exactly what a session looks like after isolation, an agent switch or a restore;
the session stores and activities apply them, and the tests pin them down.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, NonNegativeInt

from durable_plans.domain.models import Message

__all__ = [
    "DEPENDENCY_CONTEXT_HEADER",
    "AgentSwitchReport",
    "DependencyResult",
    "format_dependency_context",
    "isolate_for_subtask",
    "last_result",
    "restore_from_snapshot",
    "switch_agent_cleanup",
]

DEPENDENCY_CONTEXT_HEADER = "Results of the subtasks this one depends on:"

# In an over-long context, descriptions are titles, not payload: cap them so the budget
# goes to the results.
_DESCRIPTION_CAP = 300


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DependencyResult(_Frozen):
    """What a finished dependency hands to the subtasks that wait for it."""

    subtask_id: str
    description: str
    result: str


class AgentSwitchReport(_Frozen):
    """What an agent switch did to the session: what it removed, kept and added."""

    removed_count: NonNegativeInt
    preserved_result: str | None
    context_message: str
    final_message_count: NonNegativeInt


# --------------------------------------------------------------------------- helpers


def _text(message: Message) -> str | None:
    """The message's text if it says anything (whitespace is not a result)."""
    if message.content and message.content.strip():
        return message.content
    return None


def _without_tool_calls(message: Message) -> Message:
    """The same message (same id) as plain text: the words survive, the calls do not."""
    return message.model_copy(update={"tool_calls": None})


def _truncation_marker(dropped: int) -> str:
    return f"… [truncated {dropped:,} chars]"


def _truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` chars, with a visible marker when cut.

    The marker may not fit a tiny ``limit``; then the text is just cut short.
    """
    if len(text) <= limit:
        return text
    worst = len(_truncation_marker(len(text)))
    if limit < worst:
        return text[: max(limit, 0)]
    kept = limit - worst
    return text[:kept] + _truncation_marker(len(text) - kept)


def _fair_shares(lengths: Sequence[int], budget: int) -> list[int]:
    """Max-min fair split of ``budget``: short items keep everything, long ones share
    the rest equally, so one huge result cannot crowd out the others."""
    shares = [0] * len(lengths)
    remaining = max(budget, 0)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for rank, i in enumerate(order):
        share = min(lengths[i], remaining // (len(lengths) - rank))
        shares[i] = share
        remaining -= share
    return shares


def _render(
    deps: Sequence[DependencyResult], descriptions: Sequence[str], results: Sequence[str]
) -> str:
    parts = [DEPENDENCY_CONTEXT_HEADER]
    for dep, description, result in zip(deps, descriptions, results, strict=True):
        parts.append(f"\n\n## Subtask {dep.subtask_id}: {description}\n{result}")
    return "".join(parts)


# --------------------------------------------------------------------------- dependencies


def format_dependency_context(deps: Sequence[DependencyResult], *, max_chars: int = 12_000) -> str:
    """One system text carrying the dependencies' results, never longer than ``max_chars``.

    Dependencies can return whole files; an unbounded context would blow the model's
    window (and the store row). When the full text does not fit, descriptions are capped
    and the results share what is left fairly, each cut one marked
    ``… [truncated N chars]`` so the model knows it is not seeing everything. Returns
    ``""`` when there are no dependencies.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be positive")
    if not deps:
        return ""
    descriptions = [d.description for d in deps]
    results = [d.result for d in deps]
    full = _render(deps, descriptions, results)
    if len(full) <= max_chars:
        return full

    descriptions = [" ".join(d.split()) for d in descriptions]
    descriptions = [_truncate(d, _DESCRIPTION_CAP) for d in descriptions]
    overhead = len(_render(deps, descriptions, [""] * len(deps)))
    shares = _fair_shares([len(r) for r in results], max_chars - overhead)
    text = _render(
        deps, descriptions, [_truncate(r, s) for r, s in zip(results, shares, strict=True)]
    )
    # Only reachable with absurdly small budgets (many dependencies, tiny max_chars):
    # the bound is a promise, so cut the whole text rather than break it.
    return _truncate(text, max_chars)


# --------------------------------------------------------------------------- isolation


def isolate_for_subtask(
    messages: Sequence[Message],
    deps: Sequence[DependencyResult],
    *,
    context_id: str,
    max_context_chars: int = 12_000,
) -> list[Message]:
    """The history a subtask starts from: the conversation without anyone's tool traffic.

    An earlier subtask's calls and results in the history lead a model to reuse an old
    ``tool_call_id``, and a strict provider then rejects the request. Tool messages and
    assistant ``tool_calls`` go; user, system and plain assistant messages stay in
    order. An assistant message that said something *and* called tools keeps its words
    as a plain message (same id): what it said is still part of the conversation; one
    that only called tools vanishes.
    With dependencies, one system message ``context_id`` carrying their results ends
    the history.
    """
    out: list[Message] = []
    for message in messages:
        if message.role == "tool":
            continue
        if message.role == "assistant" and message.tool_calls:
            if _text(message) is not None:
                out.append(_without_tool_calls(message))
            continue
        out.append(message)
    if deps:
        if not context_id:
            raise ValueError("isolate_for_subtask needs a context_id for the dependency message")
        context = format_dependency_context(deps, max_chars=max_context_chars)
        out.append(Message(id=context_id, role="system", content=context))
    return out


# --------------------------------------------------------------------------- agent switch


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def switch_agent_cleanup(
    messages: Sequence[Message],
    *,
    from_agent: str,
    to_agent: str,
    reason: str | None = None,
    note_id: str,
) -> tuple[list[Message], AgentSwitchReport]:
    """Hand the conversation to another agent without the old agent's tools.

    Tool messages and assistant ``tool_calls`` messages are removed; user, system and
    plain assistant messages are kept in order. The preserved result is the latest
    assistant text: normally a plain message already kept (never appended again); when
    the agent was cut off mid-tool-use, i.e. the latest text rode on a ``tool_calls``
    message, that one message stays as plain text in its place. A system note
    ``note_id`` (first line ``Agent switched: A → B``) tells the new agent what happened.
    """
    if not note_id:
        raise ValueError("switch_agent_cleanup needs a note_id for the system note")
    preserved_at: int | None = None
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant" and _text(messages[i]) is not None:
            preserved_at = i
            break

    kept: list[Message] = []
    for i, message in enumerate(messages):
        if message.role == "tool":
            continue
        if message.role == "assistant" and message.tool_calls:
            if i == preserved_at:
                kept.append(_without_tool_calls(message))
            continue
        kept.append(message)

    removed = len(messages) - len(kept)
    preserved = messages[preserved_at].content if preserved_at is not None else None
    lines = [f"Agent switched: {from_agent} → {to_agent}"]
    if reason is not None and reason.strip():
        lines.append(f"Reason: {' '.join(reason.split())}")
    lines.append(
        f"Previous context preserved: {_plural(len(kept), 'message')} kept, "
        f"{_plural(removed, 'tool message')} removed."
    )
    note = "\n".join(lines)
    out = [*kept, Message(id=note_id, role="system", content=note)]
    report = AgentSwitchReport(
        removed_count=removed,
        preserved_result=preserved,
        context_message=note,
        final_message_count=len(out),
    )
    return out, report


# --------------------------------------------------------------------------- restore


def last_result(messages: Sequence[Message]) -> Message | None:
    """The latest plain assistant answer: what a finished turn or subtask produced."""
    for message in reversed(messages):
        if message.is_plain_assistant:
            return message
    return None


def restore_from_snapshot(
    snapshot: Sequence[Message], current: Sequence[Message], *, keep_last_result: bool
) -> list[Message]:
    """Reference semantics every session store's ``restore`` must match.

    The result is the snapshot exactly (rollback loses nothing and keeps nothing of the
    branch); with ``keep_last_result``, the last plain assistant answer written after
    the snapshot (its id is not in the snapshot) is appended once, so a subtask's
    answer survives the restore while its tool traffic does not.
    """
    out = list(snapshot)
    if keep_last_result:
        known = {m.id for m in snapshot}
        result = last_result([m for m in current if m.id not in known])
        if result is not None:
            out.append(result)
    return out
