"""A fake provider that can hold requests at a gate, to prove concurrency without timing.

"Two subtasks overlapped" measured from request timestamps depends on how fast the machine
is: a loaded one may finish one call before the next arrives. A gate holds every request
it matches until ``width`` of them are waiting at the same time, then lets them all go:
if the gate opened, that many requests were in flight at once, whatever the load. If they
never come together (the scheduler ran them one after another), the held request is let
go after ``hold_s`` and the gate reports it never opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from durable_plans.testing import FakeProvider

Messages = Sequence[Mapping[str, Any]]


class Gate:
    def __init__(self, name: str, width: int, match: Callable[[Messages], bool]) -> None:
        self.name = name
        self.width = width
        self.match = match
        self.arrived = 0
        self.opened = asyncio.Event()

    async def hold(self, hold_s: float) -> None:
        self.arrived += 1
        if self.arrived >= self.width:
            self.opened.set()
        # Bounded: the test asserts ``opened``; a request stuck for good would hide that.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.opened.wait(), timeout=hold_s)

    def release(self) -> None:
        """Let every held request go now (a gate used as a plain hold)."""
        self.opened.set()

    def __repr__(self) -> str:
        state = "opened" if self.opened.is_set() else "never opened"
        return f"Gate({self.name!r}: {self.arrived} of {self.width} arrived, {state})"


class GatedProvider(FakeProvider):
    """``FakeProvider`` whose requests pass the gates they match before being answered.

    Without gates it is the plain fake provider. ``hold_s`` stays below the worker's LLM
    timeout, so a gate that never opens fails the test's assertion, not the call.
    """

    def __init__(self, *, hold_s: float = 20.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gates: list[Gate] = []
        self.hold_s = hold_s

    def gate(self, name: str, width: int, match: Callable[[Messages], bool]) -> Gate:
        gate = Gate(name, width, match)
        self.gates.append(gate)
        return gate

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.gates:
            try:
                body = json.loads(await request.read())  # aiohttp keeps the body for reuse
            except ValueError:
                body = None
            messages = body.get("messages") if isinstance(body, dict) else None
            if isinstance(messages, list):
                for gate in self.gates:
                    if not gate.opened.is_set() and gate.match(messages):
                        await gate.hold(self.hold_s)
        return await super()._handle(request)


def first_call_of(task: str) -> Callable[[Messages], bool]:
    """Matches a subtask's first LLM call: its task text in the last user message and no
    assistant turn after it yet."""

    def match(messages: Messages) -> bool:
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users:
            return False
        last = users[-1]
        content = messages[last].get("content")
        after = messages[last + 1 :]
        return (
            isinstance(content, str)
            and task in content
            and not any(m.get("role") == "assistant" for m in after)
        )

    return match


def any_of(*matches: Callable[[Messages], bool]) -> Callable[[Messages], bool]:
    return lambda messages: any(m(messages) for m in matches)
