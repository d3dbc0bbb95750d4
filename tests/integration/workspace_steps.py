"""Plans whose agents write and read named files, and what their tools answered.

The fake provider's agent plays the ``<<tool {json}>>`` steps written in a task's text,
one call per turn, in order; ``write`` and ``read`` spell those steps. What a call
answered is read back from the session store (the answers the workflow recorded), so a
test asserts on what the agent saw, not on what a tree holds later.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from durable_plans.domain.models import PlanReport
from durable_plans.session_store import SessionStore
from tests.integration.stored import subtask_messages, tool_answers

__all__ = ["answers", "eventually", "read", "reads", "write"]

_T = TypeVar("_T")


def _step(tool: str, **arguments: str) -> str:
    return f"<<{tool} {json.dumps(arguments)}>>"


def write(path: str, content: str) -> str:
    """A step writing ``content`` to ``path``."""
    return _step("write_file", path=path, content=content)


def read(path: str) -> str:
    """A step reading ``path``."""
    return _step("read_file", path=path)


async def answers(store: SessionStore, report: PlanReport, subtask: str) -> list[tuple[str, str]]:
    """(tool, answer) of every call ``subtask``'s attempt in the report made, in order."""
    messages = await subtask_messages(store, report, subtask)
    return [(m.name or "", m.content or "") for m in tool_answers(messages)]


async def reads(store: SessionStore, report: PlanReport, subtask: str) -> list[str]:
    """What each ``read_file`` call of ``subtask`` answered, in order."""
    return [text for name, text in await answers(store, report, subtask) if name == "read_file"]


async def eventually(
    probe: Callable[[], Awaitable[_T | None]], what: str, timeout_s: float = 60.0
) -> _T:
    """``probe()``'s first answer that is not None, asked every 0.1 s for at most
    ``timeout_s``; fails naming ``what`` was waited for."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = await probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:g}s for {what}")
        await asyncio.sleep(0.1)
