"""The pieces the chaos tests share: a round's log line, and a crew of worker processes,
each with a fake provider of its own, with what the store held right after each kill."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import (
    Plan,
    PlanReport,
    Usage,
)
from durable_plans.testing import FakeProviderProcess
from tests.integration.chaos_support import (
    CallAudit,
    ChaosWorker,
    CostAudit,
    WorkerCalls,
    audit_calls,
    audit_cost,
    call_ids,
    completions,
    paid_answers,
    plan_branches,
    wait_until,
)
from tests.integration.stored import stored_answers
from tests.integration.workers import new_workspace, worker_env

BASE_LATENCY_MS = 150  # plus 0–100 ms per subtask ([slow:N] in its description)
# A bound for hangs, not a speed goal: five rounds at once on a machine that also runs
# other test files can take minutes (every tool call is a git commit too).
RESULT_TIMEOUT_S = 300.0
READY_TIMEOUT_S = 120.0


@dataclass
class RoundLog:
    """What a round did, printed whether it passed or not."""

    name: str
    parts: list[str] = field(default_factory=list)
    began: float = field(default_factory=time.monotonic)
    ended: float | None = None

    def add(self, text: str) -> None:
        self.parts.append(text)

    def line(self) -> str:
        took = (self.ended or time.monotonic()) - self.began
        return f"{self.name} " + " ".join(self.parts) + f" ({took:.1f}s)"


async def start_plan(
    client: Client, plan_input: PlanInput, task_queue: str
) -> WorkflowHandle[Any, PlanReport]:
    return await client.start_workflow(
        "PlanWorkflow",
        plan_input,
        id=plan_input.plan.id,
        task_queue=task_queue,
        result_type=PlanReport,
    )


def chaos_workspace(tmp: Path) -> Path:
    return new_workspace(tmp, "# chaos test\n")


async def start_provider(log_path: Path, **kwargs: Any) -> FakeProviderProcess:
    provider = FakeProviderProcess(log_path, log_bodies=True, **kwargs)
    await asyncio.to_thread(provider.start)
    return provider


async def stop_all(
    workers: list[ChaosWorker], providers: FakeProviderProcess | list[FakeProviderProcess] | None
) -> None:
    await asyncio.gather(*(w.shutdown() for w in workers))
    if isinstance(providers, FakeProviderProcess):
        providers = [providers]
    for provider in providers or []:
        await asyncio.to_thread(provider.stop)


@dataclass
class Crew:
    """The workers of a round, each with a provider of its own (its request log is exactly
    the calls that worker made), and what the store held right after each kill."""

    tmp: Path
    address: str
    task_queue: str
    provider_options: dict[str, Any] = field(default_factory=dict)
    # More of the workers' environment (settings such as DPLAN_LLM_HEARTBEAT_S).
    worker_settings: dict[str, str] = field(default_factory=dict)
    workers: list[ChaosWorker] = field(default_factory=list)
    providers: list[FakeProviderProcess] = field(default_factory=list)
    stored_at_kill: dict[int, dict[str, int]] = field(default_factory=dict)
    paid_at_kill: dict[int, dict[Any, Usage]] = field(default_factory=dict)
    kills: int = 0

    async def spawn(self) -> ChaosWorker:
        n = len(self.workers) + 1
        provider = await start_provider(
            self.tmp / f"requests-{n}.jsonl", latency_ms=BASE_LATENCY_MS, **self.provider_options
        )
        self.providers.append(provider)
        env = worker_env(self.address, self.tmp, provider, self.task_queue)
        env.update(self.worker_settings)
        self.workers.append(ChaosWorker(env, self.tmp / f"worker-{n}.log").start())
        return self.workers[-1]

    async def record_kill(self, plan: Plan, run_id: str) -> None:
        """Right after the last worker was SIGKILLed, before the next one starts: what it
        had stored (its answers must never be asked for again)."""
        assert not self.workers[-1].alive
        branches = plan_branches(plan, run_id)
        stored = await stored_answers(self.tmp / "sessions.db", branches)
        self.stored_at_kill[len(self.workers) - 1] = stored
        paid = await paid_answers(self.tmp / "sessions.db", call_ids(plan, run_id))
        self.paid_at_kill[len(self.workers) - 1] = paid
        self.kills += 1

    def completions(self) -> int:
        return sum(completions(p) for p in self.providers)

    async def wait_for_completions(self, n: int, timeout_s: float) -> int:
        await wait_until(
            lambda: self.completions() >= n,
            timeout_s=timeout_s,
            what=f"{n} completed LLM requests (provider logs in {self.tmp})",
            every_s=0.01,
        )
        return self.completions()

    def worker_calls(self) -> list[WorkerCalls]:
        return [
            WorkerCalls(p.log_entries(), self.stored_at_kill.get(i))
            for i, p in enumerate(self.providers)
        ]

    def audit(self) -> CallAudit:
        return audit_calls(self.worker_calls())

    def audit_cost(self) -> CostAudit:
        return audit_cost(self.worker_calls(), self.paid_at_kill)

    async def stop(self) -> None:
        await stop_all(self.workers, self.providers)
