"""Chaos: workers SIGKILLed in the middle of a workspace file write and of session work
(branch build, branch close); no torn file, no duplicated or lost message, no leftovers.

Writes land in the subtask's tree (under the state directory) and reach the plan's result
branch as commits; the files are read back from that branch."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_plans.domain.contracts import ACT_CALL_LLM, ACT_RUN_TOOL, PlanInput
from durable_plans.domain.ids import branch_session_id, snapshot_id
from durable_plans.domain.models import (
    FunctionCall,
    Message,
    SessionMeta,
    ToolCall,
)
from durable_plans.session_store import SessionNotFound
from tests.integration.chaos_crew import (
    READY_TIMEOUT_S,
    RESULT_TIMEOUT_S,
    Crew,
    RoundLog,
    chaos_workspace,
    start_plan,
)
from tests.integration.chaos_support import (
    TEMP_SUFFIX,
    ChaosWorker,
    bounded,
    check_plan,
    file_content,
    plan_run_id,
    temp_leftovers,
    workflow_running,
)
from tests.integration.plans import make_plan
from tests.integration.stored import opened_store
from tests.integration.workspace_files import plan_paths, result_text

# Rounds wait up to RESULT_TIMEOUT_S for a plan: a bound for hangs, beyond the default.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

# Three writes in a row: the kill waits for one it can catch mid-write (a write lasts about
# a millisecond, so one try may miss it); the subtask after the killed write is the one
# whose session work (the branch build in its first LLM call, the close in its last) the
# next two kills interrupt.
WRITES = ("data/one.txt", "data/two.txt", "data/three.txt")
WRITE_PLAN = [
    ("w1", f"Write data file one [write:{WRITES[0]}]", []),
    ("w2", f"Write data file two [write:{WRITES[1]}]", ["w1"]),
    ("w3", f"Write data file three [write:{WRITES[2]}]", ["w2"]),
    ("check", "Check the data files", ["w3"]),
    ("docs", "Document the data format [turns:2]", ["check"]),
]
HISTORY_TURNS = 120  # a long conversation before the plan: 480 messages, tool traffic included


def long_history(n_turns: int) -> list[Message]:
    """Earlier conversation in the base session; isolation must strip its tool traffic."""
    out: list[Message] = []
    for i in range(n_turns):
        call = ToolCall(id=f"call_{i}", function=FunctionCall(name="read_file", arguments="{}"))
        out += [
            Message(id=f"pre-{i}-u", role="user", content=f"earlier question {i}"),
            Message(id=f"pre-{i}-c", role="assistant", tool_calls=(call,)),
            Message(
                id=f"pre-{i}-t",
                role="tool",
                tool_call_id=call.id,
                name="read_file",
                content=f"earlier file {i}\n" * 20,
            ),
            Message(id=f"pre-{i}-a", role="assistant", content=f"earlier answer {i}"),
        ]
    return out


async def kill_during_write(worker: ChaosWorker, trees: Path) -> tuple[float, int, str]:
    """SIGKILL while a write's temp file exists. Each write is watched from the moment its
    ``run_tool`` starts; a write that completed between two looks is let go and the next
    one watched, and the last one is killed whatever it is doing. Returns the kill time,
    the index of the write and what the kill interrupted."""
    sizes = [len(file_content(path).encode()) for path in WRITES]  # not in the hot path
    for i, path in enumerate(WRITES):
        await worker.wait_for_activity(ACT_RUN_TOOL, timeout_s=60)
        stage = watch_write(trees, path, sizes[i])
        if stage.startswith("mid-write") or i == len(WRITES) - 1:
            return worker.kill_now(), i, stage
    raise AssertionError("unreachable")


def watch_write(trees: Path, path: str, size: int) -> str:
    """Busy-polls (≤ 10 s) until the write of ``path`` is under way or done in any of the
    plan's trees (each subtask writes in its own); says which it saw first.

    No sleep between looks (listing a few directories takes microseconds): the loop ends
    within milliseconds, as soon as the write begins.
    """
    parent, _, name = path.rpartition("/")
    temp_prefix = f".{name}."
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            folders = [tree / parent for tree in trees.iterdir() if tree.is_dir()]
        except FileNotFoundError:
            continue  # the plan's first tree is made when its first call starts
        for folder in folders:
            try:
                names = os.listdir(folder)
            except (FileNotFoundError, NotADirectoryError):
                continue  # the directory is created right before the temp file
            if any(n.startswith(temp_prefix) and n.endswith(TEMP_SUFFIX) for n in names):
                return "mid-write (temp file present)"
            if name in names and (folder / name).stat().st_size == size:
                return "write finished, activity not yet reported"
    return "run_tool running, write not begun within 10s"


async def test_kill_during_tool_write_and_session_work(
    temporal_env: WorkflowEnvironment, client: Client, tmp_path: Path, say: list[RoundLog]
) -> None:
    log = RoundLog("write+session")
    say.append(log)
    workspace = chaos_workspace(tmp_path)
    store_path = tmp_path / "sessions.db"
    plan = make_plan(WRITE_PLAN, session_id=f"write-{uuid.uuid4().hex[:6]}", prefix="write")
    trees = tmp_path / "state" / "trees" / plan.id  # where worker_env's workers make them
    base_id = plan.session_id
    assert base_id is not None
    history = long_history(HISTORY_TURNS)
    async with opened_store(store_path) as store:
        await store.create_session(SessionMeta(session_id=base_id))
        await store.append(base_id, history)

    address = temporal_env.client.service_client.config.target_host
    crew = Crew(
        tmp_path,
        address,
        f"write-{uuid.uuid4().hex[:8]}",
        {"scenario": "tests.integration.chaos_support:WriterScenario"},
    )
    workers = crew.workers
    try:
        await (await crew.spawn()).ready(READY_TIMEOUT_S)
        handle = await start_plan(client, PlanInput(plan=plan), crew.task_queue)
        run_id = plan_run_id(plan, handle.first_execution_run_id)
        _, index, stage = await kill_during_write(workers[-1], trees)
        await crew.record_kill(plan, run_id)
        log.add(f"kill1 in {ACT_RUN_TOOL} of w{index + 1}: {stage} {temp_leftovers(trees)};")

        # The next subtask's isolation: its first LLM call builds its branch (a snapshot
        # of the long base, tool traffic stripped). On the new worker the killed subtask
        # first reruns its tool and makes its final call; kill as soon as the next call,
        # the victim's first, starts.
        victim = WRITE_PLAN[index + 1][0]
        branch = branch_session_id(base_id, run_id, victim)
        snap = snapshot_id(base_id, run_id, victim)
        await (await crew.spawn()).ready(READY_TIMEOUT_S)
        await workers[-1].wait_for_activity(ACT_CALL_LLM, timeout_s=90, nth=2)
        await kill_once_snapshot_taken(workers[-1], store_path, snap)
        await crew.record_kill(plan, run_id)
        state = await branch_state(store_path, branch, snap)
        log.add(f"kill2 in the first {ACT_CALL_LLM} of {victim} (branch build): {state};")

        # Closing that branch: the call that answers closes it right after storing the
        # answer; kill as soon as the answer is in the store.
        await (await crew.spawn()).ready(READY_TIMEOUT_S)
        await kill_after_final_answer(workers[-1], store_path, branch)
        await crew.record_kill(plan, run_id)
        state = await branch_state(store_path, branch, snap)
        log.add(f"kill3 after {victim}'s answer (branch close): {state};")
        assert await workflow_running(client, plan.id), "the plan finished before the last kill"

        await crew.spawn()
        report = await bounded(handle.result(), RESULT_TIMEOUT_S, f"plan {plan.id} result")
    finally:
        await crew.stop()

    audit = crew.audit()
    leftovers = temp_leftovers(trees)
    sizes = [(trees / p).stat().st_size for p in leftovers]
    log.add(f"requests={audit.requests} repeats={audit.repeats} leftovers={leftovers} {sizes}")
    assert audit.violations == [], audit.violations
    assert audit.rejected == [] and audit.not_completions == []
    assert audit.distinct == sum(2 + ("[turns:2]" in d) for _, d, _ in WRITE_PLAN)
    # Atomic writes: every file holds exactly the intended text, whatever was interrupted.
    for path in WRITES:
        assert result_text(workspace, plan.id, path) == file_content(path), path
    # A write that was not interrupted cleans up after itself; a temp file that SIGKILL
    # left behind mid-write is reported above and never became (part of) the file, nor
    # part of any commit of the plan.
    if not stage.startswith("mid-write"):
        assert leftovers == [], leftovers
    assert len(leftovers) <= 1, leftovers
    committed = plan_paths(workspace, plan.id)
    assert set(WRITES) <= committed
    assert not [p for p in committed if p.endswith(TEMP_SUFFIX)], committed
    await check_plan(
        client, store_path, plan, report, handle.first_execution_run_id, base_before=history
    )


async def kill_once_snapshot_taken(worker: ChaosWorker, store_path: Path, snap: str) -> float:
    """SIGKILL as soon as the branch build has snapshotted the base (it then creates and
    fills the branch), or after 2 s whatever the build is doing."""
    async with opened_store(store_path) as store:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if await store.has_snapshot(snap):
                break
            await asyncio.sleep(0.001)
    return worker.kill_now()


async def kill_after_final_answer(worker: ChaosWorker, store_path: Path, branch_id: str) -> float:
    """SIGKILL as soon as the branch ends with a final answer (text, no tool call), that
    is while the call that stored it is closing the branch, or just after."""
    async with opened_store(store_path) as store:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if not worker.alive:
                raise RuntimeError(f"worker died early:\n{worker.log_path.read_text()[-3000:]}")
            try:
                last = (await store.read(branch_id))[-1:]
            except SessionNotFound:
                last = []
            if last and last[0].role == "assistant" and last[0].content and not last[0].tool_calls:
                return worker.kill_now()
            await asyncio.sleep(0.002)
    raise TimeoutError(f"no final answer in {branch_id} within 90s")


async def branch_state(store_path: Path, branch_id: str, snap: str | None = None) -> str:
    """Where a kill left a branch: its size, whether it is closed, its snapshot kept."""
    async with opened_store(store_path) as store:
        try:
            meta = await store.get_session(branch_id)
        except SessionNotFound:
            return "branch not created yet"
        state = f"branch {await store.count(branch_id)} messages, ended={meta.ended}"
        if snap is not None:
            state += f", snapshot kept={await store.has_snapshot(snap)}"
        return state
