"""Chaos: workers SIGKILLed at random moments of seeded random plans (the server restart
and the kills inside writes and session work are in test_chaos_restart.py and
test_chaos_writes.py, so that xdist runs them beside these rounds).

After every round: the plan completes with the right report, the session holds no
duplicated or lost message, no completed LLM call was made again (a repeat is excused only
when the earlier answer went to a worker that was SIGKILLed before it stored it: the store
is read right after every kill, and each worker talks to a provider of its own, so which
worker asked is known exactly), the branches are closed and their snapshots deleted, and
the histories replay.

Recovering from a SIGKILL is mostly waiting (Temporal notices a dead worker only when a
timeout expires: a heartbeat, 5 s here (``LLM_HEARTBEAT_S``), or a workflow task's 10 s;
the sticky queue's 10 s are skipped, ``forget_sticky_worker``), so the seeded rounds run
five at a time in the background on the shared dev server; each seed's test awaits its own round
and asserts on it. Every round prints one ``[chaos]`` line straight to the terminal
(seed, kill moments, requests before/after the kills, repeated calls).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Usage
from tests.integration.chaos_crew import (
    READY_TIMEOUT_S,
    RESULT_TIMEOUT_S,
    Crew,
    RoundLog,
    chaos_workspace,
    start_plan,
)
from tests.integration.chaos_support import (
    bounded,
    check_cost,
    check_plan,
    in_background,
    plan_run_id,
    random_plan,
    selected_params,
    workflow_running,
)
from tests.integration.workers import forget_sticky_worker

pytestmark = pytest.mark.integration

SEEDS = (11, 23, 37, 41, 59, 62, 73, 88, 97, 104)
ROUNDS_AT_ONCE = 5
# The LLM calls' heartbeat timeout (default 15 s): how long a call killed with its worker
# stays "running" before it is tried again. The tools' is 5 s (policies.SHORT_HEARTBEAT);
# the LLM calls here get the same, in the same workers.
LLM_HEARTBEAT_S = 5


async def chaos_round(seed: int, client: Client, address: str, tmp: Path, log: RoundLog) -> None:
    """One seeded round: random DAG, SIGKILL at a random moment, maybe once more."""
    rng = random.Random(seed)
    rp = random_plan(rng, prefix=f"chaos{seed}", session_id=f"chaos-{seed}-{uuid.uuid4().hex[:6]}")
    plan, expected = rp.plan, rp.expected_requests
    by_delay = rng.random() < 0.5
    delay_s = rng.uniform(0.3, 2.5)
    after_n = rng.randint(1, expected - 3)
    kill_twice = rng.random() < 0.35
    second_fraction = rng.random()
    log.add(f"subtasks={len(plan.subtasks)} calls={expected} max_parallel={plan.max_parallel}")

    chaos_workspace(tmp)
    crew = Crew(
        tmp,
        address,
        f"chaos-{seed}-{uuid.uuid4().hex[:8]}",
        worker_settings={"DPLAN_LLM_HEARTBEAT_S": str(LLM_HEARTBEAT_S)},
    )
    at_kill: list[int] = []
    try:
        await (await crew.spawn()).ready(READY_TIMEOUT_S)
        handle = await start_plan(client, PlanInput(plan=plan), crew.task_queue)
        run_id = plan_run_id(plan, handle.first_execution_run_id)
        if by_delay:
            # A random moment, but never later than when 3 requests remain: the plan must
            # still be running at the kill, and how long it takes is the worker's speed (a
            # fast worker finishes a 10-subtask seed inside the longest random delay).
            try:
                await crew.wait_for_completions(expected - 3, timeout_s=delay_s)
                moment = f"at {expected - 3} completions, before {delay_s:.2f}s"
            except TimeoutError:
                moment = f"{delay_s:.2f}s after start"
        else:
            await crew.wait_for_completions(after_n, timeout_s=60)
            moment = f"after {after_n} completions"
        crew.workers[-1].kill_now()
        await forget_sticky_worker(client, crew.task_queue)
        await crew.record_kill(plan, run_id)
        at_kill.append(crew.completions())
        log.add(f"kill1={moment!r} (requests done: {at_kill[-1]})")
        assert await workflow_running(client, plan.id), "the plan finished before the kill"
        await crew.spawn()

        remaining = expected - at_kill[0]
        if kill_twice and remaining >= 3:
            more = max(1, int(second_fraction * (remaining - 2)))
            await crew.workers[-1].ready(READY_TIMEOUT_S)
            await crew.wait_for_completions(at_kill[0] + more, timeout_s=90)
            crew.workers[-1].kill_now()
            await forget_sticky_worker(client, crew.task_queue)
            await crew.record_kill(plan, run_id)
            at_kill.append(crew.completions())
            log.add(f"kill2='after {more} more' (requests done: {at_kill[-1]})")
            assert await workflow_running(client, plan.id), "finished before the second kill"
            await crew.spawn()

        report = await bounded(handle.result(), RESULT_TIMEOUT_S, f"plan {plan.id} result")
    finally:
        await crew.stop()

    audit = crew.audit()
    cost = crew.audit_cost()
    log.add(
        f"requests before/after kill1={at_kill[0]}/{audit.requests - at_kill[0]} "
        f"repeats={audit.repeats} workers={len(crew.workers)} "
        f"tokens served={Usage.total(cost.served.values()).total_tokens} "
        f"lost in transit={cost.lost_answers} answers"
    )
    assert audit.violations == [], audit.violations
    # A kill loses at most one answer per subtask running at that moment.
    assert audit.repeats <= plan.max_parallel * crew.kills, audit.repeats
    assert audit.rejected == [], f"the strict provider rejected requests: {audit.rejected}"
    assert audit.not_completions == [], audit.not_completions
    # Every LLM call the plan needs was answered, and none twice but as excused above.
    assert audit.distinct == expected, f"{audit.distinct} distinct calls, expected {expected}"
    await check_plan(client, tmp / "sessions.db", plan, report, handle.first_execution_run_id)
    # Exact cost: every answer the providers served is in the report, repeats included.
    check_cost(plan, report, cost)


@dataclass
class Rounds:
    tasks: dict[int, asyncio.Task[None]]
    logs: dict[int, RoundLog]


@pytest.fixture(scope="module")
async def rounds(
    request: pytest.FixtureRequest,
    temporal_env: WorkflowEnvironment,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Rounds]:
    """The selected seeds' rounds, running ``ROUNDS_AT_ONCE`` at a time in the background."""
    selected = selected_params(request, __file__, "test_random_worker_kills[", "seed")
    client = temporal_env.client
    address = client.service_client.config.target_host
    gate = asyncio.Semaphore(ROUNDS_AT_ONCE)
    logs = {seed: RoundLog(f"seed={seed}") for seed in selected}

    async def one(seed: int) -> None:
        async with gate:
            logs[seed].began = time.monotonic()
            tmp = tmp_path_factory.mktemp(f"chaos-{seed}")
            try:
                await chaos_round(seed, client, address, tmp, logs[seed])
            finally:
                logs[seed].ended = time.monotonic()

    tasks = {seed: asyncio.create_task(one(seed), name=f"chaos-{seed}") for seed in selected}
    async with in_background(tasks):
        yield Rounds(tasks, logs)


# One xdist worker runs every round: the module fixture starts them all together, and
# `make test` distributes by file (pytest-xdist's xdist_group is ignored under pytest 9).
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.timeout(600)
async def test_random_worker_kills(seed: int, rounds: Rounds, say: list[RoundLog]) -> None:
    say.append(rounds.logs[seed])
    # Bounded: the round's own waits are (ready 60 s, kills ≤ 90 s, result 300 s).
    await bounded(asyncio.shield(rounds.tasks[seed]), 540, f"chaos round seed={seed}")
