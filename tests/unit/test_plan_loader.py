"""Plan parsing and validation: every rule, its exact wording, and all problems at once."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from durable_plans._errors import PlanValidationError
from durable_plans.domain.agents_catalog import BUILTIN_AGENTS
from durable_plans.domain.models import Budget, Plan, Subtask
from durable_plans.domain.plan_loader import (
    MAX_DEPENDENCIES,
    MAX_DESCRIPTION_CHARS,
    MAX_GOAL_CHARS,
    MAX_PLAN_BYTES,
    MAX_REPORTED_CYCLES,
    MAX_SUBTASKS,
    is_valid_id,
    load_plan_file,
    parse_plan_text,
    plan_from_data,
    plan_to_json,
    read_plan_file,
    validate_plan,
)
from durable_plans.domain.problems import MAX_REPORTED_PROBLEMS

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def sub(id: str, *deps: str, **fields: Any) -> dict[str, Any]:
    return {"id": id, "description": f"do {id}", "depends_on": list(deps), **fields}


def plan_data(*subtasks: Any, **fields: Any) -> dict[str, Any]:
    return {"id": "p", "goal": "test", "subtasks": list(subtasks), **fields}


def problems(data: Any, **kwargs: Any) -> tuple[str, ...]:
    with pytest.raises(PlanValidationError) as info:
        plan_from_data(data, **kwargs)
    return info.value.problems


def only_problem(data: Any, **kwargs: Any) -> str:
    found = problems(data, **kwargs)
    assert len(found) == 1, found
    return found[0]


# --------------------------------------------------------------------------- the error type


def test_error_joins_problems_one_per_line_and_survives_pickling() -> None:
    err = PlanValidationError(["first problem", "second problem"])
    assert str(err) == "first problem\nsecond problem"
    assert isinstance(err, ValueError)
    copy = pickle.loads(pickle.dumps(err))
    assert copy.problems == ("first problem", "second problem")


def test_error_without_problems_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one problem"):
        PlanValidationError([])


# --------------------------------------------------------------------------- parsing text


def test_json_text_parses_to_a_dict() -> None:
    text = json.dumps(plan_data(sub("a")))
    assert parse_plan_text(text) == plan_data(sub("a"))


def test_malformed_json_names_line_and_column() -> None:
    text = '{\n  "goal": "x"\n  "subtasks": []\n}\n'
    with pytest.raises(PlanValidationError) as info:
        parse_plan_text(text, source="plan.json")
    assert info.value.problems == (
        "plan.json: invalid JSON at line 3, column 3: Expecting ',' delimiter",
    )


def test_json_source_is_parsed_as_json_even_when_it_does_not_look_like_json() -> None:
    with pytest.raises(PlanValidationError, match=r"plan\.json: invalid JSON at line 1, column 1"):
        parse_plan_text("goal: yaml in a .json file", source="plan.json")


def test_yaml_by_suffix_and_by_content() -> None:
    text = "id: y\nsubtasks:\n  - id: a\n    description: do a\n"
    expected = {"id": "y", "subtasks": [{"id": "a", "description": "do a"}]}
    assert parse_plan_text(text, source="plan.yaml") == expected
    assert parse_plan_text(text, source="plan.yml") == expected
    assert parse_plan_text(text) == expected  # not JSON-looking, so YAML


def test_malformed_yaml_names_line_and_column() -> None:
    text = "id: y\nsubtasks:\n  - id: a\n   description: [unclosed\n"
    with pytest.raises(PlanValidationError) as info:
        parse_plan_text(text, source="plan.yaml")
    (line,) = info.value.problems
    assert re.fullmatch(r"plan\.yaml: invalid YAML at line \d+, column \d+: .+", line), line


@pytest.mark.parametrize(
    ("text", "described"),
    [("[1, 2]", "a list"), ("just words", "a string ('just words')"), ("42", "42")],
)
def test_top_level_must_be_an_object(text: str, described: str) -> None:
    with pytest.raises(PlanValidationError) as info:
        parse_plan_text(text, source="p")
    assert info.value.problems == (
        f"p: the plan must be an object with 'subtasks', got {described}",
    )


@pytest.mark.parametrize("text", ["", "   \n\t", "\ufeff\n"])
def test_empty_text_is_named_as_empty(text: str) -> None:
    with pytest.raises(PlanValidationError, match=r"^x\.json: the plan is empty"):
        parse_plan_text(text, source="x.json")


def test_byte_order_mark_is_tolerated() -> None:
    assert parse_plan_text("\ufeff" + json.dumps({"id": "a"})) == {"id": "a"}


def test_oversized_text_is_rejected_before_parsing() -> None:
    text = '{"goal": "' + "x" * MAX_PLAN_BYTES + '"}'
    with pytest.raises(PlanValidationError) as info:
        parse_plan_text(text, source="big.json")
    assert info.value.problems == (
        f"big.json: plan is too large ({len(text)} bytes, limit {MAX_PLAN_BYTES})",
    )


def test_duplicate_json_keys_are_not_silently_dropped() -> None:
    text = (
        '{"id": "p", "subtasks": '
        '[{"id": "a", "description": "d", "agent": "coder", "agent": "ask"}]}'
    )
    with pytest.raises(PlanValidationError) as info:
        parse_plan_text(text, source="dup.json")
    assert info.value.problems == (
        "dup.json: duplicate key 'agent' in one JSON object (only the last would count)",
    )


@pytest.mark.parametrize(("source", "kind"), [("deep.json", "JSON"), ("deep.yaml", "YAML")])
def test_absurd_nesting_is_a_problem_not_a_crash(source: str, kind: str) -> None:
    with pytest.raises(PlanValidationError) as info:
        parse_plan_text("[" * 200_000, source=source)
    assert info.value.problems == (f"{source}: invalid {kind}: nested too deeply",)


# --------------------------------------------------------------------------- building: success


def test_valid_plan_builds_with_defaults() -> None:
    plan = plan_from_data(plan_data(sub("a"), sub("b", "a", agent="architect")))
    assert plan == Plan(
        id="p",
        goal="test",
        subtasks=(
            Subtask(id="a", description="do a", agent="coder"),
            Subtask(id="b", description="do b", agent="architect", depends_on=("a",)),
        ),
    )


def test_agent_defaults_to_coder() -> None:
    plan = plan_from_data({"id": "p", "subtasks": [{"id": "a", "description": "x"}]})
    assert plan.subtasks[0].agent == "coder"


@pytest.mark.parametrize("data", [{"subtasks": [sub("a")]}, {"id": None, "subtasks": [sub("a")]}])
def test_missing_or_null_id_is_generated(data: dict[str, Any]) -> None:
    assert plan_from_data(data, new_id=lambda: "generated-1").id == "generated-1"
    default = plan_from_data(data).id
    assert re.fullmatch(r"plan-[0-9a-f]{12}", default), default
    assert plan_from_data(data).id != default


def test_a_generated_id_is_validated_too() -> None:
    line = only_problem({"subtasks": [sub("a")]}, new_id=lambda: "not ok")
    assert line.startswith("id: invalid plan id 'not ok'")


def test_budget_and_session_are_carried() -> None:
    plan = plan_from_data(
        plan_data(sub("a"), session_id="s-1", budget={"max_tokens": 10, "max_cost_usd": 1})
    )
    assert plan.session_id == "s-1"
    assert plan.budget == Budget(max_tokens=10, max_cost_usd=1.0)


def test_source_prefixes_every_line() -> None:
    found = problems({"id": "p", "subtasks": [], "extra": 1}, source="f.json")
    assert found and all(line.startswith("f.json: ") for line in found)


def test_non_mapping_data_is_rejected() -> None:
    assert only_problem(["not", "a", "plan"]) == "the plan must be an object, got a list"


# --------------------------------------------------------------------------- structural rules


def test_unknown_top_level_field_suggests_the_close_one() -> None:
    found = problems({"id": "p", "subtask": [sub("a")]})
    assert found == (
        "unknown field 'subtask' (did you mean 'subtasks'?)",
        "missing required field 'subtasks' (a list of subtasks)",
    )


def test_unknown_field_without_a_close_match_lists_known_fields() -> None:
    line = only_problem(plan_data(sub("a"), colour="blue"))
    assert line.startswith("unknown field 'colour' (known fields: id, goal, session_id")
    assert "subtasks" in line


def test_unknown_subtask_field_depends_suggests_depends_on() -> None:
    line = only_problem(plan_data({"id": "ui", "description": "x", "depends": ["a"]}))
    assert line == "subtasks[0] (id 'ui'): unknown field 'depends' (did you mean 'depends_on'?)"


def test_non_string_keys_from_yaml_are_unknown_fields() -> None:
    line = only_problem(plan_data({"id": "a", "description": "x", 3: "three"}))
    assert line == "subtasks[0] (id 'a'): unknown field 3 (field names are strings)"


@pytest.mark.parametrize(
    ("value", "got"),
    [("4", "a string ('4')"), (True, "true"), (4.5, "4.5"), (None, "null"), ([4], "a list")],
)
def test_max_parallel_must_be_an_integer(value: Any, got: str) -> None:
    line = only_problem(plan_data(sub("a"), max_parallel=value))
    assert line == f"max_parallel: must be an integer, got {got}"


def test_subtasks_must_be_a_list() -> None:
    assert (
        only_problem({"id": "p", "subtasks": {"a": 1}}) == "subtasks: must be a list, got an object"
    )


def test_subtask_entries_must_be_objects() -> None:
    line = only_problem(plan_data(sub("a"), "write tests"))
    assert line == "subtasks[1]: must be an object, got a string ('write tests')"


def test_depends_on_must_be_a_list_of_strings() -> None:
    found = problems(
        plan_data(
            sub("a"),
            {"id": "b", "description": "x", "depends_on": "a"},
            {"id": "c", "description": "x", "depends_on": ["a", 7]},
        )
    )
    assert found == (
        "subtasks[1] (id 'b'): depends_on: must be a list, got a string ('a')",
        "subtasks[2] (id 'c'): depends_on[1]: must be a string, got 7",
    )


def test_missing_required_subtask_fields_are_named() -> None:
    found = problems(plan_data({"agent": "coder"}))
    assert found == (
        "subtasks[0]: missing required field 'id'",
        "subtasks[0]: missing required field 'description'",
    )


def test_wrong_scalar_types_are_named_per_field() -> None:
    found = problems(
        plan_data({"id": 5, "description": ["x"], "agent": None}, goal=3, session_id=False)
    )
    assert found == (
        "goal: must be a string, got 3",
        "session_id: must be a string, got false",
        "subtasks[0]: id: must be a string, got 5",
        "subtasks[0]: description: must be a string, got a list",
        "subtasks[0]: agent: must be a string, got null",
    )


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        ({"max_tokens": -1}, "budget.max_tokens: must not be negative, got -1"),
        ({"max_cost_usd": -0.5}, "budget.max_cost_usd: must not be negative, got -0.5"),
        ({"max_cost_usd": "1"}, "budget.max_cost_usd: must be a number, got a string ('1')"),
        ({"max_tokens": 1.5}, "budget.max_tokens: must be an integer, got 1.5"),
        ({"max_token": 5}, "budget: unknown field 'max_token' (did you mean 'max_tokens'?)"),
        (10, "budget: must be an object, got 10"),
    ],
)
def test_budget_fields_are_non_negative_numbers(budget: Any, expected: str) -> None:
    assert only_problem(plan_data(sub("a"), budget=budget)) == expected


def test_no_raw_pydantic_output_in_any_problem() -> None:
    found = problems(
        plan_data(
            {"id": 1, "description": 2, "agent": 3, "depends_on": 4},
            max_parallel="x",
            budget={"max_tokens": "x"},
        )
    )
    assert len(found) == 6
    for line in found:
        assert "\n" not in line
        assert "pydantic" not in line and "input_value" not in line and "For further" not in line


# --------------------------------------------------------------------------- semantic rules


def test_empty_plan_is_rejected() -> None:
    assert (
        only_problem(plan_data()) == "subtasks: the plan has no subtasks (at least one is required)"
    )


@pytest.mark.parametrize("description", ["", "   ", "\n\t"])
def test_blank_description_is_rejected(description: str) -> None:
    line = only_problem(plan_data({"id": "ui", "description": description}))
    assert line == "subtasks[0] (id 'ui'): description is empty"


def test_duplicate_ids_name_the_id_and_both_positions() -> None:
    found = problems(plan_data(sub("a"), sub("ui"), sub("b"), sub("ui"), sub("ui")))
    assert found == (
        "subtasks[3] (id 'ui'): duplicate id 'ui' (first used by subtasks[1])",
        "subtasks[4] (id 'ui'): duplicate id 'ui' (first used by subtasks[1])",
    )


def test_unknown_dependency_is_named_with_a_suggestion() -> None:
    found = problems(plan_data(sub("api_client"), sub("ui", "api_clinet", "zzz")))
    assert found == (
        "subtasks[1] (id 'ui'): unknown dependency 'api_clinet' (did you mean 'api_client'?)",
        "subtasks[1] (id 'ui'): unknown dependency 'zzz'",
    )


def test_self_dependency_is_reported_once_on_its_subtask() -> None:
    line = only_problem(plan_data(sub("a", "a")))
    assert line == "subtasks[0] (id 'a'): depends on itself (cycle: a -> a)"


def test_duplicate_dependency_entries_are_reported_once_each() -> None:
    line = only_problem(plan_data(sub("a"), sub("b", "a", "a", "a")))
    assert line == "subtasks[1] (id 'b'): depends_on lists 'a' more than once"


@pytest.mark.parametrize(
    ("subtasks", "expected"),
    [
        ([sub("x", "y"), sub("y", "x")], "cycle: x -> y -> x"),
        ([sub("x", "y"), sub("y", "z"), sub("z", "x")], "cycle: x -> y -> z -> x"),
        (
            [sub("w", "x"), sub("x", "y"), sub("y", "z"), sub("z", "w")],
            "cycle: w -> x -> y -> z -> w",
        ),
        # Declared out of cycle order: the cycle still starts at the first-declared member.
        ([sub("z", "x"), sub("y", "z"), sub("x", "y")], "cycle: z -> x -> y -> z"),
    ],
)
def test_cycles_are_printed_once(subtasks: list[dict[str, Any]], expected: str) -> None:
    assert only_problem(plan_data(sub("root"), *subtasks)) == expected


def test_two_separate_cycles_are_both_reported() -> None:
    found = problems(
        plan_data(
            sub("a", "b"), sub("b", "a"), sub("ok"), sub("c", "d"), sub("d", "e"), sub("e", "c")
        )
    )
    assert found == ("cycle: a -> b -> a", "cycle: c -> d -> e -> c")


def test_overlapping_cycles_cover_every_subtask_on_a_cycle() -> None:
    # a <-> b and b <-> c share b: one strongly connected component, two distinct cycles.
    found = problems(plan_data(sub("a", "b"), sub("b", "a", "c"), sub("c", "b")))
    assert found == ("cycle: a -> b -> a", "cycle: b -> c -> b")


def test_cycle_list_is_capped() -> None:
    pairs = [
        s
        for i in range(MAX_REPORTED_CYCLES + 5)
        for s in (sub(f"a{i}", f"b{i}"), sub(f"b{i}", f"a{i}"))
    ]
    found = problems(plan_data(*pairs))
    assert len(found) == MAX_REPORTED_CYCLES + 1
    assert found[0] == "cycle: a0 -> b0 -> a0"
    assert found[-1] == f"cycle: more cycles exist; only the first {MAX_REPORTED_CYCLES} are listed"


def test_a_long_cycle_is_shortened_in_its_line() -> None:
    ring = [sub(f"s{i}", f"s{(i + 1) % 100}") for i in range(100)]
    line = only_problem(plan_data(*ring))
    assert line.startswith("cycle: s0 -> s1 -> ")
    assert line.endswith("-> ... -> s99 -> s0 (100 subtasks)")
    assert len(line) < 200


def test_unknown_agent_names_the_agent_and_lists_known_ones() -> None:
    found = problems(plan_data(sub("a", agent="designer"), sub("b", agent="codr")))
    known = ", ".join(sorted(BUILTIN_AGENTS))
    assert found == (
        f"subtasks[0] (id 'a'): unknown agent 'designer' (known agents: {known})",
        f"subtasks[1] (id 'b'): unknown agent 'codr' (did you mean 'coder'? known agents: {known})",
    )


def test_custom_agent_catalog_is_honoured() -> None:
    data = plan_data(sub("a", agent="designer"))
    assert plan_from_data(data, known_agents={"designer"}).subtasks[0].agent == "designer"
    line = only_problem(plan_data(sub("a")), known_agents={"designer"})
    assert line == "subtasks[0] (id 'a'): unknown agent 'coder' (known agents: designer)"


@pytest.mark.parametrize("good", ["a", "A", "0", "a.b_c-D9", "x" * 128, "plan-0123456789ab"])
def test_valid_ids(good: str) -> None:
    assert is_valid_id(good)
    assert plan_from_data({"id": good, "subtasks": [sub(good)]}).subtasks[0].id == good


@pytest.mark.parametrize(
    "bad", ["", "a b", "a/b", "-a", "_a", ".a", "x" * 129, "a:b", "é", "a\n", "plan/1"]
)
def test_invalid_ids_are_rejected_for_subtasks_and_plans(bad: str) -> None:
    assert not is_valid_id(bad)
    found = problems({"id": bad, "subtasks": [{"id": bad, "description": "x"}]})
    assert found[0].startswith(f"id: invalid plan id {bad[:60]!r}")
    assert f"invalid id {bad[:60]!r}" in found[1]
    assert found[1].startswith("subtasks[0]")
    assert "start with a letter or digit" in found[1]


def test_too_many_subtasks() -> None:
    data = plan_data(*(sub(f"s{i}") for i in range(MAX_SUBTASKS + 1)))
    assert only_problem(data) == f"subtasks: too many ({MAX_SUBTASKS + 1}, limit {MAX_SUBTASKS})"
    assert (
        len(plan_from_data(plan_data(*(sub(f"s{i}") for i in range(MAX_SUBTASKS)))).subtasks)
        == MAX_SUBTASKS
    )


def test_a_huge_subtask_list_is_one_problem_not_one_per_entry() -> None:
    data = {"id": "p", "subtasks": [{}] * 50_000}
    assert only_problem(data) == f"subtasks: too many (50000, limit {MAX_SUBTASKS})"


def test_problem_list_is_capped_with_a_count_of_the_rest() -> None:
    found = problems(plan_data(*({"id": f"s{i}"} for i in range(MAX_REPORTED_PROBLEMS + 30))))
    assert len(found) == MAX_REPORTED_PROBLEMS + 1
    assert found[0] == "subtasks[0] (id 's0'): missing required field 'description'"
    assert found[-1] == "... and 30 more problems not listed"


def test_user_text_in_problem_lines_is_shortened() -> None:
    line = only_problem(plan_data({"id": "a", "description": "x", "k" * 5000: 1}))
    assert line.startswith("subtasks[0] (id 'a'): unknown field 'kkkk")
    assert "…" in line and len(line) < 200


@pytest.mark.parametrize(("source", "kind"), [("big.json", "JSON"), ("big.yaml", "YAML")])
def test_an_absurdly_long_integer_is_a_problem_not_a_crash(source: str, kind: str) -> None:
    text = ('{"max_parallel": %s}' if kind == "JSON" else "max_parallel: %s") % ("9" * 5000)
    with pytest.raises(PlanValidationError) as info:
        parse_plan_text(text, source=source)
    (line,) = info.value.problems
    assert line.startswith(f"{source}: invalid {kind}: Exceeds the limit")


def test_too_long_description_and_goal() -> None:
    long_desc = "d" * (MAX_DESCRIPTION_CHARS + 1)
    found = problems(
        plan_data({"id": "a", "description": long_desc}, goal="g" * (MAX_GOAL_CHARS + 1))
    )
    assert found == (
        f"goal: too long ({MAX_GOAL_CHARS + 1} characters, limit {MAX_GOAL_CHARS})",
        f"subtasks[0] (id 'a'): description is too long ({MAX_DESCRIPTION_CHARS + 1} characters, "
        f"limit {MAX_DESCRIPTION_CHARS})",
    )


def test_too_many_dependencies_is_one_line_not_one_per_entry() -> None:
    roots = [sub(f"r{i}") for i in range(MAX_DEPENDENCIES + 1)]
    hub = sub("hub", *(f"r{i % 3}" for i in range(MAX_DEPENDENCIES + 1)))
    line = only_problem(plan_data(*roots, hub))
    assert line == (
        f"subtasks[{MAX_DEPENDENCIES + 1}] (id 'hub'): too many dependencies "
        f"({MAX_DEPENDENCIES + 1}, limit {MAX_DEPENDENCIES})"
    )


@pytest.mark.parametrize("value", [0, -3, 501])
def test_max_parallel_range(value: int) -> None:
    assert only_problem(plan_data(sub("a"), max_parallel=value)) == (
        f"max_parallel: must be between 1 and 500, got {value}"
    )


@pytest.mark.parametrize("value", [1, 500])
def test_max_parallel_bounds_are_inclusive(value: int) -> None:
    assert plan_from_data(plan_data(sub("a"), max_parallel=value)).max_parallel == value


def test_blank_session_id_is_rejected() -> None:
    line = only_problem(plan_data(sub("a"), session_id="  "))
    assert line == "session_id: must not be blank (omit it to start a new session)"


def test_many_problems_are_reported_together_in_file_order() -> None:
    data = {
        "id": "many",
        "max_parallel": "4",
        "subtasks": [
            sub("deps"),
            {"id": "ui", "description": "home screen", "agent": "designer", "depends": ["deps"]},
            {"id": "ui", "description": "  ", "depends_on": ["deps", "deps", "api"]},
            sub("tests", "tests"),
            sub("x", "y"),
            sub("y", "x"),
        ],
    }
    found = problems(data)
    assert found == (
        "max_parallel: must be an integer, got a string ('4')",
        "subtasks[1] (id 'ui'): unknown field 'depends' (did you mean 'depends_on'?)",
        "subtasks[1] (id 'ui'): unknown agent 'designer' (known agents: "
        "architect, ask, coder, debug, orchestrator)",
        "subtasks[2] (id 'ui'): duplicate id 'ui' (first used by subtasks[1])",
        "subtasks[2] (id 'ui'): description is empty",
        "subtasks[2] (id 'ui'): unknown dependency 'api'",
        "subtasks[2] (id 'ui'): depends_on lists 'deps' more than once",
        "subtasks[3] (id 'tests'): depends on itself (cycle: tests -> tests)",
        "cycle: x -> y -> x",
    )


# --------------------------------------------------------------------------- validate_plan


def test_validate_plan_applies_the_same_rules_to_a_built_plan() -> None:
    plan = Plan(
        id="bad id",
        max_parallel=900,
        subtasks=(
            Subtask(id="a", description="x", agent="nobody", depends_on=("b", "missing")),
            Subtask(id="b", description=" ", depends_on=("a",)),
            Subtask(id="b", description="again"),
        ),
    )
    found = validate_plan(plan)
    assert found == [
        "id: invalid plan id 'bad id' (use 1-128 of A-Z a-z 0-9 _ . - and start with a letter "
        "or digit)",
        "max_parallel: must be between 1 and 500, got 900",
        "subtasks[0] (id 'a'): unknown agent 'nobody' (known agents: "
        "architect, ask, coder, debug, orchestrator)",
        "subtasks[0] (id 'a'): unknown dependency 'missing'",
        "subtasks[1] (id 'b'): description is empty",
        "subtasks[2] (id 'b'): duplicate id 'b' (first used by subtasks[1])",
        "cycle: a -> b -> a",
    ]
    assert validate_plan(plan) == found  # deterministic


def test_validate_plan_on_a_valid_plan_is_empty() -> None:
    assert validate_plan(load_plan_file(EXAMPLES / "weather_app.json")) == []


def test_validate_plan_with_no_subtasks() -> None:
    assert validate_plan(Plan(id="p", subtasks=())) == [
        "subtasks: the plan has no subtasks (at least one is required)"
    ]


def test_the_largest_plan_allowed_loads_and_validates() -> None:
    # What validation costs at this size is measured in bench/ (bench.big_plans), never
    # asserted here: a timing bound fails at random on a loaded machine.
    n = MAX_SUBTASKS
    data = plan_data(
        *(sub(f"s{i}", *(f"s{j}" for j in range(max(0, i - 20), i))) for i in range(n))
    )
    plan = plan_from_data(data)
    assert validate_plan(plan) == []
    assert len(plan.subtasks) == n


# --------------------------------------------------------------------------- round trip


def test_plan_to_json_round_trips_with_stable_key_order() -> None:
    plan = plan_from_data(
        plan_data(sub("a"), sub("b", "a", agent="ask"), session_id="s", budget={"max_tokens": 9})
    )
    text = plan_to_json(plan)
    assert text.endswith("}\n")
    assert list(json.loads(text)) == [
        "id",
        "goal",
        "session_id",
        "max_parallel",
        "budget",
        "subtasks",
    ]
    assert plan_from_data(parse_plan_text(text)) == plan
    assert plan_to_json(plan_from_data(parse_plan_text(text))) == text


def test_example_plan_round_trips() -> None:
    plan = load_plan_file(EXAMPLES / "weather_app.json")
    assert plan_from_data(parse_plan_text(plan_to_json(plan))) == plan


# --------------------------------------------------------------------------- files


def test_example_weather_app_shape() -> None:
    plan = load_plan_file(EXAMPLES / "weather_app.json")
    assert plan.id == "weather-app"
    assert plan.goal == "Build a weather app"
    assert plan.max_parallel == 4
    assert len(plan.subtasks) == 7
    assert {s.agent for s in plan.subtasks} <= {"coder", "architect", "ask"}


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path)
    assert info.value.problems == (f"{path}: no such file",)


def test_directory_is_not_a_plan(tmp_path: Path) -> None:
    with pytest.raises(PlanValidationError) as info:
        load_plan_file(tmp_path)
    assert info.value.problems == (f"{tmp_path}: is a directory, not a plan file",)


def test_oversized_file_is_rejected_without_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as f:
        f.truncate(MAX_PLAN_BYTES + 1)
    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path)
    assert info.value.problems == (
        f"{path}: plan is too large ({MAX_PLAN_BYTES + 1} bytes, limit {MAX_PLAN_BYTES})",
    )


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "locked.json"
    path.write_text("{}")

    def refuse(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)
    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path)
    assert info.value.problems == (f"{path}: cannot read the file: Permission denied",)


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    raw = b'{"goal": "caf\xe9"}'
    path.write_bytes(raw)
    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path)
    offset = raw.index(b"\xe9")
    assert info.value.problems == (f"{path}: not UTF-8 text (invalid byte at offset {offset})",)


def test_file_problems_are_prefixed_with_the_path(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_data(sub("a", "ghost"), sub("b", agent="nobody"))))
    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path)
    assert len(info.value.problems) == 2
    assert info.value.problems[0] == f"{path}: subtasks[0] (id 'a'): unknown dependency 'ghost'"
    assert info.value.problems[1].startswith(
        f"{path}: subtasks[1] (id 'b'): unknown agent 'nobody'"
    )


def test_yaml_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "id: yaml-plan\nmax_parallel: 2\nsubtasks:\n"
        "  - id: a\n    description: first\n"
        "  - id: b\n    description: second\n    agent: ask\n    depends_on: [a]\n"
    )
    plan = load_plan_file(path)
    assert plan.max_parallel == 2
    assert plan.subtasks[1] == Subtask(id="b", description="second", agent="ask", depends_on=("a",))


def test_read_plan_file_returns_raw_data_even_for_an_invalid_plan() -> None:
    data = read_plan_file(EXAMPLES / "invalid" / "cycle.json")
    assert data["id"] == "cyclic"
    assert len(data["subtasks"]) == 3


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cycle.json", ["cycle: schema -> migrations -> schema"]),
        ("malformed.json", ["invalid JSON at line 3, column 3: Expecting ',' delimiter"]),
        ("unknown_dependency.yaml", ["subtasks[0] (id 'settings'): unknown dependency 'theme'"]),
        ("empty.yaml", ["subtasks: the plan has no subtasks (at least one is required)"]),
    ],
)
def test_invalid_examples(name: str, expected: list[str]) -> None:
    path = EXAMPLES / "invalid" / name
    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path)
    assert list(info.value.problems) == [f"{path}: {line}" for line in expected]


def test_invalid_example_with_many_problems_reports_all() -> None:
    path = EXAMPLES / "invalid" / "many_problems.json"
    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path)
    text = str(info.value)
    assert len(info.value.problems) == 8
    for fragment in (
        "max_parallel",
        "'depends'",
        "'designer'",
        "duplicate id 'ui'",
        "'api'",
        "itself",
    ):
        assert fragment in text
