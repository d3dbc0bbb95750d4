"""``ContextFreeSandboxedRunner``: the sandbox, minus a trip into it per visited payload.

Only where the answer cannot matter: a data converter with no external storage and no
codec that reads the serialization context (``sandbox_runner.fits``). The plugin picks
it for workers and replayers alike; a converter that does read the context keeps the
stock runner, and a runner of the user's own is never replaced.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Sequence
from typing import Any, cast

from temporalio.api.common.v1 import Payload
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    PayloadCodec,
    SerializationContext,
    StorageDriverStoreContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, WorkflowInstance
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from durable_plans.payload_codec import generate_key, keyring_from_env
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.sandbox_runner import (
    WRITTEN_FOR_TEMPORALIO,
    ContextFreeSandboxedRunner,
    _ContextFreeInstance,
    fits,
)
from durable_plans.settings import Settings


def _encryption() -> PayloadCodec:
    keyring = keyring_from_env({"DPLAN_PAYLOAD_KEY": generate_key()})
    assert keyring is not None
    return keyring.codec()


class _ContextAwareCodec(PayloadCodec, WithSerializationContext):
    """A codec that would encrypt per workflow or per activity: it needs the real context."""

    def __init__(self, context: SerializationContext | None = None) -> None:
        self.context = context

    def with_context(self, context: SerializationContext) -> _ContextAwareCodec:
        return _ContextAwareCodec(context)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


class _PlainCodec(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


def _runner_of(plugin: DurablePlansPlugin) -> object:
    return Replayer(workflows=[], plugins=[plugin]).config(active_config=True)["workflow_runner"]


def test_converters_that_ignore_the_context_fit() -> None:
    assert fits(pydantic_data_converter)
    assert fits(dataclasses.replace(pydantic_data_converter, payload_codec=_PlainCodec()))
    assert fits(dataclasses.replace(pydantic_data_converter, payload_codec=_encryption()))


def test_a_context_aware_codec_or_external_storage_does_not_fit() -> None:
    aware = dataclasses.replace(pydantic_data_converter, payload_codec=_ContextAwareCodec())
    assert not fits(aware)
    stored = dataclasses.replace(pydantic_data_converter)
    object.__setattr__(stored, "external_storage", cast(Any, object()))
    assert not fits(stored)


def test_the_plugin_picks_it_where_it_fits_and_keeps_the_sandbox_settings() -> None:
    runner = _runner_of(DurablePlansPlugin())
    assert type(runner) is ContextFreeSandboxedRunner
    assert isinstance(runner, SandboxedWorkflowRunner)
    # The passthrough the plugin configured is still there.
    assert "durable_plans.domain" in runner.restrictions.passthrough_modules
    encrypted = _runner_of(DurablePlansPlugin(payload_codec=_encryption()))
    assert type(encrypted) is ContextFreeSandboxedRunner


def test_the_plugin_keeps_the_stock_runner_for_a_context_aware_codec() -> None:
    runner = _runner_of(DurablePlansPlugin(payload_codec=_ContextAwareCodec()))
    assert type(runner) is SandboxedWorkflowRunner
    assert "durable_plans.domain" in runner.restrictions.passthrough_modules


def test_the_switch_off_keeps_the_stock_runner() -> None:
    assert Settings.from_env({}).workflow_runner_lean is True
    off = Settings.from_env({"DPLAN_WORKFLOW_RUNNER_LEAN": "0"})
    assert off.workflow_runner_lean is False
    runner = _runner_of(DurablePlansPlugin(settings=off))
    assert type(runner) is SandboxedWorkflowRunner
    assert "durable_plans.domain" in runner.restrictions.passthrough_modules
    on = _runner_of(DurablePlansPlugin(settings=Settings.from_env({})))
    assert type(on) is ContextFreeSandboxedRunner


def test_a_runner_of_the_users_own_is_left_alone() -> None:
    mine = UnsandboxedWorkflowRunner()
    replayer = Replayer(workflows=[], plugins=[DurablePlansPlugin()], workflow_runner=mine)
    assert replayer.config(active_config=True)["workflow_runner"] is mine


INFO = cast(Any, type("Info", (), {"namespace": "ns", "workflow_id": "plan-1/a"})())


class _Inner(WorkflowInstance):
    """A sandboxed instance stand-in: the context questions must never reach it."""

    def __init__(self) -> None:
        self.activations: list[WorkflowActivation] = []

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        self.activations.append(act)
        return WorkflowActivationCompletion(run_id=act.run_id)

    def get_serialization_context(self, command_info: object) -> SerializationContext | None:
        raise AssertionError("entered the sandbox for a context")

    def get_external_store_context(self, command_info: object) -> StorageDriverStoreContext:
        raise AssertionError("entered the sandbox for a store context")

    def get_info(self) -> Any:
        return INFO

    def get_thread_id(self) -> int | None:
        return 42


def test_the_instance_answers_context_questions_itself_and_delegates_the_rest() -> None:
    inner = _Inner()
    instance = _ContextFreeInstance(inner, INFO)
    expected = WorkflowSerializationContext(namespace="ns", workflow_id="plan-1/a")
    assert instance.get_serialization_context(None) == expected
    assert instance.get_serialization_context(object()) == expected
    assert instance.get_external_store_context(None) == StorageDriverStoreContext(target=None)
    completion = instance.activate(WorkflowActivation(run_id="r1"))
    assert completion.run_id == "r1" and [a.run_id for a in inner.activations] == ["r1"]
    assert instance.get_info() is INFO
    assert instance.get_thread_id() == 42


RECHECK_TEMPORALIO = (
    "durable_plans/sandbox_runner.py wraps the SDK's sandboxed workflow instance and was "
    f"written for temporalio {WRITTEN_FOR_TEMPORALIO}. Before moving it, re-check against the "
    "new release: WorkflowInstance's abstract methods (all must still be delegated or "
    "answered), that the worker asks get_serialization_context / get_external_store_context "
    "only to pick the codec and external storage of a payload (temporalio/worker/"
    "_workflow.py), SandboxedWorkflowRunner.create_instance and its dataclass fields, and "
    "DataConverter.external_storage; run tests/unit/test_sandbox_runner.py and "
    "tests/integration/test_payload_encryption.py; run `python -m bench.private_apis` and "
    "keep DPLAN_WORKFLOW_RUNNER_LEAN only if ours / ours-stock-runner stays about 0.8 or "
    "below in worker CPU or wall (else remove the module); then set WRITTEN_FOR_TEMPORALIO."
)


def test_the_runner_runs_on_the_temporalio_it_was_written_for() -> None:
    """The wrapper answers two questions the SDK's worker asks of its instances, on the
    SDK's internals: a new release must stop here and be re-checked."""
    installed = importlib.metadata.version("temporalio")
    assert installed.split(".")[:2] == WRITTEN_FOR_TEMPORALIO.split("."), (
        f"temporalio {installed} is installed. {RECHECK_TEMPORALIO}"
    )
    # Every method of the SDK's instance is answered or delegated by ours: one the SDK
    # adds later would otherwise fall to the base class, not reach the sandboxed instance.
    theirs = {name for name in vars(WorkflowInstance) if not name.startswith("_")}
    ours = {name for name in vars(_ContextFreeInstance) if not name.startswith("_")}
    assert theirs == ours, (
        f"WorkflowInstance has {sorted(theirs)}, ours {sorted(ours)}. {RECHECK_TEMPORALIO}"
    )
