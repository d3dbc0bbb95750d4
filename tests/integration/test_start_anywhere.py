"""Plans and sessions started by any Temporal client, with any input.

A plan file starts with the real ``temporal`` CLI and its report comes back with
``temporal workflow result``; malformed inputs, sent as a foreign client would send them,
each fail their workflow at once with a precise ``InvalidPlan`` (never a workflow task
retried forever); bad update and signal payloads leave a SessionWorkflow working.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from durable_plans.domain.failures import FailureType
from durable_plans.domain.models import PlanReport, PlanStatus
from durable_plans.domain.session_contracts import (
    HistoryInput,
    SendMessageInput,
    SendMessageResult,
    SessionInput,
    SessionState,
    session_workflow_id,
)
from tests.integration.conftest import Harness, temporal_binary

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "weather_app.json"
# A guard against a hang, not a measurement: every workflow here ends within seconds.
DEADLINE_S = 60.0

ONE = [{"id": "a", "description": "do a"}]


def _subtasks(n: int) -> list[dict[str, str]]:
    return [{"id": f"s{i}", "description": f"step {i}"} for i in range(n)]


def _raw(data: bytes, encoding: bytes = b"json/plain") -> RawValue:
    """A payload as a client of another language (or a careless one) may send it."""
    return RawValue(Payload(metadata={"encoding": encoding}, data=data))


_NO_ARGUMENT = object()

# (name, the start argument, a problem line the InvalidPlan details must contain)
MALFORMED: list[tuple[str, Any, str]] = [
    ("no-argument", _NO_ARGUMENT, "no input: start the workflow with the plan file's JSON"),
    ("list", [ONE], "the plan must be an object, got a list"),
    ("string", "build me an app", "the plan must be an object, got a string ('build me an app')"),
    ("number", 42, "the plan must be an object, got 42"),
    ("null", None, "the plan must be an object, got null"),
    ("binary-null", _raw(b"", b"binary/null"), "the plan must be an object, got null"),
    (
        "not-json",
        _raw(b'{"subtasks": [}'),
        "the input cannot be decoded as JSON (encoding 'json/plain'): Invalid JSON: expected value",
    ),
    (
        "foreign-encoding",
        _raw(b"goal: x", b"application/x-yaml"),
        "(encoding 'application/x-yaml')",
    ),
    ("empty-object", {}, "missing required field 'subtasks' (a list of subtasks)"),
    ("subtasks-not-list", {"subtasks": "a"}, "subtasks: must be a list, got a string ('a')"),
    ("no-subtasks", {"subtasks": []}, "subtasks: the plan has no subtasks"),
    ("subtask-not-object", {"subtasks": [5]}, "subtasks[0]: must be an object, got 5"),
    ("unknown-field", {"subtasks": ONE, "urgency": 1}, "unknown field 'urgency'"),
    ("typo-field", {"gaol": "x", "subtasks": ONE}, "unknown field 'gaol' (did you mean 'goal'?)"),
    (
        "subtask-typo",
        {"subtasks": [{"id": "a", "description": "d", "agnet": "coder"}]},
        "subtasks[0] (id 'a'): unknown field 'agnet' (did you mean 'agent'?)",
    ),
    (
        "missing-description",
        {"subtasks": [{"id": "a"}]},
        "subtasks[0] (id 'a'): missing required field 'description'",
    ),
    (
        "description-type",
        {"subtasks": [{"id": "a", "description": 5}]},
        "subtasks[0] (id 'a'): description: must be a string, got 5",
    ),
    (
        "parallel-string",
        {"max_parallel": "4", "subtasks": ONE},
        "max_parallel: must be an integer, got a string ('4')",
    ),
    (
        "parallel-zero",
        {"max_parallel": 0, "subtasks": ONE},
        "max_parallel: must be between 1 and 500, got 0",
    ),
    (
        "budget-negative",
        {"budget": {"max_tokens": -1}, "subtasks": ONE},
        "budget.max_tokens: must not be negative, got -1",
    ),
    (
        "cycle",
        {
            "subtasks": [
                {"id": "a", "description": "d", "depends_on": ["b"]},
                {"id": "b", "description": "d", "depends_on": ["a"]},
            ]
        },
        "cycle: a -> b -> a",
    ),
    (
        "self-dependency",
        {"subtasks": [{"id": "a", "description": "d", "depends_on": ["a"]}]},
        "subtasks[0] (id 'a'): depends on itself (cycle: a -> a)",
    ),
    (
        "unknown-dependency",
        {"subtasks": [{"id": "a", "description": "d", "depends_on": ["zz"]}]},
        "subtasks[0] (id 'a'): unknown dependency 'zz'",
    ),
    (
        "duplicate-id",
        {"subtasks": [{"id": "a", "description": "d"}, {"id": "a", "description": "e"}]},
        "subtasks[1] (id 'a'): duplicate id 'a' (first used by subtasks[0])",
    ),
    (
        "unknown-agent",
        {"subtasks": [{"id": "a", "description": "d", "agent": "wizard"}]},
        "subtasks[0] (id 'a'): unknown agent 'wizard'",
    ),
    (
        "invalid-id",
        {"subtasks": [{"id": "a b", "description": "d"}]},
        "subtasks[0] (id 'a b'): invalid id 'a b'",
    ),
    (
        "too-many-subtasks",
        {"subtasks": _subtasks(10_001)},
        "subtasks: too many (10001, limit 10000)",
    ),
    (
        "description-too-long",
        {"subtasks": [{"id": "a", "description": "x" * 20_001}]},
        "subtasks[0] (id 'a'): description is too long (20001 characters, limit 20000)",
    ),
    (
        "lone-surrogate",
        _raw(b'{"goal": "weather \\ud83d", "subtasks": [{"id": "a", "description": "d"}]}'),
        # Half an emoji: JSON parsers refuse it, so it never reaches the plan's own check.
        "cannot be decoded as JSON (encoding 'json/plain'): Invalid JSON: unexpected end of hex",
    ),
    ("wrapper-agents", {"plan": {"subtasks": ONE}, "agents": 5}, "agents: must be a list, got 5"),
    (
        "wrapper-plan",
        {"plan": {"subtasks": []}},
        "plan: subtasks: the plan has no subtasks (at least one is required)",
    ),
    ("wrapper-field", {"plan": {"subtasks": ONE}, "extra": True}, "unknown field 'extra'"),
]


async def _history_events(handle: WorkflowHandle[Any, Any]) -> list[EventType.ValueType]:
    return [event.event_type async for event in handle.fetch_history_events()]


async def _start(client: Client, wid: str, arg: Any, task_queue: str) -> WorkflowHandle[Any, Any]:
    if arg is _NO_ARGUMENT:
        return await client.start_workflow("PlanWorkflow", id=wid, task_queue=task_queue)
    return await client.start_workflow("PlanWorkflow", arg, id=wid, task_queue=task_queue)


async def _invalid_plan(handle: WorkflowHandle[Any, Any]) -> ApplicationError:
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), DEADLINE_S)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    return cause


async def test_malformed_plan_inputs_each_fail_at_once_with_invalid_plan(harness: Harness) -> None:
    assert len(MALFORMED) >= 20
    run = uuid.uuid4().hex[:8]
    handles = await asyncio.gather(
        *(
            _start(harness.client, f"bad-{name}-{run}", arg, harness.task_queue)
            for name, arg, _ in MALFORMED
        )
    )
    failures = await asyncio.gather(*(_invalid_plan(h) for h in handles))
    histories = await asyncio.gather(*(_history_events(h) for h in handles))

    for (name, _, expected), failure, events in zip(MALFORMED, failures, histories, strict=True):
        assert failure.type == FailureType.INVALID_PLAN, (name, failure)
        assert failure.non_retryable, name
        problems = failure.details[0]
        assert isinstance(problems, list) and problems, (name, failure.details)
        assert any(expected in line for line in problems), (name, problems)
        # One problem per line: no line hides another behind a newline.
        assert all("\n" not in line for line in problems), (name, problems)
        # Failed by the first workflow task, never a task failed and retried.
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events, name
        assert events[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED, name
        assert events.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) == 1, name


async def test_a_plan_file_starts_with_the_temporal_cli_and_its_report_comes_back(
    harness: Harness, tmp_path: Path
) -> None:
    """``temporal workflow start --input-file`` with the file ``dplan run`` takes, as is
    except for its id: without one, the plan takes the workflow id."""
    plan_file = tmp_path / "plan.json"
    data = json.loads(EXAMPLE.read_text())
    del data["id"]
    plan_file.write_text(json.dumps(data, indent=2))
    workflow_id = f"cli-plan-{uuid.uuid4().hex[:8]}"
    address = harness.client.service_client.config.target_host
    connection = ["--address", address, "--namespace", harness.client.namespace]

    started = await _cli(
        "workflow", "start", *connection, "--type", "PlanWorkflow",
        "--task-queue", harness.task_queue, "--workflow-id", workflow_id,
        "--input-file", str(plan_file),
    )  # fmt: skip
    assert workflow_id in started
    out = await _cli("workflow", "result", *connection, "--workflow-id", workflow_id, "-o", "json")

    result = json.loads(out)
    assert result["status"] == "COMPLETED", result
    report = PlanReport.model_validate(result["result"])
    assert report.plan_id == workflow_id
    assert report.status is PlanStatus.COMPLETED
    assert [r.id for r in report.subtasks] == [s["id"] for s in data["subtasks"]]
    assert report.counts.completed == len(data["subtasks"])


async def _cli(*args: str) -> str:
    """Run the ``temporal`` CLI without blocking the event loop the test's worker runs on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    proc = await asyncio.create_subprocess_exec(
        temporal_binary(),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), DEADLINE_S)
    assert proc.returncode == 0, f"temporal {' '.join(args)}:\n{out.decode()}\n{err.decode()}"
    return out.decode()


# --------------------------------------------------------------------------- sessions


async def test_bad_session_input_fails_the_workflow_with_invalid_input(harness: Harness) -> None:
    run = uuid.uuid4().hex[:8]
    cases: list[tuple[Any, str]] = [
        ({"session_id": 5}, "session_id: must be a string, got 5"),
        ({"sesion_id": "x"}, "unknown field 'sesion_id' (did you mean 'session_id'?)"),
        (["s"], "the input must be an object with 'session_id', got a list"),
        (_raw(b"not json"), "the input cannot be decoded as JSON"),
    ]
    handles = [
        await harness.client.start_workflow(
            "SessionWorkflow", arg, id=f"bad-session-{i}-{run}", task_queue=harness.task_queue
        )
        for i, (arg, _) in enumerate(cases)
    ]
    for handle, (_, expected) in zip(handles, cases, strict=True):
        failure = await _invalid_plan(handle)
        assert failure.type == FailureType.INVALID_INPUT, failure
        assert any(expected in line for line in failure.details[0]), failure.details
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in await _history_events(handle)


async def test_bad_update_and_signal_payloads_leave_the_session_working(harness: Harness) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    handle = await harness.client.start_workflow(
        "SessionWorkflow",
        SessionInput(session_id=sid),
        id=session_workflow_id(sid),
        task_queue=harness.task_queue,
        result_type=SessionState,
    )
    rejected: list[tuple[str, list[Any], str]] = [
        ("send_message", [{"text": 5}], "text"),
        ("send_message", [{}], "text"),
        ("send_message", [{"text": "hi", "mood": "sad"}], "mood"),
        ("send_message", [], ""),
        ("send_message", [{"text": "a"}, {"text": "b"}], ""),
        ("send_message", [_raw(b"{oops")], ""),
        ("switch_agent", ["coder"], ""),
        ("plan_goal", [{"goal": ""}], "goal"),
        ("history", [{"limit": 0}], "limit"),
        ("history", [{"limit": 5}, {"limit": 6}], ""),
        ("no_such_update", [{}], "no_such_update"),
    ]
    for name, args, mentions in rejected:
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await handle.execute_update(name, args=args)
        assert mentions in str(failed.value.cause), (name, args, failed.value.cause)
    # Signals: an argument that does not decode is dropped (and logged by the SDK); one
    # with a name nobody handles waits in a buffer; neither touches the conversation.
    await handle.signal("end", _raw(b"\x00", b"application/x-nothing"))
    await handle.signal("no_such_signal", {"x": 1})

    answer: SendMessageResult = await handle.execute_update(
        "send_message", SendMessageInput(text="Create a file"), result_type=SendMessageResult
    )
    assert answer.answer
    history = await handle.execute_update(
        "history", HistoryInput(limit=10), result_type=list[dict[str, Any]]
    )
    assert "user" in [m["role"] for m in history]
    # ``end`` takes no argument; one that carries some still ends the conversation.
    await handle.signal("end", {"reason": "done"})
    state = await asyncio.wait_for(handle.result(), DEADLINE_S)
    assert state.messages_handled == 1
    events = await _history_events(handle)
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events
    desc = await handle.describe()
    assert desc.status == WorkflowExecutionStatus.COMPLETED
