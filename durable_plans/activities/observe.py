"""What activities tell those watching a plan: Prometheus metrics and OpenTelemetry spans.

Recorded here, in activities, and nowhere in workflow code: an activity attempt runs once
and never replays, so every count is one real attempt (a call retried after a crash is
counted again, because it was made again). The meter is the activity's own
(``activity.metric_meter()``: the worker's Temporal runtime, which serves them when
``DPLAN_METRICS_PORT`` is set and drops them otherwise); spans go to the global tracer
provider, a no-op unless the worker traces (``durable_plans/telemetry.py``).

Metrics (Prometheus names; each also carries ``namespace``, ``task_queue`` and
``activity_type``):

* ``dplan_llm_requests_total{model, agent, outcome, error_type}``: requests sent to the
  provider; ``outcome`` is ``ok`` or ``error``, ``error_type`` the classified failure
  (``RateLimited``, ``ServerError``, ``InvalidResponse``...) or ``none``;
* ``dplan_llm_request_duration_seconds{model, outcome}``: their latency;
* ``dplan_llm_tokens_total{model, agent, kind}``: ``input`` and ``output`` tokens;
* ``dplan_llm_cost_usd{model, agent}``: cost per answered request (its ``_sum`` is the
  cost spent, its ``_count`` the answers paid for);
* ``dplan_tool_calls_total{tool, outcome}``: tool calls executed (``ok``/``error``);
* ``dplan_budget_refusals_total``: LLM calls refused because the budget was spent;
* ``dplan_session_store_op_duration_seconds{op}``: session-store operations.

Spans follow OpenTelemetry's gen_ai conventions: ``chat <model>`` (``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons``) and
``execute_tool <name>`` (``gen_ai.tool.name``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, cast

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from temporalio import activity
from temporalio.common import MetricMeter
from temporalio.exceptions import ApplicationError

from durable_plans.domain.models import Usage
from durable_plans.session_store import SessionStore

TRACER_NAME = "durable_plans"

LLM_REQUESTS = "dplan_llm_requests"
LLM_DURATION = "dplan_llm_request_duration_seconds"
LLM_TOKENS = "dplan_llm_tokens"
LLM_COST = "dplan_llm_cost_usd"
TOOL_CALLS = "dplan_tool_calls"
BUDGET_REFUSALS = "dplan_budget_refusals"
STORE_DURATION = "dplan_session_store_op_duration_seconds"


def _meter() -> MetricMeter | None:
    """The current activity's meter; None outside an activity (nothing to count)."""
    if not activity.in_activity():
        return None
    try:
        return activity.metric_meter()
    except RuntimeError:
        return None


def _tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def error_type_of(exc: BaseException) -> str:
    """The classified failure an activity raises (``ApplicationError.type``), else the
    exception's class name."""
    if isinstance(exc, ApplicationError) and exc.type:
        return exc.type
    return type(exc).__name__


class LlmRequest:
    """One request to the provider, as it is being observed (``llm_request``)."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self.usage: Usage | None = None
        self.error_type: str | None = None

    def answered(self, usage: Usage) -> None:
        """The provider answered: its tokens and cost are spent, whatever happens next."""
        self.usage = usage
        self.span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
        self.span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
        self.span.set_attribute("dplan.cost_usd", usage.cost_usd)

    def refused(self, error_type: str) -> None:
        """The provider refused the request, and the caller handles that itself."""
        self.error_type = error_type

    def finished(self, finish_reason: str | None) -> None:
        if finish_reason:
            self.span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])


@contextlib.contextmanager
def llm_request(model: str, agent: str, *, call_id: str | None = None) -> Iterator[LlmRequest]:
    """Around one provider request (and the parsing of its answer): a ``chat`` span, the
    request counter and latency, and, once ``answered``, tokens and cost. ``call_id`` (the
    answer's message id) and the attempt number tell a retried call's spans apart.

    An exception leaving the block is the request's failure (its type, classified when
    it is an ``ApplicationError``, is the ``error_type``)."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.agent.name": agent,
    }
    if call_id:
        attributes["dplan.call.id"] = call_id
    if activity.in_activity():
        attributes["dplan.attempt"] = activity.info().attempt
    started = time.perf_counter()
    with _tracer().start_as_current_span(
        f"chat {model}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        request = LlmRequest(span)
        outcome, error_type = "ok", "none"
        try:
            yield request
        except BaseException as exc:
            outcome, error_type = "error", error_type_of(exc)
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, error_type))
            raise
        else:
            if request.error_type is not None:
                outcome, error_type = "error", request.error_type
                span.set_attribute("error.type", error_type)
                span.set_status(Status(StatusCode.ERROR, error_type))
        finally:
            _record_llm(model, agent, outcome, error_type, time.perf_counter() - started, request)


def _record_llm(
    model: str, agent: str, outcome: str, error_type: str, seconds: float, req: LlmRequest
) -> None:
    meter = _meter()
    if meter is None:
        return
    meter.create_counter(LLM_REQUESTS, "LLM requests sent to the provider").add(
        1, {"model": model, "agent": agent, "outcome": outcome, "error_type": error_type}
    )
    meter.create_histogram_float(LLM_DURATION, "LLM request latency", "s").record(
        seconds, {"model": model, "outcome": outcome}
    )
    if req.usage is None:
        return
    tokens = meter.create_counter(LLM_TOKENS, "tokens of answered LLM requests")
    tokens.add(req.usage.prompt_tokens, {"model": model, "agent": agent, "kind": "input"})
    tokens.add(req.usage.completion_tokens, {"model": model, "agent": agent, "kind": "output"})
    meter.create_histogram_float(LLM_COST, "cost of one answered LLM request", "USD").record(
        req.usage.cost_usd, {"model": model, "agent": agent}
    )


@contextlib.contextmanager
def tool_span(operation: str = "execute_tool") -> Iterator[Span]:
    """An ``execute_tool`` span around one tool call's attempt; ``tool_call`` names it."""
    with _tracer().start_as_current_span(
        operation, kind=SpanKind.INTERNAL, attributes={"gen_ai.operation.name": operation}
    ) as span:
        yield span


def tool_call(name: str, ok: bool) -> None:
    """A tool call was executed (not merely found answered before a crash)."""
    span = trace.get_current_span()
    span.update_name(f"execute_tool {name}")
    span.set_attribute("gen_ai.tool.name", name)
    span.set_attribute("dplan.tool.ok", ok)
    meter = _meter()
    if meter is not None:
        meter.create_counter(TOOL_CALLS, "tool calls executed").add(
            1, {"tool": name, "outcome": "ok" if ok else "error"}
        )


def budget_refused() -> None:
    meter = _meter()
    if meter is not None:
        meter.create_counter(BUDGET_REFUSALS, "LLM calls refused: budget spent").add(1)


# The store's operations (``SessionStore``); anything else passes through untimed.
STORE_OPS = frozenset(
    {
        "create_session",
        "get_session",
        "update_session",
        "append",
        "read",
        "count",
        "replace",
        "snapshot",
        "restore",
        "read_snapshot",
        "delete_snapshot",
        "has_snapshot",
        "charge",
        "total_usage",
    }
)


class TimedStore:
    """A session store whose every operation's latency is recorded (inside activities).

    Wraps whichever backend the worker uses, so SQLite and PostgreSQL are measured the
    same way, at the one place activities reach them.
    """

    def __init__(self, store: SessionStore) -> None:
        self._store = store

    @property
    def inner(self) -> SessionStore:
        return self._store

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._store, name)
        if name not in STORE_OPS:
            return target

        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await cast(Callable[..., Awaitable[Any]], target)(*args, **kwargs)
            finally:
                meter = _meter()
                if meter is not None:
                    meter.create_histogram_float(
                        STORE_DURATION, "session-store operation latency", "s"
                    ).record(time.perf_counter() - started, {"op": name})

        return timed


def timed_store(store: SessionStore) -> SessionStore:
    return cast(SessionStore, TimedStore(store))
