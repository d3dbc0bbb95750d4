"""``dplan chat``: a terminal conversation with one long-lived ``SessionWorkflow``.

The conversation lives in Temporal (workflow ``session/{id}``) and the session store, not
in this process: quitting, a closed terminal or a crashed CLI lose nothing, and
``dplan chat --session ID`` re-attaches to the same workflow (the start uses
``USE_EXISTING``). Only ``/end`` finishes it for good.

Input is read line by line from file descriptor 0 through the event loop, never from a
blocked thread: a thread stuck in ``readline`` would keep the process alive after Ctrl-C
or ``/quit``. A pipe, a file and a pseudo-terminal all work; end of input means ``/quit``.

Output: answers are rendered as Markdown on a terminal and printed verbatim elsewhere, so
piped transcripts stay greppable. Errors a command meets (a rejected switch, a budget
stop, a provider error) are printed as ``error: <type>: <message>`` and the conversation
goes on; only errors that make the conversation unusable (no server, a dead in-process
worker) end the command.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import sys
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from pydantic import ValidationError
from rich.console import Console
from rich.markdown import Markdown
from rich.text import Text
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durable_plans.activities.log import ensure_logging
from durable_plans.domain.agents import AgentCatalog
from durable_plans.domain.models import Message, PlanStatus
from durable_plans.domain.plan_loader import ID_PATTERN, ID_RULE
from durable_plans.domain.session_contracts import (
    QUERY_EVENTS,
    QUERY_STATE,
    SESSION_WORKFLOW,
    SIGNAL_END,
    UPDATE_HISTORY,
    UPDATE_PLAN_GOAL,
    UPDATE_SEND_MESSAGE,
    UPDATE_SWITCH_AGENT,
    AgentSwitchEvent,
    AgentSwitchResult,
    HistoryInput,
    PlanGoalInput,
    PlanRef,
    SendMessageInput,
    SendMessageResult,
    SessionInput,
    SessionState,
    SwitchAgentInput,
    session_workflow_id,
)
from durable_plans.settings import Settings
from durable_plans.starter.client import (
    PlanClientError,
    TemporalUnreachable,
    query_status,
)
from durable_plans.starter.embedded import (
    EmbeddedServerError,
    WorkerDied,
)

# One wording for the notes every client command prints (same package, shared on purpose).
from durable_plans.starter.run_command import (
    Connection,
    open_connection,
    resolve_catalog,
    resolve_settings,
    unreachable_message,
)

__all__ = [
    "DEFAULT_HISTORY",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_INVALID",
    "EXIT_OK",
    "HELP_TEXT",
    "MAX_HISTORY",
    "Blank",
    "Command",
    "EndConversation",
    "Invalid",
    "PlanGoal",
    "Quit",
    "SendText",
    "SessionCommandError",
    "SessionEnded",
    "ShowEvents",
    "ShowHelp",
    "ShowHistory",
    "ShowStatus",
    "StdinLines",
    "SwitchAgent",
    "Unknown",
    "attach_session",
    "chat",
    "check_session_id",
    "event_line",
    "history_line",
    "new_session_id",
    "parse_command",
    "session_update",
    "switch_lines",
]

T = TypeVar("T")

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_INVALID: Final = 2
EXIT_INTERRUPTED: Final = 130

DEFAULT_HISTORY: Final = 10
MAX_HISTORY: Final = 500  # HistoryInput's upper bound
_QUERY_TIMEOUT: Final = timedelta(seconds=10)
_PLAN_QUERY_TIMEOUT_S: Final = 5.0
# A plain-output user gets no spinner; after this long a note says what is being waited
# for, since an update with no worker polling the queue waits silently forever.
_SLOW_NOTE_S: Final = 20.0
_PLAIN_WIDTH: Final = 100
_READ_CHUNK: Final = 65536


# --------------------------------------------------------------------------- commands
# A line typed by the user becomes one of these values. Parsing is pure (no I/O) so every
# command and every usage error can be unit-tested without a server.


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
  /events                  agent switches: time, from → to, reason, confidence
  /help                    this text
  /quit                    leave; the conversation stays resumable (also Ctrl-D, Ctrl-C)
  /end                     end the conversation for good
A message that starts with "/" is sent by doubling it: "//etc/hosts is odd" sends
"/etc/hosts is odd"."""

_NO_ARGUMENTS: Final[dict[str, Command]] = {
    "/status": ShowStatus(),
    "/events": ShowEvents(),
    "/help": ShowHelp(),
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


# --------------------------------------------------------------------------- session ids


def new_session_id() -> str:
    """A fresh conversation id, short enough to type when resuming."""
    return f"chat-{uuid.uuid4().hex[:8]}"


def check_session_id(value: str) -> str | None:
    """The problem with ``value`` as a session id, or None when it is usable.

    Session ids become workflow ids (``session/{id}``) and parts of snapshot ids, so they
    follow the plan-id rule (no separators, no whitespace).
    """
    if ID_PATTERN.fullmatch(value) is None:
        return f"invalid session id {value!r}: {ID_RULE}"
    return None


# --------------------------------------------------------------------------- connection


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class SessionEnded(PlanClientError):
    """The conversation was finished (``/end``); its id cannot be reused."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"conversation '{session_id}' has ended (/end) and cannot be resumed; "
            "start a new one with `dplan chat`"
        )
        self.session_id = session_id


class SessionCommandError(Exception):
    """An update or query the session workflow refused or could not answer.

    ``type`` is the workflow's ApplicationError type (``InvalidAgentSwitch``,
    ``BudgetExceeded``, ``BadRequest`` …) or a name for what failed on the way.
    """

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(f"{type_}: {message}")
        self.type = type_
        self.message = message


async def _is_running(client: Client, workflow_id: str) -> bool:
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return description.status == WorkflowExecutionStatus.RUNNING


async def attach_session(
    conn: Connection,
    catalog: AgentCatalog,
    session_id: str,
    *,
    agent: str | None = None,
) -> tuple[WorkflowHandle[Any, Any], bool]:
    """The conversation's workflow handle, and whether this call started it.

    A running conversation is attached to (``USE_EXISTING``: its input, including
    ``agent``, is then ignored). A finished one is not restarted under the same id
    (``ALLOW_DUPLICATE_FAILED_ONLY``): ``/end`` means for good, while a conversation
    that failed or was terminated may be started again on the same stored history.
    """
    workflow_id = session_workflow_id(session_id)
    existed = await _is_running(conn.client, workflow_id)
    session_input = SessionInput(
        session_id=session_id,
        agents=catalog.agents,
        budget=conn.settings.default_budget,
        **({"agent": agent} if agent else {}),
    )
    try:
        handle: WorkflowHandle[Any, Any] = await conn.client.start_workflow(
            SESSION_WORKFLOW,
            session_input,
            id=workflow_id,
            task_queue=conn.settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            static_summary=f"conversation {session_id}",
        )
    except WorkflowAlreadyStartedError as err:
        raise SessionEnded(session_id) from err
    return handle, not existed


async def session_update(
    conn: Connection,
    handle: WorkflowHandle[Any, Any],
    name: str,
    arg: Any,
    result_type: type[T],
) -> T:
    """Run update ``name``; every way it can fail becomes a ``SessionCommandError``."""
    try:
        result: T = await conn.watch(handle.execute_update(name, arg, result_type=result_type))
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        if isinstance(cause, ApplicationError):
            type_ = cause.type or "ApplicationError"
            # Some failures carry their type in the message too; say it once.
            message = cause.message.removeprefix(f"{type_}: ")
            raise SessionCommandError(type_, message) from err
        raise SessionCommandError(type(cause).__name__, str(cause)) from err
    except WorkflowUpdateRPCTimeoutOrCancelledError as err:
        raise SessionCommandError("Timeout", f"no answer to '{name}': {err}") from err
    except RPCError as err:
        raise _rpc_error(err, handle) from err
    return result


async def _session_query(handle: WorkflowHandle[Any, Any], name: str, result_type: type[T]) -> T:
    try:
        result: T = await handle.query(name, result_type=result_type, rpc_timeout=_QUERY_TIMEOUT)
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as err:
        raise SessionCommandError("QueryFailed", str(err)) from err
    except RPCError as err:
        if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
            raise SessionCommandError(
                "Timeout",
                f"the conversation did not answer within {_QUERY_TIMEOUT.seconds}s; "
                "is a worker running (dplan-worker)?",
            ) from err
        raise _rpc_error(err, handle) from err
    return result


def _rpc_error(err: RPCError, handle: WorkflowHandle[Any, Any]) -> SessionCommandError:
    if err.status == RPCStatusCode.NOT_FOUND:
        return SessionCommandError(
            "SessionEnded", f"the conversation ({handle.id}) is no longer running: {err.message}"
        )
    return SessionCommandError("RPCError", err.message)


# --------------------------------------------------------------------------- input


class StdinLines:
    """Lines from a file descriptor, read through the event loop.

    ``loop.add_reader`` works for pipes and terminals; regular files and ``/dev/null``
    cannot be polled, but reading them never blocks, so they are read directly.
    """

    def __init__(self, fd: int = 0) -> None:
        self._fd = fd
        self._buffer = b""
        self._eof = False

    async def read_line(self) -> str | None:
        """The next line without its newline; None at end of input."""
        while b"\n" not in self._buffer and not self._eof:
            chunk = await self._read_chunk()
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True
        if not self._buffer:
            return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace").rstrip("\r")

    async def _read_chunk(self) -> bytes:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        try:
            loop.add_reader(self._fd, wake)
        except (OSError, ValueError, NotImplementedError):
            return self._read()
        try:
            await ready
        finally:
            loop.remove_reader(self._fd)
        return self._read()

    def _read(self) -> bytes:
        try:
            return os.read(self._fd, _READ_CHUNK)
        except OSError as err:
            # EIO: the terminal went away (its master side closed); EBADF: no stdin.
            if err.errno in (errno.EIO, errno.EBADF):
                return b""
            raise


# --------------------------------------------------------------------------- output


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(width - 1, 0)] + "…"


def _when(at: str) -> str:
    if not at:
        return "-"
    try:
        return datetime.fromisoformat(at).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return at


def history_line(message: Message, width: int) -> str:
    """One screen line for a message: role, then its content and tool calls."""
    parts: list[str] = []
    if message.content:
        parts.append(message.content)
    for call in message.tool_calls or ():
        parts.append(f"→ tool({call.function.name})")
    body = " ".join(parts) if parts else "(empty)"
    if message.role == "tool" and message.name:
        body = f"{message.name}: {body}"
    prefix = f"{message.role:<9} "
    return prefix + _one_line(body, width - len(prefix))


def event_line(event: AgentSwitchEvent) -> str:
    reason = f"  reason: {event.reason}" if event.reason else ""
    return (
        f"{_when(event.at)}  {event.from_agent} → {event.to_agent}{reason}"
        f"  (confidence: {event.confidence})"
    )


def switch_lines(result: AgentSwitchResult) -> list[str]:
    preserved = result.preserved_result if result.preserved_result is not None else "(none)"
    return [
        f"switched {result.from_agent} → {result.to_agent}",
        f"  removed_count: {result.removed_count}",
        f"  preserved_result: {_one_line(preserved, 200)}",
        f"  final_message_count: {result.final_message_count}",
        "  note: " + result.context_message.strip().replace("\n", "\n    "),
    ]


def _plan_line(plan: PlanRef, progress: str | None) -> str:
    text = f"  {plan.plan_id}  {plan.status.value}"
    if progress:
        text += f"  {progress}"
    if plan.goal:
        text += f"  goal: {_one_line(plan.goal, 60)}"
    if plan.summary:
        text += f"  — {_one_line(plan.summary, 120)}"
    return text


class _Screen:
    """Where the chat writes: rich on a terminal, verbatim lines anywhere else."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self.is_terminal = self.console.is_terminal

    @property
    def width(self) -> int:
        if self.is_terminal:
            return self.console.width
        return shutil.get_terminal_size((_PLAIN_WIDTH, 24)).columns

    def line(self, text: str, style: str | None = None) -> None:
        if self.is_terminal and style:
            self.console.print(Text(text, style=style), soft_wrap=True)
        else:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def lines(self, texts: Sequence[str], style: str | None = None) -> None:
        for text in texts:
            self.line(text, style)

    def error(self, text: str) -> None:
        self.line(f"error: {text}", "bold red")

    def answer(self, agent: str, text: str) -> None:
        if self.is_terminal:
            self.console.print(Text(f"{agent}:", style="bold cyan"))
            self.console.print(Markdown(text))
        else:
            self.line(f"{agent}: {text}")

    def prompt(self, text: str) -> None:
        # Only a person needs a prompt; in a transcript of a pipe it is noise.
        if self.is_terminal:
            self.console.print(Text(text, style="bold green"), end="")


# --------------------------------------------------------------------------- the chat


class _Chat:
    def __init__(
        self,
        conn: Connection,
        handle: WorkflowHandle[Any, Any],
        session_id: str,
        screen: _Screen,
        lines: StdinLines,
    ) -> None:
        self.conn = conn
        self.handle = handle
        self.session_id = session_id
        self.screen = screen
        self.input = lines

    async def run(self) -> int:
        while True:
            self.screen.prompt("you> ")
            try:
                line = await self.input.read_line()
            except asyncio.CancelledError:  # Ctrl-C at the prompt: same as /quit
                _uncancel()
                self.screen.line("")
                self._leave()
                return EXIT_OK
            if line is None:  # end of input
                self._leave()
                return EXIT_OK
            try:
                go_on = await self.dispatch(parse_command(line))
            except asyncio.CancelledError:
                _uncancel()
                self.screen.line(
                    "\ninterrupted: the conversation carries on without this terminal; "
                    "an answer being prepared is still recorded (see /history)."
                )
                self._leave()
                return EXIT_INTERRUPTED
            if not go_on:
                return EXIT_OK

    async def dispatch(self, command: Command) -> bool:
        """Carry out ``command``; False when the chat should stop."""
        try:
            return await self._dispatch(command)
        except SessionCommandError as err:
            self.screen.error(f"{err.type}: {err.message}")
        except ValidationError as err:  # e.g. a message over the size limit
            problems = "; ".join(str(e["msg"]) for e in err.errors())
            self.screen.error(f"InvalidInput: {problems}")
        return True

    async def _dispatch(self, command: Command) -> bool:
        match command:
            case Blank():
                pass
            case SendText(text):
                await self._send(text)
            case SwitchAgent(target, reason):
                await self._switch(target, reason)
            case PlanGoal(goal):
                await self._plan(goal)
            case ShowStatus():
                await self._status()
            case ShowHistory(limit):
                await self._history(limit)
            case ShowEvents():
                await self._events()
            case ShowHelp():
                self.screen.line(HELP_TEXT)
            case Unknown(name):
                self.screen.error(f"unknown command {name}")
                self.screen.line(HELP_TEXT)
            case Invalid(message):
                self.screen.error(message)
            case Quit():
                self._leave()
                return False
            case EndConversation():
                await self._end()
                return False
        return True

    async def _waiting(self, awaitable: Awaitable[T], what: str) -> T:
        """Await a (possibly long) update with a spinner, or a note when it is slow."""
        if self.screen.is_terminal:
            with self.screen.console.status(what, spinner="dots"):
                return await awaitable
        task = asyncio.ensure_future(awaitable)
        try:
            done, _ = await asyncio.wait({task}, timeout=_SLOW_NOTE_S)
            if not done:
                _err(
                    f"still waiting ({what}); is a worker polling task queue "
                    f"'{self.conn.settings.task_queue}'?"
                )
            return await task
        finally:
            task.cancel()

    async def _send(self, text: str) -> None:
        result = await self._waiting(
            session_update(
                self.conn,
                self.handle,
                UPDATE_SEND_MESSAGE,
                SendMessageInput(text=text),
                SendMessageResult,
            ),
            "waiting for the answer…",
        )
        self._show_answer(result)

    def _show_answer(self, result: SendMessageResult) -> None:
        self.screen.answer(result.agent, result.answer)
        if result.current_agent != result.agent:
            self.screen.line(f"(now talking to {result.current_agent})", "dim")

    async def _switch(self, target: str, reason: str) -> None:
        result = await self._waiting(
            session_update(
                self.conn,
                self.handle,
                UPDATE_SWITCH_AGENT,
                SwitchAgentInput(target=target, reason=reason),
                AgentSwitchResult,
            ),
            f"switching to {target}…",
        )
        self.screen.lines(switch_lines(result), "yellow")

    async def _plan(self, goal: str) -> None:
        result = await self._waiting(
            session_update(
                self.conn,
                self.handle,
                UPDATE_PLAN_GOAL,
                PlanGoalInput(goal=goal),
                SendMessageResult,
            ),
            "planning…",
        )
        self._show_answer(result)
        if not result.plan_ids:
            self.screen.line("no plan was started", "yellow")
            return
        for plan_id in result.plan_ids:
            self.screen.line(
                f"started plan {plan_id}: check its progress with /status "
                f"(or `dplan status {plan_id}`)",
                "green",
            )

    async def _status(self) -> None:
        state = await _session_query(self.handle, QUERY_STATE, SessionState)
        usage = state.usage
        self.screen.lines(
            [
                f"session {state.session_id}",
                f"  agent: {state.agent}",
                f"  messages handled: {state.messages_handled}"
                + ("  (busy answering)" if state.busy else ""),
                f"  agent switches: {len(state.events)}"
                + (" (see /events)" if state.events else ""),
                f"  usage: {usage.prompt_tokens:,} prompt + {usage.completion_tokens:,} "
                f"completion = {usage.total_tokens:,} tokens · ${usage.cost_usd:.4f}",
            ]
        )
        if not state.plans:
            self.screen.line("  plans: none")
            return
        self.screen.line("  plans:")
        for plan in state.plans:
            self.screen.line(_plan_line(plan, await self._plan_progress(plan)))

    async def _plan_progress(self, plan: PlanRef) -> str | None:
        """Live counts of a running plan; None when it has ended or does not answer soon
        (the session's own record is shown either way)."""
        if plan.status is not PlanStatus.RUNNING:
            return None
        handle = self.conn.client.get_workflow_handle(plan.plan_id)
        try:
            report = await asyncio.wait_for(query_status(handle), _PLAN_QUERY_TIMEOUT_S)
        except (PlanClientError, RPCError, TimeoutError):
            return None
        c = report.counts
        finished = c.completed + c.failed + c.skipped + c.cancelled
        text = f"{finished}/{c.total} subtasks done"
        if c.running:
            text += f", {c.running} running"
        if c.failed:
            text += f", {c.failed} failed"
        return text

    async def _history(self, limit: int) -> None:
        messages = await session_update(
            self.conn, self.handle, UPDATE_HISTORY, HistoryInput(limit=limit), list[Message]
        )
        if not messages:
            self.screen.line("(no messages yet)")
            return
        width = self.screen.width
        self.screen.lines([history_line(m, width) for m in messages])

    async def _events(self) -> None:
        events = await _session_query(self.handle, QUERY_EVENTS, list[AgentSwitchEvent])
        if not events:
            self.screen.line("(no agent switches yet)")
            return
        self.screen.lines([event_line(e) for e in events])

    async def _end(self) -> None:
        try:
            await self.handle.signal(SIGNAL_END)
        except RPCError as err:
            raise _rpc_error(err, self.handle) from err
        self.screen.line(f"conversation {self.session_id} ended")

    def _leave(self) -> None:
        self.screen.line(
            f"left conversation {self.session_id}; resume it with: "
            f"dplan chat --session {self.session_id}"
        )


def _uncancel() -> None:
    """Consume the cancellation asyncio.run's SIGINT handler sent, so the command can
    finish (stop the worker, print its last line) and exit normally."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


async def chat(
    session_id: str | None,
    *,
    embedded: bool,
    agent: str | None = None,
    settings: Settings | None = None,
    console: Console | None = None,
    fd: int = 0,
) -> int:
    """Run an interactive conversation until /quit, /end, end of input or Ctrl-C."""
    ensure_logging(json=False, level="WARNING")
    resolved = resolve_settings(settings)
    catalog = resolve_catalog(resolved) if resolved is not None else None
    if resolved is None or catalog is None:
        return EXIT_INVALID
    if session_id is not None and (problem := check_session_id(session_id)):
        _err(f"error: {problem}")
        return EXIT_INVALID
    if agent is not None and agent not in catalog.names():
        _err(f"error: unknown agent {agent!r}; known agents: {', '.join(catalog.names())}")
        return EXIT_INVALID
    screen = _Screen(console)
    try:
        async with contextlib.AsyncExitStack() as stack:
            conn = await open_connection(
                stack,
                resolved,
                embedded=embedded,
                waiting="answers wait (or use --embedded)",
            )
            return await _converse(conn, catalog, session_id, agent, screen, StdinLines(fd))
    except TemporalUnreachable as err:
        _err(unreachable_message(err, suggest_embedded=not embedded))
    except (PlanClientError, EmbeddedServerError, WorkerDied) as err:
        _err(f"error: {err}")
    except RPCError as err:  # the server refused a call (namespace, permissions, overload)
        _err(f"error: the Temporal server refused a request: {err.status.name}: {err.message}")
    return EXIT_FAILED


async def _converse(
    conn: Connection,
    catalog: AgentCatalog,
    session_id: str | None,
    agent: str | None,
    screen: _Screen,
    lines: StdinLines,
) -> int:
    if session_id is None:
        session_id = new_session_id()
    handle, started = await attach_session(conn, catalog, session_id, agent=agent)
    if started:
        screen.line(
            f"new conversation {session_id} (agent {agent or 'orchestrator'}); "
            f"resume it later with: dplan chat --session {session_id}",
            "bold",
        )
    else:
        await _greet_resumed(handle, session_id, agent, screen)
    screen.line("type /help for commands, /quit to leave", "dim")
    return await _Chat(conn, handle, session_id, screen, lines).run()


async def _greet_resumed(
    handle: WorkflowHandle[Any, Any], session_id: str, agent: str | None, screen: _Screen
) -> None:
    try:
        state = await _session_query(handle, QUERY_STATE, SessionState)
    except SessionCommandError as err:
        screen.line(f"resumed conversation {session_id} (state unavailable: {err.message})")
        return
    screen.line(
        f"resumed conversation {session_id}: agent {state.agent}, "
        f"{state.messages_handled} messages handled",
        "bold",
    )
    if agent is not None and agent != state.agent:
        screen.line(
            f"note: --agent {agent} applies to new conversations only; "
            f"use /switch {agent} to hand this one over",
            "yellow",
        )
