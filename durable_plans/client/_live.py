"""What each running subtask is doing now, for ``dplan run`` and ``dplan status --follow``.

The plan's ``status`` query says which subtasks run; for those, this asks each subtask's
workflow for its current step (its ``progress`` query: thinking, running which tools,
waiting for approval) and the text of its last answer, and follows its live stream
(``domain/streaming.py``) for the text being generated when the worker streams plan
calls (``DPLAN_STREAM=all``). All of it is display: a subtask that does not answer in
time keeps what was shown before, and nothing here can change how the plan is followed.

None of it is free: following a subtask's stream is a workflow update (a workflow task on
the worker and events on the server) and each ``progress`` query a query task, once a
second, and a subtask that ends while followed is read once more after its end (a query
the worker answers by replaying it). ``dplan run`` and ``dplan status --follow`` follow
the first ``FOLLOWED_IN_TERMINAL`` (``cli/run_command.py``) running subtasks (plan
order), as many as a terminal shows, and subscribe to their streams only when their own
settings say the worker streams plan calls (``DPLAN_STREAM=all``; the default streams
chat turns alone, so a subscription would wait on a stream nothing writes): with every
running subtask followed, a 300-subtask fan-out ran at half the speed it has beside a
client that only waits (issue 30). The others still show their status, from the plan's
own query.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any, Final

from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from durable_plans.domain.ids import subtask_workflow_id
from durable_plans.domain.models import PlanReport, SubtaskStatus
from durable_plans.domain.streaming import LLM_TOPIC, StreamEvent, StreamFold

__all__ = ["PlanWatch", "SubtaskNow"]

_QUERY_EVERY_S: Final = 1.0
_QUERY_TIMEOUT_S: Final = 2.0


@dataclass
class SubtaskNow:
    """A running subtask's current step and latest text (streamed or last answered)."""

    step: str = ""
    text: str = ""
    text_done: bool = False
    """True when ``text`` is a whole answer (not a stream still growing)."""


class PlanWatch:
    """``at_most``: how many running subtasks to follow (the first in plan order); None:
    all of them. ``streams``: whether to subscribe to their live streams (else their
    ``progress`` query alone: the step and the last whole answer)."""

    def __init__(
        self,
        client: Client,
        plan_id: str,
        *,
        at_most: int | None = None,
        streams: bool = True,
    ) -> None:
        self._client = client
        self._plan_id = plan_id
        self._at_most = at_most
        self._streams_on = streams
        self.now: dict[str, SubtaskNow] = {}
        self._streams: dict[str, asyncio.Task[None]] = {}
        self._queried_at = 0.0

    async def refresh(self, report: PlanReport) -> None:
        """Bring ``now`` up to date for the subtasks ``report`` says are running."""
        running = [r.id for r in report.subtasks if r.status is SubtaskStatus.RUNNING]
        if self._at_most is not None:
            running = running[: self._at_most]
        for sid in [s for s in self._streams if s not in running]:
            self._streams.pop(sid).cancel()
            self.now.pop(sid, None)
        for sid in [s for s in self.now if s not in running]:
            self.now.pop(sid)
        for sid in running:
            self.now.setdefault(sid, SubtaskNow())
            if self._streams_on and sid not in self._streams:
                self._streams[sid] = asyncio.create_task(self._follow(sid))
        if running and time.monotonic() - self._queried_at >= _QUERY_EVERY_S:
            self._queried_at = time.monotonic()
            await asyncio.gather(*(self._ask(sid) for sid in running))

    async def aclose(self) -> None:
        tasks = list(self._streams.values())
        self._streams.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _ask(self, sid: str) -> None:
        handle = self._client.get_workflow_handle(subtask_workflow_id(self._plan_id, sid))
        try:
            progress: Any = await asyncio.wait_for(handle.query("progress"), _QUERY_TIMEOUT_S)
        except Exception:  # not started yet, finished meanwhile, a slow worker: keep it
            return
        now = self.now.get(sid)
        if now is None or not isinstance(progress, dict):
            return
        now.step = str(progress.get("phase") or "")
        latest = progress.get("latest")
        if isinstance(latest, str) and latest and (not now.text or now.text_done):
            now.text, now.text_done = latest, True

    async def _follow(self, sid: str) -> None:
        """The subtask's streamed text, while it streams; ends quietly when it cannot."""
        stream = WorkflowStreamClient.create(self._client, subtask_workflow_id(self._plan_id, sid))
        fold = StreamFold()
        with contextlib.suppress(Exception):
            async for item in stream.subscribe([LLM_TOPIC], result_type=StreamEvent):
                view = fold.apply(item.data)
                now = self.now.get(sid)
                if view is None or now is None:
                    continue
                if view.text:
                    now.text, now.text_done = view.text, view.ended
                elif view.tools:
                    now.step = "calling " + ", ".join(view.tools)
