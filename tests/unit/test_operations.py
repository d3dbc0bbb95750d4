"""The rules of dplan retry / resume / skip / budget (domain/operations.py)."""

from __future__ import annotations

import pytest

from durable_plans._errors import OperatorError
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import (
    Budget,
    ErrorInfo,
    Plan,
    Subtask,
    SubtaskResult,
    SubtaskStatus,
    Usage,
)
from durable_plans.domain.operations import (
    BudgetRequest,
    budget_problem,
    merged_budget,
    paused_problem,
    retry_input,
)

PLAN = Plan(
    id="p",
    subtasks=(
        Subtask(id="a", description="a"),
        Subtask(id="b", description="b", depends_on=("a",)),
        Subtask(id="c", description="c", depends_on=("b",)),
        Subtask(id="d", description="d"),
    ),
)
ERR = ErrorInfo(type="Authentication", message="bad key")


def done(sid: str, calls: int = 2) -> SubtaskResult:
    return SubtaskResult(
        id=sid,
        status=SubtaskStatus.COMPLETED,
        agent="coder",
        result=f"{sid} done",
        llm_calls=calls,
        usage=Usage(prompt_tokens=10 * calls),
        session_id=f"branch-{sid}",
    )


def failed(sid: str, status: SubtaskStatus = SubtaskStatus.FAILED) -> SubtaskResult:
    return SubtaskResult(
        id=sid, status=status, agent="coder", error=ERR, llm_calls=1, usage=Usage(prompt_tokens=3)
    )


def state(*results: SubtaskResult, prior: tuple[SubtaskResult, ...] = ()) -> PlanInput:
    return PlanInput(
        plan=PLAN,
        results=results,
        merged=tuple(r.id for r in results),
        branches=tuple((r.id, r.session_id) for r in results if r.session_id),
        prior=prior,
        started_at_s=100.0,
    )


def test_retry_reruns_what_did_not_complete_and_keeps_the_rest() -> None:
    skipped = SubtaskResult(
        id="c",
        status=SubtaskStatus.SKIPPED,
        agent="coder",
        error=ErrorInfo(type="DependencyFailed", message="b failed"),
    )
    new, rerun = retry_input(state(done("a"), failed("b"), skipped, done("d")))
    assert rerun == ["b", "c"]
    assert [r.id for r in new.results] == ["a", "d"]
    assert new.merged == ("a", "d")
    assert new.branches == (("a", "branch-a"), ("d", "branch-d"))
    # The failed attempt's spend is carried; a skipped subtask never spent anything.
    assert [r.id for r in new.prior] == ["b"]
    assert new.prior[0].llm_calls == 1
    assert new.started_at_s == 100.0


def test_retry_of_named_completed_subtasks_takes_their_dependents() -> None:
    new, rerun = retry_input(state(done("a"), done("b"), done("c"), done("d")), ["a"])
    assert rerun == ["a", "b", "c"]
    assert [r.id for r in new.results] == ["d"]
    assert [r.id for r in new.prior] == ["a", "b", "c"]


def test_retry_reruns_what_a_stopped_run_left_pending_or_paused() -> None:
    paused = failed("b", SubtaskStatus.PAUSED)
    new, rerun = retry_input(state(done("a"), paused))
    assert rerun == ["b", "c", "d"]
    assert [r.id for r in new.prior] == ["b"]


def test_retry_keeps_older_attempts_of_a_subtask_resumed_but_not_restarted() -> None:
    earlier = failed("b").model_copy(update={"retries": 1, "llm_calls": 4})
    new, _ = retry_input(state(done("a"), done("c"), done("d"), prior=(earlier,)))
    assert new.prior == (earlier,)


def test_retry_refuses_nothing_to_do_and_unknown_ids() -> None:
    complete = state(done("a"), done("b"), done("c"), done("d"))
    with pytest.raises(OperatorError, match="nothing to retry"):
        retry_input(complete)
    with pytest.raises(OperatorError, match="has no subtask 'x'"):
        retry_input(complete, ["x"])


def test_paused_problem_names_what_is_wrong() -> None:
    results = {"a": done("a"), "b": failed("b", SubtaskStatus.PAUSED)}
    assert paused_problem(PLAN, results, "b") is None
    assert "is not paused (it is completed)" in (paused_problem(PLAN, results, "a") or "")
    assert "pending or running" in (paused_problem(PLAN, results, "c") or "")
    assert "has no subtask 'zz'" in (paused_problem(PLAN, results, "zz") or "")


def test_merged_budget_changes_only_what_is_named() -> None:
    current = Budget(max_tokens=100, max_cost_usd=1.0)
    assert merged_budget(current, BudgetRequest(max_tokens=500)) == Budget(
        max_tokens=500, max_cost_usd=1.0
    )
    assert merged_budget(None, BudgetRequest(max_cost_usd=2.5)) == Budget(max_cost_usd=2.5)
    with pytest.raises(OperatorError, match="name a new limit"):
        merged_budget(current, BudgetRequest())


def test_a_limit_at_or_below_what_was_spent_cannot_help() -> None:
    spent = Usage(prompt_tokens=900, completion_tokens=100, cost_usd=0.25)
    assert budget_problem(BudgetRequest(max_tokens=1_001), spent) is None
    assert budget_problem(BudgetRequest(max_cost_usd=0.26), spent) is None
    at = budget_problem(BudgetRequest(max_tokens=1_000), spent)
    assert at is not None and "is not above the 1,000 tokens the plan has spent" in at
    below = budget_problem(BudgetRequest(max_tokens=2_000, max_cost_usd=0.1), spent)
    assert below is not None and "a cost limit of $0.1000 is not above the $0.2500" in below
    assert budget_problem(BudgetRequest(max_cost_usd=0.0), Usage()) is not None
