"""Reproduce temporalio 1.35's stray start-to-close timer of a retried local activity.

Not a test: a script, run from the repository root (it starts the ``temporal`` binary
beside the venv's python as an in-memory dev server):

    .venv/bin/python -m tests.integration.local_activity_retry_repro panic
    .venv/bin/python -m tests.integration.local_activity_retry_repro early
    .venv/bin/python -m tests.integration.local_activity_retry_repro early --threshold

One local activity, start-to-close ``S``, retried once after a 0.1 s backoff:

* ``panic``: attempt 1 fails at once, attempt 2 succeeds at once (S = 3 s); the worker
  shuts down and the process waits 5 s. Attempt 1's start-to-close timer still runs and
  fires 3 s after attempt 1 started, into a channel nobody reads any more: the core
  prints ``thread 'tokio-rt-worker' panicked at ...local_activities.rs:1120:33: receive
  half not dropped: SendError`` (the task dies alone; the workflow already has its result).
* ``early``: attempt 1 fails after 2 s, attempt 2 needs 3 s of its own S = 4 s. Attempt
  1's timer fires 4 s after attempt 1 started, 1.9 s into attempt 2: the core times
  attempt 2 out (StartToClose), cancels it, drops its result ("Tried to complete
  untracked local activity") and, attempts exhausted, the workflow gets
  ``ActivityError: Local Activity timed out``.
* ``--threshold`` passes ``policies.LOCAL_RETRY_THRESHOLD`` (1 us), as every local
  activity of ours does: the retry waits on a workflow timer and is scheduled anew, so
  attempt 2 has timers of its own; no panic, and ``early`` returns attempt 2's result.

docs/known-issues.md has the cause in the core's source and the outcomes observed;
test_local_activity_retry.py is the ``early`` case as a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

# Durations of attempt 1, attempt 2, and the start-to-close, per mode.
MODES = {"panic": (0.0, 0.0, 3.0), "early": (2.0, 3.0, 4.0)}
T0 = time.monotonic()


@activity.defn
async def flaky(first_s: float, second_s: float) -> str:
    attempt = activity.info().attempt
    started = time.monotonic() - T0
    try:
        await asyncio.sleep(first_s if attempt == 1 else second_s)
    except asyncio.CancelledError:
        print(f"attempt {attempt}: {started:.2f} s -> {time.monotonic() - T0:.2f} s cancelled")
        raise
    print(f"attempt {attempt}: {started:.2f} s -> {time.monotonic() - T0:.2f} s done")
    if attempt == 1:
        raise RuntimeError("attempt 1 fails")
    return f"attempt {attempt}'s result"


@workflow.defn
class RetriedOnce:
    @workflow.run
    async def run(self, first_s: float, second_s: float, stc_s: float, threshold: bool) -> str:
        try:
            return await workflow.execute_local_activity(
                flaky,
                args=[first_s, second_s],
                start_to_close_timeout=timedelta(seconds=stc_s),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(milliseconds=100), maximum_attempts=2
                ),
                local_retry_threshold=timedelta(microseconds=1) if threshold else None,
            )
        except Exception as err:
            return f"failed: {type(err).__name__}: {err} ({err.__cause__})"


async def main(mode: str, threshold: bool) -> None:
    global T0
    first_s, second_s, stc_s = MODES[mode]
    server = Path(sys.executable).parent / "temporal"
    async with await WorkflowEnvironment.start_local(
        dev_server_startup_timeout=timedelta(seconds=60),  # not the 5 s default
        dev_server_existing_path=str(server),
        dev_server_log_level="error",
    ) as env:
        queue = str(uuid.uuid4())
        async with Worker(
            env.client,
            task_queue=queue,
            workflows=[RetriedOnce],
            activities=[flaky],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            T0 = time.monotonic()
            result = await env.client.execute_workflow(
                RetriedOnce.run,
                args=[first_s, second_s, stc_s, threshold],
                id=str(uuid.uuid4()),
                task_queue=queue,
            )
            print(f"workflow at {time.monotonic() - T0:.2f} s: {result}")
        print(f"worker shut down at {time.monotonic() - T0:.2f} s; waiting 5 s", flush=True)
        await asyncio.sleep(5)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--threshold", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.mode, args.threshold))
    sys.stdout.flush()
    sys.stderr.flush()
    # The SDK's native threads can crash the interpreter's finalization (tests/integration/
    # test_core_log.py); the output is all out by now.
    os._exit(0)
