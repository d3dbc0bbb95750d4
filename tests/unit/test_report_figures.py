"""A report's figures say what happened: the status is how the run ended (a cancel wins
over an earlier failure, as Temporal and ``dplan list`` say it) and an open plan's
duration runs on from its start, not from the last time its workflow woke."""

from __future__ import annotations

from durable_plans.domain.models import (
    ErrorInfo,
    PlanReport,
    PlanStatus,
    SubtaskResult,
    SubtaskStatus,
)


def row(sid: str, status: SubtaskStatus) -> SubtaskResult:
    if status is SubtaskStatus.COMPLETED:
        return SubtaskResult(id=sid, status=status, agent="coder", result="done")
    error = None
    if status in (SubtaskStatus.FAILED, SubtaskStatus.SKIPPED, SubtaskStatus.PAUSED):
        error = ErrorInfo(type="MaxTurnsReached", message="out of turns")
    return SubtaskResult(id=sid, status=status, agent="coder", error=error)


def test_a_plan_cancelled_after_a_failure_reports_cancelled_with_the_failure_counted() -> None:
    rows = [
        row("a", SubtaskStatus.COMPLETED),
        row("b", SubtaskStatus.FAILED),
        row("c", SubtaskStatus.SKIPPED),
        row("d", SubtaskStatus.CANCELLED),
    ]
    report = PlanReport.build("p", rows, cancelled=True)
    assert report.status is PlanStatus.CANCELLED
    assert (report.counts.failed, report.counts.skipped, report.counts.cancelled) == (1, 1, 1)
    # Not cancelled: the failure decides, as before.
    assert PlanReport.build("p", rows[:3]).status is PlanStatus.FAILED
    paused = [row("a", SubtaskStatus.PAUSED), row("b", SubtaskStatus.FAILED)]
    assert PlanReport.build("p", paused).status is PlanStatus.PAUSED
    assert PlanReport.build("p", paused, cancelled=True).status is PlanStatus.CANCELLED


def test_an_open_plans_duration_runs_from_its_start() -> None:
    waiting = PlanReport.build(
        "p", [row("a", SubtaskStatus.RUNNING)], duration_s=0.5, started_at_s=1_000.0
    )
    assert waiting.running_for(1_120.0).duration_s == 120.0
    assert waiting.running_for(1_000.2).duration_s == 0.5  # never less than it said
    paused = PlanReport.build(
        "p", [row("a", SubtaskStatus.PAUSED)], duration_s=3.0, started_at_s=1_000.0
    )
    assert paused.running_for(1_060.0).duration_s == 60.0
    ended = PlanReport.build(
        "p", [row("a", SubtaskStatus.COMPLETED)], duration_s=7.0, started_at_s=1_000.0
    )
    assert ended.running_for(5_000.0).duration_s == 7.0
    # Failed, but another subtask still runs: the plan is open, its clock too.
    failing = PlanReport.build(
        "p",
        [row("a", SubtaskStatus.FAILED), row("b", SubtaskStatus.RUNNING)],
        duration_s=1.0,
        started_at_s=1_000.0,
    )
    assert failing.status is PlanStatus.FAILED
    assert failing.running_for(1_030.0).duration_s == 30.0
    done = PlanReport.build(
        "p",
        [row("a", SubtaskStatus.FAILED), row("b", SubtaskStatus.SKIPPED)],
        duration_s=4.0,
        started_at_s=1_000.0,
    )
    assert done.running_for(5_000.0).duration_s == 4.0
    unknown = PlanReport.build("p", [row("a", SubtaskStatus.RUNNING)], duration_s=2.0)
    assert unknown.running_for(5_000.0).duration_s == 2.0
