"""Histories where a workflow task ended the moment a local activity finished still replay.

A query that reaches a worker while one of a workflow task's local activities runs can
make the SDK complete that task with the activity's result marker and hand the result to
the workflow only in the next task (seen in CI, and reproduced on a loaded machine: 3 of
52 runs of ``test_approvals``). A replay hands the result over one task early, so
anything the workflow decides right after it from the task it is in, a
``workflow.patched`` above all, is decided otherwise; the history then matches nothing
and the replay fails. The 0.2.0 workflows ask no patch (``workflows/versions.py``).

The timing cannot be forced on a live server, so each recorded history of the baseline
is rewritten into every such history it could have been (a task ended after each
local-activity marker that had more commands after it) and each must replay. A patch
asked right after a local activity (the 0.1 approval subtasks' ``tool-approval-1``, put
back in a baseline history and its workflow) fails the same rewrite as CI did, which is
what makes the check able to fail.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory

from durable_plans.cli.replay_command import (
    RunHistory,
    replay_runs,
    workflow_id_from_file_name,
)
from durable_plans.plugin import PASSTHROUGH_MODULES
from durable_plans.workflows import agent_loop, llm_call
from tests.histories.record import CURRENT_SHAPE

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
CURRENT = sorted((HISTORIES / CURRENT_SHAPE).glob("*/*.json"))
APPROVAL = HISTORIES / CURRENT_SHAPE / "approval"
# The patch the 0.1 approval subtasks asked right after their first LLM call's marker.
PROBE = "tool-approval-1"

# Events a workflow task's completion writes (its commands' events): the rewrite moves
# those after the split point into the new task, and touches nothing else.
COMMAND_EVENTS = {
    f"EVENT_TYPE_{name}"
    for name in (
        "MARKER_RECORDED",
        "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES",
        "WORKFLOW_PROPERTIES_MODIFIED",
        "ACTIVITY_TASK_SCHEDULED",
        "ACTIVITY_TASK_CANCEL_REQUESTED",
        "TIMER_STARTED",
        "TIMER_CANCELED",
        "START_CHILD_WORKFLOW_EXECUTION_INITIATED",
        "SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED",
        "REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED",
        "WORKFLOW_EXECUTION_COMPLETED",
        "WORKFLOW_EXECUTION_FAILED",
        "WORKFLOW_EXECUTION_CONTINUED_AS_NEW",
    )
}
TASK_SCHEDULED = "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"
TASK_STARTED = "EVENT_TYPE_WORKFLOW_TASK_STARTED"
TASK_COMPLETED = "EVENT_TYPE_WORKFLOW_TASK_COMPLETED"


def _is_local_activity_marker(event: dict[str, Any]) -> bool:
    marker = event.get("markerRecordedEventAttributes", {})
    return bool(marker.get("markerName") == "core_local_activity")


def _activity_type(marker_event: dict[str, Any]) -> str:
    data = marker_event["markerRecordedEventAttributes"]["details"]["data"]["payloads"][0]
    return str(json.loads(base64.b64decode(data["data"]))["activity_type"])


def split_points(events: list[dict[str, Any]]) -> Iterator[int]:
    """Indexes of local-activity markers followed by more commands of the same task."""
    for i, event in enumerate(events[:-1]):
        if not _is_local_activity_marker(event):
            continue
        j = i - 1
        while j >= 0 and events[j]["eventType"] in COMMAND_EVENTS:
            j -= 1
        more = i + 1 < len(events) and events[i + 1]["eventType"] in COMMAND_EVENTS
        if j >= 0 and events[j]["eventType"] == TASK_COMPLETED and more:
            yield i


def _shift(node: Any, after: int, by: int) -> Any:
    """Every event id (and reference to one) above ``after`` moved up by ``by``."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "payloads":
                out[key] = value
            elif (key == "eventId" or key.endswith("EventId")) and int(value) > after:
                out[key] = str(int(value) + by) if isinstance(value, str) else int(value) + by
            else:
                out[key] = _shift(value, after, by)
        return out
    if isinstance(node, list):
        return [_shift(v, after, by) for v in node]
    return node


def forced_task_after(history: dict[str, Any], index: int) -> dict[str, Any]:
    """``history`` as if its task had been completed right after the local-activity
    marker at ``index`` and the commands that followed it came with the next task."""
    events = history["events"]
    marker_id = int(events[index]["eventId"])
    completed = next(e for e in reversed(events[:index]) if e["eventType"] == TASK_COMPLETED)
    head = events[: index + 1]
    tail = _shift(events[index + 1 :], marker_id, 3)
    scheduled_id, started_id, completed_id = marker_id + 1, marker_id + 2, marker_id + 3
    at = events[index]["eventTime"]
    new_completed = copy.deepcopy(completed)
    attributes = new_completed["workflowTaskCompletedEventAttributes"]
    attributes.update(scheduledEventId=str(scheduled_id), startedEventId=str(started_id))
    new_completed.update(eventId=str(completed_id), eventTime=at)
    inserted = [
        {
            "eventId": str(scheduled_id),
            "eventTime": at,
            "eventType": TASK_SCHEDULED,
            "workflowTaskScheduledEventAttributes": {
                "taskQueue": _task_queue(events),
                "startToCloseTimeout": "10s",
                "attempt": 1,
            },
        },
        {
            "eventId": str(started_id),
            "eventTime": at,
            "eventType": TASK_STARTED,
            "workflowTaskStartedEventAttributes": {"scheduledEventId": str(scheduled_id)},
        },
        new_completed,
    ]
    for event in tail:  # the commands that came with the new task now say so
        if event["eventType"] not in COMMAND_EVENTS:
            break
        for key, value in event.items():
            if key.endswith("Attributes") and "workflowTaskCompletedEventId" in value:
                value["workflowTaskCompletedEventId"] = str(completed_id)
    return {**history, "events": head + inserted + tail}


def _task_queue(events: list[dict[str, Any]]) -> dict[str, Any]:
    scheduled = next(e for e in events if e["eventType"] == TASK_SCHEDULED)
    queue: dict[str, Any] = scheduled["workflowTaskScheduledEventAttributes"]["taskQueue"]
    return queue


def _load(path: Path) -> dict[str, Any]:
    history: dict[str, Any] = json.loads(path.read_text())
    return history


async def _replay_failure(path: Path, history: dict[str, Any]) -> str | None:
    return (await _replay_failures(path, [history]))[0]


async def _replay_failures(path: Path, histories: list[dict[str, Any]]) -> list[str | None]:
    """Each of ``histories`` (versions of ``path``) replayed, in order, on one replay
    worker, as ``dplan replay`` replays a tree: a worker per history cost twice the CPU."""
    workflow_id = workflow_id_from_file_name(path)
    runs = [
        RunHistory(workflow_id, i, WorkflowHistory.from_json(workflow_id, json.dumps(h)))
        for i, h in enumerate(histories)
    ]
    outcomes = await replay_runs(runs)  # one per run, in order
    assert len(outcomes) == len(runs)
    return [None if o.failure is None else str(o.failure) for o in outcomes]


def test_the_current_shape_has_such_points_in_every_workflow_type() -> None:
    """Guards the test below against passing over histories with nothing to rewrite."""
    types = set()
    for path in CURRENT:
        history = _load(path)
        if any(split_points(history["events"])):
            started = history["events"][0]["workflowExecutionStartedEventAttributes"]
            types.add(started["workflowType"]["name"])
    assert types == {"PlanWorkflow", "SubtaskWorkflow", "SessionWorkflow"}


@pytest.mark.parametrize("path", CURRENT, ids=lambda p: str(p.relative_to(HISTORIES)))
async def test_every_forced_task_after_a_local_activity_replays(path: Path) -> None:
    history = _load(path)
    points = list(split_points(history["events"]))
    failures = await _replay_failures(
        path, [history, *(forced_task_after(history, i) for i in points)]
    )
    assert failures[0] is None, failures[0]  # the rewrite's baseline
    for index, failure in zip(points, failures[1:], strict=True):
        assert failure is None, f"{path.name}, task ended after event {index + 1}: {failure}"


def _b64(value: object) -> str:
    return base64.b64encode(json.dumps(value, separators=(",", ":")).encode()).decode()


def with_patch_after(history: dict[str, Any], index: int, patch_id: str) -> dict[str, Any]:
    """``history`` as a run that asked ``workflow.patched(patch_id)`` right after the
    local-activity marker at ``index`` recorded it: the patch marker and the SDK's
    ``TemporalChangeVersion`` upsert, in the same task, as the 0.1 histories held them."""
    events = history["events"]
    marker_id = int(events[index]["eventId"])
    completed = events[index]["markerRecordedEventAttributes"]["workflowTaskCompletedEventId"]
    encoding = base64.b64encode(b"json/plain").decode()
    inserted = [
        {
            "eventId": str(marker_id + 1),
            "eventTime": events[index]["eventTime"],
            "eventType": "EVENT_TYPE_MARKER_RECORDED",
            "markerRecordedEventAttributes": {
                "markerName": "core_patch",
                "details": {
                    "patch-data": {
                        "payloads": [
                            {
                                "metadata": {"encoding": encoding},
                                "data": _b64({"id": patch_id, "deprecated": False}),
                            }
                        ]
                    }
                },
                "workflowTaskCompletedEventId": completed,
            },
        },
        {
            "eventId": str(marker_id + 2),
            "eventTime": events[index]["eventTime"],
            "eventType": "EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES",
            "upsertWorkflowSearchAttributesEventAttributes": {
                "workflowTaskCompletedEventId": completed,
                "searchAttributes": {
                    "indexedFields": {
                        "TemporalChangeVersion": {
                            "metadata": {
                                "type": base64.b64encode(b"KeywordList").decode(),
                                "encoding": encoding,
                            },
                            "data": _b64([patch_id]),
                        }
                    }
                },
            },
        },
    ]
    tail = _shift(events[index + 1 :], marker_id, 2)
    return {**history, "events": events[: index + 1] + inserted + tail}


@pytest.fixture
def asks_a_patch_after_each_llm_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The subtask's agent loop as the 0.1 approval subtasks ran it: ``PROBE`` asked
    right after an LLM call returns. The loop's module is passed through the sandbox, so
    the replayer's workflows call this one."""
    assert "durable_plans.workflows.agent_loop" in PASSTHROUGH_MODULES
    original = llm_call.execute_llm_activity

    async def then_patched(*args: Any, **kwargs: Any) -> Any:
        out = await original(*args, **kwargs)
        workflow.patched(PROBE)
        return out

    monkeypatch.setattr(agent_loop, "execute_llm_activity", then_patched)


@pytest.mark.usefixtures("asks_a_patch_after_each_llm_call")
@pytest.mark.parametrize("name", ["ok", "no", "edit"])
async def test_a_patch_asked_after_a_local_activity_fails_that_replay(name: str) -> None:
    """A baseline approval subtask, as if it had asked ``PROBE`` right after its LLM
    call's marker (as 0.1 did): it replays as recorded, and rewritten so that the task
    ended between the two, as in the CI run, it fails to replay with the error CI
    printed."""
    path = APPROVAL / f"hist-approval__{name}.0.json"
    plain = _load(path)
    first = next(split_points(plain["events"]))
    assert _activity_type(plain["events"][first]) == "call_llm"
    history = with_patch_after(plain, first, PROBE)
    assert await _replay_failure(path, history) is None
    failure = await _replay_failure(path, forced_task_after(history, first))
    assert failure is not None
    assert f"patch marker encountered for change {PROBE}" in failure
