"""The committed histories (tests/histories/) replay against the current workflow code.

They are recorded runs of the workflows' one shape, the 0.2.0 baseline: a failing replay
here means a code change would break workflows of that shape that are running while it
is deployed. No server is
needed: the Replayer runs the workflow code against the recorded events alone.
"""

from __future__ import annotations

import ast
import base64
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.workflow import NondeterminismError

from durable_plans.cli.main import main
from durable_plans.cli.replay_command import (
    history_file_name,
    load_history_file,
    make_replayer,
    replay_history,
    replay_runs,
    workflow_id_from_file_name,
)
from durable_plans.domain.contracts import SubtaskInput, SubtaskOutcome
from durable_plans.workflows import versions
from durable_plans.workflows.subtask import SubtaskWorkflow
from tests.histories.record import CURRENT_SHAPE

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
WORKFLOWS = Path(versions.__file__).resolve().parent
# The one shape: the 0.2.0 baseline, recorded by the current code (tests/histories/record.py).
CURRENT = HISTORIES / CURRENT_SHAPE
SHAPES = (CURRENT,)
FILES = sorted(HISTORIES.glob("*/*/*.json"))
CASES = (
    "success",
    "failure",
    "crash",
    "subagent",
    "session",
    "streamed",
    "pause",
    "approval",
    "workspace",
    "compaction",
    "revision",
)
SUCCESS_SUBTASK = CURRENT / "success" / "hist-success__a.0.json"
PATCH_MARKER = "core_patch"
LOCAL_MARKER = "core_local_activity"
# Events a workflow task's completion writes (its commands' events).
COMMAND_EVENTS = {
    f"EVENT_TYPE_{name}"
    for name in (
        "MARKER_RECORDED",
        "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES",
        "WORKFLOW_PROPERTIES_MODIFIED",
        "ACTIVITY_TASK_SCHEDULED",
        "TIMER_STARTED",
        "START_CHILD_WORKFLOW_EXECUTION_INITIATED",
        "WORKFLOW_EXECUTION_COMPLETED",
        "WORKFLOW_EXECUTION_FAILED",
    )
}


def _types(case: Path) -> Counter[str]:
    """Workflow type → number of recorded runs in a case."""
    counts: Counter[str] = Counter()
    for path in case.glob("*.json"):
        counts[_workflow_type(path)] += 1
    return counts


def _workflow_type(path: Path) -> str:
    first = json.loads(path.read_text())["events"][0]
    return str(first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"])


def _events(path: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(path.read_text())["events"]
    return events


def _markers(path: Path) -> list[str]:
    return [
        event["markerRecordedEventAttributes"]["markerName"]
        for event in _events(path)
        if "markerRecordedEventAttributes" in event
    ]


def _plans() -> list[Path]:
    return [p for p in FILES if _workflow_type(p) == "PlanWorkflow"]


def _subtasks() -> list[Path]:
    return [p for p in FILES if _workflow_type(p) == "SubtaskWorkflow"]


def test_the_baseline_is_the_only_shape() -> None:
    """0.2.0 carries no branch for an older history, so no older shape is kept to replay
    (tests/histories/README.md says when a second directory comes)."""
    shapes = [p.name for p in HISTORIES.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert shapes == [CURRENT.name]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda p: p.name)
def test_every_case_is_recorded_with_the_workflows_it_is_about(shape: Path) -> None:
    """Guards the parametrized test below against passing on an empty or partial set."""
    assert {p.parent.name for p in FILES if p.parent.parent == shape} == set(CASES)
    assert _types(shape / "success") == {"PlanWorkflow": 1, "SubtaskWorkflow": 4}
    assert _types(shape / "failure") == {"PlanWorkflow": 1, "SubtaskWorkflow": 3}  # 1 skipped
    assert _types(shape / "crash") == {"PlanWorkflow": 1, "SubtaskWorkflow": 4}
    # The spawned sub-agent is a SubtaskWorkflow nested under the subtask that spawned it.
    assert _types(shape / "subagent") == {"PlanWorkflow": 1, "SubtaskWorkflow": 3}
    assert (shape / "subagent" / "hist-subagent__spawn__coder-0-0.0.json").exists()
    assert _types(shape / "pause") == {"PlanWorkflow": 1, "SubtaskWorkflow": 4}
    assert _types(shape / "workspace") == {"PlanWorkflow": 1, "SubtaskWorkflow": 4}
    # An agent's revision and a replan's two: seven subtasks ran, ``after`` was removed.
    assert _types(shape / "revision") == {"PlanWorkflow": 1, "SubtaskWorkflow": 7}
    plan_run = _events(shape / "revision" / "hist-revision.0.json")
    accepted = "workflowExecutionUpdateAcceptedEventAttributes"
    assert len([e for e in plan_run if accepted in e]) == 2  # lead's and replan-1's
    # Three calls waited; Updates decided them, in the subtasks that held them.
    assert _types(shape / "approval") == {"PlanWorkflow": 1, "SubtaskWorkflow": 3}
    for path in (shape / "approval").glob("*__*.json"):
        accepted = "workflowExecutionUpdateAcceptedEventAttributes"
        updates = [e for e in _events(path) if accepted in e]
        assert len(updates) == 1, path
    # Continue-as-new after each of two messages: three runs of one workflow id.
    for case, wid in (("session", "hist-session"), ("streamed", "hist-streamed")):
        assert sorted(p.name for p in (shape / case).glob("*.json")) == [
            f"session__{wid}.{i}.json" for i in range(3)
        ]
    # Streamed batches (signals), a watcher's polls (updates).
    runs = [p.read_text() for p in (shape / "streamed").glob("*.json")]
    assert any("__temporal_workflow_stream_publish" in r for r in runs)
    assert any("__temporal_workflow_stream_poll" in r for r in runs)
    assert _types(shape / "compaction") == {"SessionWorkflow": 1}


def test_no_run_asks_a_patch() -> None:
    """The baseline's workflows ask no ``workflow.patched``: no run holds a patch marker
    (``workflows/versions.py`` says where the next one would go)."""
    assert FILES
    for path in FILES:
        assert PATCH_MARKER not in _markers(path), path


def _patch_ids_asked() -> list[str]:
    """What the workflow code passes to ``workflow.patched``/``deprecate_patch``: the
    name of a ``versions`` constant (``versions.X``) resolved to its id, else the source
    of the argument as written."""
    asked = []
    for path in sorted(WORKFLOWS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("patched", "deprecate_patch")
            ):
                arg = node.args[0]
                if isinstance(arg, ast.Attribute) and hasattr(versions, arg.attr):
                    asked.append(str(getattr(versions, arg.attr)))
                else:
                    asked.append(ast.unparse(arg))
    return asked


def test_the_workflows_ask_only_the_patches_versions_lists() -> None:
    """Where the next patch goes (workflows/versions.py): any id the workflows ask is one
    of ``versions.PATCH_IDS``; since 0.2.0 they ask none."""
    asked = _patch_ids_asked()
    assert set(asked) <= versions.PATCH_IDS, asked
    assert asked == [] and not versions.PATCH_IDS


def _local_activity_types(path: Path) -> Counter[str]:
    """The activities a run ran locally (its core_local_activity markers' data)."""
    return Counter(_local_activity(e)["activity_type"] for e in _local_markers(path))


def _local_markers(path: Path) -> list[dict[str, Any]]:
    return [
        e
        for e in _events(path)
        if e.get("markerRecordedEventAttributes", {}).get("markerName") == LOCAL_MARKER
    ]


def _local_activity(marker_event: dict[str, Any]) -> dict[str, Any]:
    details = marker_event["markerRecordedEventAttributes"]["details"]
    data: dict[str, Any] = json.loads(base64.b64decode(details["data"]["payloads"][0]["data"]))
    return data


def _local_result(marker_event: dict[str, Any]) -> Any:
    details = marker_event["markerRecordedEventAttributes"]["details"]
    return json.loads(base64.b64decode(details["result"]["payloads"][0]["data"]))


def _activity_types(path: Path) -> Counter[str]:
    return Counter(
        event["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for event in _events(path)
        if "activityTaskScheduledEventAttributes" in event
    )


def test_every_plan_run_asks_its_worker_first_and_records_the_answer() -> None:
    """A plan run's first command is the ``worker_facts`` local activity, asked once: its
    marker holds what the worker decided (here: local LLM calls; the recorder's dev
    server has no ``Dplan*`` attributes registered), which a replay reads instead of its
    own settings. (A query that reaches the worker while it runs may end the first
    workflow task before the marker, as in the approval case: test_replay_forced_tasks.)
    Subtasks and conversations never ask."""
    plans = _plans()
    assert len(plans) == 8
    for path in plans:
        events = _events(path)
        first_command = next(e for e in events[1:] if e["eventType"] in COMMAND_EVENTS)
        assert "markerRecordedEventAttributes" in first_command, path
        assert _local_activity(first_command)["activity_type"] == "worker_facts", path
        assert _local_activity_types(path)["worker_facts"] == 1, path
        assert _local_result(first_command) == {"llm_local": True, "search_attributes": False}
    for path in FILES:
        if _workflow_type(path) != "PlanWorkflow":
            assert _local_activity_types(path)["worker_facts"] == 0, path


def test_subtasks_make_their_calls_and_tool_calls_as_local_activities() -> None:
    """The plan's worker said so (``SubtaskInput.llm_local``): every subtask schedules no
    ``call_llm`` or ``run_tool`` activity (local-activity markers instead), and builds its
    branch in its first call (no ``begin_subtask``)."""
    subtasks = _subtasks()
    assert len(subtasks) == 32
    for path in subtasks:
        scheduled = _activity_types(path)
        local = _local_activity_types(path)
        assert scheduled["call_llm"] == 0 and scheduled["run_tool"] == 0, path
        assert local["call_llm"] >= 1, path
        assert scheduled["begin_subtask"] == 0 and local["begin_subtask"] == 0, path
    assert _local_activity_types(CURRENT / "success" / "hist-success__c.0.json")["run_tool"] >= 1


def test_every_plan_keeps_its_workspace_in_git() -> None:
    """Every plan resolves its base (``workspace_open``) and publishes its result branch
    (``workspace_publish``); a join merges its dependencies locally, the others start
    without a merge."""
    for path in _plans():
        plan = _activity_types(path)
        assert plan["workspace_open"] == 1 and plan["workspace_publish"] == 1, path
    case = CURRENT / "workspace"
    assert _local_activity_types(case / "hist-workspace__d.0.json") == {
        "workspace_merge": 1,
        "call_llm": 2,
        "run_tool": 1,
    }
    assert _activity_types(case / "hist-workspace__d.0.json")["workspace_merge"] == 0
    assert all(
        _local_activity_types(case / f"hist-workspace__{sid}.0.json")["workspace_merge"] == 0
        for sid in "abc"
    )


@pytest.mark.parametrize("shape", SHAPES, ids=lambda p: p.name)
def test_the_crash_case_holds_a_retried_llm_call(shape: Path) -> None:
    """What makes the crash case worth keeping: workflow tasks that timed out on the dead
    worker, whose local LLM calls ran again on the next one."""
    events = [event for path in (shape / "crash").glob("*.json") for event in _events(path)]
    timed_out = [e for e in events if e["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT"]
    assert timed_out


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(HISTORIES)))
async def test_recorded_history_replays(path: Path) -> None:
    run = load_history_file(path)
    result = await replay_history(make_replayer(), run.history)
    assert result.replay_failure is None, (
        f"{path.relative_to(HISTORIES)} no longer replays; the workflow change breaks "
        f"running workflows (see tests/histories/README.md): {result.replay_failure}"
    )


# --------------------------------------------------------------------------- it can fail


# Unsandboxed: the sandbox would re-import this test module (file paths at import time);
# non-determinism is detected by the SDK core, the same with or without the sandbox.
@workflow.defn(name="SubtaskWorkflow", sandboxed=False)
class SubtaskWorkflowWithANewFirstStep(SubtaskWorkflow):
    """The kind of change that breaks running subtasks: a step added before the others,
    without a new build or a patch. A recorded run never scheduled this activity."""

    @workflow.run
    async def run(self, inp: SubtaskInput) -> SubtaskOutcome:
        await workflow.execute_activity(
            "audit_subtask", inp.subtask.id, start_to_close_timeout=timedelta(seconds=10)
        )
        return await super().run(inp)


async def test_a_changed_workflow_fails_to_replay_with_a_nondeterminism_error() -> None:
    run = load_history_file(SUCCESS_SUBTASK)
    replayer = make_replayer([SubtaskWorkflowWithANewFirstStep])
    with pytest.raises(NondeterminismError) as info:
        await replayer.replay_workflow(run.history)
    assert "Nondeterminism error" in str(info.value), info.value


async def test_replay_runs_reports_the_failure_as_nondeterminism() -> None:
    """The classification `dplan replay` prints: non-determinism, with the message."""
    run = load_history_file(SUCCESS_SUBTASK)
    [changed] = await replay_runs([run], make_replayer([SubtaskWorkflowWithANewFirstStep]))
    [unchanged] = await replay_runs([run], make_replayer())
    assert changed.nondeterministic and not changed.ok
    # The SDK wraps core's message in a debug dump; the command shows the message itself.
    assert changed.message.startswith("[TMPRL1100] Nondeterminism error: "), changed.message
    assert unchanged.ok and unchanged.failure is None


# --------------------------------------------------------------------------- the command


def test_file_names_round_trip_to_workflow_ids() -> None:
    for wid in ("hist-success", "plan-1/a", "plan-1/a/coder-0-0", "session/s-1"):
        assert workflow_id_from_file_name(history_file_name(wid, 3)) == wid
    assert workflow_id_from_file_name("dir/plan-1__a.json") == "plan-1/a"


def test_replay_command_replays_files_without_a_server(
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = sorted((CURRENT / "session").glob("*.json"))
    argv = ["replay"] + [arg for f in files for arg in ("--file", str(f))]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == len(files) + 1
    assert all(line.startswith("ok    session/hist-session  run ") for line in lines[:-1])
    assert lines[-1] == "replayed 3 runs of 1 workflows: 3 ok, 0 failed"
    assert err == ""


def test_replay_command_rejects_a_file_that_is_not_a_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "plan-1.0.json"
    bad.write_text('{"events": [{"eventId": "1", "eventType": "EVENT_TYPE_TIMER_FIRED"}]}')
    assert main(["replay", "--file", str(bad)]) == 2
    assert "does not start with a WorkflowExecutionStarted event" in capsys.readouterr().err


def test_replay_command_names_the_run_that_is_not_deterministic(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    changed = make_replayer([SubtaskWorkflowWithANewFirstStep])
    monkeypatch.setattr("durable_plans.cli.replay_command.make_replayer", lambda: changed)
    run = load_history_file(SUCCESS_SUBTASK)

    assert main(["replay", "--file", str(SUCCESS_SUBTASK)]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"FAIL  hist-success/a  run {run.run_id}  {run.event_count} events",
        "replayed 1 runs of 1 workflows: 0 ok, 1 failed",
    ]
    head, detail = err.splitlines()
    assert head == (
        f"error: non-determinism error in workflow 'hist-success/a' run {run.run_id} (run index 0):"
    )
    assert detail.startswith("  [TMPRL1100] Nondeterminism error: "), detail


def test_the_compaction_case_folds_before_a_call_and_sends_it_then() -> None:
    """A conversation's call over its window's threshold is answered without being sent,
    a compact_history activity folds the history, and the same turn's call goes out after
    it."""
    path = CURRENT / "compaction" / "session__hist-compaction.0.json"
    assert _activity_types(path)["compact_history"] >= 1
    scheduled = [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in _events(path)
        if "activityTaskScheduledEventAttributes" in e
    ]
    first = scheduled.index("compact_history")
    assert scheduled[first - 1 : first + 2] == ["call_llm", "compact_history", "call_llm"]
