"""Heartbeats while an activity awaits, so a worker that died is noticed in seconds.

Without a heartbeat Temporal only learns of a dead worker when the start-to-close timeout
expires (minutes); with one, the activity is retried elsewhere after the heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

HEARTBEAT_EVERY_S = 1.0


@contextlib.asynccontextmanager
async def heartbeating(every_s: float = HEARTBEAT_EVERY_S) -> AsyncIterator[None]:
    """Heartbeat while a slow await runs, so a dead worker is noticed in seconds.

    Local activities (store operations) run inside a workflow task, which the worker keeps
    alive itself; they have nothing to heartbeat.
    """
    if activity.info().is_local:
        yield
        return

    async def beat() -> None:
        # The first beat waits one interval: the activity has just started, so a beat
        # now says nothing, and a call that ends within the interval costs none.
        while True:
            await asyncio.sleep(every_s)
            activity.heartbeat()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
