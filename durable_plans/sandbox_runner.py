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
"""

from __future__ import annotations

import dataclasses

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import (
    DataConverter,
    SerializationContext,
    StorageDriverStoreContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.workflow import Info

__all__ = ["ContextFreeSandboxedRunner", "fits"]

_NO_TARGET = StorageDriverStoreContext(target=None)


def fits(converter: DataConverter) -> bool:
    """Whether no part of ``converter`` that encodes payloads reads the context."""
    return converter.external_storage is None and not isinstance(
        converter.payload_codec, WithSerializationContext
    )


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
