"""One trace per plan, through a worker SIGKILL and a replay, without a duplicate span
(but the one a killed worker exported for a workflow task the next worker runs again).

Two real `dplan-worker` processes export over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT) to
a receiver in this test that keeps the spans in memory; the first is SIGKILLed once it has
exported the first subtask's span, the second finishes the plan. Then a Replayer with
tracing on replays every history into an in-memory exporter, which must stay empty.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import opentelemetry.trace
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import create_tracer_provider
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from durable_plans.cli.replay_command import replay_history
from durable_plans.domain.ids import subtask_workflow_id
from durable_plans.domain.models import PlanStatus
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.testing import AgentScenario, ChatRequest, FakeProvider, Reply
from tests.integration.chaos_support import wait_until
from tests.integration.plans import make_plan, start_plan_workflow
from tests.integration.workers import WorkerProcess, new_workspace, worker_env

pytestmark = pytest.mark.integration

# b's and c's requests are slow while the first worker lives (``SlowUntilKilled``), so the
# SIGKILL that follows a's span lands before any of them is answered: nothing of b, c or d
# has ended on the first worker.
TRACED_PLAN = [
    ("a", "Inspect the repository", []),
    ("b", "Summarise the notes [call:delegate_to_sub_agent] [slow:10000x1]", ["a"]),
    ("c", "Investigate [call:spawn_subagent] [agent:ask] [slow:10000x1]", ["a"]),
    ("d", "Wrap up", ["b", "c"]),
]


@dataclass
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


class OtlpReceiver:
    """An OTLP/HTTP trace endpoint (protobuf, as the SDK's exporter posts it)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._runner: web.AppRunner | None = None
        self.endpoint = ""

    async def _traces(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource_spans in message.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            service=str(resource.get("service.name")),
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    async def start(self) -> None:
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.endpoint = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@dataclass
class SlowUntilKilled:
    """The usual agent, whose ``[slow:...]`` delays hold only until ``killed`` is set.

    Before the SIGKILL they keep b's and c's calls on the first worker unanswered; after
    it the second worker's calls (every one a request the provider has not seen, since
    the first worker rarely got to send b's or c's) are answered without them: the slow
    answers are the kill's guard, not what the second worker is tested on."""

    killed: bool = False
    agent: AgentScenario = field(default_factory=AgentScenario)

    def __call__(self, request: ChatRequest) -> Reply:
        reply = self.agent(request)
        return dataclasses.replace(reply, delay_ms=0.0) if self.killed else reply


class StartedSpans(SpanProcessor):
    """Names of the spans begun (an exporter only ever sees ended ones)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.names.add(span.name)


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    r = OtlpReceiver()
    await r.start()
    try:
        yield r
    finally:
        await r.stop()


async def test_one_trace_per_plan_through_a_sigkill_and_a_replay(
    temporal_env: WorkflowEnvironment, client: Client, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    new_workspace(tmp_path, "# tracing test\n")
    tq = f"tracing-{uuid.uuid4().hex[:8]}"
    plan = make_plan(TRACED_PLAN, prefix="traced", agent="orchestrator")

    scenario = SlowUntilKilled()
    async with FakeProvider(scenario, latency_ms=300) as provider:
        base = {
            **worker_env(client, tmp_path, provider, tq),
            "DPLAN_SUBAGENT_MODEL": "openai/cheap-model",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            # The killed worker's LLM calls are retried 2 s after its last heartbeat.
            "DPLAN_LLM_HEARTBEAT_S": "2",
        }
        first = WorkerProcess({**base, "OTEL_SERVICE_NAME": "worker-1"}, tmp_path / "w1.log")
        second: WorkerProcess | None = None
        try:
            first.start()
            await asyncio.to_thread(first.wait_ready)
            handle = await start_plan_workflow(client, plan, tq)
            # The first subtask's span, exported by the first worker: then the crash.
            await wait_until(
                lambda: any(s.name == "subtask a" for s in receiver.spans),
                timeout_s=60,
                what="the span of subtask a from the first worker",
            )
            first.kill()
            scenario.killed = True
            second = WorkerProcess({**base, "OTEL_SERVICE_NAME": "worker-2"}, tmp_path / "w2.log")
            second.start()
            await asyncio.to_thread(second.wait_ready)
            report = await asyncio.wait_for(handle.result(), timeout=180)
        finally:
            # In a thread: the receiver runs on this event loop, and a worker stopping
            # politely (SIGTERM) exports its last spans to it before it exits.
            await asyncio.to_thread(first.stop)
            if second is not None:
                await asyncio.to_thread(second.stop)

    assert report.status is PlanStatus.COMPLETED
    received = receiver.spans
    services = Counter(s.service for s in received)
    assert services["worker-1"] > 0 and services["worker-2"] > 0, services

    # One trace, and no span twice, whichever worker ran or replayed what, but for one
    # the killed worker exported for a workflow task it never completed: the next worker
    # runs that task again and exports the same span, the same id, name and parent (a
    # trace backend keeps one). Any other repeat is a bug.
    assert len({s.trace_id for s in received}) == 1, Counter(s.trace_id for s in received)
    copies: dict[str, list[ReceivedSpan]] = {}
    for s in received:
        copies.setdefault(s.span_id, []).append(s)
    for same in copies.values():
        if len(same) > 1:
            assert sorted(c.service for c in same) == ["worker-1", "worker-2"], same
            assert len({(c.name, c.parent_id, c.trace_id) for c in same}) == 1, same
    spans = [same[0] for same in copies.values()]  # as first exported
    by_name = Counter(s.name for s in spans)
    once = [f"plan {plan.id}", *(f"subtask {sid}" for sid, _, _ in TRACED_PLAN), "sub-agent ask"]
    once += ["execute_tool delegate_to_sub_agent", "chat openai/cheap-model"]
    for name in once:
        assert by_name[name] == 1, (name, by_name)
    attempts = Counter(
        (s.attributes["dplan.call.id"], s.attributes["dplan.attempt"])
        for s in spans
        if s.name.startswith("chat ")
    )
    assert [k for k, n in attempts.items() if n > 1] == []

    # The tree: plan > subtasks > LLM calls, tools, delegations, sub-agents.
    named = {s.name: s for s in spans}
    plan_span = named[f"plan {plan.id}"]
    assert plan_span.parent_id == "" and plan_span.service == "worker-2"
    assert named["subtask a"].service == "worker-1"
    for sid, _, _ in TRACED_PLAN:
        assert named[f"subtask {sid}"].parent_id == plan_span.span_id, sid
    d = named["subtask d"]
    d_chats = [s for s in spans if s.name == "chat openai/fake-model" and s.parent_id == d.span_id]
    assert len(d_chats) == 2  # a tool call, then the answer
    for chat in d_chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "openai/fake-model"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert chat.attributes["gen_ai.response.finish_reasons"] in (["stop"], ["tool_calls"])
    assert any(s.name == "execute_tool list_dir" and s.parent_id == d.span_id for s in spans)
    delegation = named["execute_tool delegate_to_sub_agent"]
    assert delegation.parent_id == named["subtask b"].span_id
    assert named["chat openai/cheap-model"].parent_id == delegation.span_id
    assert named["sub-agent ask"].parent_id == named["subtask c"].span_id
    # Nothing of b, c or d ended on the first worker: whatever of theirs it had begun was
    # done again by the second, exported once, from there.
    a_id = named["subtask a"].span_id
    first_worker = [s for s in spans if s.service == "worker-1"]
    assert {s.parent_id for s in first_worker if s.name != "subtask a"} == {a_id}

    # A replay (what a new worker does after a restart) exports nothing at all.
    exporter = InMemorySpanExporter()
    started = StartedSpans()
    provider_ = create_tracer_provider()
    provider_.add_span_processor(started)
    provider_.add_span_processor(SimpleSpanProcessor(exporter))
    opentelemetry.trace.set_tracer_provider(provider_)
    assert isinstance(opentelemetry.trace.get_tracer_provider(), type(provider_)), (
        "another test set the global tracer provider first"
    )
    replayer = Replayer(workflows=[], plugins=[DurablePlansPlugin(tracing=True)])
    workflow_ids = [plan.id, *(subtask_workflow_id(plan.id, sid) for sid, _, _ in TRACED_PLAN)]
    for wid in workflow_ids:
        history = await client.get_workflow_handle(wid).fetch_history()
        result = await replay_history(replayer, history)
        assert result.replay_failure is None, (wid, result.replay_failure)
    # The replay did trace (it began the plan's and subtasks' spans) and ended none.
    assert started.names >= {f"plan {plan.id}", "subtask a", "subtask d"}, started.names
    assert exporter.get_finished_spans() == ()
