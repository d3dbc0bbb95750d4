"""A plan's log of decisions: what people, and the plan's own rules, decided, who and when.

An operator looking at a plan asks what was done to it before asking what it did: which
subtask paused and why, who resumed or skipped it, who raised the budget, approved or
rejected which tool call, edited and re-ran what, cancelled it. The plan keeps those
answers in its workflow state (and so in its history): the pause desk writes pauses and
the operators' Updates, the run writes a cancel with the request's reason, a subtask tells
its plan each approval decision (a signal, ``LOG_SIGNAL``), and ``dplan retry`` writes the
retry and its edits into the new run's input. Every report carries the log, so a closed
plan shows it without a worker, and a continue-as-new or a retry carries it on.

Bounded: the newest ``MAX_LOG_ENTRIES`` are kept and the rest only counted, so a plan
decided on thousands of times keeps a small state and report.

Pure and passed through the workflow sandbox.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, NonNegativeFloat

from durable_plans.domain.secrets import scrub_secrets

__all__ = [
    "CANCEL_REASON_PREFIX",
    "LOG_SIGNAL",
    "MAX_LOG_ENTRIES",
    "LogEntries",
    "LogEntry",
    "LogKind",
    "PlanLog",
    "cancel_entry",
    "cancel_reason",
    "describe_entry",
]

LogKind = Literal[
    "paused",  # a subtask failed and its plan holds it for a person (on_failure: pause)
    "resumed",
    "skipped",
    "timed_out",  # nobody decided on a pause within pause_timeout_s
    "budget",
    "approved",
    "rejected",
    "cancelled",
    "retried",
    "edited",
    "revised",  # subtasks added to the running plan or removed from it (domain/revisions.py)
    "forked",  # this plan was made from another's step (dplan fork)
]

# The signal a subtask (or a sub-agent it spawned) sends its plan with an approval decision.
LOG_SIGNAL = "log_decision"
MAX_LOG_ENTRIES: Final = 200
# ``Client.cancel`` sends ``"<prefix><operator>"`` as the cancel request's reason, which
# the workflow reads (``workflow.cancellation_reason``); a cancel from Temporal's CLI, Web
# or API carries its own reason, or none.
CANCEL_REASON_PREFIX: Final = "dplan cancel by "
_MAX_DETAIL = 500


class LogEntry(BaseModel):
    """One decision on a plan."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at_s: NonNegativeFloat  # when (Unix seconds: workflow time, or the retrying client's)
    kind: LogKind
    # Who decided: the operator as the client named them (user@host), "timeout" for a
    # decision nobody took in time, empty for the plan's own rule (a pause).
    by: str = Field(default="", max_length=200)
    subtask: str = ""  # the plan's subtask it concerns, if any
    call: str = ""  # the tool call (``SUBTASK:TURN.INDEX``) of an approval decision
    detail: str = Field(default="", max_length=_MAX_DETAIL)

    @classmethod
    def of(
        cls,
        at_s: float,
        kind: LogKind,
        *,
        by: str = "",
        subtask: str = "",
        call: str = "",
        detail: str = "",
    ) -> LogEntry:
        """An entry, its free text scrubbed of secrets (a rejection's reason is anybody's
        text) and cut to fit (an error message can be long)."""
        detail = scrub_secrets(detail)
        if len(detail) > _MAX_DETAIL:
            detail = detail[: _MAX_DETAIL - 1] + "…"
        return cls(at_s=at_s, kind=kind, by=by[:200], subtask=subtask, call=call, detail=detail)


def _none_is_empty(value: object) -> object:
    return () if value is None else value


LogEntries = Annotated[tuple[LogEntry, ...], BeforeValidator(_none_is_empty)]
"""A log's entries, oldest first; empty (or null, as Temporal's CLI shows an empty list)."""


def cancel_reason(operator: str) -> str:
    """The reason ``Client.cancel`` gives a cancel request: who asked."""
    return f"{CANCEL_REASON_PREFIX}{operator}"


def cancel_entry(at_s: float, reason: str | None) -> LogEntry:
    """The log's entry for a cancel request with ``reason`` (None: a request without one,
    or a server too old to pass it on)."""
    reason = (reason or "").strip()
    if reason.startswith(CANCEL_REASON_PREFIX):
        return LogEntry.of(at_s, "cancelled", by=reason.removeprefix(CANCEL_REASON_PREFIX))
    detail = f"reason: {reason}" if reason else "a cancel request without a reason"
    return LogEntry.of(at_s, "cancelled", detail=detail)


def describe_entry(entry: LogEntry) -> str:
    """One line: ``2026-11-27 23:07:37 UTC skipped bad by alice@host: detail``."""
    when = datetime.fromtimestamp(entry.at_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    what = entry.call or entry.subtask
    line = f"{when} {entry.kind}" + (f" {what}" if what else "")
    if entry.by:
        line += f" by {entry.by}"
    return line + (f": {entry.detail}" if entry.detail else "")


class PlanLog:
    """The newest ``MAX_LOG_ENTRIES`` entries, oldest first, and how many older ones were
    dropped."""

    def __init__(self, entries: Iterable[LogEntry] = (), omitted: int = 0) -> None:
        self._entries: list[LogEntry] = []
        self.omitted = omitted
        self.extend(entries)

    @property
    def entries(self) -> tuple[LogEntry, ...]:
        return tuple(self._entries)

    def add(self, entry: LogEntry) -> None:
        self._entries.append(entry)
        self._trim()

    def extend(self, entries: Iterable[LogEntry]) -> None:
        self._entries.extend(entries)
        self._trim()

    def carry_in(self, entries: Iterable[LogEntry], omitted: int) -> None:
        """A run's start: the entries an earlier run carried go before any written since
        this run began (a signal can arrive before the run's first line)."""
        self._entries[:0] = list(entries)
        self.omitted += omitted
        self._trim()

    def _trim(self) -> None:
        extra = len(self._entries) - MAX_LOG_ENTRIES
        if extra > 0:
            del self._entries[:extra]
            self.omitted += extra
