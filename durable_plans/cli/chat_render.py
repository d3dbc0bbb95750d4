"""What ``dplan chat`` shows: one-line renderings of messages, events, switches and plans,
and the screen they go to (rich on a terminal, verbatim lines anywhere else, so piped
transcripts stay greppable).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Final

from rich.console import Console
from rich.markdown import Markdown
from rich.status import Status
from rich.text import Text

from durable_plans.domain.approval_rules import ApprovalDecision
from durable_plans.domain.compaction import CompactOutput
from durable_plans.domain.models import Message
from durable_plans.domain.session_contracts import (
    AgentSwitchEvent,
    AgentSwitchResult,
    PlanRef,
    SendMessageResult,
    UndoResult,
)

__all__ = [
    "Screen",
    "compaction_line",
    "event_line",
    "files_line",
    "history_line",
    "one_line",
    "plan_line",
    "switch_lines",
    "undo_line",
]

_PLAIN_WIDTH: Final = 100


def one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(width - 1, 0)] + "…"


def _when(at: str) -> str:
    if not at:
        return "-"
    try:
        return datetime.fromisoformat(at).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return at


# How many lines of a compaction's summary ``/history`` shows.
SUMMARY_LINES: Final = 40


def history_line(message: Message, width: int) -> str:
    """One screen line for a message: role, then its content and tool calls (a
    compaction record: what it folded, then its summary, on lines of their own)."""
    if message.compaction is not None:
        return _summary_lines(message, width)
    parts: list[str] = []
    if message.content:
        parts.append(message.content)
    for call in message.tool_calls or ():
        parts.append(f"→ tool({call.function.name})")
    body = " ".join(parts) if parts else "(empty)"
    if message.role == "tool" and message.name:
        body = f"{message.name}: {body}"
    prefix = f"{message.role:<9} "
    return prefix + one_line(body, width - len(prefix))


def _summary_lines(message: Message, width: int) -> str:
    info = message.compaction
    assert info is not None
    prefix = f"{'summary':<9} "
    head = (
        f"{info.folded} earlier messages folded ({info.reason}; "
        f"~{info.tokens_before:,} → ~{info.tokens_after:,} tokens, by {info.model}):"
    )
    summary = (message.content or "").partition("\n")[2]
    lines = [f"{'':<9} {line}" for line in summary.splitlines() if line.strip()]
    if len(lines) > SUMMARY_LINES:
        lines = [*lines[:SUMMARY_LINES], f"{'':<9} … ({len(lines) - SUMMARY_LINES} more lines)"]
    return "\n".join([prefix + one_line(head, width - len(prefix)), *lines])


def compaction_line(done: CompactOutput) -> str:
    """A compaction that happened during a turn, in one line."""
    return (
        f"(history compacted: {done.folded_messages} earlier messages folded into a summary "
        f"by {done.model}, ~{done.tokens_before:,} → ~{done.tokens_after:,} tokens; "
        "/history shows it)"
    )


def _files(files: Sequence[str]) -> str:
    return ", ".join(files) if files else "none"


def _where(commit: str | None, branch: str | None) -> str:
    if commit is None:
        return ""
    return f" (now {commit[:12]}" + (f" on {branch})" if branch else ")")


def files_line(result: SendMessageResult) -> str | None:
    """What a turn did to the conversation's files; None when it changed none."""
    if result.workspace_problem is not None:
        return f"files: the branch was not updated: {result.workspace_problem}"
    if not result.files:
        return None
    return f"files changed: {_files(result.files)}{_where(result.commit, result.branch)}"


def undo_line(result: UndoResult) -> str:
    """What ``/undo`` took back, in one line."""
    said = one_line(result.text, 80) if result.text else "(its messages were already gone)"
    removed = f"{result.removed} message" + ("" if result.removed == 1 else "s")
    line = f"undid: {said}; removed {removed}; files restored: {_files(result.files)}"
    line += _where(result.commit, result.branch) if result.files else ""
    if result.workspace_problem is not None:
        line += f"; the branch was not updated: {result.workspace_problem}"
    return line


def event_line(event: AgentSwitchEvent) -> str:
    reason = f"  reason: {event.reason}" if event.reason else ""
    return (
        f"{_when(event.at)}  {event.from_agent} → {event.to_agent}{reason}"
        f"  (confidence: {event.confidence})"
    )


def decision_line(decision: ApprovalDecision) -> str:
    """One tool-call decision for ``/events``: when, who, what."""
    verb = "approved" if decision.approved else "rejected"
    extra = f"  reason: {decision.reason}" if decision.reason else ""
    if decision.arguments is not None:
        extra += f"  arguments: {one_line(decision.arguments, 200)}"
    what = f"{decision.who} {verb} {decision.tool} (call {decision.call_id})"
    return f"{_when(decision.at)}  {what}{extra}"


def switch_lines(result: AgentSwitchResult) -> list[str]:
    preserved = result.preserved_result if result.preserved_result is not None else "(none)"
    return [
        f"switched {result.from_agent} → {result.to_agent}",
        f"  removed_count: {result.removed_count}",
        f"  preserved_result: {one_line(preserved, 200)}",
        f"  final_message_count: {result.final_message_count}",
        "  note: " + result.context_message.strip().replace("\n", "\n    "),
    ]


def plan_line(plan: PlanRef, progress: str | None) -> str:
    text = f"  {plan.plan_id}  {plan.status.value}"
    if progress:
        text += f"  {progress}"
    if plan.goal:
        text += f"  goal: {one_line(plan.goal, 60)}"
    if plan.summary:
        text += f"  — {one_line(plan.summary, 120)}"
    return text


class Screen:
    """Where the chat writes: rich on a terminal, verbatim lines anywhere else."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self.is_terminal = self.console.is_terminal
        self._spinner: Status | None = None

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """A spinner on a terminal while nothing else is written: the first line or piece
        of text written meanwhile stops it (a spinner redrawn under streamed text would
        break the text's lines)."""
        if not self.is_terminal:
            yield
            return
        self._spinner = self.console.status(what, spinner="dots")
        self._spinner.start()
        try:
            yield
        finally:
            self._quiet()

    def _quiet(self) -> None:
        if self._spinner is not None:
            self._spinner.stop()
            self._spinner = None

    @property
    def width(self) -> int:
        if self.is_terminal:
            return self.console.width
        return shutil.get_terminal_size((_PLAIN_WIDTH, 24)).columns

    def line(self, text: str, style: str | None = None) -> None:
        self._quiet()
        if self.is_terminal and style:
            self.console.print(Text(text, style=style), soft_wrap=True)
        else:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def partial(self, text: str, style: str | None = None) -> None:
        """``text`` with no line end, shown at once (streamed answer text)."""
        self._quiet()
        if self.is_terminal and style:
            self.console.print(Text(text, style=style), end="", soft_wrap=True)
        else:
            self.console.print(text, end="", markup=False, highlight=False, soft_wrap=True)
        self.console.file.flush()

    def lines(self, texts: Sequence[str], style: str | None = None) -> None:
        for text in texts:
            self.line(text, style)

    def error(self, text: str) -> None:
        self.line(f"error: {text}", "bold red")

    def answer(self, agent: str, text: str) -> None:
        self._quiet()
        if self.is_terminal:
            self.console.print(Text(f"{agent}:", style="bold cyan"))
            self.console.print(Markdown(text))
        else:
            self.line(f"{agent}: {text}")

    def prompt(self, text: str) -> None:
        # Only a person needs a prompt; in a transcript of a pipe it is noise.
        if self.is_terminal:
            self.console.print(Text(text, style="bold green"), end="")
