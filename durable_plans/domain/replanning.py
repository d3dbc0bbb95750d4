"""Replanning around a failure (``on_failure: "replan"``): what the plan asks its replanner.

A failure no retry fixes needs another approach, not the same prompt again. The plan adds
a subtask for its replanner agent (a revision of its own, ``REPLAN_BY``) whose task is one
user message: the goal, the failed subtask (id, description, error) and where every
subtask stands. The replanner answers with ``revise_plan`` (remove what cannot run without
the failure, add another way), and the plan goes on. The failure stays in the report,
marked ``replaced_by`` the replanner's subtask once that revised the plan; at most
``Plan.max_replans`` such requests are made in a plan.

Pure and passed through the workflow sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from durable_plans.domain.agents import REVISE_PLAN_TOOL
from durable_plans.domain.models import (
    DEFAULT_REPLANNER,
    Plan,
    Subtask,
    SubtaskResult,
    SubtaskStatus,
)
from durable_plans.domain.plan_loader import MAX_DESCRIPTION_CHARS

__all__ = ["REPLAN_BY", "replan_subtask"]

# Who the plan's own revision (the replanner's subtask added) is recorded as made by.
REPLAN_BY: Final = "the plan (on_failure: replan)"
_LISTED = 60  # subtasks described one per line; the rest are counted
_RESULT_CHARS = 200
_DESCRIPTION_CHARS = 2_000


def replan_subtask(
    plan: Plan,
    failed: SubtaskResult,
    results: Mapping[str, SubtaskResult],
    running: Mapping[str, object],
    number: int,
) -> Subtask:
    """The replanner's subtask for ``failed`` (the plan's ``number``-th replan): no
    dependencies (it runs at once), its own failure never replanned again."""
    taken = {s.id for s in plan.subtasks}
    sid = f"replan-{number}"
    while sid in taken:
        sid += "x"
    return Subtask(
        id=sid,
        description=_message(plan, failed, results, running),
        agent=plan.replanner or DEFAULT_REPLANNER,
        on_failure="fail",
    )


def _message(
    plan: Plan,
    failed: SubtaskResult,
    results: Mapping[str, SubtaskResult],
    running: Mapping[str, object],
) -> str:
    error = failed.error
    why = f"{error.type}: {error.message}" if error is not None else "no error was recorded"
    described = plan.subtask(failed.id).description[:_DESCRIPTION_CHARS]
    dependents = [s.id for s in plan.subtasks if failed.id in s.depends_on]
    lines = [
        f"You are the replanner of plan {plan.id!r}"
        + (f" (goal: {plan.goal})" if plan.goal else "")
        + f". Its subtask {failed.id!r} failed, and retrying it unchanged will not help.",
        f"Its task was: {described}",
        f"Its error: {why}",
        "",
        "Where the plan stands (id: status, agent, what it depends on):",
    ]
    for s in plan.subtasks[:_LISTED]:
        row = results.get(s.id)
        status = (
            SubtaskStatus.RUNNING.value
            if s.id in running
            else (row.status.value if row is not None else SubtaskStatus.PENDING.value)
        )
        line = f"- {s.id}: {status}, {s.agent}"
        if s.depends_on:
            line += ", after " + ", ".join(s.depends_on)
        if row is not None and row.result:
            line += f"; result: {row.result[:_RESULT_CHARS]}"
        lines.append(line)
    if len(plan.subtasks) > _LISTED:
        lines.append(f"- ... and {len(plan.subtasks) - _LISTED} more")
    lines += [
        "",
        f"Call {REVISE_PLAN_TOOL} once so the goal can still be reached: remove the subtasks "
        f"not yet started that cannot run without {failed.id!r}"
        + (f" ({', '.join(dependents)})" if dependents else "")
        + ", and add subtasks (new ids) that reach the same end another way; they may "
        "depend on completed subtasks. Do not add the failed task again unchanged. Then "
        "answer in a few sentences: what you changed and why.",
    ]
    return "\n".join(lines)[:MAX_DESCRIPTION_CHARS]
