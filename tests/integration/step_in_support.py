"""A provider whose key is "wrong" for some subtasks until the test fixes it.

``KeyGate`` answers 401 to every request of a task marked ``[needs-key]`` (and 503 to one
marked ``[down]``) until ``fix()``; otherwise it is the default fake agent. It counts the
requests that reached it per task, which is what "paid twice" is measured by.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from durable_plans.domain.models import Plan, PlanReport
from durable_plans.settings import Settings
from durable_plans.testing import AgentScenario, ChatRequest, FakeProvider, HttpError, Reply
from tests.integration.conftest import provider_settings, running_worker
from tests.integration.plans import start_plan_workflow

NEEDS_KEY = "[needs-key]"
DOWN = "[down]"


@dataclass
class KeyGate:
    fixed: bool = False
    requests: Counter[str] = field(default_factory=Counter)
    inner: AgentScenario = field(default_factory=AgentScenario)

    def fix(self) -> None:
        self.fixed = True

    def __call__(self, request: ChatRequest) -> Reply:
        task = request.last_user_text
        self.requests[task] += 1
        if not self.fixed and NEEDS_KEY in task:
            return HttpError(status=401, message="Incorrect API key provided (injected).")
        if not self.fixed and DOWN in task:
            return HttpError(status=503)
        return self.inner(request)

    def count(self, *markers: str) -> dict[str, int]:
        """Requests per marker (a substring of the task), e.g. {"task-c": 2}."""
        return {m: sum(n for t, n in self.requests.items() if m in t) for m in markers}


@dataclass
class Rig:
    """A gated provider's worker on its own queue, and settings a CLI call can use."""

    client: Client
    settings: Settings
    gate: KeyGate

    async def start(self, plan: Plan, **fields: Any) -> WorkflowHandle[Any, PlanReport]:
        return await start_plan_workflow(self.client, plan, self.settings.task_queue, **fields)


@asynccontextmanager
async def gated_rig(client: Client, tmp: Path, prefix: str) -> AsyncIterator[Rig]:
    """A ``KeyGate`` provider and an in-process worker reaching it, for the block."""
    gate = KeyGate()
    async with FakeProvider(gate, latency_ms=0) as provider:
        settings = provider_settings(client, provider, tmp, prefix=prefix)
        async with running_worker(client, settings):
            yield Rig(client, settings, gate)
