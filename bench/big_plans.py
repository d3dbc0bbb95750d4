"""Big plans: a 10,000-subtask plan beside a 1,000-subtask one of the same shape.

    python -m bench.big_plans [--short]

One dev server, one in-process worker (``build_worker``), a SQLite session store in a
temporary directory, the offline scripted model at ``DPLAN_SCRIPTED_LATENCY_MS=0``: what
is measured is orchestration, never a model (``bench.scale``'s setup).

Both plans have one shape, scaled: a root subtask, half the plan as chains of 10 hanging
off it, the other half a wide fan-out off the root, ``max_parallel`` 300, descriptions of
about 300 characters, agent ``ask`` (one scripted LLM call per subtask, no tool). Both
are past what travels whole (the 1,000-subtask plan's input is about 350 KiB, the line
is 256 KiB), so both go by reference (``domain.plan_data``), sent packed by a client that
cannot reach the session store, as a service would.

Printed per plan: wall time from the start request to the report, subtasks/s and its
ratio to the small plan's (the goal: no slowdown with size), and for every PlanWorkflow
run (continue-as-new followed back from the last run): events and history bytes against
Temporal's limits (51,200 events, 50 MiB; the goal is under 10 %), the run's input and
the largest single payload in its history (the server refuses one above 2 MiB and warns
above 512 KiB), and the size of the result the client got (a summary past 1,000 rows).

``--short`` (CI): 100 subtasks (sent whole) and 1,000 (by reference), the same shape,
about a minute.
Nothing is asserted: the numbers are for reading.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from bench._rig import (
    bench_dirs,
    bench_settings,
    embedded_server,
    running_worker,
    scripted_latency_zero,
)
from bench.scale import (
    HISTORY_EVENT_LIMIT,
    CoreLogCounter,
    core_runtime,
)
from durable_plans.activities.scripted_model import LATENCY_ENV, SCRIPTED_MODEL
from durable_plans.client._plans import start_plan
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, Subtask
from durable_plans.settings import Settings

MAX_PARALLEL = 300
# One scripted call per subtask (``ask`` has no tools): what grows with the plan is the
# orchestration, which is what this measures; bench.scale runs the tool-calling coder.
AGENT = "ask"
CHAIN = 10
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
class Run:
    events: int
    bytes: int
    input_bytes: int
    largest_payload: int
    continued: bool
    # Workflow task durations (started to completed, the server's clock), in ms: what one
    # activation of the plan costs, which the SDK bounds at 2 s of wall time.
    task_ms: tuple[float, ...] = ()

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

    @property
    def rate(self) -> float:
        return self.subtasks / self.wall_s


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
            )
        )
        run_id = started.continued_execution_run_id or None
        if run_id is None:
            break
    runs.reverse()
    return runs


async def one_plan(client: Client, settings: Settings, subtasks: int) -> Result:
    plan = wide_plan(subtasks)
    t0 = time.perf_counter()
    handle = await start_plan(client, plan, settings)  # no store: packed, as a service would
    report: PlanReport = await handle.result()
    wall = time.perf_counter() - t0
    if report.status is not PlanStatus.COMPLETED:
        raise RuntimeError(f"plan {plan.id} ended {report.status.value}: {report.counts}")
    return Result(
        subtasks=subtasks,
        plan_bytes=len(plan.model_dump_json()),
        wall_s=wall,
        report_bytes=len(report.model_dump_json()),
        listed=len(report.subtasks),
        runs=await plan_runs(client, plan.id),
    )


async def measure(sizes: list[int]) -> list[Result]:
    with scripted_latency_zero(), bench_dirs("big") as dirs:
        async with embedded_server(core_runtime(CoreLogCounter())) as env:
            settings = bench_settings(dirs, "big")
            async with running_worker(env.client, settings):
                await one_plan(env.client, settings, 3)  # warm-up: imports, sandbox
                return [await one_plan(env.client, settings, n) for n in sizes]


def report(results: list[Result]) -> None:
    print(
        f"scripted model {SCRIPTED_MODEL}, {LATENCY_ENV}=0; SQLite session store; one dev "
        f"server, one in-process worker; {os.cpu_count()} CPUs; a root, chains of {CHAIN} "
        f"and a fan-out, max_parallel {MAX_PARALLEL}, agent {AGENT}; sent packed past "
        "256 KiB (by reference)\n"
    )
    base = results[0]
    print(
        f"{'subtasks':>9}{'plan KiB':>10}{'wall s':>9}{'subtasks/s':>12}{'x small':>9}"
        f"{'runs':>6}{'max events':>12}{'max hist KiB':>14}{'max input KiB':>15}"
        f"{'max payload KiB':>17}{'result KiB':>12}{'rows':>7}{'slowest task ms':>17}"
    )
    for r in results:
        print(
            f"{r.subtasks:>9}{r.plan_bytes / 1024:>10.0f}{r.wall_s:>9.1f}{r.rate:>12.1f}"
            f"{r.rate / base.rate:>9.2f}{len(r.runs):>6}{max(x.events for x in r.runs):>12}"
            f"{max(x.bytes for x in r.runs) / 1024:>14.0f}"
            f"{max(x.input_bytes for x in r.runs) / 1024:>15.0f}"
            f"{max(x.largest_payload for x in r.runs) / 1024:>17.0f}"
            f"{r.report_bytes / 1024:>12.0f}{r.listed:>7}"
            f"{max(x.slowest_task_ms for x in r.runs):>17.0f}"
        )
    for r in results:
        print(f"\n  {r.subtasks} subtasks, PlanWorkflow runs (oldest first):")
        print(
            f"    {'run':>4}{'events':>8}{'/ 51,200':>10}{'history KiB':>13}{'/ 50 MiB':>10}"
            f"{'input KiB':>11}{'largest payload KiB':>21}{'tasks':>7}{'slowest ms':>12}  ended"
        )
        for i, x in enumerate(r.runs, 1):
            print(
                f"    {i:>4}{x.events:>8}{x.events / HISTORY_EVENT_LIMIT:>10.1%}"
                f"{x.bytes / 1024:>13.0f}{x.bytes / HISTORY_BYTES_LIMIT:>10.1%}"
                f"{x.input_bytes / 1024:>11.0f}{x.largest_payload / 1024:>21.0f}"
                f"{len(x.task_ms):>7}{x.slowest_task_ms:>12.0f}  "
                f"{'continued-as-new' if x.continued else 'closed'}"
            )


async def main(short: bool) -> None:
    """Entry point for ``python -m bench`` (one parameter: ``bench/__main__.py``)."""
    await run_sizes([100, 1_000] if short else [1_000, 10_000])


async def run_sizes(sizes: list[int]) -> None:
    report(await measure(sizes))


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="100 and 1,000 subtasks (CI)")
    parser.add_argument(
        "--sizes", type=int, nargs="+", metavar="N", help="plan sizes to run, smallest first"
    )
    args = parser.parse_args()
    asyncio.run(run_sizes(args.sizes) if args.sizes else main(args.short))


if __name__ == "__main__":
    cli()
