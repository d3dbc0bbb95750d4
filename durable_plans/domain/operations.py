"""What an operator can do to a plan that failed or paused, as pure rules.

``dplan resume``, ``dplan skip`` and ``dplan budget`` are Updates of a running
PlanWorkflow; ``dplan retry`` starts a new run of a finished plan from what the last run
knew (its ``carried_state`` query). The rules that decide what each may do live here,
apart from Temporal, so the workflow's validators, the CLI and the unit tests share them
and a wrong request is refused with the same sentence everywhere.

Pure and passed through the workflow sandbox.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt

from durable_plans._errors import OperatorError
from durable_plans.domain.agents import BUILTIN_CATALOG, AgentCatalog
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import (
    Budget,
    ForkedFrom,
    Plan,
    SubtaskResult,
    SubtaskStatus,
    Usage,
)
from durable_plans.domain.plan_loader import MAX_DESCRIPTION_CHARS, model_problem
from durable_plans.domain.plan_log import LogEntry
from durable_plans.domain.problems import describe, lone_surrogate, unknown_field, unknown_name
from durable_plans.domain.scheduling import transitive_dependents
from durable_plans.domain.text_formats import quote

__all__ = [
    "CARRIED_STATE_QUERY",
    "CHANGEABLE_FIELDS",
    "EDITS_MEMO",
    "EDIT_UPDATE",
    "MAX_KEPT_EDITS",
    "NOT_STARTED",
    "PLAN_QUERY",
    "RAISE_BUDGET_UPDATE",
    "RESUME_UPDATE",
    "SKIP_UPDATE",
    "SUBTASK_QUERY",
    "BudgetRequest",
    "EditRequest",
    "OperatorError",
    "SubtaskChanges",
    "SubtaskEdit",
    "SubtaskRequest",
    "budget_problem",
    "change_problems",
    "edited_plan",
    "fork_input",
    "merged_budget",
    "paused_problem",
    "retry_input",
    "with_agents_of",
]

RESUME_UPDATE = "resume_subtask"
EDIT_UPDATE = "edit_subtask"
SKIP_UPDATE = "skip_subtask"
RAISE_BUDGET_UPDATE = "raise_budget"
# The state a new run would continue from (what continue-as-new carries); answered by a
# replay of a closed run too, which is how ``dplan retry`` reads a failed plan.
CARRIED_STATE_QUERY = "carried_state"
# A running plan's subtask as it runs now (``dplan edit`` may have changed it).
SUBTASK_QUERY = "subtask_definition"
# A run's Updates are refused with this until its first task has set the plan up: one sent
# just as the plan continued as new meets the new run there, and is sent again
# (``client/_operate.update_running_plan``).
NOT_STARTED = "the plan has not started yet; try again in a moment"
# The plan as it runs now: revisions and edits included (its run's input has neither).
PLAN_QUERY = "plan_definition"


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


# ``dplan retry --subtask ID --set field=value``: what an edit and re-run may change.
CHANGEABLE_FIELDS: Final = ("description", "agent", "model")
# The memo key of a plan's edits (``SubtaskEdit``s, oldest first): set by the client when
# it starts an edited run and carried to every later retry, so the latest run says what
# was changed and by whom without a worker (memos are part of the run's history too).
EDITS_MEMO = "edits"
MAX_KEPT_EDITS: Final = 50  # the memo stays small; older edits stay in older runs' memos


class SubtaskChanges(BaseModel):
    """What an edit and re-run changes in one subtask: a field left None keeps its value.

    The subtask runs again with its dependents (whether it had completed or failed); every
    other completed subtask is reused. ``model`` is a litellm model name for this subtask
    alone (its agent's model otherwise)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    description: str | None = None
    agent: str | None = None
    model: str | None = None

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields it changes, in ``CHANGEABLE_FIELDS`` order."""
        return tuple(name for name in CHANGEABLE_FIELDS if getattr(self, name) is not None)

    @classmethod
    def from_fields(cls, values: Mapping[object, object]) -> SubtaskChanges:
        """From data (a form, JSON): ``OperatorError`` naming an unknown field or a value
        that is not a string, instead of pydantic's report."""
        for key, value in values.items():
            if key not in CHANGEABLE_FIELDS:
                raise OperatorError(
                    unknown_field(key, CHANGEABLE_FIELDS, listing="fields: " + _FIELD_LIST)
                )
            if value is not None and not isinstance(value, str):
                raise OperatorError(f"{key}: must be a string, got {describe(value)}")
        return cls.model_validate(dict(values))

    @classmethod
    def parse(cls, assignments: Iterable[str]) -> SubtaskChanges:
        """From ``field=value`` words (``--set``); ``OperatorError`` naming a word that is
        not one, an unknown field, or a field set twice."""
        values: dict[object, object] = {}
        for word in assignments:
            name, eq, value = word.partition("=")
            if not eq or not name.strip():
                raise OperatorError(f"--set takes field=value ({_FIELD_LIST}), not {quote(word)}")
            name = name.strip()
            if name in values:
                raise OperatorError(f"--set {name}=... is given twice")
            values[name] = value
        return cls.from_fields(values)


_FIELD_LIST = ", ".join(CHANGEABLE_FIELDS)


class EditRequest(_Request):
    """``dplan edit``: change a paused subtask, then run it again (its fields as for an
    edit and re-run; the rest of the running plan carries on)."""

    subtask: str = Field(min_length=1, max_length=200)
    changes: SubtaskChanges


class SubtaskEdit(BaseModel):
    """The record of one edit and re-run of one subtask: which fields, by whom, when."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    subtask: str
    fields: tuple[str, ...]
    by: str = ""
    at: str = ""  # when the edited run was started (ISO 8601, UTC)


def change_problems(
    subtask: str, changes: SubtaskChanges, known_agents: Collection[str]
) -> list[str]:
    """Why ``changes`` cannot be made to ``subtask`` whatever the plan (empty when they
    can): one line each, naming the subtask."""
    out: list[str] = []
    if not changes.fields:
        out.append(f"names no change (set {_FIELD_LIST})")
    description = changes.description
    if description is not None:
        if not description.strip():
            out.append("description is empty")
        elif len(description) > MAX_DESCRIPTION_CHARS:
            out.append(
                f"description is too long ({len(description)} characters, "
                f"limit {MAX_DESCRIPTION_CHARS})"
            )
        elif why := lone_surrogate(description):
            out.append(f"description {why}")
    if changes.agent is not None and changes.agent not in known_agents:
        out.append(unknown_name("agent", changes.agent, sorted(known_agents)))
    if changes.model is not None and (why := model_problem(changes.model)):
        out.append(why)
    return [f"subtask {subtask!r}: {line}" for line in out]


def _unknown_subtasks(plan: Plan, named: Iterable[str]) -> None:
    known = {s.id for s in plan.subtasks}
    unknown = [sid for sid in named if sid not in known]
    if unknown:
        listed = ", ".join(s.id for s in plan.subtasks[:20])
        raise OperatorError(
            f"plan {plan.id!r} has no subtask {', '.join(map(repr, unknown))} "
            f"(its subtasks: {listed})"
        )


def edited_plan(plan: Plan, changes: Mapping[str, SubtaskChanges]) -> Plan:
    """``plan`` with ``changes`` made to its subtasks; ``OperatorError`` naming a subtask
    it does not have."""
    _unknown_subtasks(plan, changes)
    return plan.model_copy(
        update={
            "subtasks": tuple(
                s.model_copy(update={f: getattr(changes[s.id], f) for f in changes[s.id].fields})
                if s.id in changes
                else s
                for s in plan.subtasks
            )
        }
    )


def with_agents_of(state: PlanInput, catalog: AgentCatalog) -> PlanInput:
    """``state`` whose agents include every one its plan names: the agents a plan runs
    with were fixed when it started, so an agent an edit brings in is added from
    ``catalog`` (the fixed ones are kept as they were)."""
    fixed = AgentCatalog(agents=state.agents) if state.agents else BUILTIN_CATALOG
    missing = dict.fromkeys(s.agent for s in state.plan.subtasks if s.agent not in fixed)
    if not missing:
        return state
    return state.model_copy(
        update={"agents": fixed.agents + tuple(catalog.get(name) for name in missing)}
    )


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
        raise OperatorError("name a new limit: a token limit and/or a cost limit")
    base = current or Budget()
    return Budget(
        max_tokens=request.max_tokens if request.max_tokens is not None else base.max_tokens,
        max_cost_usd=(
            request.max_cost_usd if request.max_cost_usd is not None else base.max_cost_usd
        ),
    )


def budget_problem(request: BudgetRequest, spent: Usage) -> str | None:
    """Why ``request`` cannot help a plan that has ``spent`` this much, or None: a limit at
    or below what is spent stops every subtask again at its first call (the budget is
    checked before each call against everything the plan spent)."""
    tokens = request.max_tokens
    if tokens is not None and tokens <= spent.total_tokens:
        return (
            f"a token limit of {tokens:,} is not above the {spent.total_tokens:,} tokens the "
            f"plan has spent: its subtasks would stop again at once; give more than "
            f"{spent.total_tokens:,}"
        )
    cost = request.max_cost_usd
    if cost is not None and cost <= spent.cost_usd:
        return (
            f"a cost limit of ${cost:.4f} is not above the ${spent.cost_usd:.4f} the plan has "
            f"spent: its subtasks would stop again at once; give more than "
            f"${spent.cost_usd:.4f}"
        )
    return None


def retry_input(
    state: PlanInput,
    also: Iterable[str] = (),
    changes: Mapping[str, SubtaskChanges] | None = None,
) -> tuple[PlanInput, list[str]]:
    """The input of a new run that re-runs what did not complete (and ``also``, with their
    dependents) and keeps every other completed subtask's result, branch and usage.

    ``changes`` edits subtasks first (``edited_plan``); an edited subtask runs again with
    its dependents, as if named in ``also``.

    Returns the input and the ids it re-runs, in plan order. What a re-run subtask spent
    before goes into ``prior``, so the new run's report counts every attempt.
    """
    if changes:
        state = state.model_copy(update={"plan": edited_plan(state.plan, changes)})
        also = [*also, *changes]
    plan = state.plan
    named = list(dict.fromkeys(also))
    _unknown_subtasks(plan, named)
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


def fork_input(
    state: PlanInput,
    from_subtask: str,
    new_id: str,
    *,
    changes: Mapping[str, SubtaskChanges] | None = None,
    by: str = "",
    at_s: float = 0.0,
) -> tuple[PlanInput, list[str]]:
    """The first input of a new plan ``new_id`` made from ``state`` (another plan's
    carried state): ``from_subtask`` and what depends on it run again (edited by
    ``changes``), with whatever did not complete; every other completed subtask's result,
    session and commit are reused, so they ask no model. The original plan is not
    touched: the fork has its own id, base session, log, clock and spend.
    """
    if state.plan_data is not None:
        raise OperatorError(
            f"plan {state.plan.id!r} runs by reference (its plan is too big to travel "
            "whole): it cannot be forked yet"
        )
    forked, rerun = retry_input(state, [from_subtask], changes)
    origin = ForkedFrom(plan=state.plan.id, subtask=from_subtask)
    entry = LogEntry.of(
        at_s, "forked", by=by, subtask=from_subtask, detail=f"from plan {state.plan.id}"
    )
    # A plan conversation's session is the original's: the fork merges into its own.
    plan = forked.plan.model_copy(update={"id": new_id, "session_id": None})
    return (
        forked.model_copy(
            update={
                "plan": plan,
                "merged": (),
                "prior": (),
                "started_at_s": None,
                "log": (entry,),
                "log_omitted": 0,
                "forked_from": origin,
                "max_completions_per_run": None,
            }
        ),
        rerun,
    )
