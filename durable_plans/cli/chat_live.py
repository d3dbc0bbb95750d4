"""A turn's answer as it is generated: ``dplan chat`` follows the session's live stream.

While the turn's update runs, a subscription (``temporalio.contrib.workflow_streams``)
reads the session workflow's stream from where it stood when the message was sent, and
each call's text is printed as it arrives: ``agent: `` then the text, tool-call starts on
lines of their own. When a call is retried (a crash, a provider error), its new attempt
says so and the message starts over. When the turn ends, its stored answer is the truth:
if what was shown differs from it (a worker that does not stream, text lost with a
dropped connection), the stored answer is printed whole.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from durable_plans.cli.chat_render import Screen
from durable_plans.domain.streaming import LLM_TOPIC, CallView, StreamEvent, StreamFold

__all__ = ["LiveAnswer"]

_OFFSET_TIMEOUT_S = 5.0


class LiveAnswer:
    """Prints one turn's streamed text; ``shown`` tells what the last call showed."""

    def __init__(self, client: Client, workflow_id: str, screen: Screen) -> None:
        self._stream = WorkflowStreamClient.create(client, workflow_id)
        self._screen = screen
        self._fold = StreamFold()
        self._task: asyncio.Task[None] | None = None
        self._open_line: str | None = None  # the call whose text line is unfinished
        self.first_output = asyncio.Event()
        """Set once the turn's first text or tool start is on screen."""

    async def __aenter__(self) -> LiveAnswer:
        try:
            offset = await asyncio.wait_for(self._stream.get_offset(), _OFFSET_TIMEOUT_S)
        except Exception:
            return self
        self._task = asyncio.create_task(self._follow(offset))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._end_line()

    async def drain(self, seconds: float) -> None:
        """Let the last batches arrive (the turn's answer can outrun its stream)."""
        if self._task is None or self._task.done():
            return
        latest = self._fold.latest
        if latest is not None and latest.ended:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._until_latest_ended(), seconds)

    async def _until_latest_ended(self) -> None:
        while True:
            latest = self._fold.latest
            if latest is not None and latest.ended:
                return
            await asyncio.sleep(0.02)

    def shown(self) -> str | None:
        """The text shown for the turn's last call, None when nothing was streamed."""
        latest = self._fold.latest
        return latest.text if latest is not None and latest.text else None

    async def _follow(self, offset: int) -> None:
        items: AsyncIterator[Any] = self._stream.subscribe(
            [LLM_TOPIC], from_offset=offset, result_type=StreamEvent
        )
        async for item in items:
            self._show(item.data)

    def _show(self, event: StreamEvent) -> None:
        before = self._fold.calls.get(event.call)
        attempt_before = before.attempt if before is not None else 0
        view = self._fold.apply(event)
        if view is None:
            return
        if view.attempt != attempt_before and attempt_before > 0:
            self._end_line()
            self._screen.line(
                f"(the answer restarts: attempt {view.attempt} of this call)", "yellow"
            )
        match event.kind:
            case "text":
                self._write(view, event.text)
            case "tool":
                self._end_line()
                self._screen.line(f"  → tool({event.text})", "dim")
                self.first_output.set()
            case "end" | "failed":
                self._end_line()
            case "start":
                pass

    def _write(self, view: CallView, text: str) -> None:
        if self._open_line != view.call:
            self._end_line()
            self._screen.partial(f"{view.agent}: ", "bold cyan")
            self._open_line = view.call
        self._screen.partial(text)
        self.first_output.set()

    def _end_line(self) -> None:
        if self._open_line is not None:
            self._screen.partial("\n")
            self._open_line = None
