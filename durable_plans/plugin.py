"""All of durable-plans' Temporal wiring, as one Temporal plugin.

A client, a worker and a replayer must agree on how payloads are encoded, which modules
the workflow sandbox passes through, which workflows exist and which exceptions fail a
workflow: a replayer built without the worker's sandbox settings, or a client without the
pydantic converter, misreads every history. ``DurablePlansPlugin`` is that agreement, in
one place, on the SDK's own plugin interface (``temporalio.plugin.SimplePlugin``, as
``OpenAIAgentsPlugin`` uses it):

* the data converter: pydantic models as JSON payloads (``pydantic_data_converter``, the
  encoding every recorded history uses), with an optional payload codec on top (the
  AES-256-GCM codec of ``payload_codec.py`` when the settings carry payload keys);
* the sandbox passthrough of our pure modules (``PASSTHROUGH_MODULES``);
* the workflows (``PlanWorkflow``, ``SubtaskWorkflow``, ``SessionWorkflow``);
* the activities, when it is given a session store and settings (a worker); a client or
  a replayer registers none;
* the workflow failure exception types;
* the worker's ``ActivityParameters`` (timeouts and attempts of LLM calls and tools),
  handed to its workflows through an extern function, so each worker's workflows use that
  worker's settings even when several workers share one process;
* whether the namespace has the ``Dplan*`` search attributes, checked when the worker
  starts (one warning line naming ``dplan setup`` if not), so plans set them only where
  that cannot fail (``workflows/visibility.py``);
* the ``worker_facts`` local activity, registered with the activities: what this worker
  decides for a plan run (local LLM calls, search attributes), asked once by the run and
  recorded in its history (``domain.contracts.WorkerFacts``).

Use: ``Client.connect(..., plugins=[DurablePlansPlugin()])`` for a client;
``Replayer(workflows=[], plugins=[DurablePlansPlugin()])`` for a replayer; a worker is
``Worker(client_carrying(client, DurablePlansPlugin(settings=s, store=st)), ...)``, which
``durable_plans.worker.build_worker`` does.

Plugins on a client propagate to every worker built from it. A worker built from a client
that already carries a ``DurablePlansPlugin`` would otherwise configure itself twice (the
SDK warns, and the workflows would be registered twice), so ``client_carrying`` gives the
worker a client whose ``DurablePlansPlugin`` is the worker's own instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic
from temporalio import activity
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)
from temporalio.plugin import SimplePlugin
from temporalio.worker import (
    Interceptor,
    ReplayerConfig,
    Worker,
    WorkerConfig,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from durable_plans import sandbox_runner
from durable_plans.domain.contracts import ACT_WORKER_FACTS, WorkerFacts
from durable_plans.payload_codec import EncryptionCodec
from durable_plans.workflows.policies import PARAMETERS_EXTERN, ActivityParameters
from durable_plans.workflows.visibility import GOAL_SEARCHABLE_EXTERN

if TYPE_CHECKING:
    from durable_plans.activities.registry import PlanActivities
    from durable_plans.session_store import SessionStore
    from durable_plans.settings import Settings

__all__ = [
    "PASSTHROUGH_MODULES",
    "PLUGIN_NAME",
    "WORKFLOW_FAILURE_EXCEPTION_TYPES",
    "DurablePlansPlugin",
    "client_carrying",
    "plugin_of",
]

PLUGIN_NAME = "durable_plans.DurablePlansPlugin"

T = TypeVar("T")

# Pure modules every workflow run would otherwise re-import inside its sandbox: the domain
# model (and pydantic under it), the workflows' own stateless helpers, and
# SubtaskWorkflow's module: one new sandbox per subtask made re-importing it (and
# re-applying ``workflow.defn`` to its class) the worker's largest single cost per subtask.
# Passing them through keeps each new workflow's first task short; none of them holds
# mutable state, and since the sandbox checks clock and random calls only in modules it
# re-imports, tests/unit/test_workflow_determinism.py checks every workflow module's
# source instead.
# PlanWorkflow and SessionWorkflow (one run per plan or conversation) stay re-imported.
# Ours are named by their full package path: a foreign top-level ``domain`` must never
# bypass the sandbox because it shares a name with ours.
PASSTHROUGH_MODULES: tuple[str, ...] = (
    "durable_plans.domain",
    # The error classes (pure): one copy, so a workflow's ``except PlanValidationError``
    # catches what a passed-through domain module raised.
    "durable_plans._errors",
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_inspection",
    "yaml",
    "durable_plans.workflows.policies",
    "durable_plans.workflows.versions",
    "durable_plans.workflows.store_ops",
    "durable_plans.workflows.agent_loop",
    "durable_plans.workflows.visibility",
    "durable_plans.workflows.approval_desk",
    "durable_plans.workflows.live",
    "durable_plans.workflows.subtask",
)

# Exceptions that fail the workflow instead of its workflow task. A pydantic
# ValidationError is a payload that does not fit our models (a workflow's input, an
# update's argument): it will not fit any better on a retry, so retrying the task forever
# (the SDK's default for non-Temporal exceptions) would only leave the workflow Running.
WORKFLOW_FAILURE_EXCEPTION_TYPES: tuple[type[BaseException], ...] = (pydantic.ValidationError,)


class _ActivityParametersInterceptor(Interceptor):
    """Exposes one worker's ``ActivityParameters`` to that worker's workflows.

    Extern functions are registered per worker (each worker collects its own), so this
    carries no process-wide state: two workers in one process with different settings each
    hand their own parameters to their own workflows. The function returns a frozen object
    of a passed-through class, so nothing mutable crosses the sandbox boundary.
    """

    def __init__(self, parameters: ActivityParameters) -> None:
        self.parameters = parameters

    def _get(self) -> ActivityParameters:
        return self.parameters

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        input.unsafe_extern_functions[PARAMETERS_EXTERN] = self._get
        return None


class _SearchAttributesInterceptor(Interceptor):
    """Whether the ``Dplan*`` search attributes are registered on one worker's namespace
    (``workflows.visibility``): setting an unregistered one would fail its workflow tasks.
    False until the worker has checked, at start. Told to a plan run by ``worker_facts``;
    whether the goal may be one is told to the workflows through an extern function."""

    def __init__(self) -> None:
        self.registered = False
        # Search attributes are indexed by the server, so no codec can encrypt them: where
        # payloads are encrypted, the goal (free text from the plan) stays out of them.
        self.goal_searchable = True

    def _goal(self) -> bool:
        return self.goal_searchable

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        input.unsafe_extern_functions[GOAL_SEARCHABLE_EXTERN] = self._goal
        return None


class _WorkerFacts:
    """The ``worker_facts`` local activity of one worker: what it decides for a plan run
    from its own settings and namespace. A local activity runs on the worker that runs
    the workflow task, so the answer is that worker's; its marker in the history is what
    a replay (another worker, ``dplan replay``) reads instead of its own settings."""

    def __init__(
        self, parameters: ActivityParameters | None, search_attributes: _SearchAttributesInterceptor
    ) -> None:
        self._parameters = parameters
        self._search_attributes = search_attributes

    @activity.defn(name=ACT_WORKER_FACTS)
    async def worker_facts(self) -> WorkerFacts:
        parameters = self._parameters
        return WorkerFacts(
            llm_local=parameters is not None and parameters.llm_local,
            search_attributes=self._search_attributes.registered,
        )


class DurablePlansPlugin(SimplePlugin):
    """The Temporal wiring of durable-plans for a client, a worker or a replayer.

    Every argument is optional and keyword-only:

    * ``settings``: the worker's settings; its ``activity_parameters()`` go to the
      workflows (unless ``parameters`` is given);
    * ``store``: the session store; with ``settings``, the plugin registers every activity
      (``PlanActivities(store, settings).all()``);
    * ``workflows`` / ``activities``: replace the defaults (tests register their own);
    * ``parameters``: the ``ActivityParameters`` handed to the workflows; without them
      (and without settings) workflows use the defaults;
    * ``payload_codec``: applied to every payload on top of the pydantic converter;
      without one, the encryption codec of ``settings.payload_keys`` (``DPLAN_PAYLOAD_KEY``)
      when configured, else a codec already on the client's converter is kept;
    * ``workflow_failure_exception_types``: replace ``WORKFLOW_FAILURE_EXCEPTION_TYPES``;
    * ``tracing``: OpenTelemetry tracing (``durable_plans/telemetry.py``); by default on
      when ``settings.otlp_endpoint`` is set and the process installed the replay-safe
      tracer provider (``telemetry.install``).
    """

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        store: SessionStore | None = None,
        workflows: Sequence[type] | None = None,
        activities: Sequence[Callable[..., Any]] | None = None,
        parameters: ActivityParameters | None = None,
        payload_codec: PayloadCodec | None = None,
        workflow_failure_exception_types: Sequence[type[BaseException]] | None = None,
        tracing: bool | None = None,
    ) -> None:
        self._search_attributes = _SearchAttributesInterceptor()
        if tracing is None:
            tracing = settings is not None and settings.otlp_endpoint is not None
            if tracing:
                # Traced only where the worker process installed the replay-safe tracer
                # provider (``dplan-worker`` does, from the same settings); a CLI that
                # merely shares the environment is not a traced worker.
                from durable_plans.telemetry import tracing_installed

                tracing = tracing_installed()
        self.tracing = tracing
        if parameters is None and settings is not None:
            parameters = settings.activity_parameters()
        if (
            parameters is not None
            and parameters.llm_local
            and not _runs_llm_activity(store, settings, activities)
        ):
            # A local activity runs on the workflow's own worker: one without the LLM
            # activity leaves its subtasks' calls to the workers that have it.
            parameters = dataclasses.replace(parameters, llm_local=False)
        self.settings = settings
        self.store = store
        self.parameters = parameters
        self._facts = _WorkerFacts(parameters, self._search_attributes)
        self.payload_codec = payload_codec
        self._workflows = list(workflows) if workflows is not None else None
        self._activities = list(activities) if activities is not None else None
        self._plan_activities: PlanActivities | None = None
        self._failure_types = list(
            WORKFLOW_FAILURE_EXCEPTION_TYPES
            if workflow_failure_exception_types is None
            else workflow_failure_exception_types
        )
        super().__init__(
            PLUGIN_NAME,
            data_converter=self._data_converter,
            workflow_runner=self._workflow_runner,
            workflows=self._add_workflows,
            activities=self._add_activities,
            workflow_failure_exception_types=self._add_failure_types,
            run_context=self._closing_activities,
            interceptors=(
                [_ActivityParametersInterceptor(parameters)] if parameters is not None else None
            ),
        )

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """As ``SimplePlugin``'s, plus the search-attribute answer for a worker's
        workflows (a worker only: a replayer reads the decision from the history), and
        the sandbox without its per-payload trips where the converter allows
        (``sandbox_runner``)."""
        config = super().configure_worker(config)
        client = config.get("client")
        self._search_attributes.goal_searchable = (
            client is None or client.data_converter.payload_codec is None
        )
        runner = config.get("workflow_runner")
        if client is not None and runner is not None:
            config["workflow_runner"] = sandbox_runner.context_free(
                runner, client.data_converter, self.settings
            )
        interceptors = list(config.get("interceptors") or [])
        if self._search_attributes not in interceptors:
            interceptors.append(self._search_attributes)
        if self.tracing:
            interceptors.extend(_tracing_interceptors(interceptors))
        config["interceptors"] = interceptors
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        """As ``SimplePlugin``'s, plus tracing when asked for (a replayer must create, and
        then not export, exactly the spans the worker did), and the same runner as a
        worker's."""
        config = super().configure_replayer(config)
        runner = config.get("workflow_runner")
        if runner is not None:
            config["workflow_runner"] = sandbox_runner.context_free(
                runner, config.get("data_converter"), self.settings
            )
        if self.tracing:
            interceptors = list(config.get("interceptors") or [])
            config["interceptors"] = [*interceptors, *_tracing_interceptors(interceptors)]
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Check the namespace's search attributes before the worker polls (one warning
        line, naming ``dplan setup``, when some are missing), then run it."""
        from durable_plans.namespace_setup import check_search_attributes

        self._search_attributes.registered = await check_search_attributes(worker.client)
        await super().run_worker(worker, next)

    # Each is a callable rather than a value: workflows and activities are imported only
    # when a worker or replayer asks for them (a CLI client has no use for them), and what
    # is already there is kept and never added twice.

    def _data_converter(self, existing: DataConverter | None) -> DataConverter:
        """Pydantic payloads, as every recorded history holds them; a codec on top: the
        one given, else the encryption codec of ``settings.payload_keys``, else the one
        already on the converter.

        With encryption, failure messages and stack traces are encoded too (they go into
        the failure's encoded attributes): a failed subtask's message may quote the
        model's answer or the plan, and would otherwise sit in the history in plain text.
        """
        codec = self.payload_codec
        if codec is None and self.settings is not None and self.settings.payload_keys is not None:
            codec = self.settings.payload_keys.codec()
        if codec is None and existing is not None:
            codec = existing.payload_codec
        if codec is None:
            return pydantic_data_converter
        if isinstance(codec, EncryptionCodec):
            return dataclasses.replace(
                pydantic_data_converter,
                payload_codec=codec,
                failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
            )
        return dataclasses.replace(pydantic_data_converter, payload_codec=codec)

    def _workflow_runner(self, existing: WorkflowRunner | None) -> WorkflowRunner:
        """The sandbox, with our pure modules passed through; a non-sandboxed runner (a
        debugging choice) is left alone."""
        if existing is None:
            existing = SandboxedWorkflowRunner()
        if not isinstance(existing, SandboxedWorkflowRunner):
            return existing
        restrictions = existing.restrictions or SandboxRestrictions.default
        # OpenTelemetry's context and tracer provider are process-wide: a workflow's spans
        # must reach the one the worker installed, not a sandboxed copy.
        passthrough = PASSTHROUGH_MODULES + (("opentelemetry",) if self.tracing else ())
        return dataclasses.replace(
            existing, restrictions=restrictions.with_passthrough_modules(*passthrough)
        )

    def _add_workflows(self, existing: Sequence[type] | None) -> Sequence[type]:
        ours = self._workflows
        if ours is None:
            # Imported on use: loading the workflow package loads every workflow module.
            from durable_plans.workflows import ALL_WORKFLOWS

            ours = list(ALL_WORKFLOWS)
        return _merge(existing, ours)

    def _add_activities(
        self, existing: Sequence[Callable[..., Any]] | None
    ) -> Sequence[Callable[..., Any]]:
        return _merge(existing, self.registered_activities())

    def _add_failure_types(
        self, existing: Sequence[type[BaseException]] | None
    ) -> Sequence[type[BaseException]]:
        return _merge(existing, self._failure_types)

    def registered_activities(self) -> list[Callable[..., Any]]:
        """The activities a worker with this plugin registers: the ones given, else every
        activity when the plugin has a store and settings, else none; with any, also
        ``worker_facts``, which every plan run asks first. (A worker without activities
        runs no plan: a plan's store operations are local activities too.)"""
        if self._activities is None:
            if self.store is None or self.settings is None:
                return []
            from durable_plans.activities.llm import import_litellm
            from durable_plans.activities.registry import PlanActivities

            # Imported now, not in the first LLM activity: the import takes seconds and
            # blocks the event loop, long enough to miss that activity's heartbeat timeout.
            import_litellm()
            from durable_plans.activities.observe import timed_store

            self._plan_activities = PlanActivities(timed_store(self.store), self.settings)
            self._activities = list(self._plan_activities.all())
        if not self._activities:
            return []
        return _merge(self._activities, [self._facts.worker_facts])

    @contextlib.asynccontextmanager
    async def _closing_activities(self) -> AsyncIterator[None]:
        """Around a worker's run: afterwards, release what its activities hold across
        calls (the webhook activity's shared HTTP client)."""
        try:
            yield
        finally:
            if self._plan_activities is not None:
                await self._plan_activities.aclose()


def _runs_llm_activity(
    store: SessionStore | None,
    settings: Settings | None,
    activities: Sequence[Callable[..., Any]] | None,
) -> bool:
    """Whether a worker with this plugin registers the LLM activity (``call_llm``)."""
    if activities is None:
        return store is not None and settings is not None
    from temporalio.activity import _Definition

    from durable_plans.domain.contracts import ACT_CALL_LLM

    return any(
        (defn := _Definition.from_callable(fn)) is not None and defn.name == ACT_CALL_LLM
        for fn in activities
    )


def _tracing_interceptors(present: Sequence[object]) -> list[Interceptor]:
    """Temporal's OpenTelemetry interceptor (trace context in every header), then our
    workflow spans inside it (``durable_plans/telemetry.py``), unless ``present`` has them.

    Worker-side only: added to a client they would also reach every worker built from it
    (the SDK prepends a client's interceptors that are worker interceptors too) and run
    twice there. A worker needs the replay-safe tracer provider installed first
    (``telemetry.install``, or ``create_tracer_provider`` in a test)."""
    from temporalio.contrib.opentelemetry import OpenTelemetryInterceptor

    from durable_plans.telemetry import WorkflowSpans

    added: list[Interceptor] = []
    if not any(isinstance(i, OpenTelemetryInterceptor) for i in present):
        added.append(OpenTelemetryInterceptor())
    if not any(isinstance(i, WorkflowSpans) for i in present):
        added.append(WorkflowSpans())
    return added


def _merge(existing: Sequence[T] | None, ours: Sequence[T]) -> list[T]:
    merged = list(existing or [])
    merged.extend(item for item in ours if item not in merged)
    return merged


def plugin_of(client: Client) -> DurablePlansPlugin | None:
    """The ``DurablePlansPlugin`` a client carries, if any."""
    for plugin in client.config()["plugins"]:
        if isinstance(plugin, DurablePlansPlugin):
            return plugin
    return None


def client_carrying(client: Client, plugin: DurablePlansPlugin) -> Client:
    """A client on the same connection as ``client`` whose ``DurablePlansPlugin`` is
    ``plugin``, for building a Worker with it.

    A client's plugins configure every worker built from it; adding a second instance at
    the worker would configure that worker twice. The new client replaces the one the
    client carries and keeps the rest of the client's configuration (namespace,
    interceptors, other plugins, and the payload codec its converter has, unless ``plugin``
    brings its own).
    """
    if plugin_of(client) is plugin:
        return client
    config = client.config()
    # The converter in use, not the one first given: a codec the replaced plugin added
    # must survive the replacement (``_data_converter`` keeps an existing codec).
    config["data_converter"] = client.data_converter
    config["plugins"] = [
        *(p for p in config["plugins"] if not isinstance(p, DurablePlansPlugin)),
        plugin,
    ]
    return Client(**config)
