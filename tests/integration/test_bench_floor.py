"""The benchmark's Temporal floor (``bench.temporal_floor``) on a real server.

The floor is only a fair baseline for the durable run if it runs the same DAG the same
way: every subtask as its own child, dependencies first, each child issuing the command
shape of ``SubtaskWorkflow``. These check that from the histories; no timing is asserted.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from bench.temporal_floor import floor_worker, run_temporal_floor
from durable_plans.domain.models import Plan, Subtask

pytestmark = pytest.mark.integration


def fan_out() -> Plan:
    return Plan(
        id=f"floor-test-{uuid.uuid4().hex[:8]}",
        max_parallel=4,
        subtasks=(
            Subtask(id="a", description="first"),
            Subtask(id="b", description="after a", depends_on=("a",)),
            Subtask(id="c", description="after a", depends_on=("a",)),
        ),
    )


def _of(events: Sequence[HistoryEvent], kind: EventType.ValueType) -> list[HistoryEvent]:
    return [e for e in events if e.event_type == kind]


@pytest.mark.parametrize("tool_as_local_activity", [True, False])
async def test_floor_runs_children_in_dependency_order(
    client: Client, tool_as_local_activity: bool
) -> None:
    plan = fan_out()
    task_queue = f"floor-{uuid.uuid4().hex[:10]}"
    wid = f"{plan.id}-run"
    worker = floor_worker(client, task_queue)
    running = asyncio.create_task(worker.run())
    try:
        await run_temporal_floor(
            client,
            plan,
            task_queue,
            0.0,
            workflow_id=wid,
            tool_as_local_activity=tool_as_local_activity,
        )
        assert await client.get_workflow_handle(wid, result_type=int).result() == 3
        children = {
            s.id: (await client.get_workflow_handle(f"{wid}/{s.id}").fetch_history()).events
            for s in plan.subtasks
        }
        parent = (await client.get_workflow_handle(wid).fetch_history()).events
    finally:
        await worker.shutdown()
        await asyncio.gather(running, return_exceptions=True)

    # Each child ran to completion, and b and c only started once a had closed.
    for events in children.values():
        assert events[0].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
        assert events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
    a_closed = children["a"][-1].event_time.ToDatetime()
    for sid in ("b", "c"):
        assert children[sid][0].event_time.ToDatetime() >= a_closed, f"{sid} started before a"

    # The parent's own view: a's completion is recorded before b and c are initiated.
    initiated = {
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id: e.event_id
        for e in _of(parent, EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED)
    }
    completed = {
        e.child_workflow_execution_completed_event_attributes.workflow_execution.workflow_id: (
            e.event_id
        )
        for e in _of(parent, EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED)
    }
    assert set(initiated) == set(completed) == {f"{wid}/{s.id}" for s in plan.subtasks}
    # Results are merged (a local activity) after a's completion and after b's and c's.
    merges = _of(parent, EventType.EVENT_TYPE_MARKER_RECORDED)
    assert 2 <= len(merges) <= 3, f"{len(merges)} merges"
    assert merges[0].event_id > completed[f"{wid}/a"]
    for sid in ("b", "c"):
        assert completed[f"{wid}/a"] < initiated[f"{wid}/{sid}"]

    # The command shape of SubtaskWorkflow: two LLM activities and the tool, local or not.
    for events in children.values():
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            for e in _of(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
        ]
        markers = _of(events, EventType.EVENT_TYPE_MARKER_RECORDED)
        if tool_as_local_activity:
            assert scheduled == ["floor_llm", "floor_llm"]
            assert len(markers) == 1  # floor_tool
        else:
            assert scheduled == ["floor_llm", "floor_tool", "floor_llm"]
            assert markers == []
