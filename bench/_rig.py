"""What the benches start from: a temporary directory (a small workspace, the SQLite
session store, the worker's state), the embedded dev server with the project's plugin,
the worker's settings and an in-process worker.

One place, so that every bench measures the same set-up and a change to it (a new
setting every worker needs, say) is made once.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.testing import WorkflowEnvironment

from durable_plans.activities.scripted_model import LATENCY_ENV, SCRIPTED_MODEL
from durable_plans.dev_server import dynamic_config_args
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Plan, PlanReport, PlanStatus
from durable_plans.embedded import DEV_SERVER_STARTUP, temporal_binary
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from durable_plans.worker import build_worker

__all__ = [
    "BenchDirs",
    "bench_dirs",
    "bench_settings",
    "embedded_server",
    "run_plan",
    "running_worker",
    "scripted_latency_zero",
    "stdout_silenced",
]


@dataclass(frozen=True)
class BenchDirs:
    """A bench's temporary directory and what lives in it."""

    root: Path

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def sessions(self) -> str:
        return str(self.root / "sessions.db")

    @property
    def state(self) -> Path:
        return self.root / "state"


@contextlib.contextmanager
def bench_dirs(prefix: str) -> Iterator[BenchDirs]:
    """A temporary directory with a one-file workspace, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"dplan-bench-{prefix}-") as name:
        dirs = BenchDirs(Path(name))
        dirs.workspace.mkdir()
        (dirs.workspace / "README.md").write_text("# bench workspace\n\nA small demo project.\n")
        yield dirs


def bench_settings(dirs: BenchDirs, queue_prefix: str, **overrides: Any) -> Settings:
    """A worker's settings in ``dirs``: the offline scripted model unless ``overrides``
    name another, a task queue of its own."""
    values: dict[str, Any] = {
        "task_queue": f"{queue_prefix}-{uuid.uuid4().hex[:8]}",
        "model": SCRIPTED_MODEL,
        "session_store": dirs.sessions,
        "workspace": dirs.workspace,
        "state_dir": dirs.state,
    }
    return Settings(**(values | overrides))


@contextlib.contextmanager
def stdout_silenced() -> Iterator[None]:
    """Point fd 1 at /dev/null while the dev server is spawned, so it inherits that: the
    ``temporal`` CLI's start-up banner would otherwise land in the middle of a table."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def scripted_latency_zero() -> Iterator[None]:
    """``DPLAN_SCRIPTED_LATENCY_MS=0`` for this bench only: the scripted model reads it on
    every call, and a later bench in the same process (or the demo) keeps its own."""
    saved = os.environ.get(LATENCY_ENV)
    os.environ[LATENCY_ENV] = "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(LATENCY_ENV, None)
        else:
            os.environ[LATENCY_ENV] = saved


@contextlib.asynccontextmanager
async def embedded_server(runtime: Runtime | None = None) -> AsyncIterator[WorkflowEnvironment]:
    """The packaged dev server with the project's plugin, shut down afterwards."""
    extra: dict[str, Any] = {"runtime": runtime} if runtime is not None else {}
    with stdout_silenced():
        env = await WorkflowEnvironment.start_local(
            dev_server_startup_timeout=DEV_SERVER_STARTUP,
            dev_server_existing_path=str(temporal_binary()),
            plugins=[DurablePlansPlugin()],
            dev_server_log_level="error",
            dev_server_extra_args=dynamic_config_args(),
            **extra,
        )
    try:
        yield env
    finally:
        await env.shutdown()


async def run_plan(client: Client, plan: Plan, task_queue: str) -> float:
    """Seconds from the client's start request to the report in its hands."""
    t0 = time.perf_counter()
    handle = await client.start_workflow(
        "PlanWorkflow",
        PlanInput(plan=plan),
        id=plan.id,
        task_queue=task_queue,
        result_type=PlanReport,
    )
    report = await handle.result()
    elapsed = time.perf_counter() - t0
    if report.status is not PlanStatus.COMPLETED:
        raise RuntimeError(f"plan {plan.id} ended {report.status.value}: {report.counts}")
    return elapsed


@contextlib.asynccontextmanager
async def running_worker(client: Client, settings: Settings) -> AsyncIterator[SessionStore]:
    """A worker of ``settings`` in this process, on its own session store."""
    store = await open_session_store(settings.session_store)
    try:
        async with build_worker(client, settings, store):
            yield store
    finally:
        await store.close()
