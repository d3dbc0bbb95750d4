"""The commands of ``dplan chat``: a typed line becomes one value, without any I/O.

Parsing is pure so that every command and every usage error can be unit-tested without a
server, and so that another front end (a web chat, a bot) can reuse the same commands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_HISTORY",
    "HELP_TEXT",
    "MAX_HISTORY",
    "Blank",
    "Command",
    "EndConversation",
    "Invalid",
    "PlanGoal",
    "Quit",
    "SendText",
    "ShowEvents",
    "ShowHelp",
    "ShowHistory",
    "ShowStatus",
    "SwitchAgent",
    "UndoTurn",
    "Unknown",
    "parse_command",
]

DEFAULT_HISTORY: Final = 10
MAX_HISTORY: Final = 500  # HistoryInput's upper bound


@dataclass(frozen=True)
class SendText:
    """Plain text: sent to the current agent as a user message."""

    text: str


@dataclass(frozen=True)
class SwitchAgent:
    target: str
    reason: str = ""


@dataclass(frozen=True)
class PlanGoal:
    goal: str


@dataclass(frozen=True)
class ShowStatus:
    pass


@dataclass(frozen=True)
class ShowHistory:
    limit: int = DEFAULT_HISTORY


@dataclass(frozen=True)
class ShowEvents:
    pass


@dataclass(frozen=True)
class ShowHelp:
    pass


@dataclass(frozen=True)
class UndoTurn:
    """Take back the last turn: its messages and the files it changed."""


@dataclass(frozen=True)
class Quit:
    """Leave the chat; the conversation keeps running and can be resumed."""


@dataclass(frozen=True)
class EndConversation:
    """Finish the conversation workflow for good."""


@dataclass(frozen=True)
class Blank:
    """An empty line: nothing to do (sending it would be rejected anyway)."""


@dataclass(frozen=True)
class Unknown:
    """A slash command that does not exist; ``name`` includes the slash."""

    name: str


@dataclass(frozen=True)
class Invalid:
    """A known command used wrongly; ``message`` is the usage line to show."""

    message: str


Command = (
    SendText
    | SwitchAgent
    | PlanGoal
    | ShowStatus
    | ShowHistory
    | ShowEvents
    | ShowHelp
    | UndoTurn
    | Quit
    | EndConversation
    | Blank
    | Unknown
    | Invalid
)

HELP_TEXT: Final = f"""\
Type a message and press Enter to send it to the current agent. Commands:
  /switch AGENT [reason…]  hand the conversation to another agent
  /plan GOAL…              let the orchestrator plan GOAL and start the plan
  /status                  agent, messages handled, plans and their progress, usage
  /history [N]             the last N messages (default {DEFAULT_HISTORY}, at most {MAX_HISTORY})
  /events                  agent switches (time, from → to, reason, confidence)
                           and tool-call approvals (who decided what, when)
  /undo                    take back the last turn: its messages and the files it
                           changed (again for the turn before it)
  /help                    this text
  /quit                    leave; the conversation stays resumable (also Ctrl-D, Ctrl-C)
  /end                     end the conversation for good
A message that starts with "/" is sent by doubling it: "//etc/hosts is odd" sends
"/etc/hosts is odd"."""

_NO_ARGUMENTS: Final[dict[str, Command]] = {
    "/status": ShowStatus(),
    "/events": ShowEvents(),
    "/help": ShowHelp(),
    "/undo": UndoTurn(),
    "/?": ShowHelp(),
    "/quit": Quit(),
    "/exit": Quit(),
    "/end": EndConversation(),
}


def parse_command(line: str) -> Command:
    """What ``line`` asks for. Never raises: a bad line becomes ``Invalid``/``Unknown``.

    Command names are case-insensitive; arguments keep their case. Leading and trailing
    whitespace is ignored, inner whitespace of messages and goals is kept.
    """
    stripped = line.strip()
    if not stripped:
        return Blank()
    if stripped.startswith("//"):
        return SendText(stripped[1:])
    if not stripped.startswith("/"):
        return SendText(stripped)

    name, _, rest = stripped.partition(" ")
    name = name.lower()
    rest = rest.strip()
    if name in _NO_ARGUMENTS:
        if rest:
            return Invalid(f"{name} takes no arguments (got {rest!r})")
        return _NO_ARGUMENTS[name]
    if name == "/switch":
        target, _, reason = rest.partition(" ")
        if not target:
            return Invalid("usage: /switch AGENT [reason…]  (AGENT is missing)")
        return SwitchAgent(target=target, reason=reason.strip())
    if name == "/plan":
        if not rest:
            return Invalid("usage: /plan GOAL…  (GOAL is missing)")
        return PlanGoal(goal=rest)
    if name == "/history":
        return _parse_history(rest)
    return Unknown(name)


def _parse_history(rest: str) -> Command:
    if not rest:
        return ShowHistory()
    usage = f"usage: /history [N]  (N is a whole number from 1 to {MAX_HISTORY}"
    if " " in rest:
        return Invalid(f"{usage}; got {rest!r})")
    try:
        limit = int(rest)
    except ValueError:
        return Invalid(f"{usage}; got {rest!r})")
    if not 1 <= limit <= MAX_HISTORY:
        return Invalid(f"{usage}; got {limit})")
    return ShowHistory(limit=limit)
