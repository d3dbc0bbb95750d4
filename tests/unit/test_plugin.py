"""``DurablePlansPlugin`` without a server: what it puts into a replayer, what it passes
through the sandbox, and that workflows replay whatever timeouts a worker was given."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pydantic
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from durable_plans.cli.replay_command import load_history_file, make_replayer, replay_runs
from durable_plans.plugin import (
    PASSTHROUGH_MODULES,
    WORKFLOW_FAILURE_EXCEPTION_TYPES,
    DurablePlansPlugin,
)
from durable_plans.settings import Settings
from durable_plans.workflows.policies import DEFAULT_PARAMETERS, ActivityParameters

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
# Third-party packages that are pure and stateless enough to share across workflow runs.
THIRD_PARTY = {"pydantic", "pydantic_core", "annotated_types", "typing_inspection", "yaml"}
# Ours that must stay inside the sandbox: they do I/O, hold state or import litellm.
NEVER_PASSED = (
    "activities",
    "session_store",
    "cli",
    "client",
    "connection",
    "embedded",
    "codec_server",
    "settings",
    "worker",
    "plugin",
)


class _Identity(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


def test_the_passthrough_names_only_our_pure_modules_and_pure_libraries() -> None:
    ours = [m for m in PASSTHROUGH_MODULES if m not in THIRD_PARTY]
    assert set(PASSTHROUGH_MODULES) - set(ours) == THIRD_PARTY
    for name in ours:
        # By full path: a bare ``domain`` would let a foreign package bypass the sandbox.
        assert name.startswith("durable_plans."), name
        assert not any(name.startswith(f"durable_plans.{bad}") for bad in NEVER_PASSED), name
        importlib.import_module(name)  # names a module that exists
    assert "durable_plans.domain" in ours


def test_the_replayer_gets_the_workers_converter_sandbox_workflows_and_failure_types() -> None:
    config = make_replayer().config(active_config=True)
    assert config["data_converter"] is pydantic_data_converter
    names = sorted(w.__name__ for w in config["workflows"])
    assert names == ["PlanWorkflow", "SessionWorkflow", "SubtaskWorkflow"]
    runner = config["workflow_runner"]
    assert isinstance(runner, SandboxedWorkflowRunner)
    assert set(PASSTHROUGH_MODULES) <= runner.restrictions.passthrough_modules
    assert pydantic.ValidationError in config["workflow_failure_exception_types"]
    assert list(WORKFLOW_FAILURE_EXCEPTION_TYPES) == list(
        config["workflow_failure_exception_types"]
    )
    # No settings: no parameters interceptor, the workflows fall back to the defaults.
    assert list(config.get("interceptors", [])) == []


def test_given_workflows_replace_ours() -> None:
    from durable_plans.workflows.subtask import SubtaskWorkflow

    config = make_replayer([SubtaskWorkflow]).config(active_config=True)
    assert list(config["workflows"]) == [SubtaskWorkflow]


def test_a_client_or_replayer_plugin_registers_no_activities() -> None:
    assert DurablePlansPlugin().registered_activities() == []
    # Settings without a store: still a client (parameters, no activities).
    plugin = DurablePlansPlugin(settings=Settings.from_env({"DPLAN_LLM_MAX_ATTEMPTS": "3"}))
    assert plugin.registered_activities() == []
    assert plugin.parameters is not None and plugin.parameters.llm_max_attempts == 3


def test_the_data_converter_is_pydantic_with_an_optional_codec_on_top() -> None:
    codec = _Identity()
    with_codec = DurablePlansPlugin(payload_codec=codec)._data_converter(None)
    assert with_codec.payload_codec is codec
    assert with_codec.payload_converter_class is PydanticPayloadConverter
    # A codec already on the caller's converter is kept, under our payload converter.
    kept = DurablePlansPlugin()._data_converter(DataConverter(payload_codec=codec))
    assert kept.payload_codec is codec
    assert kept.payload_converter_class is PydanticPayloadConverter
    assert DurablePlansPlugin()._data_converter(None) is pydantic_data_converter


async def test_recorded_histories_replay_under_other_timeouts_and_attempts() -> None:
    """Timeouts and attempts are not part of what replay compares: a worker may change
    them (DPLAN_LLM_*, DPLAN_TOOL_*) while plans are running."""
    other = ActivityParameters(
        llm_start_to_close=timedelta(seconds=7),
        llm_heartbeat=timedelta(seconds=3),
        llm_max_attempts=2,
        tool_start_to_close=timedelta(seconds=4),
        tool_max_attempts=1,
    )
    assert other != DEFAULT_PARAMETERS
    replayer = Replayer(workflows=[], plugins=[DurablePlansPlugin(parameters=other)])
    assert len(replayer.config(active_config=True)["interceptors"]) == 1
    runs = [load_history_file(p) for p in sorted(HISTORIES.glob("*/*/*.json"))]
    assert runs
    outcomes = await replay_runs(runs, replayer)
    failed = [(o.run.workflow_id, o.message) for o in outcomes if not o.ok]
    assert failed == []
