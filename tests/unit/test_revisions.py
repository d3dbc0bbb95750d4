"""``revised_plan``: a revision is judged as a plan file is, against the plan as it stands,
and every problem is named, as its author wrote the request."""

from __future__ import annotations

import pytest

from durable_plans._errors import PlanValidationError
from durable_plans.domain.agents_catalog import BUILTIN_AGENTS
from durable_plans.domain.models import (
    ErrorInfo,
    Plan,
    PlanReport,
    PlanStatus,
    Subtask,
    SubtaskResult,
    SubtaskStatus,
)
from durable_plans.domain.plan_loader import subtasks_from_data
from durable_plans.domain.replanning import replan_subtask
from durable_plans.domain.revision_record import Revision
from durable_plans.domain.revisions import MAX_REVISION_BYTES, RevisionRequest, revised_plan

PLAN = Plan(
    id="p",
    subtasks=(
        Subtask(id="a", description="first"),
        Subtask(id="b", description="second", depends_on=("a",)),
        Subtask(id="c", description="third", depends_on=("b",)),
    ),
)


def judge(request: RevisionRequest, **statuses: SubtaskStatus) -> tuple[Plan, list[str]]:
    return revised_plan(PLAN, request, statuses=statuses, known_agents=BUILTIN_AGENTS)


def test_added_subtasks_go_after_the_plans_own_and_removed_ones_go() -> None:
    new = (Subtask(id="d", description="more", depends_on=("a",)),)
    plan, problems = judge(RevisionRequest(add=new, remove=("c",)), a=SubtaskStatus.RUNNING)
    assert problems == []
    assert [s.id for s in plan.subtasks] == ["a", "b", "d"]
    assert plan.subtasks[-1] == new[0]


def test_every_problem_is_named_at_once_as_the_request_wrote_it() -> None:
    request = RevisionRequest(
        add=(
            Subtask(id="b", description="dup"),
            Subtask(id="x", description="x", agent="wizard"),
            Subtask(id="y", description="y", depends_on=("z",)),
            Subtask(id="z", description="z", depends_on=("y",)),
            Subtask(id="w", description="w", depends_on=("nowhere",)),
        ),
        remove=("a", "ghost"),
    )
    _, problems = judge(request, a=SubtaskStatus.COMPLETED)
    assert problems[:2] == [
        "remove: subtask 'a' is completed; only a subtask not yet started can be removed",
        "remove: the plan has no subtask 'ghost'",
    ]
    rest = problems[2:]
    assert any(p.startswith("add[0] (id 'b'): duplicate id 'b'") for p in rest), rest
    assert any(p.startswith("add[1] (id 'x'): unknown agent 'wizard'") for p in rest), rest
    assert "add[4] (id 'w'): unknown dependency 'nowhere'" in rest
    assert "cycle: y -> z -> y" in rest
    assert len(problems) == 6


def test_removing_what_a_kept_subtask_depends_on_names_that_subtask() -> None:
    _, problems = judge(RevisionRequest(remove=("b",)))
    assert problems == ["subtask 'c': unknown dependency 'b'"]


def test_an_empty_or_oversized_revision_is_refused() -> None:
    assert judge(RevisionRequest())[1] == ["the revision adds no subtask and removes none"]
    big = tuple(
        Subtask(id=f"s{i}", description="x" * 9_000) for i in range(MAX_REVISION_BYTES // 9_000 + 1)
    )
    (problem,) = judge(RevisionRequest(add=big))[1]
    assert problem.startswith("the subtasks added are") and "at most 262,144" in problem


def test_a_revision_describes_itself_in_a_line() -> None:
    revision = Revision(number=1, at_s=0, added=("d", "e"), removed=("c",))
    assert revision.describe() == "added d, e; removed c"


def test_subtasks_to_add_are_read_as_a_plan_files_with_each_problem() -> None:
    read = subtasks_from_data({"subtasks": [{"id": "d", "description": "x", "depends_on": ["a"]}]})
    assert read == (Subtask(id="d", description="x", depends_on=("a",)),)
    with pytest.raises(PlanValidationError) as error:
        subtasks_from_data([{"id": "d"}, {"id": "e", "description": "y", "colour": "red"}])
    assert error.value.problems[0] == "add[0] (id 'd'): missing required field 'description'"
    assert error.value.problems[1].startswith("add[1] (id 'e'): unknown field 'colour'")
    with pytest.raises(PlanValidationError, match="non-empty list"):
        subtasks_from_data({"subtasks": []})
    with pytest.raises(PlanValidationError, match="beside 'subtasks': goal"):
        subtasks_from_data({"subtasks": [], "goal": "g"})


def test_a_replanned_failure_is_counted_but_fails_the_plan_neither_while_replanned_nor_after() -> (
    None
):
    error = ErrorInfo(type="BadRequest", message="no")
    failed = SubtaskResult(id="bad", status=SubtaskStatus.FAILED, agent="coder", error=error)
    done = SubtaskResult(id="alt", status=SubtaskStatus.COMPLETED, agent="coder", result="ok")
    standing = PlanReport.build("p", [failed, done])
    replaced = PlanReport.build("p", [failed.model_copy(update={"replaced_by": "r"}), done])
    assert standing.status is PlanStatus.FAILED
    assert replaced.status is PlanStatus.COMPLETED
    assert replaced.counts.failed == 1  # never hidden
    # While its replanner works the plan is running, not failed; once the replanner is
    # done without replacing it, the failure stands again.
    replanner = SubtaskResult(id="r", status=SubtaskStatus.RUNNING, agent="orchestrator")
    held = PlanReport.build("p", [failed, replanner], replanning=["bad"])
    assert held.status is PlanStatus.RUNNING and held.counts.failed == 1
    assert PlanReport.build("p", [failed, replanner]).status is PlanStatus.FAILED


def test_the_replanner_is_told_the_goal_the_failure_and_where_the_plan_stands() -> None:
    plan = PLAN.model_copy(update={"goal": "ship it", "replanner": "architect"})
    error = ErrorInfo(type="BadRequest", message="the model refused")
    failed = SubtaskResult(id="b", status=SubtaskStatus.FAILED, agent="coder", error=error)
    done = SubtaskResult(id="a", status=SubtaskStatus.COMPLETED, agent="coder", result="laid")
    sub = replan_subtask(plan, failed, {"a": done, "b": failed}, {}, 1)
    assert (sub.id, sub.agent, sub.on_failure, sub.depends_on) == (
        "replan-1",
        "architect",
        "fail",
        (),
    )
    text = sub.description
    assert "(goal: ship it)" in text and "Its subtask 'b' failed" in text
    assert "Its task was: second" in text
    assert "Its error: BadRequest: the model refused" in text
    assert "- a: completed, coder; result: laid" in text
    assert "- c: pending, coder, after b" in text
    assert "cannot run without 'b' (c)" in text
    taken = plan.model_copy(
        update={"subtasks": (*plan.subtasks, Subtask(id="replan-2", description="x"))}
    )
    assert replan_subtask(taken, failed, {}, {}, 2).id == "replan-2x"
