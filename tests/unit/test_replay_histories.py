"""The committed histories (tests/histories/) replay against the current workflow code.

They are recorded runs of every workflow shape in production: a failing replay here means
a code change would break workflows that are running while it is deployed. No server is
needed: the Replayer runs the workflow code against the recorded events alone.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.workflow import NondeterminismError

from durable_plans.cli.main import main
from durable_plans.cli.replay_command import (
    history_file_name,
    load_history_file,
    make_replayer,
    replay_runs,
    workflow_id_from_file_name,
)
from durable_plans.domain.contracts import SubtaskInput, SubtaskOutcome
from durable_plans.workflows.subtask import SubtaskWorkflow
from tests.histories.record import CURRENT_SHAPE

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
# One directory per workflow shape that may still be running: the first release's, the
# one before the workspace was kept in git, the one before LLM calls became local
# activities, the one before runs were settled (versions.SETTLED), and the one recorded
# by the current code (tests/histories/record.py's CURRENT_SHAPE).
FIRST_RELEASE = HISTORIES / "v1-first-release"
FEWER_ROUND_TRIPS = HISTORIES / "v2-fewer-round-trips"
GIT_WORKSPACE = HISTORIES / "v3-git-workspace"
LOCAL_LLM_CALLS = HISTORIES / "v4-local-llm-calls"
CURRENT = HISTORIES / CURRENT_SHAPE
SHAPES = (FIRST_RELEASE, FEWER_ROUND_TRIPS, GIT_WORKSPACE, LOCAL_LLM_CALLS, CURRENT)
FILES = sorted(HISTORIES.glob("*/*/*.json"))
CASES = ("success", "failure", "crash", "subagent")
# Cases recorded only in some shapes. A conversation does not use the git workspace: its
# streamed case stays recorded in v2 only; nor did its calls become local: the session
# case skips v4 (a settled conversation, v5, asks its one patch first).
LATER_CASES = {
    FIRST_RELEASE.name: ("session",),
    FEWER_ROUND_TRIPS.name: ("session", "pause", "approval", "streamed"),
    GIT_WORKSPACE.name: ("session", "pause", "approval", "workspace"),
    LOCAL_LLM_CALLS.name: ("pause", "approval", "workspace", "compaction"),
    CURRENT.name: ("session", "pause", "approval", "workspace", "compaction"),
}
# The shapes whose plans keep the workspace in git (git-workspace-1, or settled).
IN_GIT = (GIT_WORKSPACE, LOCAL_LLM_CALLS, CURRENT)
# The shapes whose subtasks make their LLM calls as local activities (llm-local-1).
LOCAL_CALLS = (LOCAL_LLM_CALLS, CURRENT)
SUCCESS_SUBTASK = CURRENT / "success" / "hist-success__a.0.json"
PATCH_MARKER = "core_patch"


def _types(case: Path) -> Counter[str]:
    """Workflow type → number of recorded runs in a case."""
    counts: Counter[str] = Counter()
    for path in case.glob("*.json"):
        first = json.loads(path.read_text())["events"][0]
        counts[first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"]] += 1
    return counts


def _markers(path: Path) -> list[str]:
    return [
        event["markerRecordedEventAttributes"]["markerName"]
        for event in json.loads(path.read_text())["events"]
        if "markerRecordedEventAttributes" in event
    ]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda p: p.name)
def test_every_case_is_recorded_with_the_workflows_it_is_about(shape: Path) -> None:
    """Guards the parametrized test below against passing on an empty or partial set."""
    expected = {*CASES, *LATER_CASES.get(shape.name, ())}
    assert {p.parent.name for p in FILES if p.parent.parent == shape} == expected
    assert _types(shape / "success") == {"PlanWorkflow": 1, "SubtaskWorkflow": 4}
    assert _types(shape / "failure") == {"PlanWorkflow": 1, "SubtaskWorkflow": 3}  # 1 skipped
    assert _types(shape / "crash") == {"PlanWorkflow": 1, "SubtaskWorkflow": 4}
    # The spawned sub-agent is a SubtaskWorkflow nested under the subtask that spawned it.
    assert _types(shape / "subagent") == {"PlanWorkflow": 1, "SubtaskWorkflow": 3}
    assert (shape / "subagent" / "hist-subagent__spawn__coder-0-0.0.json").exists()
    if shape != FIRST_RELEASE:  # three calls waited; Updates decided them (tool-approval-1)
        assert _types(shape / "approval") == {"PlanWorkflow": 1, "SubtaskWorkflow": 3}
        patch_id = base64.b64encode(b'"tool-approval-1"').decode().rstrip("=")  # marker data
        asked = [patch_id in p.read_text() for p in (shape / "approval").glob("*__*.json")]
        assert all(asked) if shape != CURRENT else not any(asked)  # settled: on, unasked
    # Continue-as-new after each of two messages: three runs of one workflow id.
    if "session" in LATER_CASES[shape.name]:
        assert sorted(p.name for p in (shape / "session").glob("*.json")) == [
            f"session__hist-session.{i}.json" for i in range(3)
        ]
    if shape == FEWER_ROUND_TRIPS:  # streamed batches (signals), a watcher's polls (updates)
        runs = [p.read_text() for p in (shape / "streamed").glob("*.json")]
        assert len(runs) == 3
        assert any("__temporal_workflow_stream_publish" in r for r in runs)
        assert any("__temporal_workflow_stream_poll" in r for r in runs)


def test_the_shapes_are_the_ones_before_and_after_the_round_trip_patch() -> None:
    """The first release's subtasks never saw the patch; v3's all carry it (v4's subtasks
    imply it, asking no patch: see the next test)."""
    subtasks = [p for p in FILES if "__" in p.name and not p.name.startswith("session__")]
    old = [p for p in subtasks if p.is_relative_to(FIRST_RELEASE)]
    new = [p for p in subtasks if p.is_relative_to(GIT_WORKSPACE)]
    assert old and new
    assert all(PATCH_MARKER not in _markers(p) for p in old)
    assert all(PATCH_MARKER in _markers(p) for p in new)


def test_only_the_current_shape_makes_llm_calls_as_local_activities() -> None:
    """Every plan recorded by the current code took llm-local-1 (its marker, once per plan
    run), none before it did; its subtasks schedule no call_llm activity (a local-activity
    marker each), ask no patch of their own, and a join merges locally too."""
    plans = [p for p in FILES if "__" not in p.name and not p.name.startswith("session")]
    for path in plans:
        local = any(path.is_relative_to(shape) for shape in LOCAL_CALLS)
        assert ("llm-local-1" in _patches(path)) == local, path
    subtasks = [
        p
        for p in FILES
        if "__" in p.name
        and any(p.is_relative_to(shape) for shape in LOCAL_CALLS)
        and not p.name.startswith("session__")
    ]
    assert subtasks
    for path in subtasks:
        assert _activity_types(path)["call_llm"] == 0, path
        assert _local_activity_types(path)["call_llm"] >= 1, path
        assert "fewer-round-trips-1" not in _patches(path), path
    assert _activity_types(GIT_WORKSPACE / "success" / "hist-success__a.0.json")["call_llm"] == 2


def _patches(path: Path) -> list[str]:
    """The patch ids a run asked for (its core_patch markers' data)."""
    found = []
    for event in json.loads(path.read_text())["events"]:
        marker = event.get("markerRecordedEventAttributes", {})
        if marker.get("markerName") == PATCH_MARKER:
            data = marker["details"]["patch-data"]["payloads"][0]["data"]
            found.append(json.loads(base64.b64decode(data))["id"])
    return found


def _local_activity_types(path: Path) -> Counter[str]:
    """The activities a run ran locally (its core_local_activity markers' data)."""
    found: Counter[str] = Counter()
    for event in json.loads(path.read_text())["events"]:
        marker = event.get("markerRecordedEventAttributes", {})
        if marker.get("markerName") == "core_local_activity":
            data = marker["details"]["data"]["payloads"][0]["data"]
            found[json.loads(base64.b64decode(data))["activity_type"]] += 1
    return found


def _marker_data(patch_id: str) -> str:
    return base64.b64encode(json.dumps(patch_id).encode()).decode().rstrip("=")


def _activity_types(path: Path) -> Counter[str]:
    return Counter(
        event["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for event in json.loads(path.read_text())["events"]
        if "activityTaskScheduledEventAttributes" in event
    )


def test_only_the_current_shape_keeps_the_workspace_in_git() -> None:
    """Every plan recorded by the current code took the git path (its patch marker), none
    before it did; the workspace case holds the three workspace activities."""
    git_patch = _marker_data("git-workspace-1")
    plans = [p for p in FILES if "__" not in p.name and not p.name.startswith("session")]
    assert plans
    for path in plans:
        in_git = any(path.is_relative_to(shape) for shape in IN_GIT)
        settled = "settled-1" in _patches(path)
        assert settled == path.is_relative_to(CURRENT), path
        asked = git_patch in path.read_text() or "git-workspace-1" in _patches(path)
        assert (asked or settled) == in_git, path
    case = GIT_WORKSPACE / "workspace"
    plan = _activity_types(case / "hist-workspace.0.json")
    assert plan["workspace_open"] == 1 and plan["workspace_publish"] == 1
    join = _activity_types(case / "hist-workspace__d.0.json")
    assert join["workspace_merge"] == 1  # d joins b and c; the others start without one
    # From v4 on the join's merge is a local activity: a marker naming workspace_merge.
    assert _local_activity_types(CURRENT / "workspace" / "hist-workspace__d.0.json") == {
        "workspace_merge": 1,
        "call_llm": 2,
        "run_tool": 1,
    }
    assert (
        _activity_types(CURRENT / "workspace" / "hist-workspace__d.0.json")["workspace_merge"] == 0
    )
    assert all(
        _activity_types(case / f"hist-workspace__{sid}.0.json")["workspace_merge"] == 0
        for sid in "abc"
    )


@pytest.mark.parametrize("shape", SHAPES, ids=lambda p: p.name)
def test_the_crash_case_holds_a_retried_llm_call(shape: Path) -> None:
    """What makes the crash case worth keeping: activities re-run after the SIGKILL, or
    (v4: local LLM calls) workflow tasks that timed out on the dead worker and ran again."""
    events = [
        event
        for path in (shape / "crash").glob("*.json")
        for event in json.loads(path.read_text())["events"]
    ]
    attempts = [
        event["activityTaskStartedEventAttributes"].get("attempt", 1)
        for event in events
        if "activityTaskStartedEventAttributes" in event
    ]
    if shape in LOCAL_CALLS:
        timed_out = [e for e in events if e["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT"]
        assert timed_out
    else:
        assert max(attempts) >= 2


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(HISTORIES)))
async def test_recorded_history_replays(path: Path) -> None:
    run = load_history_file(path)
    result = await make_replayer().replay_workflow(run.history, raise_on_replay_failure=False)
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
    without ``workflow.patched``. A recorded run never scheduled this activity."""

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
    files = sorted((GIT_WORKSPACE / "session").glob("*.json"))
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
    it. The result decides that path, so the run asks no patch (compaction-1 is asked only
    when a provider refuses a call)."""
    path = CURRENT / "compaction" / "session__hist-compaction.0.json"
    assert "compaction-1" not in _patches(path)
    assert _activity_types(path)["compact_history"] >= 1
    scheduled = [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in json.loads(path.read_text())["events"]
        if "activityTaskScheduledEventAttributes" in e
    ]
    first = scheduled.index("compact_history")
    assert scheduled[first - 1 : first + 2] == ["call_llm", "compact_history", "call_llm"]


def test_settled_runs_ask_no_patch_but_the_ones_their_worker_decides() -> None:
    """A run of the current shape asks ``settled-1`` first (a plan, a conversation) and
    then only what its worker decides (llm-local-1, search-attributes-1), in its first
    task; a subtask asks nothing (``SubtaskInput.settled``). No patch is asked after a
    local activity (tests/unit/test_replay_forced_tasks.py says why)."""
    current = [p for p in FILES if p.is_relative_to(CURRENT)]
    assert current
    for path in current:
        patches = _patches(path)
        if "__" in path.name and not path.name.startswith("session__"):
            assert patches == [], path
        else:
            assert patches[0] == "settled-1", path
            assert set(patches[1:]) <= {"llm-local-1", "search-attributes-1"}, path
            events = json.loads(path.read_text())["events"]
            first_task_end = next(
                i
                for i, e in enumerate(events)
                if e["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_COMPLETED"
            )
            marker_at = [
                i
                for i, e in enumerate(events)
                if e.get("markerRecordedEventAttributes", {}).get("markerName") == PATCH_MARKER
            ]
            local_at = [
                i
                for i, e in enumerate(events)
                if e.get("markerRecordedEventAttributes", {}).get("markerName")
                == "core_local_activity"
            ]
            assert all(first_task_end < i for i in marker_at), path
            assert not local_at or max(marker_at) < min(local_at), path
