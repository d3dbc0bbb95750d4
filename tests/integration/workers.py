"""Worker processes for crash tests: `dplan-worker`'s entry point in real processes of their
own (forked from a process that has already imported the worker: prewarmed.py), killed for
real, and configured only as an operator would, through their environment (``worker_env``
and the workspace it names, ``new_workspace``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Protocol

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

from tests.integration.conftest import FAKE_KEY
from tests.integration.prewarmed import PrewarmedProcess

REPO_ROOT = Path(__file__).resolve().parents[2]


def worker_env(
    temporal: Client | str, tmp: Path, provider: HasBaseUrl, task_queue: str
) -> dict[str, str]:
    """The environment of one test's worker process: the server (a client of it, or its
    address), its own task queue, the fake provider as its model endpoint, and its store,
    workspace and state under ``tmp``; every worker started with it shares them."""
    address = temporal if isinstance(temporal, str) else temporal.service_client.config.target_host
    return {
        "TEMPORAL_ADDRESS": address,
        "DPLAN_TASK_QUEUE": task_queue,
        "DPLAN_MODEL": "openai/fake-model",
        "DPLAN_API_BASE": provider.base_url,
        "DPLAN_API_KEY": FAKE_KEY,
        "DPLAN_SESSION_STORE": str(tmp / "sessions.db"),
        "DPLAN_WORKSPACE": str(tmp / "workspace"),
        "DPLAN_STATE_DIR": str(tmp / "state"),
    }


def new_workspace(tmp: Path, readme: str) -> Path:
    """``tmp/workspace`` (where ``worker_env`` points the workers) with a README in it, so
    the agents' first look around finds a file."""
    workspace = tmp / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text(readme)
    return workspace


class HasBaseUrl(Protocol):
    """A fake provider in this process or in its own (``FakeProvider``,
    ``FakeProviderProcess``)."""

    @property
    def base_url(self) -> str: ...


class WorkerProcess:
    """A `dplan-worker` in its own process, configured only through its environment."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self._proc: PrewarmedProcess | subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> WorkerProcess:
        self._log = self.log_path.open("ab")
        # `dplan-worker`'s own entry point, in a process forked from one that has already
        # imported it and litellm (tests/integration/prewarmed.py).
        self._proc = PrewarmedProcess(
            "durable_plans.worker:main", [["--log-level", "INFO"]], self.env, self.log_path
        )
        return self

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until the worker logged that it polls (litellm and the SDK load first)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log_path.read_text()[-3000:]}")
            if b"worker.started" in self.log_path.read_bytes():
                return
            time.sleep(0.1)
        raise TimeoutError(f"worker not ready:\n{self.log_path.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: no shutdown hook, no flush, no goodbye — the crash being tested."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGKILL)
        self._proc.wait(timeout=10)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


async def forget_sticky_worker(client: Client, task_queue: str) -> None:
    """Send the next task of every running workflow of ``task_queue`` to the task queue, not to
    the killed worker's sticky queue, where it would wait out the SDK's 10 s
    schedule-to-start timeout first: what a worker asks of the server for a workflow it
    drops from its cache, asked here for the dead worker. Either way the next worker
    replays the whole history. A workflow the listing misses (visibility lags a little)
    just takes the timeout."""
    query = f'TaskQueue = "{task_queue}" AND ExecutionStatus = "Running"'
    async for wf in client.list_workflows(query):
        execution = WorkflowExecution(workflow_id=wf.id, run_id=wf.run_id)
        request = ResetStickyTaskQueueRequest(namespace=client.namespace, execution=execution)
        with contextlib.suppress(RPCError):  # it may have finished since it was listed
            await client.workflow_service.reset_sticky_task_queue(request)
