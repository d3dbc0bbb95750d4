"""What an operator can do to a plan that failed or paused, as pure rules.

``dplan resume``, ``dplan skip`` and ``dplan budget`` are Updates of a running
PlanWorkflow; ``dplan retry`` starts a new run of a finished plan from what the last run
knew (its ``carried_state`` query). The rules that decide what each may do live here,
apart from Temporal, so the workflow's validators, the CLI and the unit tests share them
and a wrong request is refused with the same sentence everywhere.

Pure and passed through the workflow sandbox.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt

from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Budget, Plan, SubtaskResult, SubtaskStatus
from durable_plans.domain.scheduling import transitive_dependents

__all__ = [
    "CARRIED_STATE_QUERY",
    "RAISE_BUDGET_UPDATE",
    "RESUME_UPDATE",
    "SKIP_UPDATE",
    "BudgetRequest",
    "OperatorError",
    "SubtaskRequest",
    "merged_budget",
    "paused_problem",
    "retry_input",
]

RESUME_UPDATE = "resume_subtask"
SKIP_UPDATE = "skip_subtask"
RAISE_BUDGET_UPDATE = "raise_budget"
# The state a new run would continue from (what continue-as-new carries); answered by a
# replay of a closed run too, which is how ``dplan retry`` reads a failed plan.
CARRIED_STATE_QUERY = "carried_state"


class OperatorError(ValueError):
    """A request that cannot be carried out; the message names the problem."""


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # Who asked (the CLI sends user@host): logged by the workflow, shown in messages.
    # Temporal records the caller's client identity with every update as well.
    by: str = Field(default="", max_length=200)


class SubtaskRequest(_Request):
    """``dplan resume`` / ``dplan skip``: one paused subtask."""

    subtask: str = Field(min_length=1, max_length=200)


class BudgetRequest(_Request):
    """``dplan budget``: new limits; a limit left out keeps its current value."""

    max_tokens: NonNegativeInt | None = None
    max_cost_usd: NonNegativeFloat | None = None


def paused_problem(plan: Plan, results: Mapping[str, SubtaskResult], subtask: str) -> str | None:
    """Why ``subtask`` cannot be resumed or skipped now; None when it can."""
    try:
        plan.subtask(subtask)
    except KeyError:
        known = ", ".join(s.id for s in plan.subtasks[:20])
        return f"plan {plan.id!r} has no subtask {subtask!r} (its subtasks: {known})"
    result = results.get(subtask)
    if result is None or result.status is not SubtaskStatus.PAUSED:
        status = result.status.value if result is not None else "pending or running"
        return f"subtask {subtask!r} of plan {plan.id!r} is not paused (it is {status})"
    return None


def merged_budget(current: Budget | None, request: BudgetRequest) -> Budget:
    """The budget after ``request``; refuses a request that names no limit."""
    if request.max_tokens is None and request.max_cost_usd is None:
        raise OperatorError("name a new limit: --max-tokens N and/or --max-cost-usd X")
    base = current or Budget()
    return Budget(
        max_tokens=request.max_tokens if request.max_tokens is not None else base.max_tokens,
        max_cost_usd=(
            request.max_cost_usd if request.max_cost_usd is not None else base.max_cost_usd
        ),
    )


def retry_input(state: PlanInput, also: Iterable[str] = ()) -> tuple[PlanInput, list[str]]:
    """The input of a new run that re-runs what did not complete (and ``also``, with their
    dependents) and keeps every other completed subtask's result, branch and usage.

    Returns the input and the ids it re-runs, in plan order. What a re-run subtask spent
    before goes into ``prior``, so the new run's report counts every attempt.
    """
    plan = state.plan
    known = {s.id for s in plan.subtasks}
    named = list(dict.fromkeys(also))
    unknown = [sid for sid in named if sid not in known]
    if unknown:
        listed = ", ".join(s.id for s in plan.subtasks[:20])
        raise OperatorError(
            f"plan {plan.id!r} has no subtask {', '.join(map(repr, unknown))} "
            f"(its subtasks: {listed})"
        )
    results = {r.id: r for r in state.results}
    rerun: set[str] = {
        s.id
        for s in plan.subtasks
        if (r := results.get(s.id)) is None or r.status is not SubtaskStatus.COMPLETED
    }
    for sid in named:
        rerun.add(sid)
        rerun.update(transitive_dependents(plan, sid))
    if not rerun:
        raise OperatorError(
            f"plan {plan.id!r} completed: nothing to retry "
            "(name completed subtasks with --subtask to run them again)"
        )
    prior = {r.id: r for r in state.prior}
    for sid in rerun:
        earlier = results.get(sid)
        if earlier is not None and earlier.status is not SubtaskStatus.SKIPPED:
            prior[sid] = earlier  # cumulative: it already includes older attempts
    order = [s.id for s in plan.subtasks]
    return (
        state.model_copy(
            update={
                "results": tuple(r for r in state.results if r.id not in rerun),
                "merged": tuple(m for m in state.merged if m not in rerun),
                "branches": tuple(b for b in state.branches if b[0] not in rerun),
                "prior": tuple(prior[sid] for sid in order if sid in prior and sid in rerun),
                "paused_since": (),
            }
        ),
        [sid for sid in order if sid in rerun],
    )
