"""The Temporal SDK core's warnings stay off standard output (``durable_plans.core_log``).

A process starts a worker on the suite's dev server and runs a workflow whose first task
fails (the core warns "Failing workflow task") and whose second completes; then it prints
one line. Routed as ``dplan`` routes it, the warning reaches Python's logging (standard
error) and standard output holds that line alone, as ``dplan run --json``'s must (a core
warning before its JSON failed the clean-install test in CI); unrouted, the core prints
it on standard output, which is what the routing is for.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import pytest
from temporalio.client import Client

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent(
    """
    import asyncio, logging, os, sys, threading
    from datetime import timedelta
    from temporalio import workflow
    from temporalio.client import Client
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker
    from durable_plans.core_log import CORE_LOGGER, route_core_log

    routed = sys.argv[3] == "routed"
    forwarded = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record):
            if "Failing workflow task" in record.getMessage():
                forwarded.set()

    if routed:
        assert route_core_log()
        logging.getLogger(CORE_LOGGER).addHandler(Seen())
        logging.basicConfig(stream=sys.stderr)

    failed = []

    @workflow.defn(name="FailsOnce")
    class FailsOnce:
        @workflow.run
        async def run(self) -> str:
            if not failed:
                failed.append(1)
                raise RuntimeError("a task failure, retried")
            return "ok"

    async def main():
        client = await Client.connect(sys.argv[1])
        queue = sys.argv[2]
        async with Worker(client, task_queue=queue, workflows=[FailsOnce],
                          workflow_runner=UnsandboxedWorkflowRunner()):
            result = await client.execute_workflow(
                FailsOnce.run, id=queue, task_queue=queue,
                execution_timeout=timedelta(seconds=60))
        assert result == "ok"
        if routed:  # forwarded in batches: wait for it, bounded (never asserted on time)
            assert forwarded.wait(30), "the core's warning never reached Python's logging"
        print("done")

    asyncio.run(main())
    # As dplan's console_main does: the SDK's native threads can crash the interpreter's
    # finalization (a SIGSEGV after the output), so the process ends once it is flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
    """
)


def run_script(client: Client, mode: str) -> subprocess.CompletedProcess[str]:
    address = client.service_client.config.target_host
    queue = f"core-log-{uuid.uuid4().hex[:8]}"
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, address, queue, mode],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_routed_core_warnings_go_to_standard_error(client: Client) -> None:
    ran = run_script(client, "routed")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "done\n"
    assert "Failing workflow task" in ran.stderr


def test_unrouted_core_warnings_land_on_standard_output(client: Client) -> None:
    ran = run_script(client, "unrouted")
    assert ran.returncode == 0, ran.stderr
    assert "Failing workflow task" in ran.stdout
    assert ran.stdout.endswith("done\n")
