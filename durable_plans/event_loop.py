"""The event loop a worker runs on: uvloop where it is installed, asyncio's own otherwise.

Everything a worker does outside its workflow threads happens on one event loop: the
SDK's activity and workflow task handling, every activity, the session store's futures,
the HTTP to the provider. With five subtasks on two cores that loop's own overhead
(selecting, scheduling callbacks, waking up for results from threads) is part of what the
plan waits for; uvloop does the same work in C, and the same worker spends less CPU per
subtask on it (bench/RESULTS.md).

``DPLAN_EVENT_LOOP`` chooses: ``auto`` (uvloop if importable, the default), ``uvloop``
(required: a clear error if it is missing) or ``asyncio`` (the standard loop, e.g. to rule
the loop out when debugging). Nothing in the project depends on which loop runs it.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from durable_plans._errors import EventLoopUnavailable

__all__ = ["EVENT_LOOPS", "EventLoopChoice", "EventLoopUnavailable", "loop_factory", "run"]

T = TypeVar("T")
EventLoopChoice = Literal["auto", "uvloop", "asyncio"]
EVENT_LOOPS: tuple[EventLoopChoice, ...] = ("auto", "uvloop", "asyncio")


def loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for ``choice``; None means asyncio's default loop."""
    if choice == "asyncio":
        return None
    if importlib.util.find_spec("uvloop") is None:
        if choice == "uvloop":
            raise EventLoopUnavailable(
                "DPLAN_EVENT_LOOP=uvloop, but uvloop is not installed "
                "(pip install uvloop, or DPLAN_EVENT_LOOP=asyncio)"
            )
        return None
    import uvloop

    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], choice: EventLoopChoice = "auto") -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    try:
        factory = loop_factory(choice)
    except EventLoopUnavailable:
        main.close()  # never awaited: say so quietly, not with a RuntimeWarning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
