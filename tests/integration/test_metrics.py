"""The worker's /metrics (DPLAN_METRICS_PORT) against the fake provider's own log.

A real `dplan-worker` process serves the metrics; plans with failures run through it
(a 500 then success, a 429 then success, a 400 that fails its subtask, a dependent that is
skipped, a budget that refuses the second call); then /metrics is read with Prometheus'
own parser, and every count must equal what the provider logged it served.
"""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_plans.domain.models import Budget, PlanStatus
from durable_plans.testing import FakeProviderProcess
from tests.integration.chaos_support import free_port
from tests.integration.plans import make_plan, run_plan
from tests.integration.workers import WorkerProcess, new_workspace, worker_env

pytestmark = pytest.mark.integration

FAILING_PLAN = [
    ("look", "Inspect the repository", []),
    ("flaky", "Write module b [flaky:500x1]", []),
    ("limited", "Write module c [flaky:429x1:retry-after-ms=50]", []),
    ("broken", "Summarise the logs [fail:400]", []),
    ("after", "Use the summary", ["broken"]),
]
# How activities/llm_errors.py classifies the provider's HTTP statuses.
ERROR_TYPE_OF_STATUS = {500: "ServerError", 429: "RateLimit", 400: "BadRequest"}


def scrape(port: int) -> list[Sample]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def total(samples: list[Sample], name: str, **labels: str) -> float:
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def test_metrics_count_what_the_provider_served(
    temporal_env: WorkflowEnvironment, client: Client, tmp_path: Path
) -> None:
    new_workspace(tmp_path, "# metrics test\n")
    tq = f"metrics-{uuid.uuid4().hex[:8]}"
    port = free_port()
    with FakeProviderProcess(tmp_path / "requests.jsonl") as provider:
        env = {**worker_env(client, tmp_path, provider, tq), "DPLAN_METRICS_PORT": str(port)}
        worker = WorkerProcess(env, tmp_path / "worker.log").start()
        try:
            await asyncio.to_thread(worker.wait_ready)
            report, _ = await run_plan(client, make_plan(FAILING_PLAN, prefix="metrics"), tq)
            # Budget of 1 token: the first call is made, the second refused before it is sent.
            budgeted = make_plan([("spend", "Write module d [turns:2]", [])], prefix="budget")
            budgeted = budgeted.model_copy(update={"budget": Budget(max_tokens=1)})
            refused, _ = await run_plan(client, budgeted, tq)
            samples = await asyncio.to_thread(scrape, port)
        finally:
            worker.stop()
        entries = provider.log_entries()

    assert report.status is PlanStatus.FAILED
    assert (report.counts.completed, report.counts.failed, report.counts.skipped) == (3, 1, 1)
    assert refused.status is PlanStatus.FAILED
    assert refused.subtasks[0].error is not None
    assert refused.subtasks[0].error.type == "BudgetExceeded"

    completions = [e for e in entries if e["kind"] == "completion"]
    failed = [e for e in entries if e["kind"] != "completion"]
    errors = Counter(ERROR_TYPE_OF_STATUS[e["status"]] for e in failed)
    assert errors == {"ServerError": 1, "RateLimit": 1, "BadRequest": 1}, entries

    requests = "dplan_llm_requests_total"
    assert total(samples, requests) == len(entries)
    assert total(samples, requests, outcome="ok", error_type="none") == len(completions)
    for error_type, n in errors.items():
        assert total(samples, requests, outcome="error", error_type=error_type) == n, error_type
    assert total(samples, requests, model="openai/fake-model", agent="coder") == len(entries)

    tokens = "dplan_llm_tokens_total"
    served_in = sum(e["usage"]["prompt_tokens"] for e in completions)
    served_out = sum(e["usage"]["completion_tokens"] for e in completions)
    assert served_in > 0 and served_out > 0
    assert total(samples, tokens, kind="input") == served_in
    assert total(samples, tokens, kind="output") == served_out
    assert total(samples, "dplan_llm_cost_usd_count") == len(completions)

    latency = "dplan_llm_request_duration_seconds_count"
    assert total(samples, latency) == len(entries)

    called = Counter(name for e in completions for name in e["tool_calls"])
    assert called, "the plan made no tool call"
    for tool, n in called.items():
        assert total(samples, "dplan_tool_calls_total", tool=tool, outcome="ok") == n, tool
    assert total(samples, "dplan_tool_calls_total") == called.total()

    assert total(samples, "dplan_budget_refusals_total") == 1
    assert total(samples, "dplan_session_store_op_duration_seconds_count", op="append") > 0
    # The Temporal SDK's own runtime metrics are on the same endpoint.
    assert any(s.name.startswith("temporal_") for s in samples)
