"""Settings come from the environment; bad values are named, secrets never printed."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from durable_plans._errors import SettingsError
from durable_plans.settings import SCRIPTED_MODEL, Settings


def test_defaults_are_the_offline_single_host_setup() -> None:
    s = Settings.from_env({})
    assert s.temporal_address == "localhost:7233"
    assert s.temporal_namespace == "default"
    assert s.task_queue == "dplan"
    assert s.model == SCRIPTED_MODEL and s.model_is_scripted
    assert s.session_store == str(s.state_dir / "sessions.db")
    assert s.state_dir.is_absolute() and s.state_dir.name == "durable-plans"
    assert s.effective_subagent_model == SCRIPTED_MODEL


def test_every_documented_variable_is_read() -> None:
    s = Settings.from_env(
        {
            "TEMPORAL_ADDRESS": "temporal:7233",
            "TEMPORAL_NAMESPACE": "plans",
            "TEMPORAL_UI_URL": "http://ui:8080/",
            "DPLAN_TASK_QUEUE": "q",
            "DPLAN_MODEL": "openrouter/some/model",
            "DPLAN_SUBAGENT_MODEL": "openrouter/cheap",
            "DPLAN_API_BASE": "http://proxy:4000",
            "DPLAN_API_KEY": "sk-or-v1-" + "a" * 40,
            "DPLAN_SESSION_STORE": "postgresql://u@h/db",
            "DPLAN_WORKSPACE": "/tmp/ws",
        }
    )
    assert (s.temporal_address, s.temporal_namespace, s.task_queue) == (
        "temporal:7233",
        "plans",
        "q",
    )
    assert s.ui_url == "http://ui:8080/"
    assert not s.model_is_scripted
    assert s.effective_subagent_model == "openrouter/cheap"
    assert s.api_base == "http://proxy:4000"
    assert s.session_store == "postgresql://u@h/db"
    assert s.workspace == Path("/tmp/ws")


def test_the_key_never_appears_in_repr() -> None:
    key = "sk-or-v1-" + "b" * 40
    s = Settings.from_env({"DPLAN_API_KEY": key})
    assert s.api_key == key
    assert key not in repr(s) and key not in str(s)


def test_blank_values_fall_back_to_defaults() -> None:
    s = Settings.from_env({"DPLAN_MODEL": "  ", "TEMPORAL_ADDRESS": ""})
    assert s.model == SCRIPTED_MODEL
    assert s.temporal_address == "localhost:7233"


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("DPLAN_LLM_TIMEOUT_S", "soon", "DPLAN_LLM_TIMEOUT_S must be a number, got 'soon'"),
        ("DPLAN_LLM_TIMEOUT_S", "-1", "DPLAN_LLM_TIMEOUT_S must be positive, got '-1'"),
        ("DPLAN_LLM_MAX_ATTEMPTS", "2.5", "DPLAN_LLM_MAX_ATTEMPTS must be an integer, got '2.5'"),
    ],
)
def test_malformed_numbers_are_named(name: str, value: str, expected: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({name: value})
    assert str(info.value) == expected


def test_default_budget_comes_from_the_environment_and_fills_plans_without_one() -> None:
    from durable_plans.client._plans import with_default_budget
    from durable_plans.domain.models import Budget, Plan, Subtask

    s = Settings.from_env({"DPLAN_MAX_TOKENS": "5000", "DPLAN_MAX_COST_USD": "0.5"})
    assert s.default_budget == Budget(max_tokens=5000, max_cost_usd=0.5)
    plan = Plan(id="p", subtasks=(Subtask(id="a", description="x"),))
    assert with_default_budget(plan, s).budget == Budget(max_tokens=5000, max_cost_usd=0.5)
    own = plan.model_copy(update={"budget": Budget(max_tokens=7)})
    assert with_default_budget(own, s).budget == Budget(max_tokens=7)
    assert Settings.from_env({}).default_budget is None
    assert Settings.from_env({"DPLAN_MAX_COST_USD": "2"}).default_budget == Budget(max_cost_usd=2.0)


# --------------------------------------------------------------------------- activity parameters


def test_the_default_activity_parameters_are_the_workflows_defaults() -> None:
    """A worker with no DPLAN_LLM_* / DPLAN_TOOL_* set schedules exactly what a replayer
    without settings assumes."""
    from durable_plans.workflows.policies import DEFAULT_PARAMETERS

    # Except llm_local, which replay never reads (the run's marker records the decision):
    # a worker with settings runs the LLM activity itself, one without says nothing.
    for parameters in (
        Settings.from_env({}).activity_parameters(),
        Settings().activity_parameters(),
    ):
        assert parameters.llm_local
        assert replace(parameters, llm_local=False) == DEFAULT_PARAMETERS


def test_llm_calls_are_local_unless_switched_off_or_streamed() -> None:
    """DPLAN_LLM_LOCAL=0, or subtasks whose calls stream (DPLAN_STREAM=all), keep regular
    activities: a local activity cannot send its text while the workflow task is held."""
    assert not Settings.from_env({"DPLAN_LLM_LOCAL": "0"}).activity_parameters().llm_local
    assert not Settings.from_env({"DPLAN_STREAM": "all"}).activity_parameters().llm_local
    assert Settings.from_env({"DPLAN_STREAM": "off"}).activity_parameters().llm_local


def test_every_llm_and_tool_variable_sets_its_activity_parameter() -> None:
    from datetime import timedelta

    from durable_plans.settings import LLM_ACTIVITY_MARGIN_S

    p = Settings.from_env(
        {
            "DPLAN_LLM_TIMEOUT_S": "30",
            "DPLAN_LLM_HEARTBEAT_S": "4.5",
            "DPLAN_LLM_MAX_ATTEMPTS": "2",
            "DPLAN_TOOL_TIMEOUT_S": "9",
            "DPLAN_TOOL_MAX_ATTEMPTS": "3",
            "DPLAN_RATE_LIMIT_PATIENCE": "90s",
        }
    ).activity_parameters()
    assert p.llm_start_to_close == timedelta(seconds=30 + LLM_ACTIVITY_MARGIN_S)
    assert p.llm_heartbeat == timedelta(seconds=4.5)
    assert p.llm_max_attempts == 2
    assert p.llm_rate_limit_patience == timedelta(seconds=90)
    # Temporal's backstop: 2 attempts, up to 90 refusals of at least 1 s, and one more.
    assert p.llm_retry.maximum_attempts == 2 + 90 + 1
    assert "BadRequest" in (p.llm_retry.non_retryable_error_types or ())
    assert p.tool_start_to_close == timedelta(seconds=9)
    assert p.tool_max_attempts == 3
    assert p.tool_retry.maximum_attempts == 3


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (
            "DPLAN_LLM_HEARTBEAT_S",
            "1",
            "DPLAN_LLM_HEARTBEAT_S must be at least 2 (activities heartbeat every second), got '1'",
        ),
        ("DPLAN_LLM_HEARTBEAT_S", "0", "DPLAN_LLM_HEARTBEAT_S must be positive, got '0'"),
        ("DPLAN_TOOL_TIMEOUT_S", "x", "DPLAN_TOOL_TIMEOUT_S must be a number, got 'x'"),
        ("DPLAN_TOOL_MAX_ATTEMPTS", "0", "DPLAN_TOOL_MAX_ATTEMPTS must be positive, got '0'"),
    ],
)
def test_malformed_activity_parameters_are_named(name: str, value: str, expected: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({name: value})
    assert str(info.value) == expected


_REPO = Path(__file__).resolve().parents[2]
# The variable table's home: the README links to it.
_CONFIGURATION = _REPO / "docs" / "configuration.md"
_VARIABLE = re.compile(r"\b((?:DPLAN|TEMPORAL)_[A-Z][A-Z0-9_]*)\b")


def test_every_llm_and_tool_variable_has_its_own_row() -> None:
    table = _CONFIGURATION.read_text()
    for name in (
        "DPLAN_LLM_TIMEOUT_S",
        "DPLAN_LLM_HEARTBEAT_S",
        "DPLAN_LLM_MAX_ATTEMPTS",
        "DPLAN_TOOL_TIMEOUT_S",
        "DPLAN_TOOL_MAX_ATTEMPTS",
    ):
        assert f"| `{name}` |" in table, name


def _documented_table_variables() -> set[str]:
    """Every variable named in a row of the configuration document's tables."""
    names: set[str] = set()
    for line in _CONFIGURATION.read_text().splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            names.update(_VARIABLE.findall(first_cell))
    return names


def _variables_read_by_the_package() -> set[str]:
    """Every DPLAN_/TEMPORAL_ name the installed code spells as a string literal (what
    settings, the connection and the CLI read), dev-server and UI variables aside."""
    names: set[str] = set()
    for path in (_REPO / "durable_plans").rglob("*.py"):
        if "testing" in path.parts:
            continue
        for literal in re.findall(r"[\"']((?:DPLAN|TEMPORAL)_[A-Z0-9_]+)[\"']", path.read_text()):
            names.add(literal)
    return names


def test_no_documented_variable_is_dead_and_none_read_is_undocumented() -> None:
    documented = _documented_table_variables()
    read = _variables_read_by_the_package()
    # `TEMPORAL_*` read through temporalio.envconfig are documented but spelled there,
    # not here; `TEMPORAL_GRPC_META_<NAME>` is a family.
    via_envconfig = {
        "TEMPORAL_ADDRESS",
        "TEMPORAL_NAMESPACE",
        "TEMPORAL_API_KEY",
        "TEMPORAL_TLS",
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
        "TEMPORAL_TLS_SERVER_NAME",
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
        "TEMPORAL_GRPC_META_",
        "TEMPORAL_PROFILE",
        "TEMPORAL_CONFIG_FILE",
    }
    dead = sorted(documented - read - via_envconfig)
    assert dead == [], f"documented in {_CONFIGURATION.name} but read nowhere: {dead}"
    undocumented = sorted(
        name for name in read - documented if not name.startswith(("TEMPORAL_GRPC_META",))
    )
    assert undocumented == [], (
        f"read by the code but not in {_CONFIGURATION.name}'s table: {undocumented}"
    )


def test_metrics_port_and_otlp_endpoint() -> None:
    s = Settings.from_env(
        {"DPLAN_METRICS_PORT": "9464", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318"}
    )
    assert (s.metrics_port, s.otlp_endpoint) == (9464, "http://otel:4318")
    assert (Settings.from_env({}).metrics_port, Settings.from_env({}).otlp_endpoint) == (None, None)
    for bad in ("nine", "0", "70000"):
        with pytest.raises(SettingsError, match="DPLAN_METRICS_PORT"):
            Settings.from_env({"DPLAN_METRICS_PORT": bad})


def test_stream_settings_are_read_and_bad_values_named() -> None:
    s = Settings.from_env({"DPLAN_STREAM": "ALL", "DPLAN_STREAM_INTERVAL_MS": "50"})
    assert (s.stream, s.stream_interval_s) == ("all", 0.05)
    assert Settings.from_env({}).stream == "chat"
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"DPLAN_STREAM": "sometimes"})
    assert str(info.value) == "DPLAN_STREAM must be one of chat, all, off, got 'sometimes'"
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"DPLAN_LLM_LEAN": "maybe"})
    assert "DPLAN_LLM_LEAN must be 1/true/yes/on or 0/false/no/off, got 'maybe'" in str(info.value)
    assert Settings.from_env({"DPLAN_LLM_LEAN": "off"}).llm_lean is False
    assert Settings.from_env({"DPLAN_LLM_LEAN": "Yes"}).llm_lean is True


def test_workspace_remote_and_branch_prefix() -> None:
    default = Settings.from_env({})
    assert default.workspace_remote is None and default.workspace_branch_prefix == "dplan/"
    url = "https://bot:ghp_" + "c" * 36 + "@git.example/team/work.git"
    s = Settings.from_env(
        {"DPLAN_WORKSPACE_REMOTE": f" {url} ", "DPLAN_WORKSPACE_BRANCH_PREFIX": "agents/"}
    )
    assert s.workspace_remote == url and s.workspace_branch_prefix == "agents/"
    assert url not in repr(s)
    assert Settings.from_env({"DPLAN_WORKSPACE_BRANCH_PREFIX": ""}).workspace_branch_prefix == ""
    for bad in ("-x/", "a..b/", "a b/", ".hidden/", "x//", "ref~1"):
        with pytest.raises(SettingsError, match="DPLAN_WORKSPACE_BRANCH_PREFIX"):
            Settings.from_env({"DPLAN_WORKSPACE_BRANCH_PREFIX": bad})
