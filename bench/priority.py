"""Does a priority-1 plan jump a queue of priority-5 subtasks? (issue 35), on the path users run.

    python -m bench.priority [--short] [--background 200] [--urgent 5] [--latency-ms 2000]

A ``dplan-worker`` process (configured through its environment only) on a ``temporal
server start-dev`` process (in memory, the project's search attributes registered:
``bench._user_path``), against the fake OpenAI-compatible provider
(``durable_plans.testing.FakeProvider``). The worker runs every LLM call as a regular
activity (``DPLAN_LLM_LOCAL=0``; by default they are local activities, which never queue
on the server), so each subtask's call is an activity task on the plan's task queue, and
the worker takes at most 50 at a time (``worker.MAX_CONCURRENT_ACTIVITIES``).

A *background* plan of ``--background`` independent ``ask`` subtasks (one LLM call each,
``max_parallel`` as wide) starts; the provider holds the calls that fill the worker's 50
slots (``HeldFirstWave``), so the plan's next 50 calls queue on the server (the plan
starts 100 subtasks until one ends; the rest wait in the plan). Once they are queued (each
subtask's workflow, described, has its call pending), an *urgent* plan of ``--urgent``
subtasks starts, and about a second later the held calls end one by one, a slot every
``--latency-ms`` / 50 (later calls take ``--latency-ms``), as on a worker busy with calls
that long. Who gets the freed slots is the server's choice.

From the workflows' histories (each call's ActivityTaskScheduled and ActivityTaskStarted
times, the server's clock): the background subtasks still waiting when the urgent plan
started, and how many of them were handed out before the urgent plan's calls: about the
slots that free while the urgent plan opens its workspace and starts its subtasks if the
server honours priority, most of them if it serves in order; and, at the queue itself,
of the background calls queued when an urgent call was queued, the share handed out
before it (0 honoured, 1 in order).

Scenarios, each on a new pair of plans (``--short``: the first two, 100 background
subtasks, about 30 s; the whole run about two minutes on 2 idle cores):

* ``priority``: background at priority 5, urgent at 1 (``Plan.priority``);
* ``control``: both at the default priority (None), in the same run on the same server;
* ``tenants``: both at the default priority, the background plan for tenant ``a``, the
  urgent one for ``b`` (``Plan.tenant``, the fairness key);
* on a dev server started with ``--dynamic-config-value matching.enableFairness=true``:
  ``tenants``, then ``priority``;
* on one with a single task-queue partition (``matching.numTaskqueueReadPartitions=1``,
  ``...WritePartitions=1``; the dev server's default is 4): ``priority``, ``control``.

Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, WorkflowExecutionStatus
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest
from temporalio.service import RPCError

from bench import _user_path
from bench._user_path import WorkerProcess, load, worker_env
from durable_plans.client import Client
from durable_plans.domain.ids import subtask_workflow_id
from durable_plans.domain.models import Plan, PlanStatus, Subtask, SubtaskStatus
from durable_plans.settings import Settings
from durable_plans.testing import AgentScenario, ChatRequest, FakeProvider, Reply

MODEL = "openai/fake-model"
FAKE_KEY = "sk-bench-fake-000000000000000000000000000"  # the fake provider checks no key
SLOTS = 50  # durable_plans.worker.MAX_CONCURRENT_ACTIVITIES
URGENT_HEAD_START_S = 1.0  # the release comes at least this long after the urgent plan starts
EXTEND_S = 3.0  # how far the release moves while the plans' subtasks are still starting
FAIRNESS = ("matching.enableFairness=true",)
ONE_PARTITION = (
    "matching.numTaskqueueReadPartitions=1",
    "matching.numTaskqueueWritePartitions=1",
)


@dataclass(frozen=True)
class Scenario:
    name: str
    background_priority: int | None = None
    urgent_priority: int | None = None
    background_tenant: str | None = None
    urgent_tenant: str | None = None


PRIORITY = Scenario("priority", background_priority=5, urgent_priority=1)
CONTROL = Scenario("control")
TENANTS = Scenario("tenants", background_tenant="a", urgent_tenant="b")


class HeldFirstWave:
    """The provider's answers (``AgentScenario``), the background plan's held: a call
    arriving before ``release_at`` (as it was then) is answered at ``release_at`` plus
    ``stagger_s`` for each call held before it since ``reset`` (plus the provider's
    latency). The calls that fill the worker's slots end one after the other from that
    moment, a slot every ``stagger_s`` as on a worker busy with calls that long, so the
    queue behind them builds up however fast this machine starts subtasks, and the freed
    slots go to whichever calls the server hands out first."""

    def __init__(self, stagger_s: float) -> None:
        self.inner = AgentScenario()
        self.stagger_s = stagger_s
        self.release_at = 0.0  # time.time()
        self.held = 0

    def reset(self, release_at: float) -> None:
        self.release_at = release_at
        self.held = 0

    def __call__(self, request: ChatRequest) -> Reply:
        reply = self.inner(request)
        wait = self.release_at - time.time()
        if wait > 0 and "job bg-" in request.last_user_text:
            wait += self.held * self.stagger_s
            self.held += 1
            return replace(reply, delay_ms=reply.delay_ms + wait * 1000)
        return reply


@dataclass(frozen=True)
class Call:
    """An activity as its workflow's history has it (the server's clock)."""

    scheduled: float  # ActivityTaskScheduled: queued (seconds since the epoch)
    started: float  # ActivityTaskStarted: handed to the worker


@dataclass
class Result:
    server: str
    scenario: str
    # When the urgent plan started: the background subtasks the plan had started (the
    # rest wait in the plan), and those whose call had not been handed out yet; how many of
    # these went before each urgent subtask's call (mean and max).
    started: int
    waiting: int
    before_urgent: float
    before_urgent_max: int
    # At the queue: the background calls queued and not yet handed out when each urgent
    # call was queued, and how many of those went before it (means over the urgent calls).
    queued_ahead: float
    served_first: float
    urgent_s: float  # median, urgent plan's start → its calls handed out
    drained_s: float  # urgent plan's start → the last background call handed out
    margin_s: float  # the urgent plan's first activity queued this long before the release
    status: str

    @property
    def overtaken(self) -> float:
        """The share of the calls queued ahead that went first: 0 honoured, 1 ignored."""
        return self.served_first / self.queued_ahead if self.queued_ahead else float("nan")


def plan(tag: str, n: int, priority: int | None, tenant: str | None) -> Plan:
    return Plan(
        id=f"bench-priority-{tag}-{uuid.uuid4().hex[:8]}",
        goal=f"priority benchmark, {tag} plan",
        max_parallel=n,
        priority=priority,
        tenant=tenant,
        subtasks=tuple(
            Subtask(id=f"s{k}", description=f"Answer briefly: job {tag}-{k}.", agent="ask")
            for k in range(n)
        ),
    )


async def first_activity(client: Client, workflow_id: str, name: str) -> Call | None:
    """When the workflow's first ``name`` activity was queued and handed to a worker."""
    history = await client.temporal.get_workflow_handle(workflow_id).fetch_history()
    scheduled: dict[int, float] = {}
    for e in history.events:
        at = e.event_time.ToNanoseconds() / 1e9
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if e.activity_task_scheduled_event_attributes.activity_type.name == name:
                scheduled[e.event_id] = at
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            queued = scheduled.get(e.activity_task_started_event_attributes.scheduled_event_id)
            if queued is not None:
                return Call(queued, at)
    return None


async def llm_calls(client: Client, p: Plan) -> list[Call]:
    """Each subtask's first LLM call (``call_llm``), from its workflow's history."""
    out: list[Call] = []
    for i in range(0, len(p.subtasks), 25):  # a few histories at a time
        batch = p.subtasks[i : i + 25]
        calls = await asyncio.gather(
            *(first_activity(client, subtask_workflow_id(p.id, st.id), "call_llm") for st in batch)
        )
        out += [c for c in calls if c is not None]
    return out


async def queued(client: Client, p: Plan, gate: HeldFirstWave) -> int:
    """Wait until every subtask the plan has started has queued its LLM call (or ended),
    and the plan starts no more (it starts at most two batches of 50 until one ends:
    ``workflows/plan.py``, ``START_BATCH``); returns how many it started. Meanwhile the
    release is held off: when it is less than a second away it moves ``EXTEND_S`` on, for
    the calls that arrive from then on (those already held end at the old time)."""
    confirmed: set[str] = set()
    last: set[str] = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        report = await client.status(p.id)
        started = {r.id for r in report.subtasks if r.status is not SubtaskStatus.PENDING}
        left = sorted(started - confirmed)
        done = await asyncio.gather(
            *(has_called(client, subtask_workflow_id(p.id, sid)) for sid in left)
        )
        confirmed |= {sid for sid, yes in zip(left, done, strict=True) if yes}
        if started and started == last and confirmed >= started:
            return len(started)
        last = started
        if gate.release_at - time.time() < 1.0:
            gate.release_at = time.time() + EXTEND_S
        await asyncio.sleep(0.2)
    raise TimeoutError(f"plan {p.id}: its subtasks had not queued their calls in 120 s")


async def has_called(client: Client, workflow_id: str) -> bool:
    """The subtask's workflow has a ``call_llm`` activity pending, or has ended."""
    try:
        resp = await client.temporal.workflow_service.describe_workflow_execution(
            DescribeWorkflowExecutionRequest(
                namespace=client.temporal.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id),
            )
        )
    except RPCError:
        return False  # not started yet
    if (
        resp.workflow_execution_info.status
        != WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING
    ):
        return True
    return any(a.activity_type.name == "call_llm" for a in resp.pending_activities)


async def run_scenario(
    client: Client,
    gate: HeldFirstWave,
    server: str,
    scenario: Scenario,
    *,
    background: int,
    urgent: int,
    hold_s: float,
) -> Result:
    bg = plan("bg", background, scenario.background_priority, scenario.background_tenant)
    gate.reset(time.time() + hold_s)
    await client.start(bg)
    # The backlog is there once every background subtask the plan started has queued its
    # call; the urgent plan then starts, and queues its first activity (``workspace_open``)
    # before the held calls end.
    bg_started = await queued(client, bg, gate)
    urg = plan("urgent", urgent, scenario.urgent_priority, scenario.urgent_tenant)
    gate.release_at = max(gate.release_at, time.time() + URGENT_HEAD_START_S)
    t1 = time.time()
    await client.start(urg)
    release = gate.release_at
    reports = [await client.report(bg.id), await client.report(urg.id)]
    bg_calls = await llm_calls(client, bg)
    urgent_calls = await llm_calls(client, urg)
    opened = await first_activity(client, urg.id, "workspace_open")
    waiting = [b for b in bg_calls if b.started > t1]
    before = [sum(1 for b in waiting if b.started < u.started) for u in urgent_calls]
    ahead = [[b for b in bg_calls if b.scheduled < u.scheduled < b.started] for u in urgent_calls]
    first = [
        sum(1 for b in queued_then if b.started < u.started)
        for u, queued_then in zip(urgent_calls, ahead, strict=True)
    ]
    nan = float("nan")
    statuses = {r.status for r in reports}
    return Result(
        server=server,
        scenario=scenario.name,
        started=bg_started,
        waiting=len(waiting),
        before_urgent=statistics.fmean(before) if before else nan,
        before_urgent_max=max(before, default=0),
        queued_ahead=statistics.fmean(len(q) for q in ahead) if ahead else nan,
        served_first=statistics.fmean(first) if first else nan,
        urgent_s=statistics.median(u.started - t1 for u in urgent_calls) if urgent_calls else nan,
        drained_s=max((b.started for b in bg_calls), default=nan) - t1,
        margin_s=release - opened.scheduled if opened is not None else nan,
        status="ok" if statuses == {PlanStatus.COMPLETED} else ",".join(sorted(statuses)),
    )


async def on_server(
    label: str,
    dynamic_config: Sequence[str],
    scenarios: Sequence[Scenario],
    args: argparse.Namespace,
) -> list[Result]:
    """One dev server, one worker, one provider; the scenarios one after the other."""
    results: list[Result] = []
    # The held calls end at the rate the others do: a slot each latency / slots.
    gate = HeldFirstWave(args.latency_ms / 1000 / SLOTS)
    with tempfile.TemporaryDirectory(prefix="dplan-bench-priority-") as name:
        tmp = Path(name)
        (tmp / "workspace").mkdir()
        async with FakeProvider(gate, latency_ms=args.latency_ms) as provider:
            with _user_path.dev_server(tmp, "memory", dynamic_config) as server:
                queue = f"bench-priority-{uuid.uuid4().hex[:6]}"
                env = worker_env(
                    server.address,
                    queue,
                    tmp,
                    DPLAN_MODEL=MODEL,
                    DPLAN_API_BASE=provider.base_url,
                    DPLAN_API_KEY=FAKE_KEY,
                    DPLAN_LLM_LOCAL="0",
                    DPLAN_LLM_TIMEOUT_S="120",
                )
                with WorkerProcess(env, tmp / "worker.log"):
                    settings = Settings(temporal_address=server.address, task_queue=queue)
                    client = await Client.connect(settings)
                    for scenario in scenarios:
                        result = await run_scenario(
                            client,
                            gate,
                            label,
                            scenario,
                            background=args.background,
                            urgent=args.urgent,
                            hold_s=args.hold_s,
                        )
                        print_row(result)
                        results.append(result)
    return results


HEADER = (
    f"  {'server':<12}{'scenario':<10}{'started':>8}{'waiting':>8}{'before urgent':>14}{'max':>5}"
    f"{'queued ahead':>13}{'served first':>13}{'share':>7}{'urgent s':>9}{'bg last s':>10}"
    f"{'margin s':>9}  plans"
)


def print_row(r: Result) -> None:
    print(
        f"  {r.server:<12}{r.scenario:<10}{r.started:>8}{r.waiting:>8}{r.before_urgent:>14.1f}"
        f"{r.before_urgent_max:>5}{r.queued_ahead:>13.1f}{r.served_first:>13.1f}"
        f"{r.overtaken:>7.2f}{r.urgent_s:>9.2f}{r.drained_s:>10.2f}{r.margin_s:>9.2f}"
        f"  {r.status}",
        flush=True,
    )


LEGEND = """\
  When the urgent plan started: started, the background subtasks its plan had started
  (the others wait in the plan: it starts 100 until one ends); waiting, the background
  subtasks whose LLM call (an activity task) had not been handed to the worker yet;
  before urgent, how many of those were handed out before an urgent subtask's call (mean
  over the urgent subtasks; max): about the slots that free while the urgent plan opens
  its workspace and starts its subtasks if the server honours priority, most of them if
  it serves the queue in order. At the queue itself: queued ahead, the background calls
  still queued when an urgent call was queued; served first, how many of those were
  handed out before it (means; share = served first / queued ahead: 0 honoured, 1 in
  order). urgent s: median seconds from the urgent plan's start to its calls handed out;
  bg last s: to the background plan's last call; margin: the urgent plan's first activity
  was queued this long before the first held call ended. Times are the server's, from
  the workflows' histories."""


async def measure(args: argparse.Namespace) -> list[Result]:
    print(
        f"background plan: {args.background} independent `ask` subtasks; urgent plan: "
        f"{args.urgent}; {SLOTS} activity slots (DPLAN_LLM_LOCAL=0); the background "
        f"calls that fill them held until the urgent plan has started (at least "
        f"{args.hold_s:g} s), then {args.latency_ms:g} ms a call"
    )
    print(HEADER, flush=True)
    servers: list[tuple[str, tuple[str, ...], tuple[Scenario, ...]]] = [
        ("default", (), (PRIORITY, CONTROL) if args.short else (PRIORITY, CONTROL, TENANTS)),
    ]
    if not args.short:
        servers += [
            ("fairness", FAIRNESS, (TENANTS, PRIORITY)),
            ("1 partition", ONE_PARTITION, (PRIORITY, CONTROL)),
        ]
    results: list[Result] = []
    for label, config, scenarios in servers:
        results += await on_server(label, config, scenarios, args)
    print(LEGEND)
    return results


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.priority",
        description="Does a priority-1 plan start before a queue of priority-5 subtasks?",
    )
    parser.add_argument("--short", action="store_true", help="two scenarios, 100 subtasks (CI)")
    parser.add_argument("--background", type=int, help="background subtasks (default 200)")
    parser.add_argument("--urgent", type=int, default=5, help="urgent subtasks")
    parser.add_argument(
        "--hold-s",
        type=float,
        help="how long the first background calls are held at least (default 4; longer "
        "while the background plan's calls are still being queued)",
    )
    parser.add_argument(
        "--latency-ms", type=float, default=2000.0, help="the provider's latency per answer"
    )
    args = parser.parse_args(argv)
    if args.background is None:
        args.background = 100 if args.short else 200
    if args.hold_s is None:
        args.hold_s = 4.0
    if args.background <= SLOTS or args.urgent < 1 or args.latency_ms < 0 or args.hold_s <= 0:
        parser.error(f"--background must exceed {SLOTS} (the worker's slots), --urgent >= 1")
    return args


async def run(argv: Sequence[str]) -> None:
    args = _parse(argv)
    print(f"=== bench.priority ({'short' if args.short else 'full'}) load {load()}")
    started = time.perf_counter()
    await measure(args)
    print(f"  {time.perf_counter() - started:.0f} s; load {load()}")


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(run(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
