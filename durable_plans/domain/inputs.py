"""Workflow inputs from whatever a client sent: a typed input, or every problem named.

PlanWorkflow and SessionWorkflow are started by any Temporal client: ``dplan``, but also
``temporal workflow start --input-file plan.json``, Temporal's HTTP API, or another
team's service in another language. Their input therefore arrives as an arbitrary JSON
value, not as a model the SDK has already decoded: were the SDK to decode it against a
model, a bad input would fail the first workflow task before any of our code runs, and
Temporal retries a failed workflow task forever (the workflow stays Running, stuck). The
workflows decode it themselves with the functions here and fail at once, non-retryably,
with one problem line per mistake, worded exactly as ``dplan validate`` words them.

A PlanWorkflow input is one of two shapes:

* the plan file as is (``{"goal": ..., "subtasks": [...]}``), validated like a plan file
  (:func:`~durable_plans.domain.plan_loader.plan_from_data`; strict types, built-in
  agents); a plan without an ``id`` takes one derived from the workflow id;
* the wrapper ``dplan run`` sends (``{"plan": {...}, "agents": [...], ...}``, a
  :class:`~durable_plans.domain.contracts.PlanInput`), which also carries the agent
  catalog and the progress carried across continue-as-new. An object with a ``plan``
  field is read as the wrapper: no plan file has one.

Pure and deterministic (no clock, no randomness, no I/O): runs inside workflow code.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from pydantic import ValidationError

from durable_plans._errors import InvalidInput, PlanValidationError
from durable_plans.domain.agents import AgentCatalog
from durable_plans.domain.agents_catalog import BUILTIN_AGENTS
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.ids import stable_id
from durable_plans.domain.plan_loader import is_valid_id, plan_from_data
from durable_plans.domain.problems import check_fields, describe, explain_error
from durable_plans.domain.session_contracts import SessionInput

__all__ = [
    "WRAPPER_FIELD",
    "InvalidInput",
    "plan_id_for_workflow",
    "plan_input_from_value",
    "session_input_from_value",
]

# The field that marks the wrapper shape (PlanInput) rather than a bare plan file.
WRAPPER_FIELD: Final = "plan"


def plan_id_for_workflow(workflow_id: str) -> str:
    """The id of a plan that came without one: its workflow id when that is a valid plan
    id (``temporal workflow start`` generates UUIDs, which are), else one derived from it.

    Derived, not random: the workflow computes it again on every replay.
    """
    if is_valid_id(workflow_id):
        return workflow_id
    return f"plan-{stable_id(workflow_id, length=16)}"


def plan_input_from_value(value: Any, *, workflow_id: str) -> PlanInput:
    """The PlanInput that ``value`` (a decoded JSON value) describes; ``InvalidInput``
    lists every problem otherwise, including the semantic ones (cycles, unknown agents,
    sizes) that ``validate_plan`` checks."""
    if isinstance(value, Mapping) and WRAPPER_FIELD in value:
        return _from_wrapper(value, workflow_id)
    try:
        plan = plan_from_data(value, new_id=lambda: plan_id_for_workflow(workflow_id))
    except PlanValidationError as err:
        raise InvalidInput(err.problems) from None
    return PlanInput(plan=plan)


def _from_wrapper(value: Mapping[Any, Any], workflow_id: str) -> PlanInput:
    values, problems = check_fields(value, PlanInput, handled={WRAPPER_FIELD})
    known_agents: Collection[str] = BUILTIN_AGENTS
    agents = values.get("agents")
    if agents:
        try:
            known_agents = AgentCatalog(agents=agents).names()
        except ValidationError as err:
            problems.extend(explain_error(e, "agents") for e in err.errors())
    raw_plan = value[WRAPPER_FIELD]
    try:
        plan = plan_from_data(
            raw_plan,
            known_agents=known_agents,
            new_id=lambda: plan_id_for_workflow(workflow_id),
            source=WRAPPER_FIELD,
        )
    except PlanValidationError as err:
        problems.extend(err.problems)
    if problems:
        raise InvalidInput(problems)
    try:
        inp = PlanInput.model_validate({**values, WRAPPER_FIELD: plan})
    except ValidationError as err:  # a model rule across fields the field checks miss
        raise InvalidInput(explain_error(e) for e in err.errors()) from None
    return inp


def session_input_from_value(value: Any) -> SessionInput:
    """The SessionInput ``value`` describes; ``InvalidInput`` lists every problem."""
    if not isinstance(value, Mapping):
        raise InvalidInput(
            [f"the input must be an object with 'session_id', got {describe(value)}"]
        )
    values, problems = check_fields(value, SessionInput)
    if values.get("agents"):
        try:
            AgentCatalog(agents=values["agents"])
        except ValidationError as err:
            problems.extend(explain_error(e, "agents") for e in err.errors())
    if not problems:
        try:
            return SessionInput.model_validate(values)
        except ValidationError as err:
            problems = [explain_error(e) for e in err.errors()]
    raise InvalidInput(problems)
