"""Orchestration-overhead benchmark: what durability costs on a realistic plan.

    python -m bench.overhead [--short] [--latency-ms 500] [--subtasks 20] [--width 4]
                             [--repeats 1]

One run, side by side, on one layered DAG (``--width`` subtasks per layer, each depending
on one or two subtasks of the layer before) and one in-process fake provider whose every
answer takes ``--latency-ms``. Each subtask is a real agent loop of two LLM calls (a tool
call, the tool, then the final answer), so the ideal plan time is
``critical path (in subtasks) x 2 x latency``. Three runners are timed against it:

* the asyncio floor (``bench.fake_dag``): the same DAG, requests and tools in plain
  asyncio, no durability at all;
* the durable path: a real Temporal dev server, the project's worker (``build_worker``)
  with a SQLite session store, PlanWorkflow → one SubtaskWorkflow per subtask, every LLM
  call an activity (the first also builds the branch, the answering one closes it), tools
  and merges local activities, timed from the client (start → result);
* the Temporal floor (``bench.temporal_floor``): the same server and DAG, run by a bare
  skeleton of that architecture with no project code (parent → one child per subtask,
  each child the same commands as SubtaskWorkflow doing nothing but sleep the latency),
  on its own task queue, timed the same way right after each durable run. What it costs
  is Temporal's own per-step price on this machine (SDK, dev server, cores); what the
  durable run costs beyond it is the project's code.

Besides the ratios it prints the history sizes and where the durable time goes, read
from the workflow histories' server timestamps (activity schedule-to-start, workflow-task
round trips, child start and completion hand-offs). All three are warmed up first on
a one-subtask plan with zero latency, so litellm's import, the sandbox's first load of
the workflow modules and the first HTTP connections are not billed to any of them.

``--short`` (CI): 100 ms latency, 8 subtasks; well under a minute. Nothing is asserted
about time: the numbers are for reading.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from bench._rig import bench_dirs, bench_settings, embedded_server, run_plan, running_worker
from bench.fake_dag import LitellmAgent, run_dag
from bench.temporal_floor import floor_worker, run_temporal_floor
from durable_plans.domain.contracts import ACT_CALL_LLM, ACT_MERGE_RESULTS
from durable_plans.domain.ids import subtask_workflow_id
from durable_plans.domain.models import Plan, Subtask
from durable_plans.domain.scheduling import critical_path_length
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider

MODEL = "openai/fake-model"
FAKE_KEY = "sk-bench-fake-000000000000000000000000000"  # the fake provider checks no key
LLM_CALLS_PER_SUBTASK = 2  # the fake's default agent: one tool-call turn, then the answer
SLOW_RATIO = 1.10


# --------------------------------------------------------------------------- the plan


def layered_plan(subtasks: int, width: int, *, prefix: str = "bench") -> Plan:
    """``subtasks`` in layers of ``width``; subtask k of a layer depends on subtask k of the
    previous one and, for odd k, also on its right neighbour there.

    Deterministic, so every run and both runners see the same DAG; mixing one- and
    two-dependency subtasks exercises both the fan-in and the plain hand-off.
    ``max_parallel`` is at least the width, so the ideal is the critical path.
    """
    if subtasks < 1 or width < 1:
        raise ValueError("subtasks and width must be positive")
    layers = [list(range(i, min(i + width, subtasks))) for i in range(0, subtasks, width)]
    items: list[Subtask] = []
    for depth, layer in enumerate(layers):
        for k, _ in enumerate(layer):
            deps: tuple[str, ...] = ()
            if depth > 0:
                below = len(layers[depth - 1])
                picks = [k % below]
                if k % 2 == 1 and below > 1:
                    picks.append((k + 1) % below)
                deps = tuple(dict.fromkeys(f"l{depth - 1}-s{p}" for p in picks))
            items.append(
                Subtask(
                    id=f"l{depth}-s{k}",
                    description=(
                        f"Layer {depth}, step {k}: look at the workspace and report what "
                        "the project contains."
                    ),
                    agent="coder",
                    depends_on=deps,
                )
            )
    return Plan(
        id=f"{prefix}-{uuid.uuid4().hex[:10]}",
        goal="orchestration overhead benchmark",
        max_parallel=max(4, width),
        subtasks=tuple(items),
    )


# --------------------------------------------------------------------------- histories


def _t(event: HistoryEvent) -> float:
    return event.event_time.ToDatetime().timestamp()


@dataclass
class SubtaskTimes:
    """One SubtaskWorkflow's history, reduced to where its wall time went (seconds)."""

    workflow_id: str
    events: int
    started: float
    closed: float
    llm_run: float = 0.0
    other_run: float = 0.0  # tool and session activities
    schedule_to_start: float = 0.0
    activities_total: float = 0.0  # scheduled → completed, summed
    workflow_tasks: int = 0
    wft_queue: float = 0.0  # workflow task scheduled → started (dispatch to the worker)
    wft_run: float = 0.0  # workflow task started → completed (the worker's processing)
    first_wft_run: float = 0.0  # the first one also builds the sandbox and the workflow

    @property
    def wall(self) -> float:
        return self.closed - self.started

    @property
    def between_activities(self) -> float:
        """Wall time outside any activity: workflow-task round trips and their gaps."""
        return self.wall - self.activities_total


def subtask_times(workflow_id: str, events: Sequence[HistoryEvent]) -> SubtaskTimes:
    out = SubtaskTimes(workflow_id, len(events), _t(events[0]), _t(events[-1]))
    scheduled: dict[int, tuple[str, float]] = {}
    started: dict[int, float] = {}
    wft_scheduled: dict[int, float] = {}
    wft_started: dict[int, float] = {}
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            wft_scheduled[e.event_id] = _t(e)
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            sched = e.workflow_task_started_event_attributes.scheduled_event_id
            wft_started[sched] = _t(e)
            out.wft_queue += _t(e) - wft_scheduled[sched]
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            sched = e.workflow_task_completed_event_attributes.scheduled_event_id
            run = _t(e) - wft_started[sched]
            if out.workflow_tasks == 0:
                out.first_wft_run = run
            out.workflow_tasks += 1
            out.wft_run += run
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[e.event_id] = (name, _t(e))
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            sid = e.activity_task_started_event_attributes.scheduled_event_id
            started[sid] = _t(e)
            out.schedule_to_start += started[sid] - scheduled[sid][1]
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sid = e.activity_task_completed_event_attributes.scheduled_event_id
            name, at = scheduled[sid]
            run = _t(e) - started[sid]
            if name == ACT_CALL_LLM:
                out.llm_run += run
            else:
                out.other_run += run
            out.activities_total += _t(e) - at
    return out


@dataclass
class PlanTimes:
    """The PlanWorkflow's side: children started and noticed, merges, hand-offs (seconds)."""

    events: int
    started: float
    closed: float
    child_start: list[float] = field(default_factory=list)  # initiated → child started
    notice: list[float] = field(default_factory=list)  # child closed → parent's event
    handoff: list[float] = field(default_factory=list)  # last dependency done → initiated
    merges: list[float] = field(default_factory=list)  # merge_results scheduled → completed


def plan_times(
    plan: Plan, events: Sequence[HistoryEvent], children: dict[str, SubtaskTimes]
) -> PlanTimes:
    out = PlanTimes(len(events), _t(events[0]), _t(events[-1]))
    prefix = f"{plan.id}/"
    initiated: dict[str, float] = {}
    completed: dict[str, float] = {}
    merge_scheduled: dict[int, float] = {}
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            wid = e.start_child_workflow_execution_initiated_event_attributes.workflow_id
            initiated[wid.removeprefix(prefix)] = _t(e)
        elif e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            attrs = e.child_workflow_execution_started_event_attributes
            sid = attrs.workflow_execution.workflow_id.removeprefix(prefix)
            out.child_start.append(_t(e) - initiated[sid])
        elif e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
            attrs_c = e.child_workflow_execution_completed_event_attributes
            sid = attrs_c.workflow_execution.workflow_id.removeprefix(prefix)
            completed[sid] = _t(e)
            if sid in children:
                out.notice.append(_t(e) - children[sid].closed)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if e.activity_task_scheduled_event_attributes.activity_type.name == ACT_MERGE_RESULTS:
                merge_scheduled[e.event_id] = _t(e)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sched = e.activity_task_completed_event_attributes.scheduled_event_id
            if sched in merge_scheduled:
                out.merges.append(_t(e) - merge_scheduled[sched])
    for sub in plan.subtasks:
        if sub.depends_on and sub.id in initiated:
            ready_at = max(completed[d] for d in sub.depends_on)
            out.handoff.append(initiated[sub.id] - ready_at)
    return out


async def fetch_times(client: Client, plan: Plan) -> tuple[PlanTimes, dict[str, SubtaskTimes]]:
    children: dict[str, SubtaskTimes] = {}
    for sub in plan.subtasks:
        wid = subtask_workflow_id(plan.id, sub.id)
        history = await client.get_workflow_handle(wid).fetch_history()
        children[sub.id] = subtask_times(wid, history.events)
    history = await client.get_workflow_handle(plan.id).fetch_history()
    return plan_times(plan, history.events, children), children


# --------------------------------------------------------------------------- the runs


@dataclass
class Measurement:
    asyncio_s: list[float] = field(default_factory=list)
    durable_s: list[float] = field(default_factory=list)
    temporal_floor_s: list[float] = field(default_factory=list)
    asyncio_requests: int = 0
    durable_requests: int = 0
    rejections: int = 0
    plan: Plan | None = None  # the last durable plan, whose histories are analysed


async def run_floor(plan: Plan, agent: LitellmAgent) -> float:
    result = await run_dag(plan, agent)
    return result.duration_s


async def measure(
    *, latency_ms: float, subtasks: int, width: int, repeats: int
) -> tuple[Measurement, PlanTimes, dict[str, SubtaskTimes]]:
    with bench_dirs("overhead") as dirs:
        async with FakeProvider(latency_ms=latency_ms) as provider, embedded_server() as env:
            settings = bench_settings(
                dirs,
                "bench",
                model=MODEL,
                api_base=provider.base_url,
                api_key=FAKE_KEY,
                llm_timeout_s=30.0,
            )
            floor_queue = f"{settings.task_queue}-floor"  # its own worker, same server
            agent = LitellmAgent(MODEL, provider.base_url, FAKE_KEY, dirs.workspace)
            async with (
                running_worker(env.client, settings),
                floor_worker(env.client, floor_queue),
            ):
                m = await _measure_with(
                    env.client, settings, floor_queue, provider, agent, latency_ms,
                    subtasks=subtasks, width=width, repeats=repeats,
                )  # fmt: skip
                assert m.plan is not None
                ptimes, ctimes = await fetch_times(env.client, m.plan)
    return m, ptimes, ctimes


async def _measure_with(
    client: Client,
    settings: Settings,
    floor_queue: str,
    provider: FakeProvider,
    agent: LitellmAgent,
    latency_ms: float,
    *,
    subtasks: int,
    width: int,
    repeats: int,
) -> Measurement:
    # Warm-up at zero latency: first import and connection costs belong to neither side.
    provider.latency_ms = 0.0
    await run_floor(layered_plan(1, 1, prefix="warm"), agent)
    await run_plan(client, layered_plan(1, 1, prefix="warm"), settings.task_queue)
    await run_temporal_floor(client, layered_plan(1, 1, prefix="warm"), floor_queue, 0.0)
    provider.latency_ms = latency_ms
    m = Measurement()
    for _ in range(repeats):
        plan = layered_plan(subtasks, width)
        before = len(provider.requests)
        m.asyncio_s.append(await run_floor(plan, agent))
        middle = len(provider.requests)
        m.durable_s.append(await run_plan(client, plan, settings.task_queue))
        m.temporal_floor_s.append(await run_temporal_floor(client, plan, floor_queue, latency_ms))
        m.asyncio_requests = middle - before
        m.durable_requests = len(provider.requests) - middle
        m.plan = plan
    m.rejections = len(provider.rejections)
    return m


# --------------------------------------------------------------------------- the report


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _row(depth: int, label: str, seconds: float, note: str = "") -> None:
    """One aligned line of the breakdown; ``depth`` indents parts under their whole."""
    indent = "  " * (depth + 1)
    line = f"{indent}{label:<{38 - len(indent)}}{_ms(seconds):>8}"
    print(f"{line}  ({note})" if note else line)


def _avg(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def report(
    m: Measurement,
    ptimes: PlanTimes,
    ctimes: dict[str, SubtaskTimes],
    *,
    latency_ms: float,
    width: int,
) -> None:
    plan = m.plan
    assert plan is not None
    n = len(plan.subtasks)
    cp = critical_path_length(plan)
    latency = latency_ms / 1000.0
    ideal = cp * LLM_CALLS_PER_SUBTASK * latency
    floor = statistics.median(m.asyncio_s)
    durable = statistics.median(m.durable_s)
    tfloor = statistics.median(m.temporal_floor_s)
    layers = -(-n // width)
    print(
        f"plan: {n} subtasks ({layers} layers x {width}), critical path {cp:.0f} subtasks, "
        f"max_parallel {plan.max_parallel}; {LLM_CALLS_PER_SUBTASK} LLM calls per subtask, "
        f"provider latency {latency_ms:.0f} ms; median of {len(m.durable_s)} run(s)\n"
    )
    rows = [
        ("ideal (critical path x 2 x lat.)", ideal),
        ("asyncio floor (bench.fake_dag)", floor),
        ("temporal floor (skeleton, no project code)", tfloor),
        ("durable (Temporal, client timed)", durable),
    ]
    label = max(len(name) for name, _ in rows) + 2
    print(f"{'':<{label}}{'seconds':>9}{'/ ideal':>9}{'/ asyncio':>11}")
    for name, value in rows:
        print(f"{name:<{label}}{value:>9.3f}{value / ideal:>8.2f}x{value / floor:>10.2f}x")
    print()
    print(f"durable / ideal   = {durable / ideal:.3f}")
    print(f"durable / asyncio = {durable / floor:.3f}")
    print(f"asyncio / ideal   = {floor / ideal:.3f}")
    print(f"temporal floor / ideal   = {tfloor / ideal:.3f}")
    print(f"durable / temporal floor = {durable / tfloor:.3f}")
    print(
        f"orchestration overhead per critical-path subtask: (durable - ideal) / {cp:.0f} = "
        f"{_ms((durable - ideal) / cp)}"
    )
    print(f"durability cost per subtask: (durable - asyncio) / {n} = {_ms((durable - floor) / n)}")
    print(
        "Temporal's own overhead per critical-path subtask: (temporal floor - ideal) / "
        f"{cp:.0f} = {_ms((tfloor - ideal) / cp)}"
    )
    print(
        "project code's share of the overhead per critical-path subtask: "
        f"(durable - temporal floor) / {cp:.0f} = {_ms((durable - tfloor) / cp)}"
    )
    print(
        f"LLM requests seen by the provider: durable {m.durable_requests}, asyncio "
        f"{m.asyncio_requests} (expected {LLM_CALLS_PER_SUBTASK * n} each); "
        f"strict-validation rejections: {m.rejections}"
    )
    counts = [t.events for t in ctimes.values()]
    first = ctimes[plan.subtasks[0].id]
    print(
        f"history events: PlanWorkflow {ptimes.events}; SubtaskWorkflow {first.workflow_id} "
        f"{first.events} (all {n}: min {min(counts)}, max {max(counts)})"
    )

    print("\nwhere the durable time goes (server timestamps from the histories):")
    subs = list(ctimes.values())
    wall = _avg([t.wall for t in subs])
    llm = _avg([t.llm_run for t in subs])
    other = _avg([t.other_run for t in subs])
    s2s = _avg([t.schedule_to_start for t in subs])
    between = _avg([t.between_activities for t in subs])
    ideal_sub = LLM_CALLS_PER_SUBTASK * latency
    wfts = _avg([t.workflow_tasks for t in subs])
    _row(0, "SubtaskWorkflow wall, avg", wall, f"ideal {_ms(ideal_sub)}")
    _row(1, "call_llm activities running", llm, f"+{_ms(llm - ideal_sub)} over provider latency")
    _row(1, "tool + session activities", other)
    _row(1, "activity schedule-to-start", s2s)
    _row(1, "workflow tasks and gaps", between, "local activities run in here too")
    print(
        f"        {wfts:.0f} workflow tasks: dispatch (scheduled→started) "
        f"{_ms(_avg([t.wft_queue for t in subs]) / wfts)} each, worker processing "
        f"(started→completed) {_ms(_avg([t.wft_run for t in subs]) / wfts)} each, "
        f"the first {_ms(_avg([t.first_wft_run for t in subs]))}"
    )
    print("  PlanWorkflow, per child / dependency hop (avg):")
    _row(1, "child start (initiated→started)", _avg(ptimes.child_start))
    _row(1, "child closed → parent notified", _avg(ptimes.notice))
    _row(
        1,
        "dependency done → next child",
        _avg(ptimes.handoff),
        "parent workflow task(s), incl. merge_results when it runs first",
    )
    _row(
        1,
        "merge_results activities",
        _avg(ptimes.merges),
        f"x {len(ptimes.merges)}, scheduled → completed",
    )
    hop = wall - ideal_sub + _avg(ptimes.child_start) + _avg(ptimes.notice) + _avg(ptimes.handoff)
    # The histories are the last run's, so compare them with that run's client time.
    client_extra = m.durable_s[-1] - (ptimes.closed - ptimes.started)
    print(
        f"  estimated overhead per critical-path hop: {_ms(hop)} (subtask wall - ideal + start "
        f"+ notice + hand-off); client start/result round trip: {_ms(client_extra)}"
    )
    if durable / ideal > SLOW_RATIO:
        print(
            f"\nnote: durable/ideal {durable / ideal:.2f} is above {SLOW_RATIO:.2f}; the "
            "breakdown above shows which hops add the time."
        )
        if tfloor / ideal > SLOW_RATIO:
            print(
                f"      the skeleton with no project code is at {tfloor / ideal:.2f} itself: "
                "on this machine the target is below Temporal's own per-step cost."
            )


# --------------------------------------------------------------------------- entry points


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overhead",
        description=(
            "Durable plan time vs the ideal critical path, a plain asyncio floor and a bare "
            "Temporal floor."
        ),
    )
    parser.add_argument("--short", action="store_true", help="100 ms latency, 8 subtasks (CI)")
    parser.add_argument("--latency-ms", type=float, help="provider latency (default 500)")
    parser.add_argument("--subtasks", type=int, help="number of subtasks (default 20)")
    parser.add_argument("--width", type=int, default=4, help="subtasks per layer (default 4)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per side; medians shown")
    args = parser.parse_args(argv)
    if args.latency_ms is None:
        args.latency_ms = 100.0 if args.short else 500.0
    if args.subtasks is None:
        args.subtasks = 8 if args.short else 20
    if args.latency_ms <= 0 or args.subtasks < 1 or args.width < 1 or args.repeats < 1:
        parser.error("latency, subtasks, width and repeats must be positive")
    return args


async def run(argv: Sequence[str] | None = None) -> None:
    args = _parse(argv)
    m, ptimes, ctimes = await measure(
        latency_ms=args.latency_ms, subtasks=args.subtasks, width=args.width, repeats=args.repeats
    )
    report(m, ptimes, ctimes, latency_ms=args.latency_ms, width=args.width)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(run(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
