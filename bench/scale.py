"""Scale benchmark: how plan size and plan concurrency load one worker and its histories.

    python -m bench.scale [--short]

One Temporal dev server, one in-process worker (``build_worker``) with a SQLite session
store in a temporary directory, and the offline scripted model (``scripted/demo``) with
``DPLAN_SCRIPTED_LATENCY_MS=0``, so what is measured is orchestration alone: Temporal
round trips, the workflow sandbox, activities and session-store writes, never a model.

* Big plans: 100 and 1,000 subtasks as parallel chains of 10 (``max_parallel`` 100).
  Wall time from the client's start request to the result, subtasks/s, the worker's
  memory (``VmRSS`` after, ``VmHWM`` peak during the plan; psutil is not a dependency and
  the worker is this process, so ``/proc/self/status`` is the truth), the dev server's
  RSS, and the PlanWorkflow's history per run. Continue-as-new is followed back from the
  latest run through ``continued_execution_run_id``, so every run's event count is shown:
  each must stay far below the 51,200-event hard limit, and the 1,000-subtask plan is
  expected to cross the 4,096-event suggestion and continue as new. The size of each
  run's start input is shown too, since that is where carried progress lives. Activity
  retries (from every subtask's history) and late completions (the SDK core's warning
  for an activity that finished after the server had timed it out) show whether the
  worker kept up: on an overloaded host heartbeats arrive late and work is redone.
* Many plans: 50 plans of 5 subtasks each (a fan-out/fan-in), all started at once:
  wall time, plans/s and the spread of per-plan latency.

``--short`` (CI): the 100-subtask plan and 10 concurrent plans, well under a minute.
A one-subtask warm-up runs first so litellm's import and the sandbox's first load are
not billed to any row. Nothing is asserted about time: the numbers are for reading.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig

from bench._rig import (
    bench_dirs,
    bench_settings,
    embedded_server,
    run_plan,
    running_worker,
    scripted_latency_zero,
)
from durable_plans.activities.scripted_model import LATENCY_ENV, SCRIPTED_MODEL
from durable_plans.domain.ids import subtask_workflow_id
from durable_plans.domain.models import Plan, Subtask

CHAIN_LENGTH = 10
BIG_MAX_PARALLEL = 100
SMALL_PLAN_SUBTASKS = 5
HISTORY_EVENT_LIMIT = 51_200  # the server terminates a run here
CAN_SUGGESTED_AT = 4_096  # the server suggests continue-as-new from here
PAYLOAD_WARN_BYTES = 512 * 1024  # the server warns about one payload above this
HISTORY_FETCHES_AT_ONCE = 16
LATE_COMPLETION = "Activity not found on completion"


# --------------------------------------------------------------------------- plans


def chains_plan(subtasks: int, *, chain: int = CHAIN_LENGTH, prefix: str = "scale") -> Plan:
    """``subtasks / chain`` independent chains of ``chain`` steps, declared layer by layer.

    Wide and shallow like a real fan-out (critical path ``chain`` whatever the size), so
    the plan's width, not its depth, is what grows. Declaring step 0 of every chain, then
    step 1, ... keeps the in-order merge of results into the base session moving while
    the plan runs, instead of holding everything back until chain 0 is done.
    """
    if subtasks < 1 or chain < 1:
        raise ValueError("subtasks and chain must be positive")
    chains = -(-subtasks // chain)
    items: list[Subtask] = []
    for step in range(chain):
        for c in range(chains):
            if c * chain + step >= subtasks:
                continue
            items.append(
                Subtask(
                    id=f"c{c}-s{step}",
                    description=f"Chain {c}, step {step}: look at the workspace and report.",
                    agent="coder",
                    depends_on=(f"c{c}-s{step - 1}",) if step else (),
                )
            )
    return Plan(
        id=f"{prefix}-{uuid.uuid4().hex[:10]}",
        goal="scale benchmark",
        max_parallel=BIG_MAX_PARALLEL,
        subtasks=tuple(items),
    )


def small_plan(prefix: str = "many") -> Plan:
    """Five subtasks, one fans out to three that fan back in: a typical small request."""
    a = Subtask(id="plan", description="Look at the workspace and plan the change.")
    mids = tuple(
        Subtask(id=f"part{i}", description=f"Do part {i} of the change.", depends_on=("plan",))
        for i in range(1, 4)
    )
    z = Subtask(
        id="review",
        description="Review the parts and report.",
        depends_on=tuple(m.id for m in mids),
    )
    return Plan(
        id=f"{prefix}-{uuid.uuid4().hex[:10]}",
        goal="concurrency benchmark",
        max_parallel=4,
        subtasks=(a, *mids, z),
    )


# --------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class Memory:
    rss_kb: int
    hwm_kb: int


def read_memory(pid: str = "self") -> Memory:
    """Resident and peak-resident memory of a process, from ``/proc/<pid>/status``."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
    return Memory(fields.get("VmRSS", 0), fields.get("VmHWM", 0))


def reset_peak() -> bool:
    """Reset this process's ``VmHWM`` to its current RSS (Linux >= 4.0), so the peak of
    each row is that row's, not the warm-up's or an earlier row's. False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def server_pids() -> list[str]:
    """This process's ``temporal`` children: the dev server ``start_local`` spawned.

    Its memory is part of what a plan costs on one host, and it is a separate process,
    so it has to be found rather than read from ``/proc/self``.
    """
    me = str(os.getpid())
    pids: list[str] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                raw = stat.read()
        except OSError:
            continue
        comm = raw[raw.find("(") + 1 : raw.rfind(")")]
        ppid = raw[raw.rfind(")") + 2 :].split()[1]
        if ppid == me and comm.startswith("temporal"):
            pids.append(entry)
    return pids


def server_rss_kb() -> int:
    total = 0
    for pid in server_pids():
        with contextlib.suppress(OSError):
            total += read_memory(pid).rss_kb
    return total


# --------------------------------------------------------------------------- histories


@dataclass(frozen=True)
class RunHistory:
    run_id: str
    events: int
    bytes: int
    input_bytes: int  # the run's start input: the plan plus progress carried over
    continued_as_new: bool


async def plan_runs(client: Client, workflow_id: str) -> list[RunHistory]:
    """Every run of a workflow id, oldest first, walking continue-as-new backwards.

    The handle without a run id fetches the latest run; each run's started event names
    the run it continued from, so the chain is followed without listing the namespace.
    """
    runs: list[RunHistory] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        events = history.events
        started = events[0].workflow_execution_started_event_attributes
        runs.append(
            RunHistory(
                run_id=run_id or started.original_execution_run_id,
                events=len(events),
                bytes=sum(e.ByteSize() for e in events),
                input_bytes=started.input.ByteSize(),
                continued_as_new=events[-1].event_type
                == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
            )
        )
        previous = started.continued_execution_run_id
        if not previous:
            break
        run_id = previous
    runs.reverse()
    return runs


async def event_count(client: Client, workflow_id: str) -> int:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return len(history.events)


async def activity_retries(client: Client, workflow_ids: Sequence[str]) -> int:
    """Activity attempts beyond the first, summed over the workflows' latest runs.

    A retried activity records only its last attempt's started event, whose ``attempt``
    says how many tries it took; the fetches are bounded so a 1,000-subtask plan does not
    open 1,000 streams at once against a server that is still busy.
    """
    limit = asyncio.Semaphore(HISTORY_FETCHES_AT_ONCE)

    async def one(workflow_id: str) -> int:
        async with limit:
            history = await client.get_workflow_handle(workflow_id).fetch_history()
        return sum(
            e.activity_task_started_event_attributes.attempt - 1
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        )

    return sum(await asyncio.gather(*(one(w) for w in workflow_ids)))


class CoreLogCounter(logging.Handler):
    """Counts the SDK core's warnings, which are forwarded here instead of to stdout.

    By default the Rust core prints them on stdout, in the middle of the table; forwarded
    to Python they go to stderr, and the late completions among them become a number.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.warnings = 0
        self.late_completions = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.warnings += 1
        if LATE_COMPLETION in record.getMessage():
            self.late_completions += 1


def core_runtime(counter: CoreLogCounter) -> Runtime:
    """A Temporal runtime whose core logs go through ``counter`` and then to stderr."""
    logger = logging.getLogger("dplan.bench.scale.core")
    logger.setLevel(logging.WARNING)
    logger.propagate = False  # stderr once, whatever the root logger is configured to do
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.addHandler(counter)
    logger.addHandler(logging.StreamHandler(sys.stderr))
    logging_config = LoggingConfig(
        filter=LoggingConfig.default.filter, forwarding=LogForwardingConfig(logger=logger)
    )
    return Runtime(telemetry=TelemetryConfig(logging=logging_config))


# --------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class BigResult:
    subtasks: int
    wall_s: float
    rss_kb: int
    hwm_kb: int
    server_rss_kb: int
    runs: list[RunHistory]
    subtask_id: str
    subtask_events: int
    retries: int
    late_completions: int

    @property
    def rate(self) -> float:
        return self.subtasks / self.wall_s


@dataclass(frozen=True)
class ManyResult:
    plans: int
    subtasks_each: int
    wall_s: float
    latencies: list[float]
    rss_kb: int
    hwm_kb: int
    server_rss_kb: int
    retries: int
    late_completions: int

    @property
    def rate(self) -> float:
        return self.plans / self.wall_s


async def big_plan(
    client: Client, task_queue: str, subtasks: int, counter: CoreLogCounter
) -> BigResult:
    plan = chains_plan(subtasks)
    late_before = counter.late_completions
    reset_peak()
    wall = await run_plan(client, plan, task_queue)
    mem = read_memory()
    first = plan.subtasks[0].id
    runs = await plan_runs(client, plan.id)
    return BigResult(
        subtasks=subtasks,
        wall_s=wall,
        rss_kb=mem.rss_kb,
        hwm_kb=mem.hwm_kb,
        server_rss_kb=server_rss_kb(),
        runs=runs,
        subtask_id=first,
        subtask_events=await event_count(client, subtask_workflow_id(plan.id, first)),
        retries=await activity_retries(client, _workflow_ids(plan)),
        late_completions=counter.late_completions - late_before,
    )


def _workflow_ids(plan: Plan) -> list[str]:
    """The plan's latest run and every SubtaskWorkflow it started (ids are stable)."""
    return [plan.id, *(subtask_workflow_id(plan.id, s.id) for s in plan.subtasks)]


async def many_plans(
    client: Client, task_queue: str, count: int, counter: CoreLogCounter
) -> ManyResult:
    plans = [small_plan() for _ in range(count)]
    late_before = counter.late_completions
    reset_peak()
    t0 = time.perf_counter()
    latencies = await asyncio.gather(*(run_plan(client, p, task_queue) for p in plans))
    wall = time.perf_counter() - t0
    mem = read_memory()
    return ManyResult(
        plans=count,
        subtasks_each=SMALL_PLAN_SUBTASKS,
        wall_s=wall,
        latencies=list(latencies),
        rss_kb=mem.rss_kb,
        hwm_kb=mem.hwm_kb,
        server_rss_kb=server_rss_kb(),
        retries=await activity_retries(client, [w for p in plans for w in _workflow_ids(p)]),
        late_completions=counter.late_completions - late_before,
    )


@dataclass
class Results:
    baseline: Memory
    warm_s: float
    after_warm: Memory
    big: list[BigResult]
    many: list[ManyResult]


async def measure(big_sizes: Sequence[int], concurrent: Sequence[int]) -> Results:
    baseline = read_memory()
    counter = CoreLogCounter()
    with scripted_latency_zero(), bench_dirs("scale") as dirs:
        async with embedded_server(core_runtime(counter)) as env:
            settings = bench_settings(dirs, "scale")
            async with running_worker(env.client, settings):
                tq = settings.task_queue
                warm_s = await run_plan(env.client, chains_plan(1, prefix="warm"), tq)
                after_warm = read_memory()
                big = [await big_plan(env.client, tq, n, counter) for n in big_sizes]
                many = [await many_plans(env.client, tq, n, counter) for n in concurrent]
    return Results(baseline, warm_s, after_warm, big, many)


# --------------------------------------------------------------------------- report


def _mib(kb: int) -> str:
    return f"{kb / 1024:.0f} MiB"


def report(res: Results) -> None:
    print(
        f"scripted model {SCRIPTED_MODEL}, {LATENCY_ENV}=0; SQLite session store; one dev "
        f"server, one in-process worker; {os.cpu_count()} CPUs\n"
        f"worker RSS: {_mib(res.baseline.rss_kb)} at start, {_mib(res.after_warm.rss_kb)} "
        f"after the warm-up plan ({res.warm_s:.1f} s: litellm import, sandbox first load)\n"
    )
    print(f"plans of parallel chains of {CHAIN_LENGTH}, max_parallel {BIG_MAX_PARALLEL}:")
    print(
        f"{'subtasks':>9}{'wall s':>9}{'subtasks/s':>12}{'worker RSS':>12}{'peak RSS':>10}"
        f"{'server RSS':>12}{'plan runs':>11}{'plan events':>13}{'subtask events':>16}"
    )
    for b in res.big:
        print(
            f"{b.subtasks:>9}{b.wall_s:>9.2f}{b.rate:>12.1f}{_mib(b.rss_kb):>12}"
            f"{_mib(b.hwm_kb):>10}{_mib(b.server_rss_kb):>12}{len(b.runs):>11}"
            f"{sum(r.events for r in b.runs):>13}{b.subtask_events:>16}"
        )
    for b in res.big:
        print(f"\n  {b.subtasks} subtasks, PlanWorkflow runs (oldest first):")
        print(
            f"    {'run':>4}  {'run id':<38}{'events':>8}{'/ 51,200':>10}{'history KiB':>13}"
            f"{'input KiB':>11}  ended"
        )
        for i, r in enumerate(b.runs, 1):
            print(
                f"    {i:>4}  {r.run_id:<38}{r.events:>8}{r.events / HISTORY_EVENT_LIMIT:>10.1%}"
                f"{r.bytes / 1024:>13.1f}{r.input_bytes / 1024:>11.1f}  "
                f"{'continued-as-new' if r.continued_as_new else 'closed'}"
            )
        worst = max(r.events for r in b.runs)
        crossed = sum(r.events for r in b.runs) > CAN_SUGGESTED_AT
        if len(b.runs) == 1 and crossed:
            print(f"    note: {worst} events in one run but no continue-as-new happened")
        biggest_input = max(r.input_bytes for r in b.runs)
        if biggest_input > PAYLOAD_WARN_BYTES:
            print(
                f"    note: a run's input is {biggest_input / 1024:.0f} KiB, above the "
                f"server's {PAYLOAD_WARN_BYTES // 1024} KiB payload warning"
            )
        print(f"    one SubtaskWorkflow ({b.subtask_id}): {b.subtask_events} events")
        print(
            f"    activity retries (all {b.subtasks} subtasks + plan): {b.retries}; "
            f"late completions (timed out before they finished): {b.late_completions}"
        )

    print(f"\nconcurrent plans of {SMALL_PLAN_SUBTASKS} subtasks (fan-out/fan-in), all at once:")
    print(
        f"{'plans':>6}{'wall s':>9}{'plans/s':>9}{'subtasks/s':>12}{'latency min/median/max s':>27}"
        f"{'worker RSS':>12}{'peak RSS':>10}{'server RSS':>12}"
    )
    for m in res.many:
        spread = (
            f"{min(m.latencies):.2f} / {statistics.median(m.latencies):.2f} / "
            f"{max(m.latencies):.2f}"
        )
        print(
            f"{m.plans:>6}{m.wall_s:>9.2f}{m.rate:>9.2f}"
            f"{m.plans * m.subtasks_each / m.wall_s:>12.1f}{spread:>27}"
            f"{_mib(m.rss_kb):>12}{_mib(m.hwm_kb):>10}{_mib(m.server_rss_kb):>12}"
        )
        print(
            f"  activity retries (all plans): {m.retries}; late completions: {m.late_completions}"
        )
    if res.big and res.many:
        big_rate = res.big[0].rate
        many = res.many[-1]
        ratio = many.plans * many.subtasks_each / many.wall_s / big_rate
        print(
            f"\nsubtasks/s, {many.plans} small plans vs one {res.big[0].subtasks}-subtask "
            f"plan: {ratio:.2f}x"
        )


# --------------------------------------------------------------------------- entry points


async def main(short: bool) -> None:
    """Entry point for ``python -m bench`` (and this module's own ``__main__``)."""
    big_sizes = [100] if short else [100, 1000]
    concurrent = [10] if short else [50]
    report(await measure(big_sizes, concurrent))


def _cli(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description="Plan size and plan concurrency on one worker: time, memory, histories.",
    )
    parser.add_argument(
        "--short", action="store_true", help="100-subtask plan and 10 concurrent plans (CI)"
    )
    args = parser.parse_args(argv)
    asyncio.run(main(args.short))


if __name__ == "__main__":
    _cli()
