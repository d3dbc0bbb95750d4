"""``dplan chat`` asks inline when a tool call of the running turn waits for approval.

While a turn runs, the chat asks the conversation's workflow (and the sub-agents it runs)
for waiting calls; each one is shown with its arguments (secrets scrubbed) and decided
with a line of input: ``y`` approves, ``n`` rejects (with a reason, which the model reads),
``e`` approves with replaced arguments. The decision is the same Update ``dplan approve``
sends, so the workflow records who decided, and when, in its history and state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from temporalio.service import RPCError

from durable_plans._errors import Refused
from durable_plans.client import Conversation
from durable_plans.domain.approval_rules import (
    PendingApproval,
    WorkflowApprovals,
    edited_arguments_problem,
)
from durable_plans.domain.secrets import scrub_secrets

T = TypeVar("T")

POLL_S = 0.5  # how often a running turn is asked for waiting calls
NO_INPUT_REASON = "no answer: the chat's input ended"


class _Screen(Protocol):
    def line(self, text: str, style: str | None = None) -> None: ...
    def prompt(self, text: str) -> None: ...
    def error(self, message: str) -> None: ...


class _Lines(Protocol):
    async def read_line(self) -> str | None: ...


class InlineApprovals:
    """Finds the calls a conversation's turn waits on and asks the person at the chat."""

    def __init__(self, conversation: Conversation, screen: _Screen, lines: _Lines):
        self.conversation = conversation
        self.root = conversation.workflow_id
        self.screen = screen
        self.lines = lines
        self._asked: set[tuple[str, str]] = set()

    async def next_waiting(self) -> tuple[WorkflowApprovals, PendingApproval] | None:
        try:
            found = await self.conversation.waiting_calls()
        except RPCError:
            return None
        for snap, pending in found:
            if (snap.workflow_id, pending.call_id) not in self._asked:
                return snap, pending
        return None

    def _label(self, snap: WorkflowApprovals, pending: PendingApproval) -> str:
        below = snap.workflow_id.removeprefix(self.root).strip("/")
        return f"{below}:{pending.call_id}" if below else pending.call_id

    async def _read(self, prompt: str) -> str | None:
        self.screen.prompt(prompt)
        line = await self.lines.read_line()
        return None if line is None else line.strip()

    async def ask(self, snap: WorkflowApprovals, pending: PendingApproval) -> None:
        """Ask until the call is decided (by this chat, or by someone else first)."""
        self._asked.add((snap.workflow_id, pending.call_id))
        label = self._label(snap, pending)
        self.screen.line(
            f"approval needed: {pending.agent} wants to call {pending.tool} "
            f"(call {label}) with {scrub_secrets(pending.arguments)}"
        )
        while True:
            answer = await self._read("approve? [y]es / [n]o / [e]dit arguments: ")
            approve, reason, arguments = True, "", None
            if answer is None:
                approve, reason = False, NO_INPUT_REASON
            elif answer.lower() in ("y", "yes"):
                pass
            elif answer.lower() in ("n", "no"):
                approve = False
                reason = (await self._read("reason (the model reads it): ")) or "rejected in chat"
            elif answer.lower() in ("e", "edit") and pending.editable:
                arguments = await self._read("arguments (a JSON object): ")
                problem = edited_arguments_problem(arguments or "")
                if problem is not None:
                    self.screen.error(problem)
                    continue
            else:
                hint = "" if pending.editable else f" (a {pending.tool} call cannot be edited)"
                self.screen.error(f"answer y, n or e{hint}")
                continue
            try:
                decision = await self.conversation.decide(
                    snap.workflow_id,
                    pending.call_id,
                    approve=approve,
                    reason=reason,
                    arguments=arguments,
                )
            except Refused as err:  # e.g. decided elsewhere first, or timed out
                self.screen.error(str(err))
                return
            verb = "approved" if decision.approved else "rejected"
            self.screen.line(f"{verb} call {label} ({decision.tool})", "dim")
            return


async def answer_asking_approvals(
    update: asyncio.Future[T],
    approvals: InlineApprovals,
    waiting: Callable[[Awaitable[object], str], Awaitable[object]],
) -> T:
    """The turn's result, asking for each call it waits on meanwhile. Cancelled (Ctrl-C),
    it stops waiting here; the turn itself goes on in its workflow."""
    try:
        while True:
            found = await waiting(_answer_or_call(update, approvals), "waiting for the answer…")
            if found is None:
                return update.result()
            assert isinstance(found, tuple)
            await approvals.ask(*found)
    finally:
        if not update.done():
            update.cancel()


async def _answer_or_call(
    update: asyncio.Future[T], approvals: InlineApprovals
) -> tuple[WorkflowApprovals, PendingApproval] | None:
    """None when the turn has answered; else the first call it waits on, not yet asked."""
    while True:
        done, _ = await asyncio.wait({update}, timeout=POLL_S)
        if done:
            return None
        found = await approvals.next_waiting()
        if found is not None:
            return found
