"""Plan text and data in, a validated :class:`~domain.models.Plan` out, every problem named.

A person fixing a plan file wants the whole list of what is wrong at once, one line each,
with a location they can find; so nothing here stops at the first error. The checks run
twice: in the CLI/client before anything starts, and inside PlanWorkflow (which imports
:func:`validate_plan`), so this module does no I/O except in :func:`load_plan_file` /
:func:`read_plan_file`, and every result is deterministic.

Two kinds of rule exist. *Structural* ones (unknown fields, wrong types) only make sense
for raw data: :func:`plan_from_data` checks each field against the models and words the
failures through :mod:`domain.problems`, as every loader does. *Semantic* ones (ids,
sizes, agents, dependencies, cycles) are the plan's own, written once, over a small
"facts" view that can come either from raw data whose fields passed the type checks or
from an already-built Plan.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from durable_plans._errors import PlanValidationError, TextFormatError
from durable_plans.domain.agents import APPROVABLE_TOOL_NAMES
from durable_plans.domain.agents_catalog import BUILTIN_AGENTS
from durable_plans.domain.approval_rules import ApprovalPolicy, policy_problems
from durable_plans.domain.checks import check_problems, check_rounds_problems
from durable_plans.domain.models import Notify, Plan, Subtask
from durable_plans.domain.problems import (
    capped,
    check_fields,
    closest,
    describe,
    explain_error,
    lone_surrogate,
    prefixed,
    unknown_name,
)
from durable_plans.domain.scheduling import CYCLE_DISPLAY_LIMIT, find_cycles, format_cycle
from durable_plans.domain.text_formats import parse_json, parse_yaml, quote, read_text_file
from durable_plans.domain.webhook import notify_problems

# A plan file's size and subtask count; what else limits a plan's size is what it travels
# as (``domain.plan_data.size_problems``), its data being kept in the session store.
MAX_PLAN_BYTES: Final = 32 * 1024 * 1024
MAX_SUBTASKS: Final = 10_000
MAX_DESCRIPTION_CHARS: Final = 20_000
MAX_GOAL_CHARS: Final = 20_000
MAX_DEPENDENCIES: Final = 200
# A litellm model name ("provider/model"): one word, and no longer than any real one.
MAX_MODEL_CHARS: Final = 200
MODEL_PATTERN: Final = re.compile(r"\S+")
MIN_PARALLEL: Final = 1
MAX_PARALLEL: Final = 500
# Past this, more cycle lines would only bury the first ones.
MAX_REPORTED_CYCLES: Final = 20

# Ids become parts of Temporal workflow ids (``{plan_id}/{subtask_id}``) and snapshot
# ids (``{session}:{plan}:{subtask}``), so they exclude separators and whitespace.
ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
ID_RULE: Final = "use 1-128 of A-Z a-z 0-9 _ . - and start with a letter or digit"

_YAML_SUFFIXES: Final = (".yaml", ".yml")
# difflib over thousands of ids for thousands of typos would dominate validation time.
_SUGGESTION_BUDGET: Final = 50


def is_valid_id(value: str) -> bool:
    """Whether ``value`` may be used as a plan or subtask id."""
    return ID_PATTERN.fullmatch(value) is not None


def new_plan_id() -> str:
    """A fresh plan id for a plan file that has none (client side only: it is random)."""
    return f"plan-{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------- parsing


def parse_plan_text(text: str, *, source: str = "<plan>") -> dict[str, Any]:
    """Decode plan text (JSON, or YAML for .yaml/.yml sources and non-JSON-looking text).

    Every problem line starts with ``source`` so it can be found in the file.
    """
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_PLAN_BYTES:
        raise PlanValidationError(
            [f"{source}: plan is too large ({size} bytes, limit {MAX_PLAN_BYTES})"]
        )
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise PlanValidationError(
            [f"{source}: the plan is empty (expected a JSON or YAML object with 'subtasks')"]
        )
    lowered = source.lower()
    use_yaml = lowered.endswith(_YAML_SUFFIXES) or (
        not lowered.endswith(".json") and not text.lstrip().startswith("{")
    )
    data = _parse_yaml(text, source) if use_yaml else _parse_json(text, source)
    if not isinstance(data, dict):
        raise PlanValidationError(
            [f"{source}: the plan must be an object with 'subtasks', got {describe(data)}"]
        )
    return data


def _parse_json(text: str, source: str) -> Any:
    try:
        return parse_json(text, source)
    except TextFormatError as err:
        raise PlanValidationError(err.problems) from None


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return parse_yaml(text, source)
    except TextFormatError as err:
        raise PlanValidationError(err.problems) from None


# --------------------------------------------------------------------------- files


def read_plan_file(path: str | Path) -> dict[str, Any]:
    """Read and decode a plan file without building the Plan (the CLI reports on raw data)."""
    try:
        text = read_text_file(path, noun="plan", not_a="a plan file", limit=MAX_PLAN_BYTES)
    except TextFormatError as err:
        raise PlanValidationError(err.problems) from None
    return parse_plan_text(text, source=str(path))


def load_plan_file(
    path: str | Path,
    *,
    known_agents: Collection[str] = BUILTIN_AGENTS,
    new_id: Callable[[], str] | None = None,
) -> Plan:
    """Read, decode and validate a plan file; every problem line starts with its path."""
    data = read_plan_file(path)
    return plan_from_data(data, known_agents=known_agents, new_id=new_id, source=str(path))


def plan_to_json(plan: Plan) -> str:
    """Pretty JSON in model field order that :func:`parse_plan_text` reads back equal."""
    return json.dumps(plan.model_dump(mode="json", exclude_none=True), indent=2) + "\n"


# --------------------------------------------------------------------------- building

# Problems are collected with a group key so the final list reads top to bottom like the
# file: plan fields first, then each subtask in order, then whole-graph problems.
_PLAN_GROUP: Final = -1
_Problem = tuple[int, str]


@dataclass(frozen=True, slots=True)
class _PlanFacts:
    """Plan-level values that passed type checks (None: absent or already reported)."""

    id: str | None
    goal: str | None
    session_id: str | None
    max_parallel: int | None
    subtask_count: int | None
    notify: Notify | None = None
    replanner: str | None = None


@dataclass(frozen=True, slots=True)
class _SubtaskFacts:
    position: int
    id: str | None
    description: str | None
    agent: str | None
    depends_on: tuple[str, ...] | None
    model: str | None = None


def plan_from_data(
    data: Mapping[str, Any],
    *,
    known_agents: Collection[str] = BUILTIN_AGENTS,
    new_id: Callable[[], str] | None = None,
    source: str | None = None,
) -> Plan:
    """Build a Plan from decoded data, or raise PlanValidationError listing every problem.

    ``id`` absent (or null) is filled by ``new_id`` (default :func:`new_plan_id`); a
    subtask without ``agent`` runs as ``coder``. ``source`` prefixes every problem line.
    """
    if not isinstance(data, Mapping):
        raise PlanValidationError(
            [prefixed(source, f"the plan must be an object, got {describe(data)}")]
        )
    problems: list[_Problem] = []

    header = {k: v for k, v in data.items() if k != "subtasks" and not (k == "id" and v is None)}
    values, header_problems = check_fields(
        header, Plan, handled={"subtasks", "approval", *_CHECK_FIELDS}, optional={"id"}, strict=True
    )
    problems.extend((_PLAN_GROUP, p) for p in header_problems)
    problems.extend((_PLAN_GROUP, p) for p in _check_fields(header, values))
    if header.get("approval") is not None:
        approval_problems = policy_problems(header["approval"], APPROVABLE_TOOL_NAMES)
        problems.extend((_PLAN_GROUP, f"approval{p}") for p in approval_problems)
        if not approval_problems:
            values["approval"] = ApprovalPolicy.model_validate(header["approval"])
    if "id" not in header:
        values["id"] = (new_id or new_plan_id)()

    subtask_values: list[dict[str, Any]] = []
    subtask_facts: list[_SubtaskFacts] = []
    raw_subtasks = data.get("subtasks")
    if "subtasks" not in data:
        problems.append((_PLAN_GROUP, "missing required field 'subtasks' (a list of subtasks)"))
    elif not isinstance(raw_subtasks, list | tuple):
        problems.append((_PLAN_GROUP, f"subtasks: must be a list, got {describe(raw_subtasks)}"))
    elif len(raw_subtasks) <= MAX_SUBTASKS:  # beyond that, "too many" is the one problem
        for position, raw in enumerate(raw_subtasks):
            sub_values, sub_problems = _check_subtask(raw)
            where = _where(position, raw.get("id") if isinstance(raw, Mapping) else None)
            problems.extend((position, f"{where}: {p}") for p in sub_problems)
            subtask_values.append(sub_values)
            subtask_facts.append(_subtask_facts(position, sub_values))

    plan_facts = _PlanFacts(
        id=values.get("id"),
        goal=values.get("goal"),
        session_id=values.get("session_id"),
        max_parallel=values.get("max_parallel"),
        subtask_count=len(raw_subtasks) if isinstance(raw_subtasks, list | tuple) else None,
        notify=values.get("notify"),
        replanner=values.get("replanner"),
    )
    problems.extend(_semantic_problems(plan_facts, subtask_facts, known_agents))
    if problems:
        raise PlanValidationError(prefixed(source, line) for line in _ordered(problems))
    try:
        return Plan.model_validate({**values, "subtasks": subtask_values})
    except ValidationError as exc:  # a model constraint the rules above do not mirror
        lines = [explain_error(err) for err in exc.errors()]
        raise PlanValidationError(prefixed(source, line) for line in lines) from None


def subtasks_from_data(data: Any, *, source: str | None = None) -> tuple[Subtask, ...]:
    """The subtasks a revision adds (``dplan add``), as a plan file writes them: a list,
    or an object whose ``subtasks`` is one. Each is checked on its own, as a plan file's
    are (``PlanValidationError`` lists every problem, ``add[i]`` naming the subtask);
    what depends on the running plan (its ids, its agents, cycles) the plan judges."""
    items = data.get("subtasks") if isinstance(data, Mapping) else data
    if isinstance(data, Mapping) and set(data) - {"subtasks"}:
        extra = ", ".join(sorted(set(data) - {"subtasks"}))
        raise PlanValidationError(
            [prefixed(source, f"unknown field(s) beside 'subtasks': {extra}")]
        )
    if not isinstance(items, list) or not items:
        raise PlanValidationError(
            [prefixed(source, f"expected a non-empty list of subtasks, got {describe(items)}")]
        )
    problems: list[str] = []
    built: list[Subtask] = []
    for position, raw in enumerate(items):
        values, found = _check_subtask(raw)
        sid = raw.get("id") if isinstance(raw, Mapping) else None
        where = f"add[{position}]" + (f" (id {sid!r})" if isinstance(sid, str) else "")
        problems.extend(prefixed(source, f"{where}: {p}") for p in found)
        if not found:
            try:
                built.append(Subtask.model_validate(values))
            except ValidationError as exc:
                problems.extend(
                    prefixed(source, f"{where}: {explain_error(e)}") for e in exc.errors()
                )
    if problems:
        raise PlanValidationError(problems)
    return tuple(built)


def validate_plan(plan: Plan, *, known_agents: Collection[str] = BUILTIN_AGENTS) -> list[str]:
    """Semantic problems of an already-built Plan (empty when valid); pure, deterministic."""
    plan_facts = _PlanFacts(
        id=plan.id,
        goal=plan.goal,
        session_id=plan.session_id,
        max_parallel=plan.max_parallel,
        subtask_count=len(plan.subtasks),
        notify=plan.notify,
        replanner=plan.replanner,
    )
    subtask_facts = [
        _SubtaskFacts(i, s.id, s.description, s.agent, tuple(s.depends_on), s.model)
        for i, s in enumerate(plan.subtasks)
    ]
    return _ordered(_semantic_problems(plan_facts, subtask_facts, known_agents))


def _check_subtask(raw: Any) -> tuple[dict[str, Any], list[str]]:
    if not isinstance(raw, Mapping):
        return {}, [f"must be an object, got {describe(raw)}"]
    values, problems = check_fields(raw, Subtask, handled=_CHECK_FIELDS, strict=True)
    return values, problems + _check_fields(raw, values)


_CHECK_FIELDS: Final = frozenset({"check", "check_rounds"})


def _check_fields(raw: Mapping[str, Any], values: dict[str, Any]) -> list[str]:
    """``check`` and ``check_rounds`` (``domain/checks.py``): into ``values`` when they
    are valid, else one line per problem."""
    checks, problems = check_problems(raw.get("check"))
    lines = [f"check{p if p.startswith('[') else ': ' + p}" for p in problems]
    if "check" in raw and not problems:
        values["check"] = checks
    rounds_problems = check_rounds_problems(raw.get("check_rounds"))
    lines.extend(f"check_rounds: {p}" for p in rounds_problems)
    if "check_rounds" in raw and not rounds_problems:
        values["check_rounds"] = raw["check_rounds"]
    return lines


def _subtask_facts(position: int, values: Mapping[str, Any]) -> _SubtaskFacts:
    return _SubtaskFacts(
        position=position,
        id=values.get("id"),
        description=values.get("description"),
        agent=values.get("agent"),
        depends_on=values.get("depends_on"),
        model=values.get("model"),
    )


def _ordered(problems: list[_Problem]) -> list[str]:
    return capped([line for _, line in sorted(problems, key=lambda p: p[0])])


# --------------------------------------------------------------------------- semantic rules


def _semantic_problems(
    plan: _PlanFacts, subtasks: Sequence[_SubtaskFacts], known_agents: Collection[str]
) -> list[_Problem]:
    problems = _plan_field_problems(plan)
    if plan.replanner is not None and plan.replanner not in known_agents:
        known = ", ".join(sorted(known_agents))
        problems.append(
            (
                _PLAN_GROUP,
                f"replanner: unknown agent {quote(plan.replanner)} (known agents: {known})",
            )
        )
    first_position: dict[str, int] = {}
    for s in subtasks:
        if s.id is None:
            continue
        where = _where(s.position, s.id)
        if not is_valid_id(s.id):
            problems.append((s.position, f"{where}: invalid id {quote(s.id)} ({ID_RULE})"))
        if s.id in first_position:
            first = first_position[s.id]
            problems.append(
                (
                    s.position,
                    f"{where}: duplicate id {quote(s.id)} (first used by subtasks[{first}])",
                )
            )
        else:
            first_position[s.id] = s.position
    suggestions = _Suggester(first_position)
    for s in subtasks:
        where = _where(s.position, s.id)
        problems.extend((s.position, f"{where}: {p}") for p in _subtask_problems(s, known_agents))
        problems.extend(
            (s.position, f"{where}: {p}")
            for p in _dependency_problems(s, first_position, suggestions)
        )
    problems.extend(_cycle_problems(subtasks, graph_group=len(subtasks)))
    return problems


def _plan_field_problems(plan: _PlanFacts) -> list[_Problem]:
    out: list[str] = []
    if plan.id is not None and not is_valid_id(plan.id):
        out.append(f"id: invalid plan id {quote(plan.id)} ({ID_RULE})")
    if plan.goal is not None and len(plan.goal) > MAX_GOAL_CHARS:
        out.append(f"goal: too long ({len(plan.goal)} characters, limit {MAX_GOAL_CHARS})")
    elif plan.goal is not None and (why := lone_surrogate(plan.goal)):
        out.append(f"goal: {why}")
    if plan.session_id is not None and not plan.session_id.strip():
        out.append("session_id: must not be blank (omit it to start a new session)")
    elif plan.session_id is not None and (why := lone_surrogate(plan.session_id)):
        out.append(f"session_id: {why}")
    if plan.max_parallel is not None and not MIN_PARALLEL <= plan.max_parallel <= MAX_PARALLEL:
        out.append(
            f"max_parallel: must be between {MIN_PARALLEL} and {MAX_PARALLEL}, "
            f"got {plan.max_parallel}"
        )
    if plan.subtask_count == 0:
        out.append("subtasks: the plan has no subtasks (at least one is required)")
    elif plan.subtask_count is not None and plan.subtask_count > MAX_SUBTASKS:
        out.append(f"subtasks: too many ({plan.subtask_count}, limit {MAX_SUBTASKS})")
    if plan.notify is not None:
        out.extend(notify_problems(plan.notify))
    return [(_PLAN_GROUP, line) for line in out]


def _subtask_problems(s: _SubtaskFacts, known_agents: Collection[str]) -> list[str]:
    out: list[str] = []
    if s.description is not None:
        if not s.description.strip():
            out.append("description is empty")
        elif len(s.description) > MAX_DESCRIPTION_CHARS:
            out.append(
                f"description is too long ({len(s.description)} characters, "
                f"limit {MAX_DESCRIPTION_CHARS})"
            )
        elif why := lone_surrogate(s.description):
            out.append(f"description {why}")
    if s.agent is not None and s.agent not in known_agents:
        out.append(unknown_name("agent", s.agent, sorted(known_agents)))
    if s.model is not None and (why := model_problem(s.model)):
        out.append(why)
    return out


def model_problem(model: str) -> str | None:
    """Why ``model`` cannot name a subtask's model (None when it can): a litellm model
    name is one word, such as ``openai/gpt-4o-mini``."""
    if not model.strip():
        return "model is empty (leave it out to use the agent's model)"
    if len(model) > MAX_MODEL_CHARS:
        return f"model is too long ({len(model)} characters, limit {MAX_MODEL_CHARS})"
    if MODEL_PATTERN.fullmatch(model) is None:
        return f"model {quote(model)} has whitespace (a model name is one word, e.g. openai/gpt-4o)"
    if why := lone_surrogate(model):
        return f"model {why}"
    return None


class _Suggester:
    """did-you-mean hints for unknown dependency ids, within a fixed work budget."""

    def __init__(self, ids: Collection[str]) -> None:
        self._ids = list(ids)
        self._left = _SUGGESTION_BUDGET

    def hint(self, unknown: str) -> str:
        if self._left <= 0:
            return ""
        self._left -= 1
        match = closest(unknown, self._ids)
        return f" (did you mean {match!r}?)" if match is not None else ""


def _dependency_problems(
    s: _SubtaskFacts, known_ids: Mapping[str, int], suggestions: _Suggester
) -> list[str]:
    if s.depends_on is None:
        return []
    if len(s.depends_on) > MAX_DEPENDENCIES:
        return [f"too many dependencies ({len(s.depends_on)}, limit {MAX_DEPENDENCIES})"]
    out: list[str] = []
    seen: set[str] = set()
    repeated: dict[str, None] = {}
    for dep in s.depends_on:
        if dep in seen:
            repeated[dep] = None
            continue
        seen.add(dep)
        if dep == s.id:
            out.append(f"depends on itself (cycle: {format_cycle([dep])})")
        elif dep not in known_ids:
            out.append(f"unknown dependency {quote(dep)}{suggestions.hint(dep)}")
    out.extend(f"depends_on lists {quote(dep)} more than once" for dep in repeated)
    return out


@dataclass(frozen=True, slots=True)
class _Edges:
    id: str
    depends_on: tuple[str, ...]


def _cycle_problems(subtasks: Sequence[_SubtaskFacts], *, graph_group: int) -> list[_Problem]:
    # Self-dependencies are reported on their own subtask by _dependency_problems.
    nodes = [
        _Edges(s.id, tuple(d for d in s.depends_on or () if d != s.id))
        for s in subtasks
        if s.id is not None
    ]
    cycles = find_cycles(nodes, limit=MAX_REPORTED_CYCLES + 1)
    lines = [
        f"cycle: {format_cycle(c, limit=CYCLE_DISPLAY_LIMIT)}" for c in cycles[:MAX_REPORTED_CYCLES]
    ]
    if len(cycles) > MAX_REPORTED_CYCLES:
        lines.append(f"cycle: more cycles exist; only the first {MAX_REPORTED_CYCLES} are listed")
    return [(graph_group, line) for line in lines]


# --------------------------------------------------------------------------- wording


def _where(position: int, subtask_id: Any) -> str:
    if isinstance(subtask_id, str) and subtask_id:
        return f"subtasks[{position}] (id {quote(subtask_id)})"
    return f"subtasks[{position}]"
