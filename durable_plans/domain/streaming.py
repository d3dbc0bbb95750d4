"""What a running LLM call shows before its answer is stored, and how a watcher folds it.

The LLM activity publishes ``StreamEvent`` s to its workflow's stream
(``temporalio.contrib.workflow_streams``) while the provider streams; ``dplan chat``,
``dplan run`` and ``dplan status --follow`` read them. The stream is a display, never the
record: the stored answer stays the truth (``activities/llm.py``). Events carry the
activity attempt, so when a call is retried after a crash or a provider error, a watcher
sees the new attempt's ``start`` and throws away what the failed attempt had shown,
instead of gluing two half answers together.

This module is pure (no I/O), so the workflow, the activity and the clients share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "LLM_TOPIC",
    "STREAM_MODES",
    "StreamEvent",
    "StreamFold",
    "StreamKind",
    "StreamMode",
    "streams_in",
]

LLM_TOPIC: Final = "llm"
"""The topic every LLM call publishes to, in the stream of the workflow that called it."""

StreamMode = Literal["chat", "all", "off"]
"""``DPLAN_STREAM``: which LLM calls stream. ``chat`` (the default): conversations, where a
person waits for the text; ``all``: plan subtasks too (each streamed batch is a signal,
so a few history events per batch); ``off``: none."""

STREAM_MODES: Final = ("chat", "all", "off")


def streams_in(mode: StreamMode, workflow_type: str | None) -> bool:
    """Whether an LLM call made by a workflow of ``workflow_type`` streams under ``mode``."""
    if mode == "off" or workflow_type is None:
        return False
    if mode == "all":
        return True
    return workflow_type == "SessionWorkflow"


StreamKind = Literal["start", "text", "tool", "end", "failed"]


class StreamEvent(BaseModel):
    """One piece of a call's progress.

    ``start`` opens an attempt (``attempt`` > 1: a retry, whose text replaces what the
    earlier attempt showed); ``text`` adds answer text; ``tool`` says the model began a
    tool call (``text`` is the tool's name); ``end`` closes the attempt (its text is the
    finish reason, if any); ``failed`` says the attempt broke off mid-stream (its text
    is the error type); the activity may be retried.
    """

    model_config = ConfigDict(frozen=True)

    kind: StreamKind
    call: str
    """The id the answer is stored under (``assistant_message_id``): one per LLM call."""
    attempt: int = 1
    agent: str = ""
    text: str = ""


@dataclass
class CallView:
    """What a watcher shows of one call: its current attempt's text and tool starts."""

    call: str
    agent: str = ""
    attempt: int = 0
    text: str = ""
    tools: list[str] = field(default_factory=list)
    ended: bool = False
    restarted: bool = False
    """True once an attempt after the first began: the display started the message over."""


@dataclass
class StreamFold:
    """Events folded into what to show, per call, in order of first appearance.

    Events of an attempt older than the call's current one are ignored (a batch of a
    failed attempt that arrives late must not reappear after the retry began).
    """

    calls: dict[str, CallView] = field(default_factory=dict)

    def apply(self, event: StreamEvent) -> CallView | None:
        """Fold ``event`` in; the call's view when it changed, None when ignored."""
        view = self.calls.get(event.call)
        if view is None:
            view = self.calls[event.call] = CallView(call=event.call, agent=event.agent)
        if event.attempt < view.attempt:
            return None
        if event.attempt > view.attempt:
            view.restarted = view.attempt > 0
            view.attempt = event.attempt
            view.text, view.tools, view.ended = "", [], False
        if event.agent:
            view.agent = event.agent
        match event.kind:
            case "text":
                view.text += event.text
            case "tool":
                view.tools.append(event.text)
            case "end" | "failed":
                view.ended = True
            case "start":
                pass
        return view

    def apply_all(self, events: Iterable[StreamEvent]) -> None:
        for event in events:
            self.apply(event)

    @property
    def latest(self) -> CallView | None:
        """The call seen last to begin (dicts keep insertion order)."""
        return next(reversed(self.calls.values()), None)
