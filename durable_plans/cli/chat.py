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

This module is the REPL only: the commands are parsed in ``chat_commands``, the workflow
is reached through ``Client.conversation``, lines come from ``stdin_lines`` and are shown by
``chat_render``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Iterator
from typing import Any, Final, TypeVar

from pydantic import ValidationError
from rich.console import Console
from temporalio.service import RPCError

from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, Usage, read_settings, reported
from durable_plans.cli.chat_approvals import InlineApprovals, answer_asking_approvals
from durable_plans.cli.chat_commands import (
    HELP_TEXT,
    Blank,
    Command,
    EndConversation,
    Invalid,
    PlanGoal,
    Quit,
    SendText,
    ShowEvents,
    ShowHelp,
    ShowHistory,
    ShowStatus,
    SwitchAgent,
    UndoTurn,
    Unknown,
    parse_command,
)
from durable_plans.cli.chat_live import LiveAnswer
from durable_plans.cli.chat_render import (
    Screen,
    compaction_line,
    decision_line,
    event_line,
    files_line,
    history_line,
    plan_line,
    switch_lines,
    undo_line,
)
from durable_plans.cli.run_command import Connection, open_connection
from durable_plans.cli.stdin_lines import StdinLines
from durable_plans.client import (
    Conversation,
    DurablePlansError,
    SessionCommandError,
    agents_of,
    check_session_id,
    new_session_id,
)
from durable_plans.domain.models import PlanStatus
from durable_plans.domain.session_contracts import (
    PlanRef,
    SendMessageResult,
)
from durable_plans.settings import Settings

__all__ = ["chat"]

T = TypeVar("T")


_PLAN_QUERY_TIMEOUT_S: Final = 5.0
# A plain-output user gets no spinner; after this long a note says what is being waited
# for, since an update with no worker polling the queue waits silently forever.
_SLOW_NOTE_S: Final = 20.0
_DRAIN_S: Final = 1.0  # for the last streamed batches once the answer is in


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the chat


class _Chat:
    def __init__(
        self,
        conn: Connection,
        conversation: Conversation,
        screen: Screen,
        lines: StdinLines,
    ) -> None:
        self.conn = conn
        self.conversation = conversation
        self.session_id = conversation.session_id
        self.screen = screen
        self.input = lines

    async def run(self) -> int:
        with _ctrl_c_cancels_this_task():
            return await self._repl()

    async def _repl(self) -> int:
        while True:
            self.screen.prompt("you> ")
            try:
                line = await self.input.read_line()
            except asyncio.CancelledError:  # Ctrl-C at the prompt: same as /quit
                _uncancel()
                self.screen.line("")
                self._leave()
                return Exit.OK
            if line is None:  # end of input
                self._leave()
                return Exit.OK
            try:
                go_on = await self.dispatch(parse_command(line))
            except asyncio.CancelledError:
                _uncancel()
                self.screen.line(
                    "\ninterrupted: the conversation carries on without this terminal; "
                    "an answer being prepared is still recorded (see /history)."
                )
                self._leave()
                return Exit.INTERRUPTED
            if not go_on:
                return Exit.OK

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
            case UndoTurn():
                await self._undo()
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

    async def _waiting(
        self, awaitable: Awaitable[T], what: str, shown: asyncio.Event | None = None
    ) -> T:
        """Await a (possibly long) update with a spinner, or a note when it is slow.

        The spinner stops once ``shown`` is set (streamed text is on screen), and the note
        is not needed then either."""
        task = asyncio.ensure_future(awaitable)
        try:
            if self.screen.is_terminal:
                if shown is None or not shown.is_set():
                    with self.screen.waiting(what):
                        await _first_of(task, shown)
            else:
                await _first_of(task, shown, limit_s=_SLOW_NOTE_S)
                if not task.done() and not (shown is not None and shown.is_set()):
                    _err(
                        f"still waiting ({what}); is a worker polling task queue "
                        f"'{self.conn.settings.task_queue}'?"
                    )
            return await task
        finally:
            task.cancel()

    async def _send(self, text: str) -> None:
        update = asyncio.ensure_future(self.conn.watch(self.conversation.send(text)))
        # Tool calls of the turn that wait for approval are asked here, inline.
        approvals = InlineApprovals(self.conversation, self.screen, self.input)
        workflow_id = self.conversation.workflow_id
        async with LiveAnswer(self.conn.plans.temporal, workflow_id, self.screen) as live:

            def waiting(awaitable: Awaitable[T], what: str) -> Awaitable[T]:
                return self._waiting(awaitable, what, live.first_output)

            try:
                result = await answer_asking_approvals(update, approvals, waiting)
            finally:
                if not update.done():
                    update.cancel()
            await live.drain(_DRAIN_S)
        self._show_answer(result, live.shown())

    def _show_answer(self, result: SendMessageResult, shown: str | None = None) -> None:
        """The stored answer, unless the stream already showed exactly that text."""
        for done in result.compactions:
            self.screen.line(compaction_line(done), "dim")
        if shown is not None and shown.strip() == result.answer.strip():
            pass
        else:
            if shown is not None:
                self.screen.line("(the stored answer:)", "dim")
            self.screen.answer(result.agent, result.answer)
        files = files_line(result)
        if files is not None:
            self.screen.line(files, "dim")
        if result.current_agent != result.agent:
            self.screen.line(f"(now talking to {result.current_agent})", "dim")

    async def _undo(self) -> None:
        result = await self._waiting(
            self.conn.watch(self.conversation.undo()),
            "undoing the last turn…",
        )
        self.screen.line(undo_line(result), "yellow")

    async def _switch(self, target: str, reason: str) -> None:
        result = await self._waiting(
            self.conn.watch(self.conversation.switch_agent(target, reason)),
            f"switching to {target}…",
        )
        self.screen.lines(switch_lines(result), "yellow")

    async def _plan(self, goal: str) -> None:
        result = await self._waiting(
            self.conn.watch(self.conversation.plan(goal)),
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
        state = await self.conversation.state()
        usage = state.usage
        self.screen.lines(
            [
                f"session {state.session_id}",
                f"  agent: {state.agent}",
                f"  messages handled: {state.messages_handled}"
                + ("  (busy answering)" if state.busy else ""),
                f"  agent switches: {len(state.events)}"
                + (" (see /events)" if state.events else ""),
                "  files: "
                + (
                    f"{state.commit[:12]}" + (f" on {state.branch}" if state.branch else "")
                    if state.commit
                    else "none yet"
                )
                + f" · {state.undoable} turn(s) /undo can take back",
                f"  usage: {usage.prompt_tokens:,} prompt + {usage.completion_tokens:,} "
                f"completion = {usage.total_tokens:,} tokens · ${usage.cost_usd:.4f}",
            ]
        )
        if not state.plans:
            self.screen.line("  plans: none")
            return
        self.screen.line("  plans:")
        for plan in state.plans:
            self.screen.line(plan_line(plan, await self._plan_progress(plan)))

    async def _plan_progress(self, plan: PlanRef) -> str | None:
        """Live counts of a running plan; None when it has ended or does not answer soon
        (the session's own record is shown either way)."""
        if plan.status not in (PlanStatus.RUNNING, PlanStatus.PAUSED):
            return None
        try:
            report = await asyncio.wait_for(
                self.conn.plans.live_status(plan.plan_id), _PLAN_QUERY_TIMEOUT_S
            )
        except (DurablePlansError, RPCError, TimeoutError):
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
        messages = await self.conn.watch(self.conversation.history(limit))
        if not messages:
            self.screen.line("(no messages yet)")
            return
        width = self.screen.width
        self.screen.lines([history_line(m, width) for m in messages])

    async def _events(self) -> None:
        events = await self.conversation.events()
        if not events:
            self.screen.line("(no agent switches yet)")
        self.screen.lines([event_line(e) for e in events])
        state = await self.conversation.state()
        self.screen.lines([decision_line(d) for d in state.approvals])

    async def _end(self) -> None:
        await self.conversation.end()
        self.screen.line(f"conversation {self.session_id} ended")

    def _leave(self) -> None:
        self.screen.line(
            f"left conversation {self.session_id}; resume it with: "
            f"dplan chat --session {self.session_id}"
        )


async def _first_of(
    task: asyncio.Future[Any], event: asyncio.Event | None, limit_s: float | None = None
) -> None:
    """Until ``task`` is done, ``event`` is set or ``limit_s`` seconds have passed."""
    waiter = asyncio.ensure_future(event.wait()) if event is not None else None
    try:
        await asyncio.wait(
            {task, *([waiter] if waiter else [])},
            timeout=limit_s,
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        if waiter is not None:
            waiter.cancel()


@contextlib.contextmanager
def _ctrl_c_cancels_this_task() -> Iterator[None]:
    """Ctrl-C cancels the running task (the REPL) through the event loop.

    asyncio.run's own SIGINT handler is a plain Python handler: it runs only when the main
    thread executes bytecode. A SIGINT landing just before the loop blocks in select() (the
    moment the prompt has been shown, a window a loaded machine widens) was then noticed
    only when something else woke the loop: at an idle prompt, never. The loop's signal
    handler sets the wakeup fd, so the signal itself wakes the loop. The first Ctrl-C
    cancels; the default handler is then back, so a second one raises KeyboardInterrupt as
    under asyncio.run. An inherited ignored SIGINT stays ignored.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    previous = signal.getsignal(signal.SIGINT)
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        loop.remove_signal_handler(signal.SIGINT)  # back to default_int_handler
        if task is not None:
            task.cancel()

    installed = False
    if task is not None and previous not in (signal.SIG_IGN, None):
        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
            installed = True
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
            pass
    try:
        yield
    finally:
        if installed and not interrupted:
            loop.remove_signal_handler(signal.SIGINT)
            signal.signal(signal.SIGINT, previous)


def _uncancel() -> None:
    """Consume the cancellation a SIGINT handler sent, so the command can
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

    async def body() -> int:
        resolved = read_settings(settings)
        catalog = agents_of(resolved)
        if session_id is not None and (problem := check_session_id(session_id)):
            raise Usage(f"error: {problem}")
        if agent is not None and agent not in catalog.names():
            raise Usage(
                f"error: unknown agent {agent!r}; known agents: {', '.join(catalog.names())}"
            )
        screen = Screen(console)
        async with contextlib.AsyncExitStack() as stack:
            conn = await open_connection(
                stack,
                resolved,
                embedded=embedded,
                waiting="answers wait (or use --embedded)",
            )
            return await _converse(conn, session_id, agent, screen, StdinLines(fd))

    return await reported(body(), suggest_embedded=not embedded)


async def _converse(
    conn: Connection,
    session_id: str | None,
    agent: str | None,
    screen: Screen,
    lines: StdinLines,
) -> int:
    if session_id is None:
        session_id = new_session_id()
    conversation = await conn.plans.conversation(session_id, agent=agent)
    if conversation.started:
        screen.line(
            f"new conversation {session_id} (agent {agent or 'orchestrator'}); "
            f"resume it later with: dplan chat --session {session_id}",
            "bold",
        )
    else:
        await _greet_resumed(conversation, agent, screen)
    screen.line("type /help for commands, /quit to leave", "dim")
    return await _Chat(conn, conversation, screen, lines).run()


async def _greet_resumed(conversation: Conversation, agent: str | None, screen: Screen) -> None:
    session_id = conversation.session_id
    try:
        state = await conversation.state()
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
