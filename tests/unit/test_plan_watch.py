"""What a terminal follows of a plan's running subtasks (``client/_live.py``): the first
``at_most`` in plan order, their streams only when asked. Each followed subtask costs the
worker a query a second, and a stream a workflow update; following all 300 running
subtasks of a fan-out halved the plan's speed (issue 30). No server: the queries and
streams are replaced by recorders."""

from __future__ import annotations

from typing import Any

import pytest

from durable_plans.client._live import PlanWatch
from durable_plans.domain.models import Counts, PlanReport, PlanStatus, SubtaskResult, SubtaskStatus


def _report(running: int, done: int = 0) -> PlanReport:
    rows = [
        SubtaskResult(id=f"d{i}", status=SubtaskStatus.COMPLETED, agent="ask", result="ok")
        for i in range(done)
    ]
    rows += [
        SubtaskResult(id=f"r{i}", status=SubtaskStatus.RUNNING, agent="ask") for i in range(running)
    ]
    return PlanReport(
        plan_id="p",
        status=PlanStatus.RUNNING,
        counts=Counts(completed=done, running=running),
        subtasks=tuple(rows),
    )


class _Recording(PlanWatch):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(client=None, plan_id="p", **kwargs)  # type: ignore[arg-type]
        self.asked: list[str] = []
        self.followed: list[str] = []

    async def _ask(self, sid: str) -> None:
        self.asked.append(sid)

    async def _follow(self, sid: str) -> None:
        self.followed.append(sid)


@pytest.mark.asyncio
async def test_a_bounded_watch_follows_the_first_running_subtasks_in_plan_order() -> None:
    watch = _Recording(at_most=3, streams=False)
    await watch.refresh(_report(running=300))
    assert watch.asked == ["r0", "r1", "r2"]
    assert sorted(watch.now) == ["r0", "r1", "r2"]
    assert watch.followed == []  # no stream subscribed
    await watch.aclose()


@pytest.mark.asyncio
async def test_a_subtask_that_stops_running_is_let_go_and_the_next_one_taken() -> None:
    watch = _Recording(at_most=2, streams=True)
    await watch.refresh(_report(running=3))
    watch._queried_at = 0.0  # the next refresh asks again
    report = _report(running=3)
    rows = (report.subtasks[0].model_copy(update={"status": SubtaskStatus.COMPLETED}),)
    await watch.refresh(report.model_copy(update={"subtasks": rows + report.subtasks[1:]}))
    assert sorted(watch.now) == ["r1", "r2"]
    assert watch.asked == ["r0", "r1", "r1", "r2"]
    await watch.aclose()


@pytest.mark.asyncio
async def test_an_unbounded_watch_follows_every_running_subtask() -> None:
    watch = _Recording()
    await watch.refresh(_report(running=20, done=5))
    assert len(watch.asked) == 20 and len(watch.now) == 20
    await watch.aclose()
