"""A local activity's retry gets a start-to-close of its own (``policies.LOCAL_RETRY_THRESHOLD``).

temporalio 1.35's core, retrying a local activity inside the worker (a backoff under the
SDK's one-minute default threshold), leaves the previous attempt's start-to-close timer
running: it fires at that attempt's start plus start-to-close and times out whichever
attempt is running then, cancelling it and dropping its result (and, after the worker
has shut down, panics: ``receive half not dropped``). docs/known-issues.md has the
standalone reproduction and its outcome.

With our threshold a retry waits on a workflow timer and is scheduled anew, so each
attempt has its own timers. The activity here fails its first attempt, and its second
runs until past the first attempt's deadline, well within its own: the backoff (2 s)
puts the second attempt's start at least 2 s after the first's, so it runs at most
1.5 s of its 3 s. It must succeed, its retry must show in history as a timer, and the
workflow's only failed attempt must be the first. ``tests/unit/test_local_activities.py``
checks every local activity of ours passes the threshold.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from durable_plans.workflows import policies

pytestmark = pytest.mark.integration

START_TO_CLOSE = timedelta(seconds=3)
BACKOFF = timedelta(seconds=2)
PAST_FIRST_DEADLINE_S = 0.5

# When each test's first attempt started (monotonic), by the key its workflow passes.
_first_started: dict[str, float] = {}


@activity.defn(name="FailsThenOutlivesFirstDeadline")
async def fails_then_outlives_first_deadline(key: str) -> int:
    attempt = activity.info().attempt
    if attempt == 1:
        _first_started[key] = time.monotonic()
        raise ApplicationError("the first attempt fails")
    until = _first_started[key] + START_TO_CLOSE.total_seconds() + PAST_FIRST_DEADLINE_S
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    return attempt


@workflow.defn(name="RetriedLocalActivity")
class RetriedLocalActivity:
    @workflow.run
    async def run(self, key: str) -> int:
        attempt: int = await workflow.execute_local_activity(
            fails_then_outlives_first_deadline,
            key,
            start_to_close_timeout=START_TO_CLOSE,
            retry_policy=RetryPolicy(initial_interval=BACKOFF, maximum_attempts=2),
            local_retry_threshold=policies.LOCAL_RETRY_THRESHOLD,
        )
        return attempt


async def test_a_retried_local_activity_runs_to_its_own_deadline(client: Client) -> None:
    queue = f"la-retry-{uuid.uuid4()}"
    key = str(uuid.uuid4())
    async with Worker(
        client,
        task_queue=queue,
        workflows=[RetriedLocalActivity],
        activities=[fails_then_outlives_first_deadline],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(
            RetriedLocalActivity.run, key, id=f"la-retry-{key}", task_queue=queue
        )
        assert await handle.result() == 2
        events = [event.event_type async for event in handle.fetch_history_events()]
    assert events.count(EventType.EVENT_TYPE_TIMER_STARTED) == 1
    # The first attempt's failure, then the second attempt's result
    assert events.count(EventType.EVENT_TYPE_MARKER_RECORDED) == 2
