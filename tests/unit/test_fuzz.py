"""Fuzzing the input boundary and the history transforms with hypothesis.

The loaders must turn *anything* (random text, half-broken JSON/YAML/TOML, arbitrary
decoded values) into either a valid result or their own error, whose every line is a
non-empty single line that can be printed and serialised; and what they accept must be
usable downstream (a Plan or agent catalog that Temporal's data converter can carry).
The history transforms must accept any message sequence, however malformed, and keep
their promises. tests/unit/test_history_properties.py covers well-formed-ish histories;
here every role may carry every field.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from datetime import date
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_plans._errors import AgentsFileError, PlanValidationError
from durable_plans.domain.agents import KNOWN_TOOL_NAMES, AgentCatalog
from durable_plans.domain.agents_catalog import BUILTIN_AGENTS
from durable_plans.domain.agents_loader import (
    is_valid_agent_name,
    parse_agents_data,
    parse_agents_text,
)
from durable_plans.domain.history import (
    DependencyResult,
    isolate_for_subtask,
    switch_agent_cleanup,
)
from durable_plans.domain.models import FunctionCall, Message, Plan, ToolCall
from durable_plans.domain.plan_loader import parse_plan_text, plan_from_data, validate_plan
from durable_plans.domain.secrets import contains_secret, scrub_secrets, scrub_value
from durable_plans.domain.tool_ids import repair_tool_pairing, strict_violations
from durable_plans.domain.tools_config import CommandPolicy

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --------------------------------------------------------------------------- shared checks


def _assert_problem_lines(problems: Sequence[str]) -> None:
    assert len(problems) >= 1
    for line in problems:
        assert isinstance(line, str)
        assert line.strip(), problems
        assert len(line.splitlines()) == 1, line
        line.encode("utf-8")  # printable on a UTF-8 stream, storable in a Temporal failure


def _assert_carried_by_temporal(value: Plan | AgentCatalog) -> None:
    """What validation accepts must survive the workflow input's JSON round trip."""
    converter = pydantic_data_converter.payload_converter
    (payload,) = converter.to_payloads([value])
    (back,) = converter.from_payloads([payload], [type(value)])
    assert back == value


def _plan_outcome(data: Any) -> None:
    try:
        plan = plan_from_data(data, new_id=lambda: "generated")
    except PlanValidationError as exc:
        _assert_problem_lines(exc.problems)
        return
    assert validate_plan(plan) == []
    _assert_carried_by_temporal(plan)


def _agents_outcome(data: Any) -> None:
    try:
        catalog = parse_agents_data(data, source="agents.toml")
    except AgentsFileError as exc:
        _assert_problem_lines(exc.problems)
        assert all(line.startswith("agents.toml: ") for line in exc.problems)
        return
    assert all(is_valid_agent_name(name) for name in catalog.names())
    _assert_carried_by_temporal(catalog)


# --------------------------------------------------------------------------- value strategies

# st.text() never yields lone surrogates, but JSON's "\ud83d" escape and YAML's "\ud83d"
# put them into decoded strings: half the texts may hold some.
surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
any_text = st.text(max_size=24) | st.lists(st.characters() | surrogates, max_size=24).map("".join)
floats = st.floats(allow_nan=True, allow_infinity=True)
json_scalars = st.none() | st.booleans() | st.integers() | floats | any_text
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(any_text, kids, max_size=4),
    max_leaves=16,
)
# What YAML and TOML decode to besides JSON's types: dates, bytes, sets, non-string keys.
yaml_keys = any_text | st.integers() | st.booleans() | st.none() | st.dates()
yaml_scalars = json_scalars | st.dates() | st.binary(max_size=6)
yaml_values = st.recursive(
    yaml_scalars,
    lambda kids: (
        st.lists(kids, max_size=4)
        | st.dictionaries(yaml_keys, kids, max_size=4)
        | st.frozensets(st.integers(), max_size=3)
    ),
    max_leaves=16,
)

ids = st.sampled_from(["a", "b", "c", "api", "ui", "", "a/b", "a b", "-x", "x" * 129]) | any_text
valid_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,8}", fullmatch=True)
good_text = st.text(min_size=1, max_size=30).filter(lambda t: bool(t.strip()))
# Values that hit a rule: wrong types, blanks, bounds, separators, NaN, half an emoji.
# (Fresh containers from builds(): the strategies below edit what they draw.)
hostile = st.one_of(
    st.sampled_from([None, "", "  ", "a/b", "a b", 0, -1, 501, 10**30, True, "4", 2.5, "\ud83d"]),
    st.builds(list),
    st.builds(dict),
    st.just(float("nan")),
    ids,
    yaml_values,
)
plan_field_names = st.sampled_from(
    ["id", "goal", "session_id", "max_parallel", "budget", "subtasks", "tasks", "name"]
)
subtask_field_names = st.sampled_from(
    ["id", "description", "agent", "depends_on", "depends", "dependsOn", "agnet", "desc"]
)
agent_names = st.sampled_from([*sorted(BUILTIN_AGENTS), "codr", "tester", ""])


@st.composite
def valid_plans(draw: st.DrawFn) -> dict[str, Any]:
    """Plan data every rule accepts: unique valid ids, dependencies on earlier subtasks."""
    subtask_ids = draw(st.lists(valid_ids, min_size=1, max_size=5, unique=True))
    subtasks: list[dict[str, Any]] = []
    for i, sid in enumerate(subtask_ids):
        sub: dict[str, Any] = {"id": sid, "description": draw(good_text)}
        if draw(st.booleans()):
            sub["agent"] = draw(st.sampled_from(sorted(BUILTIN_AGENTS)))
        if i and draw(st.booleans()):
            earlier = st.sampled_from(subtask_ids[:i])
            sub["depends_on"] = draw(st.lists(earlier, unique=True, max_size=3))
        subtasks.append(sub)
    optional = {
        "id": valid_ids | st.none(),
        "goal": good_text | st.just(""),
        "session_id": good_text | st.none(),
        "max_parallel": st.integers(1, 500),
        "budget": st.none()
        | st.fixed_dictionaries(
            {},
            optional={
                "max_tokens": st.integers(0, 10**6) | st.none(),
                "max_cost_usd": st.floats(0, 100) | st.none(),
            },
        ),
    }
    plan = draw(st.fixed_dictionaries({}, optional=optional))
    return {**plan, "subtasks": subtasks}


@st.composite
def plans(draw: st.DrawFn) -> dict[Any, Any]:
    """A valid plan with 0-3 mistakes: a field set to a hostile value, dropped, or added."""
    plan: dict[Any, Any] = draw(valid_plans())
    for _ in range(draw(st.integers(0, 3))):
        subs = plan.get("subtasks")
        entries = [x for x in subs if isinstance(x, dict)] if isinstance(subs, list) else []
        in_subtask = bool(entries) and draw(st.booleans())
        target = draw(st.sampled_from(entries)) if in_subtask else plan
        key = draw(subtask_field_names if in_subtask else plan_field_names)
        action = draw(st.sampled_from(["set", "set", "drop", "add", "append"]))
        if action == "set":
            target[key] = draw(hostile)
        elif action == "drop":
            target.pop(key, None)
        elif action == "add":
            target[draw(yaml_keys)] = draw(yaml_values)
        elif isinstance(subs, list):  # another subtask: a duplicate id, often closing a cycle
            extra: Any = dict(draw(st.sampled_from(entries))) if entries else draw(yaml_values)
            subs.append(extra)
            if draw(st.booleans()) and entries:
                entries[0]["depends_on"] = [str(extra.get("id", ""))]
    return plan


agent_keys = st.sampled_from(["system_prompt", "tools", "max_turns", "model", "name", "tool"])


@st.composite
def valid_agents_data(draw: st.DrawFn) -> dict[str, Any]:
    """Agents-file data every rule accepts: overrides of built-ins and complete new agents."""
    names = draw(
        st.lists(st.sampled_from(sorted(BUILTIN_AGENTS)) | valid_ids, unique=True, max_size=4)
    )
    agents: dict[str, Any] = {}
    for name in names:
        optional = {
            "tools": st.lists(st.sampled_from(KNOWN_TOOL_NAMES), unique=True, max_size=4),
            "max_turns": st.integers(1, 200),
            "model": good_text | st.none(),
        }
        body = draw(st.fixed_dictionaries({}, optional=optional))
        tools: Any = body.get("tools", [])
        if "run_command" in tools:
            body["run_command"] = {"allow": ["python"], "approval_required": False}
        if name not in BUILTIN_AGENTS or draw(st.booleans()):
            body["system_prompt"] = draw(good_text)
        agents[name] = body
    return {"agents": agents}


@st.composite
def agents_data(draw: st.DrawFn) -> dict[Any, Any]:
    """Valid agents data with 0-3 mistakes, like ``plans``."""
    data: dict[Any, Any] = draw(valid_agents_data())
    for _ in range(draw(st.integers(0, 3))):
        agents = data.get("agents")
        bodies = (
            [b for b in agents.values() if isinstance(b, dict)] if isinstance(agents, dict) else []
        )
        where = draw(st.sampled_from(["top", "agents", "body"]))
        if where == "body" and bodies:
            body = draw(st.sampled_from(bodies))
            key = draw(agent_keys)
            if draw(st.booleans()):
                body[key] = draw(
                    hostile | st.lists(st.sampled_from([*KNOWN_TOOL_NAMES, "shell"]), max_size=3)
                )
            else:
                body.pop(key, None)
        elif where == "agents" and isinstance(agents, dict):
            name = draw(st.one_of(agent_names, st.just("my agent"), valid_ids, yaml_keys))
            agents[name] = draw(st.fixed_dictionaries({}) | yaml_values)
        else:
            data[draw(st.sampled_from(["agents", "agent", "x"]))] = draw(hostile)
    return data


# --------------------------------------------------------------------------- text strategies

# The characters that break documents: brackets, quotes, escapes, tabs, YAML indicators.
_SYNTAX = "{}[],:\"'\\\t\n #&*!|>-%@`?=.\ufeff"


@st.composite
def mutated(draw: st.DrawFn, documents: st.SearchStrategy[str]) -> str:
    """A document with a few edits: cut short, characters dropped or inserted."""
    text = draw(documents)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        edit = draw(st.sampled_from(["cut", "drop", "insert"]))
        if edit == "cut":
            text = text[:at]
        elif edit == "drop":
            text = text[:at] + text[at + draw(st.integers(1, 4)) :]
        else:
            text = text[:at] + draw(st.text(_SYNTAX, min_size=1, max_size=3) | any_text) + text[at:]
    return text


def _json_text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _yaml_text(value: Any) -> str:
    return yaml.safe_dump(_sets(value), allow_unicode=True, sort_keys=False)


def _sets(value: Any) -> Any:
    """PyYAML writes ``set`` (as !!set) but not ``frozenset``."""
    if isinstance(value, dict):
        return {k: _sets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sets(v) for v in value]
    return set(value) if isinstance(value, frozenset) else value


def _json_safe(value: Any) -> Any:
    """``value`` with what JSON cannot hold turned into text (dates, bytes, sets, keys)."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | frozenset):
        return [_json_safe(v) for v in value]
    if isinstance(value, date | bytes):
        return str(value)
    return value


plan_documents = st.one_of(
    plans().map(_json_safe).map(_json_text),
    plans().map(_yaml_text),
    json_values.map(_json_text),
)
plan_texts = st.one_of(any_text, st.text(_SYNTAX + "abc019", max_size=40), mutated(plan_documents))
plan_sources = st.sampled_from(["plan.json", "plan.yaml", "plan.yml", "plan", "PLAN.JSON"])


@st.composite
def toml_documents(draw: st.DrawFn) -> str:
    """TOML-looking agents files: tables and key = value lines with JSON-ish values."""
    lines: list[str] = []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.one_of(agent_names, st.just("reviewer"), st.just('"my agent"')))
        lines.append(draw(st.sampled_from([f"[agents.{name}]", "[[agents]]", f"[agent.{name}]"])))
        for _ in range(draw(st.integers(0, 3))):
            key = draw(agent_keys)
            value = draw(
                st.one_of(
                    st.integers(-3, 300).map(str),
                    any_text.map(lambda t: json.dumps(t, ensure_ascii=False)),
                    st.lists(st.sampled_from([*KNOWN_TOOL_NAMES, "shell"]), max_size=3).map(
                        json.dumps
                    ),
                    st.sampled_from(["true", "nan", "inf", "1979-05-27", '"""\n  \n"""']),
                )
            )
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


agents_documents = {
    "TOML": mutated(toml_documents()),
    "JSON": mutated(agents_data().map(_json_safe).map(_json_text)),
    "YAML": mutated(agents_data().map(_yaml_text)),
}

# --------------------------------------------------------------------------- (a) plans


@FUZZ
@given(plans())
def test_plan_from_data_on_plan_shaped_data(data: dict[Any, Any]) -> None:
    _plan_outcome(data)


@FUZZ
@given(yaml_values)
def test_plan_from_data_on_any_value(data: Any) -> None:
    _plan_outcome(data)


@FUZZ
@given(plan_texts, plan_sources)
def test_parse_plan_text_on_any_text(text: str, source: str) -> None:
    try:
        data = parse_plan_text(text, source=source)
    except PlanValidationError as exc:
        _assert_problem_lines(exc.problems)
        assert all(line.startswith(f"{source}: ") for line in exc.problems)
        return
    assert isinstance(data, dict)
    _plan_outcome(data)


@FUZZ
@given(valid_plans(), st.sampled_from(["goal", "session_id", "description"]), any_text)
def test_free_text_fields_take_any_text_that_can_travel(
    data: dict[str, Any], field: str, text: str
) -> None:
    """Free text is accepted exactly when the workflow input can carry it (not "\\ud83d")."""
    target = data["subtasks"][0] if field == "description" else data
    target[field] = text
    _plan_outcome(data)


@FUZZ
@given(valid_plans())
def test_valid_plan_data_is_accepted_as_written(data: dict[str, Any]) -> None:
    """The other side of the fuzzers: what every rule allows must not be rejected."""
    plan = plan_from_data(data, new_id=lambda: "generated")
    assert [s.id for s in plan.subtasks] == [s["id"] for s in data["subtasks"]]
    assert plan.id == (data.get("id") or "generated")
    _assert_carried_by_temporal(plan)


# --------------------------------------------------------------------------- (b) agents files


@FUZZ
@given(st.one_of(agents_data(), yaml_values))
def test_parse_agents_data_on_any_value(data: Any) -> None:
    _agents_outcome(data)


@FUZZ
@given(st.data(), st.sampled_from(sorted(agents_documents)))
def test_agents_text_on_any_text(data: st.DataObject, fmt: str) -> None:
    text = data.draw(st.one_of(any_text, agents_documents[fmt]), label="text")
    try:
        decoded = parse_agents_text(text, fmt=fmt, source="agents.toml")
    except AgentsFileError as exc:
        _assert_problem_lines(exc.problems)
        return
    _agents_outcome(decoded)


@FUZZ
@given(valid_agents_data(), st.sampled_from(["system_prompt", "model"]), any_text)
def test_agent_text_fields_take_any_text_that_can_travel(
    data: dict[str, Any], field: str, text: str
) -> None:
    data["agents"]["reviewer"] = {"system_prompt": "You review changes.", field: text}
    _agents_outcome(data)


@FUZZ
@given(valid_agents_data())
def test_valid_agents_data_is_accepted_as_written(data: dict[str, Any]) -> None:
    catalog = parse_agents_data(data, source="a")
    for name, body in data["agents"].items():
        spec = catalog.get(name)
        assert {k: getattr(spec, k) for k in body} == {
            k: CommandPolicy.model_validate(v)
            if k == "run_command"
            else tuple(v)
            if isinstance(v, list)
            else v
            for k, v in body.items()
        }
    _assert_carried_by_temporal(catalog)


# --------------------------------------------------------------------------- (c) histories

_SECRETS = (
    "sk-" + "a1B2" * 6,
    "sk-ant-" + "x" * 24,
    "Bearer " + "t0k3n" * 4,
    "OPENAI_API_KEY=sk-proj-" + "Z" * 22,
    "password: hunter2hunter2",
    "AKIA" + "ABCDEFGHIJKLMNOP",
)
secretish = st.lists(st.sampled_from(_SECRETS) | any_text, max_size=4).map("".join)
contents = st.none() | st.sampled_from(["", " ", "\n\t"]) | any_text | secretish
call_ids = st.one_of(
    st.sampled_from(["", "call_1", "call_abc123", "toolu_1"]),
    st.text(string.ascii_letters + string.digits + "_-", max_size=6),
    any_text,
)
message_ids = st.sampled_from([f"m{i}" for i in range(6)]) | any_text
tool_calls = st.builds(
    ToolCall,
    id=call_ids,
    function=st.builds(FunctionCall, name=any_text, arguments=any_text | secretish),
)
# Every role may carry every field: stores, retries and old data are not tidy.
messages = st.builds(
    Message,
    id=message_ids,
    role=st.sampled_from(["system", "user", "assistant", "assistant", "tool", "tool"]),
    content=contents,
    tool_calls=st.none() | st.lists(tool_calls, max_size=3).map(tuple),
    tool_call_id=st.none() | call_ids,
    name=st.none() | any_text,
)
histories = st.lists(messages, max_size=16)
dependencies = st.lists(
    st.builds(
        DependencyResult, subtask_id=any_text, description=any_text, result=any_text | secretish
    ),
    max_size=3,
)


def _wire(history: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.to_openai() for m in history]


def _is_subsequence(part: Sequence[str], whole: Sequence[str]) -> bool:
    rest = iter(whole)
    return all(any(x == y for y in rest) for x in part)


@FUZZ
@given(histories, dependencies)
def test_isolation_leaves_no_tool_traffic(
    history: list[Message], deps: list[DependencyResult]
) -> None:
    out = isolate_for_subtask(history, deps, context_id="ctx", max_context_chars=500)
    assert not any(m.is_tool_traffic for m in out)
    assert strict_violations(_wire(out)) == []
    kept = out[:-1] if deps else out
    assert _is_subsequence([m.id for m in kept], [m.id for m in history])
    assert [m for m in kept if m.role in ("system", "user")] == [
        m for m in history if m.role in ("system", "user")
    ]
    if deps:
        assert (out[-1].id, out[-1].role) == ("ctx", "system")
        assert len(out[-1].content or "") <= 500


@FUZZ
@given(histories, st.none() | any_text)
def test_agent_switch_leaves_no_tool_traffic(history: list[Message], reason: str | None) -> None:
    out, report = switch_agent_cleanup(
        history, from_agent="coder", to_agent="debug", reason=reason, note_id="note"
    )
    assert not any(m.is_tool_traffic for m in out)
    assert strict_violations(_wire(out)) == []
    assert (out[-1].id, out[-1].role) == ("note", "system")
    assert report.final_message_count == len(out)
    assert report.removed_count == len(history) - (len(out) - 1)
    assert (out[-1].content or "").split("\n")[0] == "Agent switched: coder → debug"
    texts = [
        m.content for m in history if m.role == "assistant" and m.content and m.content.strip()
    ]
    assert report.preserved_result == (texts[-1] if texts else None)


@FUZZ
@given(histories)
def test_repair_passes_a_strict_provider_and_is_idempotent(history: list[Message]) -> None:
    out = repair_tool_pairing(history)
    assert strict_violations(_wire(out)) == []
    assert repair_tool_pairing(out) == out
    non_tool = [(m.id, m.role, m.content) for m in history if m.role != "tool"]
    assert [(m.id, m.role, m.content) for m in out if m.role != "tool"] == non_tool


@FUZZ
@given(histories)
def test_scrubbing_messages_is_idempotent_and_keeps_them_valid(history: list[Message]) -> None:
    for message in history:
        for text in (message.content or "", message.name or ""):
            once = scrub_secrets(text)
            assert scrub_secrets(once) == once
            assert not contains_secret(once)
    dumps = [m.model_dump() for m in history]
    scrubbed = scrub_value(dumps)
    assert scrub_value(scrubbed) == scrubbed
    rebuilt = [Message.model_validate(d) for d in scrubbed]
    assert [(m.id, m.role) for m in rebuilt] == [(scrub_secrets(m.id), m.role) for m in history]
    assert [m.content for m in rebuilt] == [
        None if m.content is None else scrub_secrets(m.content) for m in history
    ]
    assert strict_violations(_wire(repair_tool_pairing(rebuilt))) == []
