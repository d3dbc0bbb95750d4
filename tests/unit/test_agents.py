"""Agents as configuration: the built-ins, the catalog, and agents files with every rule."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from durable_plans._errors import AgentsFileError, UnknownAgentError
from durable_plans.domain.agents import (
    BUILTIN_AGENT_NAMES,
    BUILTIN_AGENT_SPECS,
    BUILTIN_CATALOG,
    DELEGATE_TOOL,
    KNOWN_TOOL_NAMES,
    ORCHESTRATION_TOOL_NAMES,
    READ_ONLY_TOOL_NAMES,
    REVISE_PLAN_TOOL,
    SPAWN_TOOL,
    WORKSPACE_TOOL_NAMES,
    AgentCatalog,
    AgentSpec,
    agent_spec,
)
from durable_plans.domain.agents_catalog import BUILTIN_AGENTS
from durable_plans.domain.agents_loader import (
    MAX_AGENTS_FILE_BYTES,
    load_agents_file,
    load_catalog,
    parse_agents_data,
)
from durable_plans.settings import Settings

REPO = Path(__file__).resolve().parents[2]
KNOWN_TOOLS_TEXT = ", ".join(KNOWN_TOOL_NAMES)
SRC = "agents.toml"


def problems_of(data: Any) -> tuple[str, ...]:
    with pytest.raises(AgentsFileError) as info:
        parse_agents_data(data, source=SRC)
    return info.value.problems


def one_problem(data: Any) -> str:
    problems = problems_of(data)
    assert len(problems) == 1, problems
    return problems[0]


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- built-ins


def test_the_five_builtins_in_a_stable_order() -> None:
    assert BUILTIN_CATALOG.names() == ("orchestrator", "architect", "coder", "debug", "ask")
    assert BUILTIN_CATALOG.names() == BUILTIN_AGENT_NAMES
    assert set(BUILTIN_AGENT_SPECS) == set(BUILTIN_AGENT_NAMES)
    # Plan validation's names derive from the specs, so they cannot drift apart.
    assert frozenset(BUILTIN_AGENT_NAMES) == BUILTIN_AGENTS


def test_tool_name_constants() -> None:
    assert (DELEGATE_TOOL, SPAWN_TOOL) == ("delegate_to_sub_agent", "spawn_subagent")
    assert ORCHESTRATION_TOOL_NAMES == (DELEGATE_TOOL, SPAWN_TOOL)
    assert (
        *WORKSPACE_TOOL_NAMES,
        *ORCHESTRATION_TOOL_NAMES,
        "run_command",
        REVISE_PLAN_TOOL,
    ) == KNOWN_TOOL_NAMES
    assert set(READ_ONLY_TOOL_NAMES) < set(WORKSPACE_TOOL_NAMES)
    assert "write_file" not in READ_ONLY_TOOL_NAMES


def test_orchestrator_reads_delegates_and_spawns_but_does_not_write() -> None:
    tools = BUILTIN_CATALOG.get("orchestrator").tools
    assert DELEGATE_TOOL in tools and SPAWN_TOOL in tools
    assert set(READ_ONLY_TOOL_NAMES) <= set(tools)
    assert "write_file" not in tools


def test_builtin_tools_by_role() -> None:
    assert BUILTIN_CATALOG.get("ask").tools == ()
    assert BUILTIN_CATALOG.get("architect").tools == READ_ONLY_TOOL_NAMES
    for writer in ("coder", "debug"):
        tools = BUILTIN_CATALOG.get(writer).tools
        assert tools == WORKSPACE_TOOL_NAMES
        assert not set(tools) & set(ORCHESTRATION_TOOL_NAMES)


@pytest.mark.parametrize("name", BUILTIN_AGENT_NAMES)
def test_builtins_are_valid_configuration(name: str) -> None:
    spec = BUILTIN_CATALOG.get(name)
    assert set(spec.tools) <= set(KNOWN_TOOL_NAMES)
    assert len(set(spec.tools)) == len(spec.tools)
    assert spec.model is None  # the worker's DPLAN_MODEL decides
    assert 1 <= spec.max_turns <= 200


@pytest.mark.parametrize("name", BUILTIN_AGENT_NAMES)
def test_builtin_prompts_say_how_the_loop_ends(name: str) -> None:
    spec = BUILTIN_CATALOG.get(name)
    prompt = spec.system_prompt
    assert len(prompt) > 300, "a paragraph about the role, its tools and its answer"
    assert "final answer" in prompt
    if spec.tools:
        assert "no tool calls" in prompt, "the model must know what ends the loop"
        assert "error as the tool result" in prompt, "tool errors are to be read, not fatal"
        for tool in spec.tools:
            assert tool in prompt, f"{name}'s prompt should say how to use {tool}"
    else:
        assert "no tools" in prompt


# --------------------------------------------------------------------------- catalog


def test_catalog_get_and_unknown_name_lists_known() -> None:
    assert BUILTIN_CATALOG.get("coder") is BUILTIN_AGENT_SPECS["coder"]
    with pytest.raises(KeyError) as info:
        BUILTIN_CATALOG.get("coderr")
    assert isinstance(info.value, UnknownAgentError)
    assert str(info.value) == (
        "unknown agent 'coderr'; known agents: architect, ask, coder, debug, orchestrator"
    )
    assert "coder" in BUILTIN_CATALOG and "coderr" not in BUILTIN_CATALOG
    assert len(BUILTIN_CATALOG) == 5


def test_unknown_agent_error_survives_pickling() -> None:
    err = UnknownAgentError("x", ["b", "a"])
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.known) == (UnknownAgentError, str(err), ("a", "b"))


def test_subset_keeps_the_order_asked_and_ignores_repeats() -> None:
    sub = BUILTIN_CATALOG.subset(["ask", "coder", "ask"])
    assert sub.names() == ("ask", "coder")
    assert sub.get("coder") == BUILTIN_CATALOG.get("coder")
    assert BUILTIN_CATALOG.subset([]).names() == ()
    with pytest.raises(KeyError, match="unknown agent 'nope'"):
        BUILTIN_CATALOG.subset(["coder", "nope"])


def test_catalog_rejects_repeated_names_and_is_frozen() -> None:
    coder = BUILTIN_CATALOG.get("coder")
    with pytest.raises(ValidationError, match="repeated: coder"):
        AgentCatalog(agents=(coder, BUILTIN_CATALOG.get("ask"), coder))
    with pytest.raises(ValidationError):
        BUILTIN_CATALOG.agents = ()  # type: ignore[misc]


def test_catalog_round_trips_as_a_payload() -> None:
    again = AgentCatalog.model_validate_json(BUILTIN_CATALOG.model_dump_json())
    assert again == BUILTIN_CATALOG
    assert again.get("orchestrator").tools == BUILTIN_CATALOG.get("orchestrator").tools
    assert pickle.loads(pickle.dumps(BUILTIN_CATALOG)) == BUILTIN_CATALOG


def test_merged_replaces_in_place_and_appends_new() -> None:
    coder = BUILTIN_CATALOG.get("coder").model_copy(update={"max_turns": 3})
    extra = AgentSpec(name="extra", system_prompt="x")
    merged = BUILTIN_CATALOG.merged([extra, coder])
    assert merged.names() == (*BUILTIN_AGENT_NAMES, "extra")
    assert merged.get("coder").max_turns == 3
    assert BUILTIN_CATALOG.get("coder").max_turns == 16  # the original is untouched


def test_agent_spec_accepts_none_a_dict_or_a_catalog() -> None:
    custom = AgentSpec(name="solo", system_prompt="x")
    assert agent_spec("debug") is BUILTIN_CATALOG.get("debug")
    assert agent_spec("solo", {"solo": custom}) is custom
    assert agent_spec("solo", AgentCatalog(agents=(custom,))) is custom
    with pytest.raises(KeyError, match="unknown agent 'coder'; known agents: solo"):
        agent_spec("coder", {"solo": custom})
    with pytest.raises(KeyError, match="known agents: solo"):
        agent_spec("coder", AgentCatalog(agents=(custom,)))


# --------------------------------------------------------------------------- loading

REVIEWER = {
    "system_prompt": "You review changes.",
    "tools": ["list_dir", "read_file", "search_files"],
    "max_turns": 8,
    "model": "openrouter/vendor/model",
}

TOML_TEXT = """
[agents.reviewer]
system_prompt = "You review changes."
tools = ["list_dir", "read_file", "search_files"]
max_turns = 8
model = "openrouter/vendor/model"

[agents.coder]
max_turns = 24
"""


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("agents.toml", TOML_TEXT),
        (
            "agents.yaml",
            yaml.safe_dump({"agents": {"reviewer": REVIEWER, "coder": {"max_turns": 24}}}),
        ),
        (
            "agents.yml",
            yaml.safe_dump({"agents": {"reviewer": REVIEWER, "coder": {"max_turns": 24}}}),
        ),
        ("agents.JSON", json.dumps({"agents": {"reviewer": REVIEWER, "coder": {"max_turns": 24}}})),
    ],
)
def test_every_format_gives_the_same_catalog(tmp_path: Path, name: str, text: str) -> None:
    catalog = load_agents_file(write(tmp_path, name, text))
    assert catalog.names() == (*BUILTIN_AGENT_NAMES, "reviewer")
    assert catalog.get("reviewer") == AgentSpec(name="reviewer", **REVIEWER)
    assert catalog.get("coder").max_turns == 24


def test_an_override_inherits_every_field_it_does_not_give() -> None:
    catalog = parse_agents_data({"agents": {"coder": {"max_turns": 24}}}, source=SRC)
    builtin = BUILTIN_CATALOG.get("coder")
    assert catalog.get("coder") == builtin.model_copy(update={"max_turns": 24})
    assert catalog.names() == BUILTIN_AGENT_NAMES  # no new agent, order kept
    assert catalog.get("ask") == BUILTIN_CATALOG.get("ask")


def test_an_override_may_take_every_tool_away_or_set_a_model() -> None:
    data = {"agents": {"orchestrator": {"tools": [], "model": "gpt-x"}}}
    spec = parse_agents_data(data, source=SRC).get("orchestrator")
    assert (spec.tools, spec.model) == ((), "gpt-x")
    assert spec.system_prompt == BUILTIN_CATALOG.get("orchestrator").system_prompt


def test_a_new_agent_gets_defaults_for_what_it_leaves_out() -> None:
    catalog = parse_agents_data(
        {"agents": {"scribe": {"system_prompt": "Write.", "model": None}}}, source=SRC
    )
    assert catalog.get("scribe") == AgentSpec(
        name="scribe", system_prompt="Write.", tools=(), max_turns=12, model=None
    )


def test_an_empty_agents_table_means_the_builtins() -> None:
    assert parse_agents_data({"agents": {}}, source=SRC) == BUILTIN_CATALOG


def test_orchestration_tools_may_be_given_to_any_agent() -> None:
    data = {"agents": {"lead": {"system_prompt": "Lead.", "tools": [SPAWN_TOOL, DELEGATE_TOOL]}}}
    assert parse_agents_data(data, source=SRC).get("lead").tools == (SPAWN_TOOL, DELEGATE_TOOL)


def test_load_catalog_uses_the_builtins_without_a_file(tmp_path: Path) -> None:
    assert load_catalog(None) is BUILTIN_CATALOG
    path = write(tmp_path, "a.toml", "[agents.ask]\nmax_turns = 2\n")
    assert load_catalog(path).get("ask").max_turns == 2


def test_the_example_file_loads() -> None:
    catalog = load_agents_file(REPO / "examples" / "agents.toml")
    reviewer = catalog.get("reviewer")
    assert reviewer.tools == READ_ONLY_TOOL_NAMES
    assert "final answer" in reviewer.system_prompt
    assert not reviewer.system_prompt.endswith("\n")
    coder = catalog.get("coder")
    assert coder.max_turns == 24
    assert coder.system_prompt == BUILTIN_CATALOG.get("coder").system_prompt
    assert coder.tools == BUILTIN_CATALOG.get("coder").tools


def test_settings_read_dplan_agents() -> None:
    assert Settings.from_env({}).agents_file is None
    assert Settings.from_env({"DPLAN_AGENTS": "  "}).agents_file is None
    got = Settings.from_env({"DPLAN_AGENTS": "conf/agents.toml"}).agents_file
    assert got == Path("conf/agents.toml")


# --------------------------------------------------------------------------- file problems


def load_problems(path: Path) -> tuple[str, ...]:
    with pytest.raises(AgentsFileError) as info:
        load_agents_file(path)
    return info.value.problems


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    assert load_problems(path) == (f"{path}: no such file",)


def test_directory(tmp_path: Path) -> None:
    path = tmp_path / "conf.toml"
    path.mkdir()
    assert load_problems(path) == (f"{path}: is a directory, not an agents file",)


@pytest.mark.parametrize(("name", "got"), [("agents.ini", "'.ini'"), ("agents", "no suffix")])
def test_unsupported_suffix(tmp_path: Path, name: str, got: str) -> None:
    path = write(tmp_path, name, "[agents]\n")
    assert load_problems(path) == (
        f"{path}: unsupported agents file type ({got}); use .toml, .yaml, .yml or .json",
    )


def test_too_large_and_not_utf8(tmp_path: Path) -> None:
    big = write(tmp_path, "big.toml", "#" * (MAX_AGENTS_FILE_BYTES + 1))
    (line,) = load_problems(big)
    assert line.startswith(f"{big}: agents file is too large (")
    bad = write(tmp_path, "bad.toml", b"[agents.x]\nsystem_prompt = '\xff'\n")
    assert load_problems(bad) == (f"{bad}: not UTF-8 text (invalid byte at offset 28)",)


@pytest.mark.parametrize("name", ["e.toml", "e.yaml", "e.json"])
def test_empty_file(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, name, "  \n")
    assert load_problems(path) == (
        f"{path}: the file is empty (expected an 'agents' table keyed by agent name)",
    )


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "a.toml",
            "[agents.coder]\nmax_turns = 3\n[agents.x\n",
            "invalid TOML at line 3, column 10: Expected ']' at the end of a table declaration",
        ),
        ("a.toml", "[agents.coder]\nmax_turns =", "invalid TOML at end of document: Invalid value"),
        (
            "a.json",
            '{"agents": {\n  "coder": {"max_turns": 3,}\n}}',
            "invalid JSON at line 2, column 28: Expecting property name enclosed in double quotes",
        ),
        (
            "a.yaml",
            "agents:\n  coder:\n    max_turns: [3\n",
            "invalid YAML at line 4, column 1: expected ',' or ']', but got '<stream end>'",
        ),
        (
            "a.json",
            '{"agents": {"coder": {"max_turns": 3}, "coder": {}}}',
            "duplicate key 'coder' in one JSON object (only the last would count)",
        ),
        (
            "a.yaml",
            "agents:\n  coder:\n    max_turns: 3\n  coder:\n    max_turns: 4\n",
            "duplicate key 'coder' at line 4 (only the last would count)",
        ),
    ],
)
def test_parse_errors_say_where(tmp_path: Path, name: str, text: str, expected: str) -> None:
    path = write(tmp_path, name, text)
    assert load_problems(path) == (f"{path}: {expected}",)


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    text = (
        "base: &base {tools: [read_file], max_turns: 5}\n"
        "agents:\n"
        "  a1: {<<: *base, system_prompt: One, max_turns: 6}\n"
    )
    path = write(tmp_path, "m.yaml", text)
    # 'base' is an unknown top-level key, but the merge itself is not reported.
    (line,) = load_problems(path)
    assert (
        line
        == f"{path}: unknown key 'base' (the file holds only 'agents', 'approval', 'mcp_servers')"
    )


# --------------------------------------------------------------------------- data problems


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([1, 2], "must be a mapping with an 'agents' table, got a list"),
        (
            {},
            "missing the 'agents' table (e.g. [agents.reviewer] in TOML, "
            "agents: {reviewer: ...} in YAML)",
        ),
        ({"agents": ["coder"]}, "agents: must be a table keyed by agent name, got a list"),
        ({"agents": {}, "agent": 1}, "unknown key 'agent' (did you mean 'agents'?)"),
        (
            {"agents": {}, "zzz": 1},
            "unknown key 'zzz' (the file holds only 'agents', 'approval', 'mcp_servers')",
        ),
        (
            {"agents": {"coder": "fast"}},
            "agents.coder: must be a table of settings (system_prompt, tools, max_turns, "
            "model, fallback_models, approval, mcp, run_command, context_window, check, "
            "check_rounds), got a string ('fast')",
        ),
        (
            {"agents": {"coder": {"max_turn": 3}}},
            "agents.coder: unknown field 'max_turn' (did you mean 'max_turns'?)",
        ),
        (
            {"agents": {"coder": {"colour": "red"}}},
            "agents.coder: unknown field 'colour' "
            "(known fields: system_prompt, tools, max_turns, model, fallback_models, approval, "
            "mcp, run_command, context_window, check, check_rounds)",
        ),
        (
            {"agents": {"coder": {"name": "coder"}}},
            "agents.coder: unknown field 'name' "
            "(an agent's name is its key, e.g. [agents.reviewer])",
        ),
        (
            {"agents": {"coder": {"system_prompt": 7}}},
            "agents.coder: system_prompt: must be a string, got 7",
        ),
        (
            {"agents": {"coder": {"system_prompt": " \n "}}},
            "agents.coder: system_prompt: must not be empty",
        ),
        (
            {"agents": {"coder": {"system_prompt": ""}}},
            "agents.coder: system_prompt: must not be empty",
        ),
        (
            {"agents": {"coder": {"tools": "read_file"}}},
            "agents.coder: tools: must be a list of tool names, got a string ('read_file')",
        ),
        (
            {"agents": {"coder": {"tools": ["read_file", None]}}},
            "agents.coder: tools[1]: must be a string, got null",
        ),
        (
            {"agents": {"coder": {"tools": ["reed_file"]}}},
            "agents.coder: tools: unknown tool 'reed_file' "
            f"(did you mean 'read_file'? known tools: {KNOWN_TOOLS_TEXT})",
        ),
        (
            {"agents": {"coder": {"tools": ["shell"]}}},
            f"agents.coder: tools: unknown tool 'shell' (known tools: {KNOWN_TOOLS_TEXT})",
        ),
        (
            {"agents": {"coder": {"tools": ["read_file", "read_file"]}}},
            "agents.coder: tools: lists 'read_file' more than once",
        ),
        (
            {"agents": {"coder": {"max_turns": 0}}},
            "agents.coder: max_turns: must be between 1 and 200, got 0",
        ),
        (
            {"agents": {"coder": {"max_turns": 201}}},
            "agents.coder: max_turns: must be between 1 and 200, got 201",
        ),
        (
            {"agents": {"coder": {"max_turns": "12"}}},
            "agents.coder: max_turns: must be an integer, got a string ('12')",
        ),
        (
            {"agents": {"coder": {"max_turns": True}}},
            "agents.coder: max_turns: must be an integer, got true",
        ),
        (
            {"agents": {"coder": {"max_turns": 12.5}}},
            "agents.coder: max_turns: must be an integer, got 12.5",
        ),
        (
            {"agents": {"coder": {"model": ""}}},
            "agents.coder: model: must not be empty (leave it out to use the worker's DPLAN_MODEL)",
        ),
        (
            {"agents": {"coder": {"model": 4}}},
            "agents.coder: model: must be a string (a litellm model name), got 4",
        ),
        (
            {"agents": {"reviewer": {"tools": ["read_file"]}}},
            "agents.reviewer: missing 'system_prompt' (required for a new agent; only "
            "orchestrator, architect, coder, debug, ask inherit one)",
        ),
        (
            {"agents": {"my agent": {"system_prompt": "x"}}},
            "agents.\"my agent\": invalid agent name 'my agent' "
            "(use 1-64 of A-Z a-z 0-9 _ . - and start with a letter or digit)",
        ),
        (
            {"agents": {"-lead": {"system_prompt": "x"}}},
            "agents.-lead: invalid agent name '-lead' "
            "(use 1-64 of A-Z a-z 0-9 _ . - and start with a letter or digit)",
        ),
        (
            {"agents": {"a" * 65: {"system_prompt": "x"}}},
            f"agents.{'a' * 65}: invalid agent name '{'a' * 60}'… "
            "(use 1-64 of A-Z a-z 0-9 _ . - and start with a letter or digit)",
        ),
        ({"agents": {3: {"system_prompt": "x"}}}, "agents: agent name 3 must be a string"),
    ],
)
def test_each_problem_has_its_line(data: Any, expected: str) -> None:
    assert one_problem(data) == f"{SRC}: {expected}"


@pytest.mark.parametrize("name", ["a", "A1", "r.v2", "code_review-2", "x" * 64])
def test_valid_agent_names(name: str) -> None:
    assert name in parse_agents_data({"agents": {name: {"system_prompt": "x"}}}, source=SRC)


@pytest.mark.parametrize("turns", [1, 200])
def test_max_turns_bounds_are_inclusive(turns: int) -> None:
    data = {"agents": {"ask": {"max_turns": turns}}}
    assert parse_agents_data(data, source=SRC).get("ask").max_turns == turns


def test_all_problems_at_once_in_file_order(tmp_path: Path) -> None:
    text = """
typo = 1

[agents.reviewer]
tools = ["read_file", "reed_file"]
max_turns = 0

[agents.coder]
model = ""
prompt = "x"

[agents.ok]
system_prompt = "Fine."
"""
    path = write(tmp_path, "many.toml", text)
    assert load_problems(path) == (
        f"{path}: unknown key 'typo' (the file holds only 'agents', 'approval', 'mcp_servers')",
        f"{path}: agents.reviewer: tools: unknown tool 'reed_file' "
        f"(did you mean 'read_file'? known tools: {KNOWN_TOOLS_TEXT})",
        f"{path}: agents.reviewer: max_turns: must be between 1 and 200, got 0",
        f"{path}: agents.reviewer: missing 'system_prompt' (required for a new agent; only "
        "orchestrator, architect, coder, debug, ask inherit one)",
        f"{path}: agents.coder: model: must not be empty "
        "(leave it out to use the worker's DPLAN_MODEL)",
        f"{path}: agents.coder: unknown field 'prompt' (did you mean 'system_prompt'?)",
    )


def test_problem_list_is_capped() -> None:
    agents = {f"a{i}": {"max_turns": 0, "system_prompt": "x"} for i in range(150)}
    problems = problems_of({"agents": agents})
    assert len(problems) == 101
    assert problems[-1] == f"{SRC}: ... and 50 more problems not listed"


def test_the_error_is_a_value_error_that_pickles() -> None:
    err = AgentsFileError(["a: one", "a: two"])
    assert isinstance(err, ValueError)
    assert str(err) == "a: one\na: two"
    back = pickle.loads(pickle.dumps(err))
    assert back.problems == err.problems
    with pytest.raises(ValueError, match="at least one problem"):
        AgentsFileError([])


@pytest.mark.parametrize("name", ["\x85", "\u2028", "a\nb", "\ud83d"])
def test_an_agent_or_server_name_that_breaks_lines_is_written_escaped(name: str) -> None:
    """U+0085 and U+2028 are kept raw by json.dumps yet split a line: each problem must
    still be exactly one printable line (found by the fuzz test)."""
    cases: list[dict[str, Any]] = [
        {"agents": {name: {}}},
        {"agents": {}, "mcp_servers": {name: {}}},
    ]
    for data in cases:
        with pytest.raises(AgentsFileError) as err:
            parse_agents_data(data, source="a.toml")
        for line in err.value.problems:
            assert len(line.splitlines()) == 1 and line.isprintable(), repr(line)
