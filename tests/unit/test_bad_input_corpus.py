"""A corpus of realistic bad plan and agents files, each with the exact line it must produce.

Every file under ``tests/corpus/`` is a mistake a person or an LLM makes (truncated output,
a YAML tab, a typo'd field, a cycle, a Windows editor's encoding...). For each one the
expectations below give, in order, a fragment of every problem line the loaders must
report, so the list is complete (no noise, nothing double-reported) and specific. The
checks go through the ways the files are really used: ``dplan validate`` (in process and as
the installed console script), the loaders, and ``dplan run`` up to the point where it
would connect to Temporal, which a bad file must never reach.

tests/unit/test_plan_loader.py and test_agents.py pin each rule on in-memory data; this
file is about whole files as they arrive.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import durable_plans.cli.run_command as run_command
from durable_plans._errors import AgentsFileError, PlanValidationError
from durable_plans.cli._common import Exit
from durable_plans.cli.main import main
from durable_plans.domain.agents_loader import load_agents_file
from durable_plans.domain.plan_loader import MAX_PLAN_BYTES, load_plan_file
from durable_plans.settings import Settings

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "corpus"
PLANS_DIR = CORPUS / "plans"
AGENTS_DIR = CORPUS / "agents"
DPLAN = Path(sys.executable).with_name("dplan")

ID_RULE = "(use 1-128 of A-Z a-z 0-9 _ . - and start with a letter or digit)"
KNOWN_PLAN_FIELDS = (
    "(known fields: id, goal, session_id, max_parallel, budget, subtasks, notify, "
    "on_failure, pause_timeout_s, workspace_base, check, check_rounds, replanner, max_replans, "
    "priority, tenant, approval)"
)
KNOWN_AGENTS = "known agents: architect, ask, coder, debug, orchestrator)"
KNOWN_TOOLS = (
    "known tools: list_dir, read_file, write_file, search_files, delegate_to_sub_agent, "
    "spawn_subagent, run_command, revise_plan)"
)

# File name -> one fragment per expected problem line, in report order. A fragment is the
# line after its "<path>: " prefix, or a specific part of it when the rest is long.
PLAN_EXPECTATIONS: Mapping[str, tuple[str, ...]] = {
    # --- syntax: what a truncated or chatty LLM, or a hand edit, leaves behind
    "truncated_llm_output.json": ("invalid JSON at line 7, column 1: Expecting ',' delimiter",),
    "trailing_comma.json": (
        "invalid JSON at line 4, column 82: Expecting property name enclosed in double quotes",
    ),
    "markdown_fence.json": ("invalid JSON at line 1, column 1: Expecting value",),
    "python_literal.json": (
        "invalid JSON at line 1, column 2: Expecting property name enclosed in double quotes",
    ),
    "js_comments.json": (
        "invalid JSON at line 2, column 3: Expecting property name enclosed in double quotes",
    ),
    "yaml_tab_indent.yaml": (
        "invalid YAML at line 4, column 1: found character '\\t' that cannot start any token",
    ),
    "yaml_unquoted_colon.yaml": (
        "invalid YAML at line 4, column 31: mapping values are not allowed here",
    ),
    "yaml_two_documents.yaml": (
        "invalid YAML at line 5, column 1: "
        "expected a single document in the stream, but found another document",
    ),
    "yaml_bad_bool_tag.yaml": ("invalid YAML at line 6, column 13: 'maybe' is not a valid !!bool",),
    # Terminal colours pasted with a log line: YAML forbids the raw ESC character.
    "yaml_terminal_escape.yaml": (
        "invalid YAML at line 4, column 30: character U+001B is not allowed in YAML",
    ),
    "yaml_comments_only.yaml": ("the plan must be an object with 'subtasks', got null",),
    "deeply_nested.json": ("invalid JSON: nested too deeply",),
    "deeply_nested.yaml": ("invalid YAML: nested too deeply",),
    # --- encoding
    "utf16_from_notepad.json": ("not UTF-8 text (invalid byte at offset 0)",),
    "latin1_description.yaml": ("not UTF-8 text (invalid byte at offset 67)",),
    # The BOM is skipped, and the position of the real mistake is still right.
    "bom_then_trailing_comma.json": (
        "invalid JSON at line 4, column 1: Expecting property name enclosed in double quotes",
    ),
    "lone_surrogate_escape.json": (
        "subtasks[0] (id 'ui'): description contains a lone surrogate "
        "('\\ud83d' at character 16), which is not valid Unicode text",
    ),
    # --- shape
    "top_level_list.json": ("the plan must be an object with 'subtasks', got a list",),
    "top_level_prose.yaml": (
        "the plan must be an object with 'subtasks', got a string ('Sure! Here is a plan",
    ),
    "llm_preamble_before_yaml.yaml": (
        f"unknown field 'Here is the plan you asked for' {KNOWN_PLAN_FIELDS}",
    ),
    "empty_subtasks.json": ("subtasks: the plan has no subtasks (at least one is required)",),
    "subtasks_keyed_by_id.yaml": ("subtasks: must be a list, got an object",),
    "tasks_instead_of_subtasks.json": (
        "unknown field 'tasks' (did you mean 'subtasks'?)",
        "missing required field 'subtasks' (a list of subtasks)",
    ),
    "unknown_top_level_field.json": (f"unknown field 'version' {KNOWN_PLAN_FIELDS}",),
    "null_subtask_entry.yaml": ("subtasks[1]: must be an object, got null",),
    # --- ids and the dependency graph
    "duplicate_ids.json": (
        "subtasks[2] (id 'api'): duplicate id 'api' (first used by subtasks[0])",
        "subtasks[2] (id 'api'): depends on itself (cycle: api -> api)",
    ),
    "unknown_dependency.yaml": ("subtasks[1] (id 'cache'): unknown dependency 'db'",),
    "self_dependency.json": (
        "subtasks[0] (id 'tests'): depends on itself (cycle: tests -> tests)",
    ),
    "cycle_two.json": ("cycle: a -> b -> a",),
    "cycle_three.yaml": ("cycle: api -> tests -> ui -> api",),
    "numeric_ids.json": (
        "subtasks[0]: id: must be a string, got 1",
        "subtasks[1]: id: must be a string, got 2",
        "subtasks[1]: depends_on[0]: must be a string, got 1",
    ),
    "id_with_slash.json": (f"subtasks[0] (id 'api/v2'): invalid id 'api/v2' {ID_RULE}",),
    "id_with_spaces.yaml": (f"subtasks[0] (id 'write tests'): invalid id 'write tests' {ID_RULE}",),
    "plan_id_with_slash.yaml": (f"id: invalid plan id 'team/weather-app' {ID_RULE}",),
    "depends_on_string.json": (
        "subtasks[1] (id 'ui'): depends_on: must be a list, got a string ('api')",
    ),
    "depends_on_null_entry.json": (
        "subtasks[1] (id 'ui'): depends_on[1]: must be a string, got null",
    ),
    # --- fields
    "unknown_agent.json": (f"subtasks[0] (id 'tests'): unknown agent 'tester' ({KNOWN_AGENTS}",),
    "agent_typo.yaml": (
        f"subtasks[0] (id 'api'): unknown agent 'codr' (did you mean 'coder'? {KNOWN_AGENTS}",
    ),
    "typo_depends.json": (
        "subtasks[1] (id 'ui'): unknown field 'depends' (did you mean 'depends_on'?)",
    ),
    "typo_dependsOn.json": (
        "subtasks[1] (id 'ui'): unknown field 'dependsOn' (did you mean 'depends_on'?)",
    ),
    "typo_agnet.yaml": (
        "subtasks[0] (id 'design'): unknown field 'agnet' (did you mean 'agent'?)",
    ),
    "description_missing.json": ("subtasks[0] (id 'api'): missing required field 'description'",),
    "description_empty.json": ("subtasks[0] (id 'api'): description is empty",),
    "description_whitespace.yaml": ("subtasks[0] (id 'api'): description is empty",),
    "description_as_list.yaml": (
        "subtasks[0] (id 'api'): description: must be a string, got a list",
    ),
    "yaml_date_id.yaml": ("id: must be a string, got a date",),
    "max_parallel_zero.json": ("max_parallel: must be between 1 and 500, got 0",),
    "max_parallel_string.json": ("max_parallel: must be an integer, got a string ('4')",),
    "max_parallel_true.yaml": ("max_parallel: must be an integer, got true",),
    "max_parallel_huge.json": ("max_parallel: must be between 1 and 500, got 100000",),
    "max_parallel_infinity.json": ("max_parallel: must be an integer, got inf",),
    "budget_negative.json": ("budget.max_tokens: must not be negative, got -1000",),
    "budget_string.yaml": ("budget: must be an object, got a string ('$5')",),
    "budget_nan.json": ("budget.max_cost_usd: must be a finite number, got nan",),
    "budget_typo.yaml": ("budget: unknown field 'max_cost' (did you mean 'max_cost_usd'?)",),
    "yaml_duplicate_key.yaml": (
        "duplicate key 'depends_on' at line 10 (only the last would count)",
    ),
    "duplicate_json_keys.json": (
        "duplicate key 'description' in one JSON object (only the last would count)",
    ),
    "session_id_blank.json": ("session_id: must not be blank (omit it to start a new session)",),
}

AGENT_EXPECTATIONS: Mapping[str, tuple[str, ...]] = {
    "bad_toml_unclosed_string.toml": ("invalid TOML at line 2, column 37: Illegal character",),
    "bad_toml_duplicate_table.toml": (
        "invalid TOML at line 4, column 14: Cannot declare ('agents', 'coder') twice",
    ),
    "json_trailing_comma.json": (
        "invalid JSON at line 3, column 31: Expecting property name enclosed in double quotes",
    ),
    "yaml_duplicate_agent.yaml": ("duplicate key 'coder' at line 4 (only the last would count)",),
    "yaml_bad_timestamp_tag.yaml": (
        "invalid YAML at line 4, column 12: 'latest' is not a valid !!timestamp",
    ),
    "yaml_terminal_escape.yaml": (
        "invalid YAML at line 3, column 46: character U+001B is not allowed in YAML",
    ),
    "latin1.toml": ("not UTF-8 text (invalid byte at offset 65)",),
    "lone_surrogate_prompt.json": (
        "agents.reviewer: system_prompt: contains a lone surrogate ('\\ud83d' at character 11), "
        "which is not valid Unicode text",
    ),
    "unknown_tool.toml": (f"agents.reviewer: tools: unknown tool 'run_shell' ({KNOWN_TOOLS}",),
    "tool_typo.yaml": (
        "agents.reviewer: tools: unknown tool 'reed_file' "
        f"(did you mean 'read_file'? {KNOWN_TOOLS}",
    ),
    "empty_system_prompt.toml": ("agents.reviewer: system_prompt: must not be empty",),
    "max_turns_zero.toml": ("agents.coder: max_turns: must be between 1 and 200, got 0",),
    "max_turns_thousand.yaml": ("agents.coder: max_turns: must be between 1 and 200, got 1000",),
    "max_turns_ten.json": ("agents.debug: max_turns: must be an integer, got a string ('ten')",),
    "max_turns_bool.toml": ("agents.coder: max_turns: must be an integer, got true",),
    "model_empty.yaml": (
        "agents.coder: model: must not be empty (leave it out to use the worker's DPLAN_MODEL)",
    ),
    "invalid_name.toml": (
        "agents.\"code reviewer\": invalid agent name 'code reviewer' "
        "(use 1-64 of A-Z a-z 0-9 _ . - and start with a letter or digit)",
    ),
    "unknown_field.toml": (
        "agents.coder: unknown field 'temperature' "
        "(known fields: system_prompt, tools, max_turns, model, fallback_models, approval, mcp, "
        "run_command, context_window, check, check_rounds)",
    ),
    "name_field.yaml": (
        "agents.reviewer: unknown field 'name' "
        "(an agent's name is its key, e.g. [agents.reviewer])",
    ),
    "agents_not_a_table.json": ("agents: must be a table keyed by agent name, got a list",),
    "array_of_tables.toml": ("agents: must be a table keyed by agent name, got a list",),
    "singular_agent_key.toml": (
        "unknown key 'agent' (did you mean 'agents'?)",
        "missing the 'agents' table",
    ),
    "new_agent_without_prompt.yaml": (
        "agents.reviewer: missing 'system_prompt' (required for a new agent; only "
        "orchestrator, architect, coder, debug, ask inherit one)",
    ),
}

# A few files, one per kind of failure, also go through the real console script.
CONSOLE_SCRIPT_SAMPLE = (
    "truncated_llm_output.json",
    "yaml_tab_indent.yaml",
    "utf16_from_notepad.json",
    "lone_surrogate_escape.json",
    "cycle_three.yaml",
    "yaml_bad_bool_tag.yaml",
)


def _relative(path: Path) -> str:
    """The path as a user in the repository root would type it (keeps lines readable)."""
    return path.relative_to(REPO).as_posix()


def _assert_problems(problems: tuple[str, ...], prefix: str, fragments: tuple[str, ...]) -> None:
    """One line per expected fragment, in order, each prefixed by the file's path."""
    assert len(problems) == len(fragments), "\n".join(problems)
    for line, fragment in zip(problems, fragments, strict=True):
        assert line.startswith(f"{prefix}: "), line
        assert fragment in line.removeprefix(f"{prefix}: "), (fragment, line)
        assert "\n" not in line and "\r" not in line
        line.encode("utf-8")  # printable anywhere: no lone surrogate leaks into a message


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


# --------------------------------------------------------------------------- the corpus itself


@pytest.mark.parametrize(
    ("folder", "expectations", "minimum"),
    [(PLANS_DIR, PLAN_EXPECTATIONS, 30), (AGENTS_DIR, AGENT_EXPECTATIONS, 12)],
    ids=["plans", "agents"],
)
def test_every_corpus_file_has_an_expectation_and_vice_versa(
    folder: Path, expectations: Mapping[str, tuple[str, ...]], minimum: int
) -> None:
    on_disk = {p.name for p in folder.iterdir() if p.is_file()}
    assert on_disk == set(expectations)
    assert len(on_disk) >= minimum
    assert all(fragments for fragments in expectations.values())


def test_the_corpus_really_holds_the_bytes_it_is_about() -> None:
    # Editors and git settings can "fix" these; the tests would then pass for nothing.
    assert (PLANS_DIR / "utf16_from_notepad.json").read_bytes().startswith(b"\xff\xfe")
    assert (PLANS_DIR / "bom_then_trailing_comma.json").read_bytes().startswith(b"\xef\xbb\xbf")
    assert b"\t" in (PLANS_DIR / "yaml_tab_indent.yaml").read_bytes()
    assert b"caf\xe9" in (PLANS_DIR / "latin1_description.yaml").read_bytes()
    assert b"\\ud83d" in (PLANS_DIR / "lone_surrogate_escape.json").read_bytes()
    assert b"\x1b[31m" in (AGENTS_DIR / "yaml_terminal_escape.yaml").read_bytes()


# --------------------------------------------------------------------------- plans


@pytest.mark.parametrize("name", sorted(PLAN_EXPECTATIONS))
def test_dplan_validate_rejects_the_plan_with_its_lines(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _relative(PLANS_DIR / name)
    assert main(["validate", path]) == Exit.INVALID
    out, err = capsys.readouterr()
    assert out == ""
    header, *problems = err.splitlines()
    assert header == f"invalid plan: {path}"
    _assert_problems(tuple(problems), path, PLAN_EXPECTATIONS[name])


@pytest.mark.parametrize("name", sorted(PLAN_EXPECTATIONS))
def test_the_loader_raises_only_plan_validation_error(name: str) -> None:
    path = _relative(PLANS_DIR / name)
    # pytest.raises lets any other exception through, failing the test.
    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path)
    _assert_problems(info.value.problems, path, PLAN_EXPECTATIONS[name])


@pytest.mark.parametrize("name", sorted(PLAN_EXPECTATIONS))
def test_dplan_validate_json_reports_the_same_problems(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _relative(PLANS_DIR / name)
    assert main(["validate", path, "--json"]) == Exit.INVALID
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert (report["valid"], err) == (False, "")
    _assert_problems(tuple(report["problems"]), path, PLAN_EXPECTATIONS[name])


def _refuse_to_start(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a bad input reached the point of connecting to Temporal")


@pytest.fixture
def no_temporal(monkeypatch: pytest.MonkeyPatch) -> None:
    """``dplan run`` as far as it goes before connecting: reaching ``_run`` fails the test."""
    monkeypatch.setattr(run_command, "_run", _refuse_to_start)
    monkeypatch.setattr(run_command, "ensure_logging", lambda **_: None)


@pytest.mark.usefixtures("no_temporal")
@pytest.mark.parametrize("name", sorted(PLAN_EXPECTATIONS))
async def test_dplan_run_stops_a_bad_plan_before_any_workflow_starts(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _relative(PLANS_DIR / name)
    code = await run_command.run_plan(
        path, embedded=False, json_output=False, no_wait=True, settings=Settings()
    )
    assert code == Exit.INVALID
    header, *problems = capsys.readouterr().err.splitlines()
    assert header == f"invalid plan: {path}"
    stripped = tuple(line.removeprefix("  ") for line in problems)
    _assert_problems(stripped, path, PLAN_EXPECTATIONS[name])


def _oversized_plan(tmp_path: Path) -> tuple[Path, int]:
    # Realistic shape (a model pasted a whole file into a description), generated rather
    # than committed; just past the plan file limit.
    filler = "x" * (MAX_PLAN_BYTES + 1024)
    text = json.dumps({"id": "huge", "subtasks": [{"id": "a", "description": filler}]})
    path = tmp_path / "huge.json"
    path.write_text(text, encoding="utf-8")
    return path, len(text)


def test_a_plan_past_the_file_limit_is_rejected_by_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, size = _oversized_plan(tmp_path)
    fragment = f"plan is too large ({size} bytes, limit {MAX_PLAN_BYTES})"
    assert main(["validate", str(path)]) == Exit.INVALID
    _, *problems = capsys.readouterr().err.splitlines()
    _assert_problems(tuple(problems), str(path), (fragment,))
    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path)
    _assert_problems(info.value.problems, str(path), (fragment,))


@pytest.mark.parametrize("name", CONSOLE_SCRIPT_SAMPLE)
def test_the_console_script_rejects_a_sample(name: str) -> None:
    assert name in PLAN_EXPECTATIONS
    path = _relative(PLANS_DIR / name)
    done = subprocess.run(
        [str(DPLAN), "validate", path], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (Exit.INVALID, "")
    header, *problems = done.stderr.splitlines()
    assert header == f"invalid plan: {path}"
    _assert_problems(tuple(problems), path, PLAN_EXPECTATIONS[name])


def test_the_console_script_rejects_a_plan_past_the_file_limit(tmp_path: Path) -> None:
    path, size = _oversized_plan(tmp_path)
    done = subprocess.run(
        [str(DPLAN), "validate", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == Exit.INVALID
    assert done.stderr.splitlines() == [
        f"invalid plan: {path}",
        f"{path}: plan is too large ({size} bytes, limit {MAX_PLAN_BYTES})",
    ]


# --------------------------------------------------------------------------- agents


@pytest.mark.parametrize("name", sorted(AGENT_EXPECTATIONS))
def test_the_agents_loader_raises_only_agents_file_error(name: str) -> None:
    path = _relative(AGENTS_DIR / name)
    with pytest.raises(AgentsFileError) as info:
        load_agents_file(path)
    _assert_problems(info.value.problems, path, AGENT_EXPECTATIONS[name])


@pytest.mark.usefixtures("no_temporal")
@pytest.mark.parametrize("name", sorted(AGENT_EXPECTATIONS))
async def test_dplan_run_stops_a_bad_agents_file_before_any_workflow_starts(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    agents = AGENTS_DIR / name
    code = await run_command.run_plan(
        "examples/weather_app.json",
        embedded=False,
        json_output=False,
        no_wait=True,
        settings=Settings(agents_file=agents),
    )
    assert code == Exit.INVALID
    header, *problems = capsys.readouterr().err.splitlines()
    assert header == f"invalid agents file: {agents}"
    stripped = tuple(line.removeprefix("  ") for line in problems)
    _assert_problems(stripped, str(agents), AGENT_EXPECTATIONS[name])


@pytest.mark.parametrize("name", ["yaml_terminal_escape.yaml", "lone_surrogate_prompt.json"])
def test_the_console_script_run_rejects_a_bad_agents_file(name: str, tmp_path: Path) -> None:
    agents = _relative(AGENTS_DIR / name)
    env = {
        **os.environ,
        "DPLAN_AGENTS": agents,
        # Nothing may be contacted; should validation regress, fail fast rather than hang.
        "TEMPORAL_ADDRESS": "127.0.0.1:9",
        "DPLAN_STATE_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [str(DPLAN), "run", "examples/weather_app.json", "--no-wait"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (Exit.INVALID, "")
    header, *problems = done.stderr.splitlines()
    assert header == f"invalid agents file: {agents}"
    stripped = tuple(line.removeprefix("  ") for line in problems)
    _assert_problems(stripped, agents, AGENT_EXPECTATIONS[name])
