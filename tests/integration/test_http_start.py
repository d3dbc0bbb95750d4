"""A plan started through Temporal's own HTTP API, as the curl in docs/service.md does it.

A service without a Temporal SDK POSTs the plan file's JSON to the frontend's
``/api/v1/namespaces/{ns}/workflows/{id}``; no HTTP server of ours is involved. The
suite's shared dev server picks its HTTP port at random and does not say which, so this
module runs its own dev server with a known ``--http-port`` (its tests use it through the
``client`` fixture, which the shared ``harness`` fixture builds its worker on).
"""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from durable_plans.dev_server import dynamic_config_args
from durable_plans.domain.failures import FailureType, invalid_plan_problems
from durable_plans.domain.models import PlanReport, PlanStatus
from durable_plans.embedded import DEV_SERVER_STARTUP
from durable_plans.plugin import DurablePlansPlugin
from tests.integration.conftest import Harness, temporal_binary

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0  # a guard against a hang, not a measurement


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class HttpServer:
    def __init__(self, env: WorkflowEnvironment, http_port: int) -> None:
        self.env = env
        self.base = f"http://127.0.0.1:{http_port}"


@pytest.fixture(scope="module")
async def http_server() -> AsyncIterator[HttpServer]:
    port = _free_port()
    env = await WorkflowEnvironment.start_local(
        dev_server_startup_timeout=DEV_SERVER_STARTUP,
        dev_server_existing_path=temporal_binary(),
        plugins=[DurablePlansPlugin()],
        dev_server_log_level="error",
        dev_server_extra_args=["--http-port", str(port), *dynamic_config_args()],
    )
    try:
        yield HttpServer(env, port)
    finally:
        await env.shutdown()


@pytest.fixture
async def client(http_server: HttpServer) -> Client:
    """Overrides conftest's: ``harness`` runs its worker on this module's server."""
    return http_server.env.client


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """What the curl in docs/service.md sends: ``curl -X POST URL -H
    'content-type: application/json' -d BODY``."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _start_body(task_queue: str, plan: Any) -> dict[str, Any]:
    # The HTTP API's payload shorthand: each JSON value in "input" becomes one json/plain
    # payload, so the plan file goes in as is.
    return {
        "workflowType": {"name": "PlanWorkflow"},
        "taskQueue": {"name": task_queue},
        "input": [plan],
    }


async def test_a_plain_http_post_starts_a_plan_and_a_bad_one_fails_invalid(
    harness: Harness, http_server: HttpServer
) -> None:
    plan = json.loads((REPO / "examples" / "weather_app.json").read_text())
    plan["id"] = f"http-{uuid.uuid4().hex[:8]}"
    url = f"{http_server.base}/api/v1/namespaces/{harness.client.namespace}/workflows/{plan['id']}"
    status, body = await asyncio.to_thread(_post, url, _start_body(harness.task_queue, plan))
    assert status == 200, body
    assert body.get("runId"), body

    report = await asyncio.wait_for(
        harness.client.get_workflow_handle(plan["id"], result_type=PlanReport).result(),
        DEADLINE_S,
    )
    assert report.plan_id == plan["id"]
    assert report.status is PlanStatus.COMPLETED
    assert report.counts.completed == len(plan["subtasks"])

    bad_id = f"http-bad-{uuid.uuid4().hex[:8]}"
    bad_url = f"{http_server.base}/api/v1/namespaces/{harness.client.namespace}/workflows/{bad_id}"
    bad = {"goal": "g", "subtasks": [{"id": "a", "description": "d", "agent": "wizard"}]}
    status, body = await asyncio.to_thread(_post, bad_url, _start_body(harness.task_queue, bad))
    assert status == 200, body
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(harness.client.get_workflow_handle(bad_id).result(), DEADLINE_S)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == FailureType.INVALID_PLAN
    assert any("unknown agent 'wizard'" in line for line in invalid_plan_problems(cause))
