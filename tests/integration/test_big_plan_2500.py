"""The 2,500-subtask plan (``test_big_plans``'s rig), in a file of its own.

It runs for minutes on a loaded 2-core host, the longest test of the suite. ``make test``
keeps each file on one xdist worker (``--dist loadfile``): beside the other big-plan tests
it made the longest file, the one that bounds the suite's wall time; alone it runs while
another worker takes them.
"""

from __future__ import annotations

import uuid

import pytest

from durable_plans.activities.plan_data import stored_report
from durable_plans.client import Client
from durable_plans.client._plans import start_plan
from durable_plans.domain.contracts import PLAN_TASK_TIMEOUT
from durable_plans.domain.models import Plan, PlanStatus, Subtask
from durable_plans.domain.plan_data import INLINE_PLAN_BYTES
from durable_plans.workflows.plan import HISTORY_GOAL_EVENTS, REPORT_ROWS
from tests.integration.replay import replayed_runs
from tests.integration.test_big_plans import FILLER, Rig, no_latency, rig

pytestmark = pytest.mark.integration

__all__ = ["no_latency", "rig"]  # fixtures of test_big_plans, used here by name


@pytest.mark.timeout(1200)  # a bound for hangs: a loaded 2-core host takes minutes
async def test_a_plan_above_the_old_cap_runs(rig: Rig) -> None:
    """2,500 subtasks (the cap was 2,000): chains of 10 and a wide fan-out, sent packed.
    Agent ``ask`` has no tools: one scripted call per subtask, the orchestration is what
    runs. 50 at a time: more fast children than that can pass the server's limit of 100
    events buffered during one plan task (docs/known-issues.md)."""
    subtasks: list[Subtask] = [
        Subtask(id="root", description="Look at the workspace.", agent="ask")
    ]
    for c in range(125):
        for step in range(10):
            parent = f"c{c}-{step - 1}" if step else "root"
            subtasks.append(
                Subtask(
                    id=f"c{c}-{step}",
                    description=f"Chain {c}, step {step}. {FILLER}",
                    agent="ask",
                    depends_on=(parent,),
                )
            )
    subtasks.extend(
        Subtask(
            id=f"f{i}", description=f"Fan-out item {i}. {FILLER}", agent="ask", depends_on=("root",)
        )
        for i in range(1_249)
    )
    plan = Plan(
        id=f"wide-{uuid.uuid4().hex[:8]}", goal="big", max_parallel=50, subtasks=tuple(subtasks)
    )
    assert len(plan.subtasks) == 2_500
    assert len(plan.model_dump_json()) > INLINE_PLAN_BYTES  # sent packed, run by reference

    handle = await start_plan(rig.client, plan, rig.settings)
    report = await handle.result()

    assert report.status is PlanStatus.COMPLETED, report.counts
    assert report.counts.completed == 2_500
    # The result is a summary naming the whole report, kept in the session store.
    assert (len(report.subtasks), report.omitted) == (REPORT_ROWS, 2_500 - REPORT_ROWS)
    assert report.full_report is not None
    full = await stored_report(rig.store, report.full_report)
    assert full.counts == report.counts and full.omitted == 0
    assert [r.id for r in full.subtasks] == [s.id for s in plan.subtasks]
    client = Client(rig.client, rig.settings)
    client.use_plan_store(rig.store)
    assert await client.full_report(plan.id) == full
    # Continued as new with the progress packed; every run replays, and each stays
    # under a tenth of Temporal's event limit (the runs wind down before it).
    # (The replayed histories are the ones measured: each run fetched once.)
    runs = await replayed_runs(rig.client, plan.id)
    assert len(runs) >= 2
    lengths = [len(history.events) for history in runs]  # newest run first
    assert len(lengths) >= 2 and max(lengths) < HISTORY_GOAL_EVENTS, lengths
    # Each run keeps the start's workflow task timeout: a big run's task (a replay of
    # thousands of events on a loaded host) is not timed out at Temporal's 10 s default.
    timeouts = {
        h.events[0].workflow_execution_started_event_attributes.workflow_task_timeout.ToTimedelta()
        for h in runs
    }
    assert timeouts == {PLAN_TASK_TIMEOUT}
