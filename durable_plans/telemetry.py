"""A worker's telemetry: Prometheus metrics and OpenTelemetry traces, set up once per process.

Metrics: with ``DPLAN_METRICS_PORT`` the worker's Temporal runtime serves ``/metrics``
(Prometheus text) on that port. The SDK's own runtime metrics (workflow and activity task
latencies, slots, polls...) and ours (``activities/observe.py``) are recorded on the same
runtime meter, so one endpoint carries both. Ours are recorded by activities only, once
per real attempt: activities never replay.

Traces: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` the worker installs Temporal's replay-safe
tracer provider (``temporalio.contrib.opentelemetry.create_tracer_provider``) exporting
over OTLP/HTTP, and ``DurablePlansPlugin`` adds Temporal's ``OpenTelemetryInterceptor``
(context carried in the headers of every activity, child workflow and continue-as-new) and
``WorkflowSpans`` below. Span and trace ids made inside a workflow come from the workflow's
deterministic random and spans are not ended while history is replayed, so a worker that
replays a plan after a restart (or a replayer) produces no second copy of a span: one
trace per plan, whichever workers ran it.

Everything here is per process because a Prometheus port and the global tracer provider
are; ``install`` is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import opentelemetry.trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from temporalio import workflow
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from durable_plans._errors import TelemetryError
from durable_plans.core_log import core_logging

if TYPE_CHECKING:
    from durable_plans.settings import Settings

__all__ = [
    "HISTOGRAM_BUCKETS",
    "TRACER_NAME",
    "Telemetry",
    "TelemetryError",
    "WorkflowSpans",
    "install",
    "metrics_runtime",
    "tracing_installed",
]

TRACER_NAME = "durable_plans"
DEFAULT_SERVICE_NAME = "dplan-worker"

# Latencies in seconds. LLM requests take from a fraction of a second to minutes; store
# operations take milliseconds. Cost per request in USD.
HISTOGRAM_BUCKETS: dict[str, tuple[float, ...]] = {
    "dplan_llm_request_duration_seconds": (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
    "dplan_session_store_op_duration_seconds": (
        0.0005,
        0.001,
        0.0025,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        1,
    ),
    "dplan_llm_cost_usd": (0.0001, 0.001, 0.01, 0.1, 1, 10),
}


def metrics_runtime(bind_address: str) -> Runtime:
    """A Temporal runtime serving Prometheus metrics on ``bind_address`` (``host:port``):
    counters end in ``_total``, durations are seconds."""
    return Runtime(
        telemetry=TelemetryConfig(
            logging=core_logging(),
            metrics=PrometheusConfig(
                bind_address=bind_address,
                counters_total_suffix=True,
                durations_as_seconds=True,
                histogram_bucket_overrides={k: list(v) for k, v in HISTOGRAM_BUCKETS.items()},
            ),
        )
    )


@dataclass
class Telemetry:
    """What ``install`` set up in this process."""

    runtime: Runtime | None = None
    tracer_provider: Any = None  # a ReplaySafeTracerProvider

    def flush(self) -> None:
        """Export the spans still buffered (a worker stopping politely calls it; a
        SIGKILLed one loses what it had not exported yet, as any process would)."""
        if self.tracer_provider is not None:
            self.tracer_provider.force_flush()


_installed: Telemetry | None = None


def install(settings: Settings) -> Telemetry:
    """Metrics and tracing for this worker process, as ``settings`` ask; call before the
    worker's client connects (the metrics runtime becomes the default runtime). What is
    already set up in the process stays as it is."""
    global _installed
    telemetry = _installed or Telemetry()
    if settings.metrics_port is not None and telemetry.runtime is None:
        try:
            telemetry.runtime = metrics_runtime(f"0.0.0.0:{settings.metrics_port}")
        except (ValueError, RuntimeError) as err:  # the port is taken, most likely
            raise TelemetryError(
                f"DPLAN_METRICS_PORT={settings.metrics_port}: cannot serve metrics: {err}"
            ) from None
        Runtime.set_default(telemetry.runtime, error_if_already_set=False)
    if settings.otlp_endpoint is not None and telemetry.tracer_provider is None:
        telemetry.tracer_provider = _otlp_tracer_provider()
        opentelemetry.trace.set_tracer_provider(telemetry.tracer_provider)
    _installed = telemetry
    return telemetry


def _otlp_tracer_provider() -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from temporalio.contrib.opentelemetry import create_tracer_provider

    # The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT (and its headers, timeout...) itself.
    resource = Resource.create(
        {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: DEFAULT_SERVICE_NAME}
    )
    provider = create_tracer_provider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def tracing_installed() -> bool:
    """Whether this process's global tracer provider is Temporal's replay-safe one (the
    only kind ``OpenTelemetryInterceptor`` accepts on a worker)."""
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider

    return isinstance(opentelemetry.trace.get_tracer_provider(), ReplaySafeTracerProvider)


# --------------------------------------------------------------------------- workflow spans


class WorkflowSpans(Interceptor):
    """One span per workflow run, around its whole execution: ``plan <id>``, ``subtask
    <id>`` (``sub-agent <agent>`` for a spawned one), ``conversation <id>``.

    It sits inside ``OpenTelemetryInterceptor``, which attaches the context the starter
    or the parent workflow sent in the headers, so a subtask's span is a child of its
    plan's and an LLM call's span (``activities/observe.py``) a child of its subtask's.
    No workflow code changes, and no command either: spans are not history events.
    """

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _WorkflowSpansInbound


class _WorkflowSpansInbound(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        name, attributes = _describe(input)
        tracer = opentelemetry.trace.get_tracer(TRACER_NAME)
        with _workflow_span(tracer, name, attributes) as span:
            try:
                return await super().execute_workflow(input)
            except BaseException as exc:
                if isinstance(exc, Exception) and workflow.is_failure_exception(exc):
                    # The run ends Failed: say so on its span, which still ends.
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                    span.record_exception(exc)
                elif not isinstance(exc, (workflow.ContinueAsNewError, asyncio.CancelledError)):
                    # A workflow-task failure: the task runs again, so this span must not
                    # end (the replay-safe span skips ending once it holds an exception).
                    span.record_exception(exc)
                raise


@contextlib.contextmanager
def _workflow_span(tracer: Any, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
    with tracer.start_as_current_span(
        name,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def _describe(input: ExecuteWorkflowInput) -> tuple[str, dict[str, Any]]:
    info = workflow.info()
    attributes: dict[str, Any] = {
        "temporal.workflow.id": info.workflow_id,
        "temporal.workflow.type": info.workflow_type,
    }
    arg = input.args[0] if input.args else None
    subtask = getattr(arg, "subtask", None)
    if subtask is not None:
        depth = int(getattr(arg, "depth", 0) or 0)
        attributes.update(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": subtask.agent,
                "dplan.subtask.id": subtask.id,
                "dplan.depth": depth,
            }
        )
        name = f"sub-agent {subtask.agent}" if depth else f"subtask {subtask.id}"
        return name, attributes
    if info.workflow_type == "PlanWorkflow":
        attributes["dplan.plan.id"] = info.workflow_id
        return f"plan {info.workflow_id}", attributes
    if info.workflow_type == "SessionWorkflow":
        attributes["dplan.session.workflow_id"] = info.workflow_id
        return f"conversation {info.workflow_id}", attributes
    return info.workflow_type, attributes
