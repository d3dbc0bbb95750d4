"""A plan's events as they happen, for a service to forward to its own UI.

Everything comes from what Temporal knows, never from a guess made on this side: subtask
states from the plan's ``status`` query, text from each running subtask's live stream (or
its last answer, when the worker does not stream plan calls), waiting calls from the
``approvals`` queries, and the end from the workflow's own result. Polling the queries is
deliberate: a watcher attaches at any time, to a plan started anywhere, and never needs
the plan to know it is watched.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from durable_plans._errors import StatusUnavailable
from durable_plans.client._approvals import PendingCall, pending_calls
from durable_plans.client._live import PlanWatch
from durable_plans.client._plans import describe_plan, query_status, wait_for_report
from durable_plans.domain.models import PlanReport, SubtaskResult, SubtaskStatus
from durable_plans.domain.revision_record import Revision

__all__ = [
    "ApprovalWaiting",
    "PlanEnded",
    "PlanEvent",
    "PlanRevised",
    "SubtaskChanged",
    "TextStreamed",
    "watch_plan",
]


@dataclass(frozen=True)
class SubtaskChanged:
    """A subtask reached a new status; ``result`` is its line of the report now."""

    plan_id: str
    subtask: str
    status: SubtaskStatus
    result: SubtaskResult


@dataclass(frozen=True)
class TextStreamed:
    """A running subtask's text so far: the answer being generated (``done`` False) or a
    whole answer (``done`` True). Each event carries the whole text, not a delta, so a
    consumer that missed one shows the right thing on the next."""

    plan_id: str
    subtask: str
    text: str
    done: bool


@dataclass(frozen=True)
class ApprovalWaiting:
    """A tool call started waiting for a person (``Client.approve`` / ``reject`` it)."""

    call: PendingCall


@dataclass(frozen=True)
class PlanRevised:
    """The plan changed while it ran (``domain/revisions.py``): subtasks added or removed
    by an operator, an agent, or the plan replanning around a failure."""

    plan_id: str
    revision: Revision


@dataclass(frozen=True)
class PlanEnded:
    """The last event: the plan's final report, however it ended."""

    report: PlanReport


PlanEvent = SubtaskChanged | TextStreamed | ApprovalWaiting | PlanRevised | PlanEnded


# How long one round of a watch waits for the running subtasks to list their waiting calls.
APPROVALS_WAIT_S = 2.0


class _Seen:
    """What was already said, so each change is one event."""

    def __init__(self, plan_id: str) -> None:
        self.plan_id = plan_id
        self.status: dict[str, SubtaskStatus] = {}
        self.text: dict[str, str] = {}
        self.calls: set[str] = set()
        self.revisions = 0

    def changes(self, report: PlanReport) -> list[PlanEvent]:
        events: list[PlanEvent] = [
            PlanRevised(self.plan_id, r) for r in report.revisions[self.revisions :]
        ]
        self.revisions = max(self.revisions, len(report.revisions))
        for result in report.subtasks:
            if self.status.get(result.id) is not result.status:
                self.status[result.id] = result.status
                events.append(SubtaskChanged(self.plan_id, result.id, result.status, result))
        return events

    def texts(self, watch: PlanWatch) -> list[PlanEvent]:
        events: list[PlanEvent] = []
        for sid, now in list(watch.now.items()):
            if now.text and self.text.get(sid) != now.text:
                self.text[sid] = now.text
                events.append(TextStreamed(self.plan_id, sid, now.text, now.text_done))
        return events

    def waiting(self, calls: list[PendingCall]) -> list[PlanEvent]:
        fresh = [c for c in calls if c.call not in self.calls]
        self.calls.update(c.call for c in fresh)
        return [ApprovalWaiting(c) for c in fresh]


async def watch_plan(
    client: Client, plan_id: str, *, poll_interval_s: float = 0.5
) -> AsyncIterator[PlanEvent]:
    """Events of ``plan_id`` until it ends (``PlanEnded`` is always the last one).

    Raises ``PlanNotFound`` at once for a plan that does not exist; a plan that cannot
    answer for a while (no worker) is waited for, silently, as ``dplan status --follow``
    does."""
    await describe_plan(client, plan_id)
    handle: WorkflowHandle[Any, PlanReport] = client.get_workflow_handle(
        plan_id, result_type=PlanReport
    )
    seen = _Seen(plan_id)
    live = PlanWatch(client, plan_id)
    ended = asyncio.ensure_future(wait_for_report(handle))
    try:
        while not ended.done():
            report, events = await _poll(handle, seen, live)
            for event in events:
                yield event
            if report is not None:
                for event in await _waiting(client, handle.id, report, seen):
                    yield event
            await asyncio.wait({ended}, timeout=poll_interval_s)
        report = ended.result()
        for event in seen.changes(report):
            yield event
        yield PlanEnded(report)
    finally:
        ended.cancel()
        with contextlib.suppress(BaseException):
            await ended
        await live.aclose()


async def _poll(
    handle: WorkflowHandle[Any, PlanReport], seen: _Seen, live: PlanWatch
) -> tuple[PlanReport | None, list[PlanEvent]]:
    try:
        report = await query_status(handle)
    except (StatusUnavailable, RPCError):
        return None, []  # no worker right now, or the plan just closed: the result says
    events = seen.changes(report)
    await live.refresh(report)
    events += seen.texts(live)
    return report, events


async def _waiting(
    client: Client, plan_id: str, report: PlanReport, seen: _Seen
) -> list[PlanEvent]:
    """Calls that started waiting for a person. Asked after the round's other events are
    out, and only for so long: a subtask busy in a long call (a local activity holds its
    workflow task) answers its query late, and the plan's other news must not wait."""
    if not any(r.status is SubtaskStatus.RUNNING for r in report.subtasks):
        return []
    try:
        calls = await asyncio.wait_for(pending_calls(client, plan_id, report), APPROVALS_WAIT_S)
    except (RPCError, StatusUnavailable, TimeoutError):
        return []  # the next round asks again
    return seen.waiting(calls)
