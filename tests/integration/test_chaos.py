"""Chaos: workers SIGKILLed at random moments, the Temporal server killed mid-plan, workers
killed during a file write and during session work.

After every round: the plan completes with the right report, the session holds no
duplicated or lost message, no completed LLM call was made again (a repeat is excused only
when the earlier answer went to a worker that was SIGKILLed before it stored it: the store
is read right after every kill, and each worker talks to a provider of its own, so which
worker asked is known exactly), the branches are closed and their snapshots deleted, and
the histories replay.

Recovering from a SIGKILL is mostly waiting (Temporal notices a dead worker only when a
heartbeat or sticky-queue timeout expires: 10–17 s), so the seeded rounds run five at a
time in the background on the shared dev server; each seed's test awaits its own round
and asserts on it. Every round prints one ``[chaos]`` line straight to the terminal
(seed, kill moments, requests before/after the kills, repeated calls).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from durable_plans.domain.contracts import ACT_CALL_LLM, ACT_RUN_TOOL, PlanInput
from durable_plans.domain.ids import branch_session_id, snapshot_id
from durable_plans.domain.models import (
    FunctionCall,
    Message,
    Plan,
    PlanReport,
    SessionMeta,
    ToolCall,
)
from durable_plans.session_store import SessionNotFound
from durable_plans.session_store.factory import open_session_store
from durable_plans.testing import FakeProviderProcess
from tests.integration.chaos_support import (
    TEMP_SUFFIX,
    CallAudit,
    ChaosWorker,
    DevServer,
    WorkerCalls,
    audit_calls,
    bounded,
    check_plan,
    completions,
    file_content,
    plan_branches,
    plan_run_id,
    random_plan,
    stored_answers,
    temp_leftovers,
    wait_for_completions,
    wait_until,
    worker_env,
    workflow_running,
)
from tests.integration.plans import make_plan

pytestmark = pytest.mark.integration

SEEDS = (11, 23, 37, 41, 59, 62, 73, 88, 97, 104)
ROUNDS_AT_ONCE = 5
BASE_LATENCY_MS = 150  # plus 0–100 ms per subtask ([slow:N] in its description)
RESULT_TIMEOUT_S = 150.0
READY_TIMEOUT_S = 60.0


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


@pytest.fixture
def say(capsys: pytest.CaptureFixture[str]) -> Iterator[list[RoundLog]]:
    """Round logs printed past pytest's output capture when the test ends."""
    logs: list[RoundLog] = []
    yield logs
    with capsys.disabled():
        for log in logs:
            print(f"\n[chaos] {log.line()}", end="", flush=True)


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


def new_workspace(tmp: Path) -> Path:
    workspace = tmp / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("# chaos test\n")
    return workspace


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
    workers: list[ChaosWorker] = field(default_factory=list)
    providers: list[FakeProviderProcess] = field(default_factory=list)
    stored_at_kill: dict[int, dict[str, int]] = field(default_factory=dict)
    kills: int = 0

    async def spawn(self) -> ChaosWorker:
        n = len(self.workers) + 1
        provider = await start_provider(
            self.tmp / f"requests-{n}.jsonl", latency_ms=BASE_LATENCY_MS, **self.provider_options
        )
        self.providers.append(provider)
        env = worker_env(self.address, self.tmp, provider, self.task_queue)
        self.workers.append(ChaosWorker(env, self.tmp / f"worker-{n}.log").start())
        return self.workers[-1]

    async def record_kill(self, plan: Plan, run_id: str) -> None:
        """Right after the last worker was SIGKILLed, before the next one starts: what it
        had stored (its answers must never be asked for again)."""
        assert not self.workers[-1].alive
        branches = plan_branches(plan, run_id)
        stored = await stored_answers(self.tmp / "sessions.db", branches)
        self.stored_at_kill[len(self.workers) - 1] = stored
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

    def audit(self) -> CallAudit:
        return audit_calls(
            [
                WorkerCalls(p.log_entries(), self.stored_at_kill.get(i))
                for i, p in enumerate(self.providers)
            ]
        )

    async def stop(self) -> None:
        await stop_all(self.workers, self.providers)


# --------------------------------------------------------------------------- 1. random kills


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

    new_workspace(tmp)
    crew = Crew(tmp, address, f"chaos-{seed}-{uuid.uuid4().hex[:8]}")
    at_kill: list[int] = []
    try:
        await (await crew.spawn()).ready(READY_TIMEOUT_S)
        handle = await start_plan(client, PlanInput(plan=plan), crew.task_queue)
        run_id = plan_run_id(plan, handle.first_execution_run_id)
        if by_delay:
            await asyncio.sleep(delay_s)
            moment = f"{delay_s:.2f}s after start"
        else:
            await crew.wait_for_completions(after_n, timeout_s=60)
            moment = f"after {after_n} completions"
        crew.workers[-1].kill_now()
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
            await crew.record_kill(plan, run_id)
            at_kill.append(crew.completions())
            log.add(f"kill2='after {more} more' (requests done: {at_kill[-1]})")
            assert await workflow_running(client, plan.id), "finished before the second kill"
            await crew.spawn()

        report = await bounded(handle.result(), RESULT_TIMEOUT_S, f"plan {plan.id} result")
    finally:
        await crew.stop()

    audit = crew.audit()
    log.add(
        f"requests before/after kill1={at_kill[0]}/{audit.requests - at_kill[0]} "
        f"repeats={audit.repeats} workers={len(crew.workers)}"
    )
    assert audit.violations == [], audit.violations
    # A kill loses at most one answer per subtask running at that moment.
    assert audit.repeats <= plan.max_parallel * crew.kills, audit.repeats
    assert audit.rejected == [], f"the strict provider rejected requests: {audit.rejected}"
    assert audit.not_completions == [], audit.not_completions
    # Every LLM call the plan needs was answered, and none twice but as excused above.
    assert audit.distinct == expected, f"{audit.distinct} distinct calls, expected {expected}"
    await check_plan(client, tmp / "sessions.db", plan, report, handle.first_execution_run_id)


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
    selected = [
        item.callspec.params["seed"]
        for item in request.session.items
        if item.path == Path(__file__)
        and item.name.startswith("test_random_worker_kills[")
        and hasattr(item, "callspec")
    ]
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
    try:
        yield Rounds(tasks, logs)
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


# One xdist worker runs every round (the module fixture starts them all together).
@pytest.mark.xdist_group("chaos-rounds")
@pytest.mark.parametrize("seed", SEEDS)
async def test_random_worker_kills(seed: int, rounds: Rounds, say: list[RoundLog]) -> None:
    say.append(rounds.logs[seed])
    # Bounded: the round's own waits are (ready 60 s, kills ≤ 90 s, result 150 s).
    await bounded(asyncio.shield(rounds.tasks[seed]), 280, f"chaos round seed={seed}")


# --------------------------------------------------------------------------- 2. server restart

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
    new_workspace(tmp_path)
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


# --------------------------------------------------------------------- 3. tool write, session work

# Three writes in a row: the kill waits for one it can catch mid-write (a write lasts about
# a millisecond, so one try may miss it); the subtask after the killed write is the one
# whose session work (the branch build in its first LLM call, the close in its last) the
# next two kills interrupt.
WRITES = ("data/one.txt", "data/two.txt", "data/three.txt")
WRITE_PLAN = [
    ("w1", f"Write data file one [write:{WRITES[0]}]", []),
    ("w2", f"Write data file two [write:{WRITES[1]}]", ["w1"]),
    ("w3", f"Write data file three [write:{WRITES[2]}]", ["w2"]),
    ("check", "Check the data files", ["w3"]),
    ("docs", "Document the data format [turns:2]", ["check"]),
]
HISTORY_TURNS = 120  # a long conversation before the plan: 480 messages, tool traffic included


def long_history(n_turns: int) -> list[Message]:
    """Earlier conversation in the base session; isolation must strip its tool traffic."""
    out: list[Message] = []
    for i in range(n_turns):
        call = ToolCall(id=f"call_{i}", function=FunctionCall(name="read_file", arguments="{}"))
        out += [
            Message(id=f"pre-{i}-u", role="user", content=f"earlier question {i}"),
            Message(id=f"pre-{i}-c", role="assistant", tool_calls=(call,)),
            Message(
                id=f"pre-{i}-t",
                role="tool",
                tool_call_id=call.id,
                name="read_file",
                content=f"earlier file {i}\n" * 20,
            ),
            Message(id=f"pre-{i}-a", role="assistant", content=f"earlier answer {i}"),
        ]
    return out


async def kill_during_write(worker: ChaosWorker, workspace: Path) -> tuple[float, int, str]:
    """SIGKILL while a write's temp file exists. Each write is watched from the moment its
    ``run_tool`` starts; a write that completed between two looks is let go and the next
    one watched, and the last one is killed whatever it is doing. Returns the kill time,
    the index of the write and what the kill interrupted."""
    sizes = [len(file_content(path).encode()) for path in WRITES]  # not in the hot path
    for i, path in enumerate(WRITES):
        await worker.wait_for_activity(ACT_RUN_TOOL, timeout_s=60)
        stage = watch_write(workspace / path, sizes[i])
        if stage.startswith("mid-write") or i == len(WRITES) - 1:
            return worker.kill_now(), i, stage
    raise AssertionError("unreachable")


def watch_write(target: Path, size: int) -> str:
    """Busy-polls (≤ 10 s) until the write is under way or done; says which it saw first.

    No sleep between looks (listing one directory takes microseconds): the loop ends
    within milliseconds, as soon as the write begins.
    """
    temp_prefix = f".{target.name}."
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            names = os.listdir(target.parent)
        except FileNotFoundError:
            continue  # the directory is created right before the temp file
        if any(n.startswith(temp_prefix) and n.endswith(TEMP_SUFFIX) for n in names):
            return "mid-write (temp file present)"
        if target.name in names and target.stat().st_size == size:
            return "write finished, activity not yet reported"
    return "run_tool running, write not begun within 10s"


async def test_kill_during_tool_write_and_session_work(
    temporal_env: WorkflowEnvironment, client: Client, tmp_path: Path, say: list[RoundLog]
) -> None:
    log = RoundLog("write+session")
    say.append(log)
    workspace = new_workspace(tmp_path)
    store_path = tmp_path / "sessions.db"
    plan = make_plan(WRITE_PLAN, session_id=f"write-{uuid.uuid4().hex[:6]}", prefix="write")
    base_id = plan.session_id
    assert base_id is not None
    history = long_history(HISTORY_TURNS)
    store = await open_session_store(str(store_path))
    try:
        await store.create_session(SessionMeta(session_id=base_id))
        await store.append(base_id, history)
    finally:
        await store.close()

    address = temporal_env.client.service_client.config.target_host
    crew = Crew(
        tmp_path,
        address,
        f"write-{uuid.uuid4().hex[:8]}",
        {"scenario": "tests.integration.chaos_support:WriterScenario", "startup_timeout_s": 60},
    )
    workers = crew.workers
    try:
        await (await crew.spawn()).ready(READY_TIMEOUT_S)
        handle = await start_plan(client, PlanInput(plan=plan), crew.task_queue)
        run_id = plan_run_id(plan, handle.first_execution_run_id)
        _, index, stage = await kill_during_write(workers[-1], workspace)
        await crew.record_kill(plan, run_id)
        log.add(f"kill1 in {ACT_RUN_TOOL} of w{index + 1}: {stage} {temp_leftovers(workspace)};")

        # The next subtask's isolation: its first LLM call builds its branch (a snapshot
        # of the long base, tool traffic stripped). On the new worker the killed subtask
        # first reruns its tool and makes its final call; kill as soon as the next call,
        # the victim's first, starts.
        victim = WRITE_PLAN[index + 1][0]
        branch = branch_session_id(base_id, run_id, victim)
        snap = snapshot_id(base_id, run_id, victim)
        await (await crew.spawn()).ready(READY_TIMEOUT_S)
        await workers[-1].wait_for_activity(ACT_CALL_LLM, timeout_s=90, nth=2)
        await kill_once_snapshot_taken(workers[-1], store_path, snap)
        await crew.record_kill(plan, run_id)
        state = await branch_state(store_path, branch, snap)
        log.add(f"kill2 in the first {ACT_CALL_LLM} of {victim} (branch build): {state};")

        # Closing that branch: the call that answers closes it right after storing the
        # answer; kill as soon as the answer is in the store.
        await (await crew.spawn()).ready(READY_TIMEOUT_S)
        await kill_after_final_answer(workers[-1], store_path, branch)
        await crew.record_kill(plan, run_id)
        state = await branch_state(store_path, branch, snap)
        log.add(f"kill3 after {victim}'s answer (branch close): {state};")
        assert await workflow_running(client, plan.id), "the plan finished before the last kill"

        await crew.spawn()
        report = await bounded(handle.result(), RESULT_TIMEOUT_S, f"plan {plan.id} result")
    finally:
        await crew.stop()

    audit = crew.audit()
    leftovers = temp_leftovers(workspace)
    sizes = [(workspace / p).stat().st_size for p in leftovers]
    log.add(f"requests={audit.requests} repeats={audit.repeats} leftovers={leftovers} {sizes}")
    assert audit.violations == [], audit.violations
    assert audit.rejected == [] and audit.not_completions == []
    assert audit.distinct == sum(2 + ("[turns:2]" in d) for _, d, _ in WRITE_PLAN)
    # Atomic writes: every file holds exactly the intended text, whatever was interrupted.
    for path in WRITES:
        assert (workspace / path).read_text() == file_content(path), path
    # A write that was not interrupted cleans up after itself; a temp file that SIGKILL
    # left behind mid-write is reported above and never became (part of) the file.
    if not stage.startswith("mid-write"):
        assert leftovers == [], leftovers
    assert len(leftovers) <= 1, leftovers
    await check_plan(
        client, store_path, plan, report, handle.first_execution_run_id, base_before=history
    )


async def kill_once_snapshot_taken(worker: ChaosWorker, store_path: Path, snap: str) -> float:
    """SIGKILL as soon as the branch build has snapshotted the base (it then creates and
    fills the branch), or after 2 s whatever the build is doing."""
    store = await open_session_store(str(store_path))
    deadline = time.monotonic() + 2
    try:
        while time.monotonic() < deadline:
            if await store.has_snapshot(snap):
                break
            await asyncio.sleep(0.001)
    finally:
        await store.close()
    return worker.kill_now()


async def kill_after_final_answer(worker: ChaosWorker, store_path: Path, branch_id: str) -> float:
    """SIGKILL as soon as the branch ends with a final answer (text, no tool call), that
    is while the call that stored it is closing the branch, or just after."""
    store = await open_session_store(str(store_path))
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            if not worker.alive:
                raise RuntimeError(f"worker died early:\n{worker.log_path.read_text()[-3000:]}")
            try:
                last = (await store.read(branch_id))[-1:]
            except SessionNotFound:
                last = []
            if last and last[0].role == "assistant" and last[0].content and not last[0].tool_calls:
                return worker.kill_now()
            await asyncio.sleep(0.002)
    finally:
        await store.close()
    raise TimeoutError(f"no final answer in {branch_id} within 90s")


async def branch_state(store_path: Path, branch_id: str, snap: str | None = None) -> str:
    """Where a kill left a branch: its size, whether it is closed, its snapshot kept."""
    store = await open_session_store(str(store_path))
    try:
        try:
            meta = await store.get_session(branch_id)
        except SessionNotFound:
            return "branch not created yet"
        state = f"branch {await store.count(branch_id)} messages, ended={meta.ended}"
        if snap is not None:
            state += f", snapshot kept={await store.has_snapshot(snap)}"
        return state
    finally:
        await store.close()
