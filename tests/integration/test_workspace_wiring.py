"""The workflows' side of the git workspace, on a real Temporal server: which commit each
tree starts from, what every call is handed and what it hands back, what is merged and
published, and what the report says.

The git side is replaced by a recording stand-in (commit ids are hashes of what a commit
would be made from), so these tests see exactly what the workflows send: the order of a
join's parents, calls of one turn running one after another from each other's commits, a
sub-agent's tree, a conflict that pauses and merges again when resumed. The activities
that do the git work are tested on their own and end to end elsewhere.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from durable_plans.activities.registry import PlanActivities
from durable_plans.client._operate import start_retry
from durable_plans.client._plans import wait_for_report
from durable_plans.domain.agents import BUILTIN_CATALOG, SPAWN_TOOL, WORKSPACE_TOOL_NAMES, AgentSpec
from durable_plans.domain.contracts import (
    ACT_RUN_TOOL,
    ACT_WORKSPACE_MERGE,
    ACT_WORKSPACE_OPEN,
    ACT_WORKSPACE_PUBLISH,
    SubtaskInput,
    ToolCallInput,
    ToolCallOutput,
)
from durable_plans.domain.ids import plan_run_id, subtask_workflow_id
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, Subtask, SubtaskStatus
from durable_plans.domain.operations import RESUME_UPDATE, SubtaskRequest
from durable_plans.domain.workspace_refs import (
    GitIdentity,
    WorkspaceMergeInput,
    WorkspaceMergeOutput,
    WorkspaceOpenInput,
    WorkspaceOpenOutput,
    WorkspacePublishInput,
    WorkspaceSummary,
)
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from durable_plans.testing import (
    AgentScenario,
    ChatRequest,
    Completion,
    FakeProvider,
    HttpError,
    Reply,
    ToolCallSpec,
)
from durable_plans.worker import build_worker
from tests.integration.chaos_support import since_last_user
from tests.integration.conftest import provider_settings
from tests.integration.plans import run_plan, start_plan_workflow
from tests.integration.replay import assert_replays

pytestmark = pytest.mark.integration

BASE = "b" * 40
STUBBED = {ACT_WORKSPACE_OPEN, ACT_WORKSPACE_MERGE, ACT_WORKSPACE_PUBLISH, ACT_RUN_TOOL}
WAIT_S = 60


def commit_of(*parts: object) -> str:
    return hashlib.sha1(":".join(map(str, parts)).encode()).hexdigest()


def activity_name(fn: Any) -> str:
    return str(activity._Definition.must_from_callable(fn).name)


@dataclass(frozen=True)
class Call:
    tree: str
    head: str
    commit: str | None
    turn: int
    index: int


@dataclass
class RecordingGit:
    """The three workspace activities and ``run_tool``, recording what they are handed.

    ``run_tool`` runs the real tool (in the worker's workspace directory, as calls without
    a tree do) and answers a ``write_file`` with a commit made from the head it was given.
    """

    tools: Any
    conflicts: set[str] = field(default_factory=set)  # subtasks whose next merge conflicts
    opened: list[WorkspaceOpenInput] = field(default_factory=list)
    merges: list[WorkspaceMergeInput] = field(default_factory=list)
    published: list[WorkspacePublishInput] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)

    @activity.defn(name=ACT_WORKSPACE_OPEN)
    async def open(self, inp: WorkspaceOpenInput) -> WorkspaceOpenOutput:
        self.opened.append(inp)
        return WorkspaceOpenOutput(base=BASE)

    @activity.defn(name=ACT_WORKSPACE_MERGE)
    async def merge(self, inp: WorkspaceMergeInput) -> WorkspaceMergeOutput:
        self.merges.append(inp)
        if inp.subtask in self.conflicts:
            self.conflicts.discard(inp.subtask)
            raise ApplicationError(
                "shared.txt changed by " + " and ".join(sid for sid, _ in inp.parents),
                type="WorkspaceConflict",
                non_retryable=True,
            )
        return WorkspaceMergeOutput(commit=commit_of("merge", inp.base, *inp.parents))

    @activity.defn(name=ACT_WORKSPACE_PUBLISH)
    async def publish(self, inp: WorkspacePublishInput) -> WorkspaceSummary:
        self.published.append(inp)
        result = commit_of("publish", inp.base, *inp.commits)
        return WorkspaceSummary(base=inp.base, result=result, branch=f"dplan/{inp.plan_id}")

    @activity.defn(name=ACT_RUN_TOOL)
    async def run_tool(self, inp: ToolCallInput) -> ToolCallOutput:
        out: ToolCallOutput = await self.tools.run_tool(
            inp.model_copy(update={"workspace": None, "at_s": 0.0})
        )
        tree = inp.workspace
        if tree is None:
            return out
        commit = None
        if out.name == "write_file" and out.ok:
            commit = commit_of(tree.head, inp.scope, inp.turn, inp.call_index, inp.at_s)
        self.calls.append(Call(tree.tree, tree.head, commit, inp.turn, inp.call_index))
        return out.model_copy(update={"commit": commit})

    def of_tree(self, tree: str) -> list[Call]:
        return [c for c in self.calls if c.tree == tree]


_WRITES = re.compile(r"\{writes:([^}]*)\}")


def scenario(request: ChatRequest) -> Reply:
    """``{writes:a,b}``: one turn writing each file (all calls in one answer), then the
    answer; ``{spawn}``: write, spawn a coder that writes, write again; ``{then-fail}``:
    the answer after the writes is a 400. Anything else: the usual fake agent."""
    task = request.last_user_text
    since = since_last_user(request.messages)
    done = sum(1 for m in since if m.get("role") == "assistant" and m.get("tool_calls"))
    found = _WRITES.search(task)

    def write(*paths: str) -> list[ToolCallSpec]:
        return [
            ToolCallSpec("write_file", json.dumps({"path": p, "content": f"{p}\n"})) for p in paths
        ]

    if "{spawn}" in task:
        spawn = json.dumps({"agent": "coder", "task": "Write the child's file {writes:child.txt}"})
        turns = [write("parent.txt"), [ToolCallSpec(SPAWN_TOOL, spawn)], write("after.txt")]
    elif found is not None:
        turns = [write(*found.group(1).split(","))]
    else:
        return AgentScenario()(request)
    if done < len(turns):
        return Completion(tool_calls=tuple(turns[done]), id_policy="unique")
    if "{then-fail}" in task:
        return HttpError(status=400)
    return Completion(content=f"Done: {task}")


@dataclass
class Rig:
    client: Client
    settings: Settings
    git: RecordingGit

    def tree(self, plan: Plan, run_id: str, attempt: str) -> str:
        return f"{plan_run_id(plan.id, run_id).rpartition('.')[2]}/{attempt}"


@pytest.fixture
async def rig(client: Client, tmp_path: Path) -> AsyncIterator[Rig]:
    async with FakeProvider(scenario, latency_ms=0) as provider:
        settings = provider_settings(client, provider, tmp_path, prefix="wiring")
        async with wiring_worker(client, settings) as git:
            yield Rig(client, settings, git)


@asynccontextmanager
async def wiring_worker(client: Client, settings: Settings) -> AsyncIterator[RecordingGit]:
    store = await open_session_store(settings.session_store)
    real = PlanActivities(store, settings)
    git = RecordingGit(tools=real.tools)
    kept = [fn for fn in real.all() if activity_name(fn) not in STUBBED]
    stand_ins: list[Callable[..., Any]] = [git.open, git.merge, git.publish, git.run_tool]
    worker = build_worker(client, settings, store, activities=[*kept, *stand_ins])
    task = asyncio.create_task(worker.run())
    try:
        yield git
    finally:
        await worker.shutdown()
        await asyncio.gather(task, return_exceptions=True)
        await real.aclose()
        await store.close()


def _plan(prefix: str, *subtasks: Subtask, **fields: Any) -> Plan:
    return Plan(
        id=f"{prefix}-{uuid.uuid4().hex[:8]}", goal="workspace wiring", subtasks=subtasks, **fields
    )


def _coder(sid: str, task: str, *deps: str) -> Subtask:
    return Subtask(id=sid, description=task, agent="coder", depends_on=deps)


async def test_trees_start_from_the_base_a_dependency_or_the_merge_and_the_result_is_published(
    rig: Rig,
) -> None:
    plan = _plan(
        "dag",
        _coder("a", "Write two files {writes:a1.txt,a2.txt}"),
        _coder("b", "Write b {writes:b.txt}", "a"),
        _coder("c", "Write c {writes:c.txt}", "a"),
        _coder("d", "Write d {writes:d.txt}", "c", "b"),  # listed c first; the plan says b
    )
    handle = await start_plan_workflow(rig.client, plan, rig.settings.task_queue)
    report = await handle.result()
    run_id = handle.first_execution_run_id
    assert run_id is not None
    git = rig.git

    assert report.status is PlanStatus.COMPLETED
    assert git.opened == [WorkspaceOpenInput(plan_id=plan.id, requested_base=None)]
    a1, a2 = git.of_tree(rig.tree(plan, run_id, "a"))
    # Two writes of one answer run one after the other, the second from the first's commit.
    assert (a1.head, a1.index, a2.index) == (BASE, 0, 1)
    assert a2.head == a1.commit and a2.commit is not None
    rows = {r.id: r for r in report.subtasks}
    assert rows["a"].commit == a2.commit
    # One dependency: its result as is, no merge.
    [b] = git.of_tree(rig.tree(plan, run_id, "b"))
    [c] = git.of_tree(rig.tree(plan, run_id, "c"))
    assert b.head == c.head == a2.commit
    assert (rows["b"].commit, rows["c"].commit) == (b.commit, c.commit)
    # Several: merged in the plan's order, by the subtask's agent.
    [merge] = git.merges
    assert merge.subtask == "d" and merge.base == BASE
    assert merge.parents == (("b", b.commit), ("c", c.commit))
    assert merge.identity == GitIdentity(name="coder (dplan)", email=f"d@{plan.id}.dplan")
    [d] = git.of_tree(rig.tree(plan, run_id, "d"))
    assert d.head == commit_of("merge", BASE, *merge.parents)
    assert rows["d"].commit == d.commit

    [published] = git.published
    assert published.base == BASE
    assert published.commits == (("d", d.commit),)  # d's commit holds everything before it
    assert report.workspace == WorkspaceSummary(
        base=BASE, result=commit_of("publish", BASE, *published.commits), branch=f"dplan/{plan.id}"
    )
    assert await handle.query("status", result_type=PlanReport) == report
    workflow_ids = [plan.id, *(subtask_workflow_id(plan.id, s) for s in "abcd")]
    assert await assert_replays(rig.client, workflow_ids) == 5


async def test_a_failed_subtask_names_its_attempt_and_gives_the_result_nothing(rig: Rig) -> None:
    plan = _plan(
        "fail",
        _coder("ok", "Write ok {writes:ok.txt}"),
        _coder("bad", "Write then fail {writes:bad.txt} {then-fail}", "ok"),
    )
    report, failure = await run_plan(rig.client, plan, rig.settings.task_queue)
    assert failure is not None and report.status is PlanStatus.FAILED
    rows = {r.id: r for r in report.subtasks}
    [bad] = [c for c in rig.git.calls if c.tree.endswith("/bad")]
    assert bad.head == rows["ok"].commit
    assert rows["bad"].status is SubtaskStatus.FAILED and rows["bad"].commit == bad.commit
    # The plan failed part-way: what completed is still published (the failed dependent's
    # commit holds it, but is not taken), and the failure's report (the PlanFailed
    # details) names the branch.
    [published] = rig.git.published
    assert published.commits == (("ok", rows["ok"].commit),)
    assert report.workspace is not None and report.workspace.branch == f"dplan/{plan.id}"


async def test_a_conflicting_join_pauses_and_merges_again_when_resumed(rig: Rig) -> None:
    rig.git.conflicts.add("join")
    plan = _plan(
        "conflict",
        _coder("left", "Write left {writes:left.txt}"),
        _coder("right", "Write right {writes:right.txt}"),
        _coder("join", "Write join {writes:join.txt}", "left", "right"),
        on_failure="pause",
    )
    handle = await start_plan_workflow(rig.client, plan, rig.settings.task_queue)
    run_id = handle.first_execution_run_id
    assert run_id is not None

    async def paused() -> PlanReport:
        for _ in range(WAIT_S * 10):
            report: PlanReport = await handle.query("status", result_type=PlanReport)
            if report.status is PlanStatus.PAUSED:
                return report
            await asyncio.sleep(0.1)
        raise AssertionError(f"the plan never paused: {report}")

    row = {r.id: r for r in (await paused()).subtasks}["join"]
    assert row.status is SubtaskStatus.PAUSED and row.error is not None
    assert row.error.type == "WorkspaceConflict"
    assert row.error.message == "shared.txt changed by left and right"  # the merge's own
    assert row.commit is None  # it never started a tree
    assert rig.git.of_tree(rig.tree(plan, run_id, "join")) == []

    await handle.execute_update(RESUME_UPDATE, SubtaskRequest(subtask="join"), result_type=str)
    report = await handle.result()
    assert report.status is PlanStatus.COMPLETED
    first, second = rig.git.merges
    assert first.parents == second.parents  # the same dependencies, merged again
    [join] = rig.git.of_tree(rig.tree(plan, run_id, "join~1"))  # a tree of its own
    assert join.head == commit_of("merge", BASE, *second.parents)
    assert {r.id: r for r in report.subtasks}["join"].commit == join.commit
    assert await assert_replays(rig.client, [plan.id]) == 1


async def test_a_sub_agent_works_on_its_own_tree_and_its_parent_carries_on_from_it(
    rig: Rig,
) -> None:
    lead = AgentSpec(
        name="lead",
        system_prompt="You write and delegate.",
        tools=(*WORKSPACE_TOOL_NAMES, SPAWN_TOOL),
    )
    agents = (*BUILTIN_CATALOG.agents, lead)
    plan = _plan("spawn", Subtask(id="p", description="Lead the work {spawn}", agent="lead"))
    handle = await start_plan_workflow(rig.client, plan, rig.settings.task_queue, agents=agents)
    report = await handle.result()
    run_id = handle.first_execution_run_id
    assert run_id is not None and report.status is PlanStatus.COMPLETED

    parent_tree = rig.tree(plan, run_id, "p")
    before, after = rig.git.of_tree(parent_tree)
    [child] = rig.git.of_tree(f"{parent_tree}/coder-1-0")
    assert before.head == BASE
    assert child.head == before.commit  # from the parent's head
    assert after.head == child.commit  # the parent carries on from the sub-agent's result
    assert report.subtasks[0].commit == after.commit

    child_id = f"{subtask_workflow_id(plan.id, 'p')}/coder-1-0"
    history = await rig.client.get_workflow_handle(child_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    payload = json.loads(started.input.payloads[0].data)
    start = SubtaskInput.model_validate(payload).workspace
    assert start is not None and start.parents == ()
    assert start.identity == GitIdentity(name="coder (dplan)", email=f"coder-1-0.p@{plan.id}.dplan")
    assert await assert_replays(rig.client, [plan.id, subtask_workflow_id(plan.id, "p")]) == 2


async def test_the_base_is_resolved_once_and_carried_across_continue_as_new(rig: Rig) -> None:
    plan = _plan(
        "carried",
        _coder("a", "Write a {writes:a.txt}"),
        _coder("b", "Write b {writes:b.txt}", "a"),
        _coder("c", "Write c {writes:c.txt}", "b"),
    )
    handle = await start_plan_workflow(
        rig.client, plan, rig.settings.task_queue, max_completions_per_run=1
    )
    report = await handle.result()
    run_id = handle.first_execution_run_id
    assert run_id is not None and report.status is PlanStatus.COMPLETED

    # Three runs (one completion each); the base was resolved by the first one only.
    assert len(rig.git.opened) == 1 and report.workspace is not None
    assert report.workspace.base == BASE
    [a] = rig.git.of_tree(rig.tree(plan, run_id, "a"))
    [b] = rig.git.of_tree(rig.tree(plan, run_id, "b"))
    [c] = rig.git.of_tree(rig.tree(plan, run_id, "c"))
    assert (a.head, b.head, c.head) == (BASE, a.commit, b.commit)  # carried commits too
    [published] = rig.git.published
    assert published.commits == (("c", c.commit),)
    assert await assert_replays(rig.client, [plan.id]) == 3


async def test_a_retried_plan_keeps_its_base_and_runs_again_on_new_trees(rig: Rig) -> None:
    plan = _plan(
        "retried",
        _coder("ok", "Write ok {writes:ok.txt}"),
        _coder("bad", "Write then fail {writes:bad.txt} {then-fail}", "ok"),
    )
    first, _ = await run_plan(rig.client, plan, rig.settings.task_queue)
    first_run = (await rig.client.get_workflow_handle(plan.id).describe()).run_id
    assert first.status is PlanStatus.FAILED and first_run is not None

    carried, rerun = await start_retry(rig.client, plan.id, rig.settings.task_queue)
    assert rerun == ["bad"] and carried.workspace_base == BASE
    second = await wait_for_report(rig.client.get_workflow_handle(plan.id, result_type=PlanReport))
    second_run = (await rig.client.get_workflow_handle(plan.id).describe()).run_id
    assert second_run is not None and second_run != first_run

    assert len(rig.git.opened) == 1  # the retry started from the carried base
    ok_commit = {r.id: r for r in first.subtasks}["ok"].commit
    [again] = rig.git.of_tree(rig.tree(plan, second_run, "bad~1"))  # a new execution's tree
    assert again.head == ok_commit  # from where it started before, not the failed attempt
    rows = {r.id: r for r in second.subtasks}
    assert rows["ok"].commit == ok_commit and rows["bad"].retries == 1
    assert [p.commits for p in rig.git.published] == [(("ok", ok_commit),)] * 2
