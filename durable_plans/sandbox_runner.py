"""The workflow sandbox, without a trip into it for every payload the worker visits.

Before an activation reaches a workflow and after its completion leaves it, the SDK walks
every payload in them (six visits: codec, external storage and storage references, each
way) and, for each payload sequence, asks the workflow instance which serialization
context applies: the workflow's own, or that of the activity or child workflow a command
targets. A sandboxed instance answers by entering its sandbox (an ``exec`` under the
sandbox's import and builtins overrides) every time: one of the larger costs a worker
pays per subtask, and it grows with the number of payloads (bench/RESULTS.md).

The answer only picks which codec and which external storage encode a payload. Where the
data converter has no external storage and its codec (if any) ignores the context (it is
not a ``WithSerializationContext``, as our AES-GCM codec is not), every answer gives the
same bytes. ``ContextFreeSandboxedRunner`` is then the stock sandboxed runner, whose
instances answer from outside: the workflow's own context, no storage target. Where a
converter does use the context, ``fits`` says no and the plugin keeps the stock runner.

It leans on the SDK's internals (a ``WorkflowInstance`` wrapping the sandboxed one, the
two context questions the SDK's worker asks it), so it stays behind one switch,
``DPLAN_WORKFLOW_RUNNER_LEAN`` (``Settings.workflow_runner_lean``; ``0``: the stock
runner), and is pinned to the temporalio release it was written for
(``WRITTEN_FOR_TEMPORALIO``, checked by tests/unit/test_sandbox_runner.py). Worth 0.78 of
the stock runner's worker CPU per subtask on the user's path (bench/RESULTS.md,
``python -m bench.private_apis``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import (
    DataConverter,
    SerializationContext,
    StorageDriverStoreContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.workflow import Info

if TYPE_CHECKING:
    from durable_plans.settings import Settings

__all__ = ["WRITTEN_FOR_TEMPORALIO", "ContextFreeSandboxedRunner", "context_free", "fits"]

# The temporalio release (major.minor) whose worker internals this module was checked
# against: how the worker asks an instance for its serialization and store contexts.
WRITTEN_FOR_TEMPORALIO = "1.35"

_NO_TARGET = StorageDriverStoreContext(target=None)


def fits(converter: DataConverter) -> bool:
    """Whether no part of ``converter`` that encodes payloads reads the context."""
    return converter.external_storage is None and not isinstance(
        converter.payload_codec, WithSerializationContext
    )


def context_free(
    runner: WorkflowRunner, converter: DataConverter | None, settings: Settings | None
) -> WorkflowRunner:
    """The stock sandboxed runner becomes ``ContextFreeSandboxedRunner`` where the switch
    is on (no settings, as for a client's replayer: on, the default) and the data converter
    ignores serialization contexts; anything else (a runner of the user's, a converter
    that reads the context) is left as it is."""
    if settings is not None and not settings.workflow_runner_lean:
        return runner
    if type(runner) is not SandboxedWorkflowRunner or converter is None:
        return runner
    if not fits(converter):
        return runner
    fields = {f.name: getattr(runner, f.name) for f in dataclasses.fields(runner) if f.init}
    return ContextFreeSandboxedRunner(**fields)


@dataclasses.dataclass(frozen=True)
class ContextFreeSandboxedRunner(SandboxedWorkflowRunner):
    """``SandboxedWorkflowRunner`` whose instances answer context questions from outside
    the sandbox. Only for a worker whose data converter ``fits``."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _ContextFreeInstance(super().create_instance(det), det.info)


class _ContextFreeInstance(WorkflowInstance):
    """A sandboxed instance, with the two context questions answered without it."""

    def __init__(self, inner: WorkflowInstance, info: Info) -> None:
        self._inner = inner
        self._context = WorkflowSerializationContext(
            namespace=info.namespace, workflow_id=info.workflow_id
        )

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        return self._inner.activate(act)

    def get_serialization_context(self, command_info: object) -> SerializationContext | None:
        return self._context

    def get_external_store_context(self, command_info: object) -> StorageDriverStoreContext:
        return _NO_TARGET

    def get_info(self) -> Info:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()
