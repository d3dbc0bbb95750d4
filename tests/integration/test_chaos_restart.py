"""Chaos: the Temporal dev server SIGKILLed mid-plan and restarted on the same database;
the worker reconnects by itself and the plan completes with nothing lost or repeated."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path

import pytest

from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import (
    PlanReport,
)
from durable_plans.testing import FakeProviderProcess
from tests.integration.chaos_crew import (
    RESULT_TIMEOUT_S,
    RoundLog,
    chaos_workspace,
    start_plan,
    start_provider,
    stop_all,
)
from tests.integration.chaos_support import (
    ChaosWorker,
    DevServer,
    WorkerCalls,
    audit_calls,
    check_plan,
    completions,
    wait_for_completions,
)
from tests.integration.plans import make_plan
from tests.integration.workers import worker_env

# Rounds wait up to RESULT_TIMEOUT_S for a plan: a bound for hangs, beyond the default.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SERVER_PLAN = [
    ("a", "Inspect the repository", []),
    ("b", "Write module b [turns:2]", ["a"]),
    ("c", "Write module c", ["a"]),
    ("d", "Write module d [turns:2]", ["a"]),
    ("e", "Integrate b and c", ["b", "c"]),
    ("f", "Test d", ["d"]),
    ("g", "Write the changelog", ["e", "f"]),
    ("h", "Write the docs", []),
]
SERVER_DOWN_S = 3.0


async def test_dev_server_restart_mid_plan(tmp_path: Path, say: list[RoundLog]) -> None:
    sig = signal.SIGKILL
    log = RoundLog(f"server-restart({sig.name})")
    say.append(log)
    chaos_workspace(tmp_path)
    server = DevServer(tmp_path / "temporal.db", tmp_path / "temporal.log").start()
    workers: list[ChaosWorker] = []
    provider: FakeProviderProcess | None = None
    plan = make_plan(SERVER_PLAN, session_id=f"restart-{uuid.uuid4().hex[:6]}", prefix="restart")
    expected = sum(2 + ("[turns:2]" in d) for _, d, _ in SERVER_PLAN)
    try:
        client = await server.wait_ready()
        provider = await start_provider(tmp_path / "requests.jsonl", latency_ms=200)
        env = worker_env(server.address, tmp_path, provider, f"restart-{uuid.uuid4().hex[:8]}")
        workers.append(await ChaosWorker(env, tmp_path / "worker-1.log").start().ready())
        handle = await start_plan(client, PlanInput(plan=plan), env["DPLAN_TASK_QUEUE"])
        await wait_for_completions(provider, 6, timeout_s=60)
        server.signal(sig)
        before = completions(provider)
        assert before < expected, "the plan's model calls were all done before the kill"
        log.add(f"server {sig.name} after {before} requests, down {SERVER_DOWN_S:g}s")
        await asyncio.sleep(SERVER_DOWN_S)
        during = completions(provider) - before
        server.start()
        await server.wait_ready()
        log.add(f"restarted on {server.address} (same db); requests while down={during}")

        # The worker is expected to reconnect by itself; a dead or stuck worker is
        # replaced (and the summary says so) — the point is that no work is lost.
        result = asyncio.ensure_future(handle.result())
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        last_progress, last_count = time.monotonic(), completions(provider)
        while not result.done():
            if time.monotonic() > deadline:
                result.cancel()
                raise TimeoutError(f"plan {plan.id} not done {RESULT_TIMEOUT_S:g}s after restart")
            await asyncio.wait({result}, timeout=0.5)
            count = completions(provider)
            if count != last_count:
                last_progress, last_count = time.monotonic(), count
            stuck = time.monotonic() - last_progress > 45
            if not result.done() and (not workers[-1].alive or stuck):
                log.add(f"worker {'stuck' if stuck else 'exited'}: REPLACED")
                await workers[-1].shutdown()
                workers.append(await ChaosWorker(env, tmp_path / "w-new.log").start().ready())
                last_progress = time.monotonic()
        report: PlanReport = result.result()
        log.add(f"worker reconnected by itself={len(workers) == 1}")
        await stop_all(workers, provider)
        audit = audit_calls([WorkerCalls(provider.log_entries())])
        log.add(f"requests before/after={before}/{audit.requests - before} repeats={audit.repeats}")
        # No process that called the model died, so no answer may have been asked twice.
        assert audit.violations == [], audit.violations
        assert audit.rejected == [] and audit.not_completions == []
        assert audit.distinct == expected
        await check_plan(
            client, tmp_path / "sessions.db", plan, report, handle.first_execution_run_id
        )
    finally:
        await stop_all(workers, provider)
        server.stop()
