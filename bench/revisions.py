"""What a revision costs a running plan (issue 34), on the path users run.

    python -m bench.revisions [--short]

A ``dplan-worker`` process and a dev server writing its state file, as ``dplan run
--embedded`` leaves them; a plan of 1,000 subtasks (200 with ``--short``) in chains of
10, the offline scripted model at a few milliseconds a call, so the plan is still running
when, a quarter of the way in, ``Client.revise`` adds 10 subtasks after a completed one
(the Update rebuilds the plan's graph and frontier once: a pass over the whole plan).

Printed: the Update's round trip as the client saw it; the workflow task that accepted
it, against the run's other tasks (median and 95th percentile of Started→Completed, on the
server's clock) before and after it; and the plan's wall time. Nothing is asserted.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench._user_path import WorkerProcess, dev_server, load, worker_env
from durable_plans.activities.scripted_model import LATENCY_ENV
from durable_plans.client import Client
from durable_plans.domain.models import Plan, PlanStatus, Subtask
from durable_plans.settings import Settings

CHAIN = 10
ADDED = 10
LATENCY_MS = "5"


def chains(size: int) -> Plan:
    return Plan(
        id=f"bench-revise-{uuid.uuid4().hex[:8]}",
        goal="revision cost",
        max_parallel=100,
        subtasks=tuple(
            Subtask(
                id=f"c{c}-s{s}",
                description=f"Chain {c}, step {s}.",
                agent="ask",
                depends_on=(f"c{c}-s{s - 1}",) if s else (),
            )
            for s in range(CHAIN)
            for c in range(size // CHAIN)
        ),
    )


def task_runs_ms(events: list[HistoryEvent]) -> list[tuple[int, float]]:
    """Each workflow task's (completed event id, Started→Completed ms)."""
    started: dict[int, float] = {}
    out: list[tuple[int, float]] = []
    for e in events:
        at = e.event_time.ToNanoseconds() / 1e6
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            started[e.event_id] = at
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            begun = started.get(e.workflow_task_completed_event_attributes.started_event_id)
            if begun is not None:
                out.append((e.event_id, at - begun))
    return out


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _history_with_update(client: Client, plan_id: str) -> list[HistoryEvent]:
    """The events of the plan's run that accepted the revision (it may have continued as
    new since)."""
    run_id: str | None = None
    while True:
        history = await client.temporal.get_workflow_handle(plan_id, run_id=run_id).fetch_history()
        events = list(history.events)
        if any(
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED for e in events
        ):
            return events
        started = events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id or None
        if run_id is None:
            return []


async def measure(size: int) -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "workspace").mkdir()
        with dev_server(tmp, "file") as server:
            queue = f"bench-revise-{uuid.uuid4().hex[:6]}"
            env = worker_env(server.address, queue, tmp, **{LATENCY_ENV: LATENCY_MS})
            with WorkerProcess(env, tmp / "worker.log"):
                settings = Settings(temporal_address=server.address, task_queue=queue)
                client = await Client.connect(settings)
                plan = chains(size)
                began = time.perf_counter()
                await client.start(plan)
                # Polled as an operator watching the plan would (nothing to wait on here).
                while (await client.status(plan.id)).counts.completed < size // 4:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
                done = next(
                    r.id
                    for r in (await client.status(plan.id)).subtasks
                    if r.status.value == "completed"
                )
                added = [
                    Subtask(
                        id=f"added-{i}", description=f"Added {i}.", agent="ask", depends_on=(done,)
                    )
                    for i in range(ADDED)
                ]
                t0 = time.perf_counter()
                await client.revise(plan.id, add=added, reason="bench")
                update_ms = (time.perf_counter() - t0) * 1000
                report = await client.report(plan.id)
                wall = time.perf_counter() - began
                events = await _history_with_update(client, plan.id)
    assert report.status is PlanStatus.COMPLETED, report.counts
    accepted = next(
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    )
    tasks = task_runs_ms(events)
    before = [ms for eid, ms in tasks if eid < accepted]
    after = [ms for eid, ms in tasks if eid > accepted]
    revising = max((ms for eid, ms in tasks if eid < accepted), default=float("nan"))
    the_task = next((ms for eid, ms in reversed(tasks) if eid < accepted), float("nan"))
    print(
        f"  {size:,} subtasks (+{ADDED} added), {report.counts.completed:,} completed in "
        f"{wall:.1f} s; Update round trip {update_ms:.0f} ms"
    )
    print(
        f"  workflow task that accepted it: {the_task:.1f} ms; the run's other tasks: "
        f"before median {statistics.median(before[:-1] or [0]):.1f} ms "
        f"(p95 {_p(before[:-1], 0.95):.1f}, max {revising:.1f}), after median "
        f"{statistics.median(after or [0]):.1f} ms (p95 {_p(after, 0.95):.1f})"
    )
    ratio = the_task / statistics.median(before[:-1] or [1.0])
    print(f"  the revising task / the median task before it: {ratio:.1f}x")


async def main(short: bool) -> None:
    print(f"=== bench.revisions ({'short' if short else 'full'}) load {load()}")
    await measure(200 if short else 1_000)
