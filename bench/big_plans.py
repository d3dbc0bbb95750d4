"""Big plans, on the path users run beside the in-process one.

    python -m bench.big_plans [--short] [--sizes N ...] [--shapes fanout,chains]
                              [--agents ask,coder] [--paths in-process/memory,...]
                              [--no-floor]

The offline scripted model at ``DPLAN_SCRIPTED_LATENCY_MS=0``: what is measured is
orchestration, never a model. Paths (``WORKER/SERVER``), printed side by side as ratios
in one run:

* ``in-process/memory``: worker and client in this process (``build_worker``), a dev
  server in memory: what this bench measured alone before issue 30;
* ``process/...``: a ``dplan-worker`` process configured through its environment (as the
  README starts one), the client here, only waiting for the result;
* ``cli/...``: the same worker, and ``dplan run PLAN`` in a process of its own as the
  client (following the plan as it does for a user; wall time on the server's clock, from
  the plan's start to its close, so the command's own start-up is not counted);
* ``.../memory``: a dev server in memory; ``.../file``: one writing its state file
  (``--db-filename``), as ``dplan run --embedded`` runs it. ``cli/file`` is the user's path.

Both shapes of issue 30 (``fanout``: a root and a fan-out off it; ``chains``: chains of
10), both agents (``ask``: one scripted LLM call; ``coder``: tool calls and the git
workspace), ``max_parallel`` 300, descriptions of about 300 characters; past 256 KiB a
plan goes by reference (``domain.plan_data``), sent packed by a client that cannot reach
the session store, as a service would. Beside them, on each server, the bare Temporal
workflow of the same shape (``bench.temporal_floor``: a parent starting one child per
subtask, each child one local activity that does nothing): what the dev server's own
persistence costs, which no change of ours can go below.

Printed per plan: wall time from the start request to the report, subtasks/s, the worker's
and the dev server's CPU per subtask (``/proc``; in-process, the worker's figure is this
process's, client included), the plan's workflow tasks (how long they waited to be
picked up, Scheduled→Started, and ran, Started→Completed, on the server's clock) and
those of a sample of its SubtaskWorkflows, history sizes against Temporal's limits; then
the ratios and the goals: the user's path in memory (``cli/memory``) within 1.3x of
``in-process/memory``; the 10,000-subtask chains at >= 0.9x the 1,000-subtask rate on
``cli/file`` (full mode).

``--short`` (CI): 100 subtasks per case, both shapes, both agents, on ``in-process/memory``,
``cli/memory`` and ``cli/file``, and the floor on both servers; about 2.5 minutes. Full
mode: 1,000 per case, and the 10,000-subtask chains (``ask``) on the user's path.
``--shapes mixed`` runs the shape this bench had before (a root, chains and a fan-out off
it). Nothing is asserted: the numbers are for reading.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import resource
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from bench._rig import bench_dirs, bench_settings, running_worker, scripted_latency_zero
from bench._user_path import (
    SERVER_KINDS,
    WorkerProcess,
    cpu_seconds,
    dev_server,
    load,
    worker_env,
)
from bench.scale import HISTORY_EVENT_LIMIT, CoreLogCounter, core_runtime
from bench.temporal_floor import floor_worker, run_temporal_floor
from durable_plans.activities.scripted_model import LATENCY_ENV, SCRIPTED_MODEL
from durable_plans.client._plans import start_plan
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, Subtask
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.settings import Settings

MAX_PARALLEL = 300
# One scripted call per subtask (``ask`` has no tools): what grows with the plan is the
# orchestration, which is what this measures; bench.scale runs the tool-calling coder.
AGENT = "ask"
AGENTS = ("ask", "coder")
SHAPES = ("fanout", "chains")
PATHS = ("in-process/memory", "process/memory", "cli/memory", "process/file", "cli/file")
# --short (CI): the user's path (cli: dplan-worker + dplan run) on both servers and the
# in-process figure it is compared with.
SHORT_PATHS = ("in-process/memory", "cli/memory", "cli/file")
SHORT_SIZE = 100
CHAIN = 10
LAST_CLI_CPU_S: list[float] = [0.0]  # the last ``dplan run``'s CPU (user + system)
CHILD_SAMPLE = 40  # SubtaskWorkflows whose workflow tasks are read, spread over the plan
GOAL_PROCESS_VS_IN_PROCESS = 1.3  # in-process rate / worker-process rate, in-memory server
GOAL_BIG_VS_SMALL = 0.9  # 10,000-subtask chains rate / 1,000-subtask rate, user's path
HISTORY_BYTES_LIMIT = 50 * 1024 * 1024
PAYLOAD_LIMIT = 2 * 1024 * 1024
FILLER = (
    "Read the files this item names, apply the change described in the ticket to each, "
    "keep the style of the surrounding code, run the checks that cover them and report "
    "what changed, what was left alone and why, in a few lines."
)


def wide_plan(subtasks: int, *, prefix: str = "big") -> Plan:
    """A root, then (subtasks - 1) / 2 in chains of ``CHAIN`` off it, the rest a fan-out
    off it; chains declared layer by layer so results merge in order as they come."""
    chained = (subtasks - 1) // 2
    chains = -(-chained // CHAIN)
    items = [Subtask(id="root", description=f"Survey the work. {FILLER}", agent=AGENT)]
    for step in range(CHAIN):
        for c in range(chains):
            if c * CHAIN + step >= chained:
                continue
            items.append(
                Subtask(
                    id=f"c{c}-s{step}",
                    description=f"Chain {c}, step {step}: {FILLER}",
                    agent=AGENT,
                    depends_on=(f"c{c}-s{step - 1}" if step else "root",),
                )
            )
    items.extend(
        Subtask(id=f"f{i}", description=f"Item {i}: {FILLER}", agent=AGENT, depends_on=("root",))
        for i in range(subtasks - len(items))
    )
    return Plan(
        id=f"{prefix}-{uuid.uuid4().hex[:10]}",
        goal="big plan benchmark",
        max_parallel=MAX_PARALLEL,
        subtasks=tuple(items),
    )


@dataclass(frozen=True)
class TaskTimes:
    """Workflow tasks on the server's clock, in ms: how long each waited for a worker to
    pick it up (Scheduled→Started: no free slot, or no poller) and how long it ran
    (Started→Completed: a local activity keeps its task open)."""

    wait_ms: tuple[float, ...] = ()
    run_ms: tuple[float, ...] = ()


@dataclass(frozen=True)
class Run:
    events: int
    bytes: int
    input_bytes: int
    largest_payload: int
    continued: bool
    # Workflow task durations (started to completed, the server's clock), in ms: what one
    # activation of the plan costs, which the SDK bounds at 2 s of wall time.
    task_ms: tuple[float, ...] = ()
    task_wait_ms: tuple[float, ...] = ()
    children: tuple[str, ...] = ()

    @property
    def slowest_task_ms(self) -> float:
        return max(self.task_ms, default=0.0)


@dataclass(frozen=True)
class Result:
    subtasks: int
    plan_bytes: int
    wall_s: float
    report_bytes: int
    listed: int
    runs: list[Run]
    case: Case | None = None
    worker_cpu_s: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0  # ``dplan run``'s own (the cli path only)
    child_tasks: TaskTimes = dataclasses.field(default_factory=TaskTimes)

    @property
    def rate(self) -> float:
        return self.subtasks / self.wall_s


@dataclass(frozen=True)
class Floor:
    """The bare Temporal workflow of a shape on one server kind."""

    server: str
    shape: str
    subtasks: int
    wall_s: float
    server_cpu_s: float

    @property
    def rate(self) -> float:
        return self.subtasks / self.wall_s


@dataclass(frozen=True)
class Measured:
    results: list[Result]
    floors: list[Floor]


def largest_payload(event: HistoryEvent) -> int:
    """The biggest ``Payload`` anywhere in the event (inputs, results, markers, details)."""
    best = 0
    stack: list[Any] = [event]
    while stack:
        message = stack.pop()
        if message.DESCRIPTOR.full_name == "temporal.api.common.v1.Payload":
            best = max(best, message.ByteSize())
            continue
        for field, value in message.ListFields():
            if field.message_type is None:
                continue
            if field.message_type.GetOptions().map_entry:
                stack.extend(v for v in value.values() if hasattr(v, "DESCRIPTOR"))
            elif field.is_repeated:
                stack.extend(value)
            else:
                stack.append(value)
    return best


def task_durations_ms(events: Sequence[HistoryEvent]) -> tuple[float, ...]:
    """How long each workflow task took, from its started event to its completed one."""
    started: dict[int, float] = {}
    out: list[float] = []
    for e in events:
        at = e.event_time.ToNanoseconds() / 1e6
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            started[e.event_id] = at
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            begun = started.get(e.workflow_task_completed_event_attributes.started_event_id)
            if begun is not None:
                out.append(at - begun)
    return tuple(out)


def task_times(events: Sequence[HistoryEvent]) -> TaskTimes:
    """Each workflow task's wait (Scheduled→Started) and run (Started→Completed)."""
    at = {e.event_id: e.event_time.ToNanoseconds() / 1e6 for e in events}
    waits: list[float] = []
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            scheduled = at.get(e.workflow_task_started_event_attributes.scheduled_event_id)
            if scheduled is not None:
                waits.append(at[e.event_id] - scheduled)
    return TaskTimes(tuple(waits), task_durations_ms(events))


async def plan_runs(client: Client, workflow_id: str) -> list[Run]:
    runs: list[Run] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        events = history.events
        started = events[0].workflow_execution_started_event_attributes
        runs.append(
            Run(
                events=len(events),
                bytes=sum(e.ByteSize() for e in events),
                input_bytes=started.input.ByteSize(),
                largest_payload=max(largest_payload(e) for e in events),
                continued=events[-1].event_type
                == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
                task_ms=task_durations_ms(events),
                task_wait_ms=task_times(events).wait_ms,
                children=tuple(
                    e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
                    for e in events
                    if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED
                ),
            )
        )
        run_id = started.continued_execution_run_id or None
        if run_id is None:
            break
    runs.reverse()
    return runs


def shape_plan(shape: str, subtasks: int, agent: str, *, prefix: str = "big") -> Plan:
    """The user's-path shapes of issue 30: ``fanout``, a root and a fan-out of
    ``subtasks - 1`` off it; ``chains``, ``subtasks / CHAIN`` independent chains of
    ``CHAIN``, declared layer by layer; ``mixed``, ``wide_plan``'s root, chains and fan-out."""
    if shape == "mixed":
        plan = wide_plan(subtasks, prefix=prefix)
        retyped = tuple(s.model_copy(update={"agent": agent}) for s in plan.subtasks)
        return plan.model_copy(update={"subtasks": retyped})
    items: list[Subtask]
    if shape == "fanout":
        items = [Subtask(id="root", description=f"Survey the work. {FILLER}", agent=agent)]
        items.extend(
            Subtask(
                id=f"f{i}", description=f"Item {i}: {FILLER}", agent=agent, depends_on=("root",)
            )
            for i in range(subtasks - 1)
        )
    elif shape == "chains":
        chains = -(-subtasks // CHAIN)
        items = [
            Subtask(
                id=f"c{c}-s{step}",
                description=f"Chain {c}, step {step}: {FILLER}",
                agent=agent,
                depends_on=(f"c{c}-s{step - 1}",) if step else (),
            )
            for step in range(CHAIN)
            for c in range(chains)
            if c * CHAIN + step < subtasks
        ]
    else:
        raise ValueError(f"unknown shape {shape!r}: one of {SHAPES}")
    return Plan(
        id=f"{prefix}-{shape}-{uuid.uuid4().hex[:10]}",
        goal="big plan benchmark",
        max_parallel=MAX_PARALLEL,
        subtasks=tuple(items),
    )


@dataclass(frozen=True)
class Case:
    """One plan to run: where (``worker``: in-process, process or cli; ``server``: memory
    or file), its shape, agent and size."""

    worker: str
    server: str
    shape: str
    agent: str
    subtasks: int

    @property
    def path(self) -> str:
        return f"{self.worker}/{self.server}"


async def one_plan(
    client: Client, settings: Settings, plan: Plan, pids: tuple[int, int]
) -> tuple[float, float, float, PlanReport]:
    """Wall, worker CPU and server CPU seconds of one plan, and its report."""
    worker_pid, server_pid = pids
    w0, s0, t0 = cpu_seconds(worker_pid), cpu_seconds(server_pid), time.perf_counter()
    handle = await start_plan(client, plan, settings)  # no store: packed, as a service would
    report: PlanReport = await handle.result()
    wall = time.perf_counter() - t0
    w1, s1 = cpu_seconds(worker_pid), cpu_seconds(server_pid)
    if report.status is not PlanStatus.COMPLETED:
        raise RuntimeError(f"plan {plan.id} ended {report.status.value}: {report.counts}")
    return wall, w1 - w0, s1 - s0, report


async def measure_one(
    client: Client,
    settings: Settings,
    case: Case,
    pids: tuple[int, int],
    cli_env: dict[str, str] | None = None,
) -> Result:
    plan = shape_plan(case.shape, case.subtasks, case.agent)
    client_cpu = 0.0
    if case.worker == "cli":
        assert cli_env is not None
        wall, worker_cpu, server_cpu, report = await cli_plan(client, plan, pids, cli_env)
        client_cpu = LAST_CLI_CPU_S[0]
    else:
        wall, worker_cpu, server_cpu, report = await one_plan(client, settings, plan, pids)
    runs = await plan_runs(client, plan.id)
    children = await child_tasks(client, [c for r in runs for c in r.children])
    return Result(
        subtasks=case.subtasks,
        plan_bytes=len(plan.model_dump_json()),
        wall_s=wall,
        report_bytes=len(report.model_dump_json()),
        listed=len(report.subtasks),
        runs=runs,
        case=case,
        worker_cpu_s=worker_cpu,
        server_cpu_s=server_cpu,
        client_cpu_s=client_cpu,
        child_tasks=children,
    )


async def cli_plan(
    client: Client, plan: Plan, pids: tuple[int, int], env: dict[str, str]
) -> tuple[float, float, float, PlanReport]:
    """The plan run by ``dplan run PLAN`` in a process of its own (output to a file, as
    in a pipe: one line per change, the running subtasks followed), as a user runs it.
    Wall time is the plan's own, from its start event to its close event on the server's
    clock: the command's own start-up (imports) is not the plan's."""
    worker_pid, server_pid = pids
    plan_file = Path(env["DPLAN_STATE_DIR"]).parent / f"{plan.id}.json"
    plan_file.write_text(plan.model_dump_json(exclude_defaults=True))
    dplan = Path(sys.executable).parent / "dplan"
    argv = [str(dplan), "run", str(plan_file)]
    w0, s0 = cpu_seconds(worker_pid), cpu_seconds(server_pid)
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with plan_file.with_suffix(".out").open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
        code = await proc.wait()
    w1, s1 = cpu_seconds(worker_pid), cpu_seconds(server_pid)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CLI_CPU_S[:] = [c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime]
    handle = client.get_workflow_handle(plan.id, result_type=PlanReport)
    report: PlanReport = await handle.result()
    if code != 0 or report.status is not PlanStatus.COMPLETED:
        tail = plan_file.with_suffix(".out").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"dplan run {plan.id} exited {code}, {report.status.value}:\n{tail}")
    return await _server_duration(client, plan.id), w1 - w0, s1 - s0, report


async def _server_duration(client: Client, workflow_id: str) -> float:
    """Seconds from the first run's start event to the last run's close event."""
    first = last = 0.0
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        events = history.events
        last = last or events[-1].event_time.ToNanoseconds() / 1e9
        first = events[0].event_time.ToNanoseconds() / 1e9
        run_id = events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not run_id:
            return last - first


async def child_tasks(client: Client, child_ids: Sequence[str]) -> TaskTimes:
    """Workflow-task timings of up to ``CHILD_SAMPLE`` SubtaskWorkflows, spread over the plan."""
    if not child_ids:
        return TaskTimes()
    step = max(1, len(child_ids) // CHILD_SAMPLE)
    waits: list[float] = []
    runs: list[float] = []
    for wid in child_ids[::step][:CHILD_SAMPLE]:
        events = (await client.get_workflow_handle(wid).fetch_history()).events
        times = task_times(events)
        waits.extend(times.wait_ms)
        runs.extend(times.run_ms)
    return TaskTimes(tuple(waits), tuple(runs))


_RUNTIME: list[Any] = []  # one runtime for the process: its core log counted, on stderr


async def _connect(address: str) -> Client:
    """A client of a dev server that may still be starting (up to a minute)."""
    if not _RUNTIME:
        _RUNTIME.append(core_runtime(CoreLogCounter()))
    deadline = time.monotonic() + 60
    while True:
        try:
            return await Client.connect(
                address, plugins=[DurablePlansPlugin()], runtime=_RUNTIME[0]
            )
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


async def _warm(client: Client, settings: Settings, pids: tuple[int, int]) -> None:
    """Imports, the sandbox's first load of each workflow, the agents' first calls."""
    for agent in AGENTS:
        await one_plan(client, settings, shape_plan("fanout", 3, agent, prefix="warm"), pids)


async def _floor(client: Client, queue: str, shape: str, subtasks: int) -> float:
    plan = shape_plan(shape, subtasks, "ask")
    return await run_temporal_floor(
        client, plan, queue, 0.0, tool_as_local_activity=True, llm_calls=1, llm_local=True
    )


async def measure(
    cases: Sequence[Case],
    floor_sizes: Sequence[tuple[str, int]],
    *,
    profile: Path | None = None,
) -> Measured:
    """Every case, grouped by server (one dev server process of each kind asked for, one
    after the other). On each server the in-process worker, the ``dplan-worker`` process
    and the bare-Temporal floor's worker (in this process) each poll their own queue; the
    cases run in the order given, and the floor of a shape and size (``floor_sizes``)
    right before the first case of it, so each is measured in the same minute of disk
    and CPU load as the plans it is the floor of. ``profile``: py-spy records the worker
    process over the measured plans (``DIR/worker-{server}.txt``, raw, 100 Hz)."""
    results: list[Result] = []
    floors: list[Floor] = []
    with scripted_latency_zero(), bench_dirs("big") as dirs, contextlib.ExitStack() as stack:
        for kind in [k for k in SERVER_KINDS if any(c.server == k for c in cases)]:
            server = stack.enter_context(dev_server(dirs.root, kind))
            client = await _connect(server.address)
            here = [c for c in cases if c.server == kind]
            settings = {
                "in-process": bench_settings(dirs, "big", temporal_address=server.address),
                "process": bench_settings(dirs, "bigp", temporal_address=server.address),
            }
            floor_queue = f"floor-{uuid.uuid4().hex[:8]}"
            floors_left = list(floor_sizes)
            async with contextlib.AsyncExitStack() as workers:
                pids: dict[str, tuple[int, int]] = {}
                if any(c.worker == "in-process" for c in here):
                    await workers.enter_async_context(
                        running_worker(client, settings["in-process"])
                    )
                    pids["in-process"] = (os.getpid(), server.pid)
                cli_env: dict[str, str] | None = None
                if any(c.worker in ("process", "cli") for c in here):
                    root = dirs.root / f"worker-{kind}"
                    (root / "workspace").mkdir(parents=True)
                    (root / "workspace" / "README.md").write_text("# bench workspace\n")
                    env = worker_env(server.address, settings["process"].task_queue, root)
                    proc = workers.enter_context(WorkerProcess(env, dirs.root / f"{kind}.log"))
                    pids["process"] = pids["cli"] = (proc.pid, server.pid)
                    settings["cli"] = settings["process"]
                    # ``dplan run`` beside it, as a user on the same machine: the same
                    # configuration, so the same session store (a plan past 256 KiB goes
                    # by reference through it).
                    cli_env = env
                if floors_left:
                    await workers.enter_async_context(floor_worker(client, floor_queue))
                    await _floor(client, floor_queue, "fanout", 3)  # warm-up
                for worker, p in pids.items():
                    if worker != "cli":
                        await _warm(client, settings[worker], p)
                if profile is not None and "process" in pids:
                    workers.enter_context(
                        _py_spy(pids["process"][0], profile / f"worker-{kind}.txt")
                    )
                for case in here:
                    if (case.shape, case.subtasks) in floors_left:
                        floors_left.remove((case.shape, case.subtasks))
                        s0 = cpu_seconds(server.pid)
                        wall = await _floor(client, floor_queue, case.shape, case.subtasks)
                        floor = Floor(
                            kind, case.shape, case.subtasks, wall, cpu_seconds(server.pid) - s0
                        )
                        floors.append(floor)
                        print(f"  floor {kind} {case.shape} {floor.subtasks}: "
                              f"{floor.rate:.1f} subtasks/s", flush=True)  # fmt: skip
                    result = await measure_one(
                        client, settings[case.worker], case, pids[case.worker], cli_env
                    )
                    results.append(result)
                    print(f"  {_row(result)}", flush=True)
    return Measured(results, floors)


@contextlib.contextmanager
def _py_spy(pid: int, out: Path) -> Iterator[None]:
    """py-spy (the ``bench`` extra) recording ``pid`` until the block ends."""
    beside = Path(sys.executable).parent / "py-spy"
    argv = [str(beside) if beside.exists() else "py-spy", "record", "--format", "raw"]
    argv += ["-r", "100", "--nonblocking", "-p", str(pid), "-o", str(out)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        try:
            spy.wait(timeout=60)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


ROW_HEAD = (
    f"{'path':<19}{'shape':<8}{'agent':<7}{'subtasks':>9}{'wall s':>8}{'subtasks/s':>11}"
    f"{'worker ms/st':>13}{'server ms/st':>13}{'cli ms/st':>10}{'plan WFT wait p50/max ms':>26}"
    f"{'plan WFT run p50/max':>22}{'child WFT wait p50/p95':>24}{'child WFT run p50/p95':>23}"
)


def _row(r: Result) -> str:
    case = r.case or Case("in-process", "memory", "mixed", AGENT, r.subtasks)
    waits = [w for run in r.runs for w in run.task_wait_ms]
    runs = [t for run in r.runs for t in run.task_ms]
    child = r.child_tasks
    return (
        f"{case.path:<19}{case.shape:<8}{case.agent:<7}{r.subtasks:>9}{r.wall_s:>8.1f}"
        f"{r.rate:>11.1f}{r.worker_cpu_s * 1000 / r.subtasks:>13.0f}"
        f"{r.server_cpu_s * 1000 / r.subtasks:>13.0f}"
        f"{r.client_cpu_s * 1000 / r.subtasks if r.client_cpu_s else 0:>10.0f}"
        f"{f'{_pct(waits, 0.5):.0f}/{max(waits, default=0):.0f}':>26}"
        f"{f'{_pct(runs, 0.5):.0f}/{max(runs, default=0):.0f}':>22}"
        f"{f'{_pct(child.wait_ms, 0.5):.0f}/{_pct(child.wait_ms, 0.95):.0f}':>24}"
        f"{f'{_pct(child.run_ms, 0.5):.0f}/{_pct(child.run_ms, 0.95):.0f}':>23}"
    )


def report(measured: Measured, *, load_before: str) -> None:
    results, floors = measured.results, measured.floors
    print(
        f"\nscripted model {SCRIPTED_MODEL}, {LATENCY_ENV}=0; {os.cpu_count()} CPUs; "
        f"max_parallel {MAX_PARALLEL}; chains of {CHAIN}; sent packed past 256 KiB "
        f"(by reference)\nload before: {load_before}\nload after:  {load()}\n"
    )
    print(ROW_HEAD)
    for r in results:
        print(_row(r))
    _history_table(results)
    by = {(r.case.path, r.case.shape, r.case.agent, r.subtasks): r for r in results if r.case}
    print("\nratios, in this run (subtasks/s; > 1: the first is faster):")
    for shape, agent, n in dict.fromkeys((k[1], k[2], k[3]) for k in by):
        parts = []
        inproc = by.get(("in-process/memory", shape, agent, n))
        for worker in ("process", "cli"):
            theirs = by.get((f"{worker}/memory", shape, agent, n))
            if inproc is None or theirs is None:
                continue
            slower = inproc.rate / theirs.rate
            goal = ""
            if worker == user_worker(by, "memory"):
                verdict = "met" if slower <= GOAL_PROCESS_VS_IN_PROCESS else "NOT met"
                goal = f" (goal <= {GOAL_PROCESS_VS_IN_PROCESS}: {verdict})"
            parts.append(f"in-process / {worker} (memory) {slower:.2f}x{goal}")
        for worker in ("process", "cli"):
            mem = by.get((f"{worker}/memory", shape, agent, n))
            onfile = by.get((f"{worker}/file", shape, agent, n))
            if mem is not None and onfile is not None:
                parts.append(f"{worker} memory / file {mem.rate / onfile.rate:.2f}x")
        if parts:
            print(f"  {shape:<7} {agent:<6} {n:>6}: " + "; ".join(parts))
    floor_by = {(f.server, f.shape, f.subtasks): f for f in floors}
    for (server, shape, n), f in floor_by.items():
        ours = by.get((f"{user_worker(by, server)}/{server}", shape, "ask", n))
        vs = (
            f"; dplan ({ours.case.path if ours.case else ''}, ask) {ours.rate:.1f}/s = "
            f"{ours.rate / f.rate:.2f}x it"
            if ours
            else ""
        )
        print(
            f"  floor (bare Temporal, same shape) {server:<6} {shape:<7} {n:>6}: "
            f"{f.rate:.1f} subtasks/s, server {f.server_cpu_s * 1000 / n:.0f} ms/subtask{vs}"
        )
        if server == "file" and ("memory", shape, n) in floor_by:
            floor_mem = floor_by[("memory", shape, n)]
            print(
                f"    the dev server's state file alone (floor memory / file): "
                f"{floor_mem.rate / f.rate:.2f}x"
            )
    user = f"{user_worker(by, 'file')}/file"
    chains = sorted(
        (r for r in results if r.case and r.case.path == user and r.case.shape == "chains"),
        key=lambda r: r.subtasks,
    )
    for agent in AGENTS:
        sized = [r for r in chains if r.case and r.case.agent == agent]
        if len(sized) >= 2 and sized[-1].subtasks >= 10 * sized[0].subtasks:
            small, big = sized[0], sized[-1]
            ratio = big.rate / small.rate
            verdict = "met" if ratio >= GOAL_BIG_VS_SMALL else "NOT met"
            print(
                f"  chains {agent} on {user}: {big.subtasks} / {small.subtasks} "
                f"subtasks rate {ratio:.2f}x (goal >= {GOAL_BIG_VS_SMALL}: {verdict})"
            )


def user_worker(by: dict[tuple[str, str, str, int], Result], server: str) -> str:
    """The user's path on ``server``: ``cli`` (``dplan-worker`` + ``dplan run``) where it
    ran, else ``process``."""
    return "cli" if any(k[0] == f"cli/{server}" for k in by) else "process"


def _history_table(results: list[Result]) -> None:
    print(
        f"\n{'path':<19}{'shape':<8}{'agent':<7}{'subtasks':>9}{'plan KiB':>10}{'runs':>6}"
        f"{'max events':>12}{'/ 51,200':>10}{'max hist KiB':>14}{'/ 50 MiB':>10}"
        f"{'max input KiB':>15}{'max payload KiB':>17}{'result KiB':>12}{'rows':>7}"
    )
    for r in results:
        case = r.case or Case("in-process", "memory", "mixed", AGENT, r.subtasks)
        events = max(x.events for x in r.runs)
        hist = max(x.bytes for x in r.runs)
        print(
            f"{case.path:<19}{case.shape:<8}{case.agent:<7}{r.subtasks:>9}"
            f"{r.plan_bytes / 1024:>10.0f}{len(r.runs):>6}{events:>12}"
            f"{events / HISTORY_EVENT_LIMIT:>10.1%}{hist / 1024:>14.0f}"
            f"{hist / HISTORY_BYTES_LIMIT:>10.1%}"
            f"{max(x.input_bytes for x in r.runs) / 1024:>15.0f}"
            f"{max(x.largest_payload for x in r.runs) / 1024:>17.0f}"
            f"{r.report_bytes / 1024:>12.0f}{r.listed:>7}"
        )


def cases_for(
    sizes: Sequence[int], shapes: Sequence[str], agents: Sequence[str], paths: Sequence[str]
) -> list[Case]:
    """Every (path, shape, agent, size), the paths of one server interleaved, so the
    in-process and the process worker see the same minutes of machine load."""
    out = []
    for size in sizes:
        for shape in shapes:
            for agent in agents:
                for path in paths:
                    worker, server = path.split("/")
                    out.append(Case(worker, server, shape, agent, size))
    return out


async def run(
    cases: Sequence[Case],
    floor_sizes: Sequence[tuple[str, int]],
    *,
    profile: Path | None = None,
) -> None:
    before = load()
    report(await measure(cases, floor_sizes, profile=profile), load_before=before)


async def main(short: bool) -> None:
    """Entry point for ``python -m bench`` (one parameter: ``bench/__main__.py``)."""
    if short:
        cases = cases_for([SHORT_SIZE], SHAPES, AGENTS, SHORT_PATHS)
        await run(cases, [(shape, SHORT_SIZE) for shape in SHAPES])
        return
    cases = cases_for([1_000], SHAPES, AGENTS, PATHS)
    cases.append(Case("cli", "file", "chains", "ask", 10_000))
    await run(cases, [(shape, 1_000) for shape in SHAPES])


def _csv(value: str, known: Sequence[str]) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in items if v not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; known: {', '.join(known)}")
    return items


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="100 subtasks per case (CI)")
    parser.add_argument(
        "--sizes", type=int, nargs="+", metavar="N", help="plan sizes to run, smallest first"
    )
    parser.add_argument(
        "--shapes", type=lambda v: _csv(v, (*SHAPES, "mixed")), default=list(SHAPES)
    )
    parser.add_argument("--agents", type=lambda v: _csv(v, AGENTS), default=list(AGENTS))
    parser.add_argument("--paths", type=lambda v: _csv(v, PATHS), default=list(PATHS))
    parser.add_argument("--no-floor", dest="floor", action="store_false")
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="py-spy the worker process into DIR"
    )
    args = parser.parse_args()
    if not args.sizes:
        asyncio.run(main(args.short))
        return
    cases = cases_for(args.sizes, args.shapes, args.agents, args.paths)
    floors = [(shape, n) for n in args.sizes for shape in args.shapes] if args.floor else []
    asyncio.run(run(cases, floors, profile=args.profile))


if __name__ == "__main__":
    cli()
