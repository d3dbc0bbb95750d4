"""What a workflow's history costs the server: events, tasks and Temporal Cloud actions.

Actions are counted from the history by Temporal Cloud's published rules
(https://docs.temporal.io/cloud/actions, "Temporal Cloud Actions"):

* a workflow started by a client or by continue-as-new: 1 (its first event); a child's
  own start is not counted again: the parent's StartChildWorkflowExecutionInitiated is
  2 ("one for starting the Workflow, and another for the attempted Execution");
* an activity started or retried: 1 per attempt (the ActivityTaskStarted event carries
  the attempt number of the attempt that ended it);
* local activities: "all Local Activities associated with one Workflow Task count as a
  single Action", because Cloud "counts all RecordMarkers from each Workflow Task as one
  action": 1 per workflow task that recorded any marker (patch markers included, so the
  count errs high; a workflow-task heartbeat during a long local activity would be one
  more, and none happens at these latencies);
* a timer started, a search-attribute upsert (not one of ``TemporalChangeVersion`` alone,
  which the SDK makes for each patch: exempt), a signal received, an update accepted, an
  execution-options update: 1 each.

Not in a history, so not counted: queries, activity heartbeats that reached the server
(``heartbeating`` beats every second, the SDK sends one per 80 % of the 15 s heartbeat
timeout: none for calls of a few seconds), rejected updates, and the workflow-task
heartbeats of local activities that ran longer than 8 s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

__all__ = ["HistoryCost", "history_cost"]

# What the SDK upserts with every patch asked: exempt ("used for Workflow versioning").
CHANGE_VERSION = "TemporalChangeVersion"

_ONE_EACH = frozenset(
    {
        EventType.EVENT_TYPE_TIMER_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED,
    }
)


@dataclass
class HistoryCost:
    """Summed over one or more histories."""

    events: int = 0
    actions: int = 0
    workflow_tasks: int = 0  # completed workflow tasks
    activity_tasks: int = 0  # regular activity attempts (each one matched and started)

    def __add__(self, other: HistoryCost) -> HistoryCost:
        return HistoryCost(
            self.events + other.events,
            self.actions + other.actions,
            self.workflow_tasks + other.workflow_tasks,
            self.activity_tasks + other.activity_tasks,
        )


def history_cost(events: Iterable[HistoryEvent]) -> HistoryCost:
    """Events, actions and tasks of one workflow run's history."""
    cost = HistoryCost()
    marker_tasks: set[int] = set()
    for e in events:
        cost.events += 1
        t = e.event_type
        if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = e.workflow_execution_started_event_attributes
            if not started.parent_workflow_execution.workflow_id:
                cost.actions += 1
        elif t == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            cost.actions += 2
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attempts = max(e.activity_task_started_event_attributes.attempt, 1)
            cost.actions += attempts
            cost.activity_tasks += attempts
        elif t == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker_tasks.add(e.marker_recorded_event_attributes.workflow_task_completed_event_id)
        elif t == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            cost.workflow_tasks += 1
        elif t == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = e.upsert_workflow_search_attributes_event_attributes.search_attributes
            if set(fields.indexed_fields) - {CHANGE_VERSION}:
                cost.actions += 1
        elif t in _ONE_EACH:
            cost.actions += 1
    cost.actions += len(marker_tasks)
    return cost
