"""Plan-end webhooks on a real Temporal dev server, delivered to real local HTTP receivers.

Every receiver verifies the Standard Webhooks signature with the specification's reference
package (``standardwebhooks``), independently of our sender. The cases: a receiver that
fails its first attempts, one that is down until later, one that refuses (400), one that
never recovers within the delivery window; plans that end completed, failed and
cancelled. No timing is asserted: waits are for events, and backoffs are the defaults'
first steps, shortened (``NOTIFY_INITIAL_BACKOFF_S``).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError, CancelledError

from durable_plans.activities.log import configure_logging
from durable_plans.cli.run_command import status_command
from durable_plans.client._plans import notification_outcome
from durable_plans.domain.ids import plan_run_id, webhook_message_id
from durable_plans.domain.models import (
    DeliveryOutcome,
    DeliveryStatus,
    Notify,
    Plan,
    PlanReport,
    PlanStatus,
)
from tests.integration.chaos_support import wait_until
from tests.integration.conftest import Harness, provider_settings, running_worker
from tests.integration.gates import GatedProvider, first_call_of
from tests.integration.plans import make_plan, workflow_status
from tests.integration.replay import assert_replays
from tests.integration.webhook_receiver import Answer, WebhookReceiver, new_secret

pytestmark = pytest.mark.integration

Status = WorkflowExecutionStatus


@pytest.fixture
async def provider() -> AsyncIterator[GatedProvider]:
    """The fake provider, able to hold a call (the cancelled plan's) at a gate."""
    p = GatedProvider(latency_ms=0)
    async with p:
        yield p


# The first wait between webhook attempts (``DPLAN_NOTIFY_INITIAL_BACKOFF_S``; the default
# is a second, doubling): retries, not their pace, are what these tests are about.
NOTIFY_INITIAL_BACKOFF_S = 0.25


@asynccontextmanager
async def notify_harness(
    client: Client, provider: GatedProvider, tmp_path: Path, *, llm_local: bool = True
) -> AsyncIterator[Harness]:
    """conftest's ``harness`` with a short first webhook backoff."""
    settings = provider_settings(
        client,
        provider,
        tmp_path,
        notify_initial_backoff_s=NOTIFY_INITIAL_BACKOFF_S,
        llm_local=llm_local,
    )
    (settings.workspace / "README.md").write_text("# demo workspace\n")
    async with running_worker(client, settings) as (worker, store):
        yield Harness(client, settings, store, provider, worker)


@pytest.fixture
async def harness(
    client: Client, provider: GatedProvider, tmp_path: Path
) -> AsyncIterator[Harness]:
    async with notify_harness(client, provider, tmp_path) as h:
        yield h


@pytest.fixture
async def regular_harness(
    client: Client, provider: GatedProvider, tmp_path: Path
) -> AsyncIterator[Harness]:
    """``harness`` with its subtasks' LLM calls as regular activities
    (``DPLAN_LLM_LOCAL=0``): a child cancelled mid-call then learns of it at once, where a
    local call's child learns of it only when its in-flight workflow task is next completed
    (80 % of the 10 s workflow task timeout; workflows/llm_call.py). The cancellation is
    what is delivered here, not how a child's call learns of it."""
    async with notify_harness(client, provider, tmp_path, llm_local=False) as h:
        yield h


def with_notify(plan: Plan, url: str, env: str, deliver_for_s: float | None = None) -> Plan:
    notify = Notify(webhook=url, secret_env=env, deliver_for_s=deliver_for_s)
    return plan.model_copy(update={"notify": notify})


async def finish(handle: WorkflowHandle[Any, PlanReport]) -> tuple[PlanReport, str]:
    """The plan's report and how its workflow ended: ``completed`` or the failure type."""
    try:
        return await handle.result(), "completed"
    except WorkflowFailureError as err:
        cause = err.cause
        assert isinstance(cause, ApplicationError), cause
        return PlanReport.model_validate(cause.details[0]), cause.type or ""


async def outcome(client: Client, plan_id: str) -> DeliveryOutcome:
    found = await notification_outcome(client, plan_id)
    assert found is not None, "no notify outcome in the memo"
    return found


def assert_signed_deliveries(receiver: WebhookReceiver, plan: Plan, run_id: str) -> None:
    """Every request verified; one webhook-id across retries; sane, ordered timestamps."""
    assert receiver.received, "the receiver saw nothing"
    assert all(r.verified for r in receiver.received), [r.error for r in receiver.received]
    expected_id = webhook_message_id(plan_run_id(plan.id, run_id))
    assert {r.headers["webhook-id"] for r in receiver.received} == {expected_id}
    stamps = [int(r.headers["webhook-timestamp"]) for r in receiver.received]
    assert stamps == sorted(stamps)
    assert all(abs(s - time.time()) < 600 for s in stamps)
    assert all(r.headers["content-type"] == "application/json" for r in receiver.received)
    bodies = {r.body for r in receiver.received}
    assert len(bodies) == 1, "every attempt sends the same report"


async def assert_no_secret(
    handle: WorkflowHandle[Any, Any], secret: str, capfd: pytest.CaptureFixture[str], logs: str
) -> None:
    """Neither the secret nor its key bytes' base64 appear in the history or any log."""
    history = (await handle.fetch_history()).to_json()
    key_b64 = secret.removeprefix("whsec_")
    out, err = capfd.readouterr()
    # The worker's log lines about the delivery were captured, so their absence of the
    # secret means something.
    assert "webhook.unavailable" in out + err + logs
    for where, text in (("history", history), ("output", out + err), ("logs", logs)):
        assert secret not in text, f"the secret is in the {where}"
        assert key_b64 not in text, f"the secret's key is in the {where}"
        assert base64.b64decode(key_b64).hex() not in text


@pytest.fixture
def worker_logging() -> Iterator[None]:
    """The worker's log pipeline as a worker process sets it up, whatever an earlier test
    in this process did to logging (the secret check needs the delivery's log lines); taken
    down afterwards, before pytest closes the stream it writes to."""
    configure_logging(json=True, level="DEBUG")
    yield
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == "dplan-structlog"]:
        root.removeHandler(handler)
    structlog.reset_defaults()


async def test_completed_plan_is_delivered_after_failed_attempts(
    worker_logging: None,
    harness: Harness,
    secret_env: tuple[str, str],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    env, secret = secret_env
    caplog.set_level("DEBUG")
    script = [Answer(500, body="oops"), Answer(429, {"Retry-After": "1"}), Answer(200)]
    async with WebhookReceiver(secret, script) as receiver:
        plan = with_notify(make_plan([("a", "Write the code", [])]), receiver.url, env)
        handle = await harness.start(plan)
        report, ended = await finish(handle)

    assert ended == "completed" and report.status is PlanStatus.COMPLETED
    assert [r.answered for r in receiver.received] == [500, 429, 200]
    assert_signed_deliveries(receiver, plan, handle.first_execution_run_id or "")
    sent = receiver.received[-1].report
    assert PlanReport.model_validate(sent) == report  # the body is the report, as returned
    # ... where the plan's work is included: its result branch, published before the POST.
    assert sent["workspace"]["branch"] == f"dplan/{plan.id}"
    assert sent["workspace"]["result"] is not None

    delivered = await outcome(harness.client, plan.id)
    assert delivered.status is DeliveryStatus.DELIVERED
    assert (delivered.attempts, delivered.last_status, delivered.reason) == (3, 200, None)
    assert delivered.webhook_id == receiver.received[0].headers["webhook-id"]
    await assert_no_secret(handle, secret, capfd, caplog.text)
    await assert_replays(harness.client, [plan.id])


async def test_failed_plan_is_delivered_to_a_receiver_that_comes_up_later(
    harness: Harness, secret_env: tuple[str, str]
) -> None:
    env, secret = secret_env
    with socket.socket() as s:  # a free port, closed: connections are refused until later
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/hooks/plan-ended"
    plan = with_notify(
        make_plan([("deps", "Add dependencies [fail:400]", []), ("ui", "Write the UI", ["deps"])]),
        url,
        env,
    )
    handle = await harness.start(plan)

    async def refused_twice() -> bool:
        description = await handle.describe()
        pending = description.raw_description.pending_activities
        return any(a.activity_type.name == "deliver_webhook" and a.attempt >= 3 for a in pending)

    deadline = time.monotonic() + 60
    while not await refused_twice():
        assert time.monotonic() < deadline, "the delivery was never retried"
        await asyncio.sleep(0.05)
    async with WebhookReceiver(secret, [Answer(204)], port=port) as receiver:
        report, ended = await finish(handle)

    # The plan failed, and says so in Temporal, after its report was delivered.
    assert ended == "PlanFailed" and report.status is PlanStatus.FAILED
    assert await workflow_status(harness.client, plan.id) == Status.WORKFLOW_EXECUTION_STATUS_FAILED
    assert_signed_deliveries(receiver, plan, handle.first_execution_run_id or "")
    assert receiver.received[-1].report["status"] == "failed"
    delivered = await outcome(harness.client, plan.id)
    assert delivered.status is DeliveryStatus.DELIVERED
    assert delivered.attempts >= 3 and delivered.last_status == 204
    await assert_replays(harness.client, [plan.id])


async def test_a_refused_delivery_fails_without_changing_the_plan(
    harness: Harness, secret_env: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    env, secret = secret_env
    async with WebhookReceiver(secret, [Answer(400, body="unknown plan")]) as receiver:
        plan = with_notify(make_plan([("a", "Write the code", [])]), receiver.url, env)
        handle = await harness.start(plan)
        report, ended = await finish(handle)

    assert ended == "completed" and report.status is PlanStatus.COMPLETED
    assert await workflow_status(harness.client, plan.id) == (
        Status.WORKFLOW_EXECUTION_STATUS_COMPLETED
    )
    assert [r.answered for r in receiver.received] == [400]  # never retried
    failed = await outcome(harness.client, plan.id)
    assert failed.status is DeliveryStatus.FAILED
    assert (failed.attempts, failed.last_status) == (1, 400)
    assert failed.reason is not None and "unknown plan" in failed.reason

    # `dplan status` shows the delivery; its JSON keeps the report's fields as they are.
    address = harness.client.service_client.config.target_host
    settings = harness.settings.with_overrides(temporal_address=address)
    capsys.readouterr()
    assert await status_command(plan.id, json_output=False, settings=settings) == 0
    assert "webhook: FAILED after 1 attempt: HTTP 400: unknown plan" in capsys.readouterr().out
    assert await status_command(plan.id, json_output=True, settings=settings) == 0
    document = __import__("json").loads(capsys.readouterr().out)
    assert document["notification"]["status"] == "failed"
    del document["notification"]
    assert PlanReport.model_validate(document) == report


async def test_cancelled_plan_is_delivered(
    regular_harness: Harness, secret_env: tuple[str, str]
) -> None:
    harness = regular_harness
    assert isinstance(harness.provider, GatedProvider)
    env, secret = secret_env
    held = harness.provider.gate("slow", 2, first_call_of("Think slowly"))
    async with WebhookReceiver(secret, [Answer(200)]) as receiver:
        plan = with_notify(
            make_plan([("slow", "Think slowly", []), ("after", "Then this", ["slow"])]),
            receiver.url,
            env,
        )
        handle = await harness.start(plan)
        await wait_until(lambda: held.arrived > 0, timeout_s=60, what="the first LLM call")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
        held.release()

    assert isinstance(info.value.cause, CancelledError)
    assert await workflow_status(harness.client, plan.id) == (
        Status.WORKFLOW_EXECUTION_STATUS_CANCELED
    )
    assert_signed_deliveries(receiver, plan, handle.first_execution_run_id or "")
    sent = receiver.received[-1].report
    assert sent["status"] == "cancelled" and sent["counts"]["cancelled"] == 2
    assert (await outcome(harness.client, plan.id)).status is DeliveryStatus.DELIVERED
    await assert_replays(harness.client, [plan.id])


async def test_delivery_gives_up_when_its_window_closes(
    harness: Harness, secret_env: tuple[str, str]
) -> None:
    env, secret = secret_env
    async with WebhookReceiver(secret, [Answer(503, body="maintenance")]) as receiver:
        plan = with_notify(
            make_plan([("a", "Write the code", [])]), receiver.url, env, deliver_for_s=2
        )
        report, ended = await finish(await harness.start(plan))

    assert ended == "completed" and report.status is PlanStatus.COMPLETED
    assert receiver.received and all(r.answered == 503 for r in receiver.received)
    failed = await outcome(harness.client, plan.id)
    assert failed.status is DeliveryStatus.FAILED
    # The attempts whose answer reached the workflow; one cut off by the closing window
    # may still have reached the receiver (its result arrives after the timeout).
    assert failed.last_status == 503 and 1 <= failed.attempts <= len(receiver.received)
    assert failed.reason is not None and failed.reason.startswith("gave up after retrying for 2s")
    assert "HTTP 503: maintenance" in failed.reason


async def test_a_missing_secret_fails_the_delivery_not_the_plan(harness: Harness) -> None:
    env = f"DPLAN_TEST_UNSET_{uuid.uuid4().hex[:8].upper()}"
    async with WebhookReceiver(new_secret(), [Answer(200)]) as receiver:
        plan = with_notify(make_plan([("a", "Write the code", [])]), receiver.url, env)
        report, ended = await finish(await harness.start(plan))

    assert ended == "completed" and report.status is PlanStatus.COMPLETED
    assert receiver.received == []
    failed = await outcome(harness.client, plan.id)
    assert failed.status is DeliveryStatus.FAILED and failed.last_status is None
    assert failed.reason == f"{env} is not set in the worker's environment"
