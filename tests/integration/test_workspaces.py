"""The workspace kept in git, end to end on a real server with the strict fake provider:
joins merge truthfully (a conflict names the file and both writers, pauses for an
operator's resolution and carries on from it), a failed subtask leaves nothing in the
plan's result but its attempt under its own ref and is retried from its base, and two
plans at once on a repository with a dirty checkout neither see each other nor touch it.

Each agent writes and reads the files its task names (``workspace_steps``); what a read
saw is the answer the workflow stored, what a plan left is read from its result branch.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_plans.client import Client
from durable_plans.domain.ids import plan_run_id, subtask_workflow_id
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, Subtask, SubtaskStatus
from durable_plans.domain.workspace_refs import attempt_ref, resolution_ref
from durable_plans.testing import AgentScenario, ChatRequest, HttpError, Reply
from durable_plans.workflows.plan_workspace import subtask_tree
from tests import gitrepos
from tests.integration.chaos_support import since_last_user
from tests.integration.conftest import Harness
from tests.integration.plans import by_id, run_plan, start_plan_workflow
from tests.integration.workspace_files import git, plan_paths, result_paths, result_text
from tests.integration.workspace_steps import answers, eventually, read, reads, write

pytestmark = pytest.mark.integration

WAIT_S = 60


def _plan(prefix: str, *subtasks: Subtask, **fields: object) -> Plan:
    return Plan(
        id=f"{prefix}-{uuid.uuid4().hex[:8]}",
        goal="workspace end to end",
        subtasks=subtasks,
        **fields,
    )


def _task(sid: str, text: str, *deps: str) -> Subtask:
    return Subtask(id=sid, description=text, depends_on=deps)


def _rev(repo: Path, what: str) -> str:
    return git(repo, "rev-parse", what).stdout.strip()


def _parents(repo: Path, commit: str) -> list[str]:
    return git(repo, "rev-list", "--parents", "-n", "1", commit).stdout.split()[1:]


def _writers_of_one_file(prefix: str, **fields: object) -> Plan:
    return _plan(
        prefix,
        _task("w1", "Write the shared file " + write("shared.txt", "one\n")),
        _task("w2", "Write the shared file too " + write("shared.txt", "two\n")),
        _task(
            "join",
            "Read the shared file " + read("shared.txt") + write("joined.txt", "joined\n"),
            "w1",
            "w2",
        ),
        **fields,
    )


def _conflict_named(message: str, plan: Plan) -> None:
    """The message names the file, both writers and where a resolution goes."""
    assert "shared.txt" in message, message
    assert "w1" in message and "w2" in message, message
    assert resolution_ref(plan.id, "join") in message, message


async def test_writers_of_one_file_make_their_dependent_fail_naming_the_file_and_both(
    harness: Harness,
) -> None:
    plan = _writers_of_one_file("clash")
    report, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is not None and report.status is PlanStatus.FAILED
    rows = by_id(report)
    assert rows["w1"].status is rows["w2"].status is SubtaskStatus.COMPLETED
    join = rows["join"]
    assert join.status is SubtaskStatus.FAILED and join.error is not None
    assert join.error.type == "WorkspaceConflict"
    _conflict_named(join.error.message, plan)
    # It did not start on a silently chosen side: no tree, no LLM call.
    assert join.commit is None and join.llm_calls == 0
    assert not any("Read the shared file" in str(r.messages) for r in harness.provider.requests)

    child = harness.client.get_workflow_handle(subtask_workflow_id(plan.id, "join"))
    with pytest.raises(WorkflowFailureError) as failed:
        await child.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "WorkspaceConflict"
    _conflict_named(cause.message, plan)

    # The plan's result holds the first writer; the second, which conflicts, is named.
    workspace = harness.settings.workspace
    assert report.workspace is not None and report.workspace.left_out == ("w2",)
    assert result_text(workspace, plan.id, "shared.txt") == "one\n"
    assert result_text(workspace, plan.id, "joined.txt") is None


def _resolve(workspace: Path, operator: Path, ours: str, theirs: str, ref: str) -> str:
    """What an operator does: merge the two writers' commits in a clone of their own,
    settle the conflict by hand, commit, and push the result to ``ref``."""
    gitrepos.git(operator.parent, "clone", "-q", str(workspace), str(operator))
    gitrepos.git(operator, "fetch", "-q", "origin", "+refs/dplan/*:refs/dplan/*")
    gitrepos.git(operator, "checkout", "-q", "--detach", ours)
    merged = gitrepos.git(operator, "merge", "--no-edit", theirs, check=False)
    assert "CONFLICT" in merged and "shared.txt" in merged, merged
    (operator / "shared.txt").write_text("one\ntwo\n")
    gitrepos.git(operator, "add", "shared.txt")
    gitrepos.git(operator, "commit", "-qm", "Keep both lines of shared.txt")
    gitrepos.git(operator, "push", "-q", "origin", f"HEAD:{ref}")
    return gitrepos.git(operator, "rev-parse", "HEAD")


async def test_a_conflict_paused_is_resolved_by_a_pushed_commit_and_resume(
    harness: Harness, tmp_path: Path
) -> None:
    plan = _writers_of_one_file("resolve", on_failure="pause")
    handle = await start_plan_workflow(harness.client, plan, harness.task_queue)
    operator = Client(harness.client, harness.settings)

    def paused(attempts: int) -> Callable[[], Awaitable[PlanReport | None]]:
        async def probe() -> PlanReport | None:
            report = await operator.status(plan.id)
            row = by_id(report)["join"]
            held = row.status is SubtaskStatus.PAUSED and row.retries == attempts - 1
            return report if report.status is PlanStatus.PAUSED and held else None

        return probe

    for attempt in (1, 2):
        # Resumed before anyone resolved it, the join meets the same conflict again.
        if attempt == 2:
            await operator.resume(plan.id, "join")
        report = await eventually(paused(attempt), f"pause {attempt} on the conflict", WAIT_S)
        rows = by_id(report)
        join = rows["join"]
        assert join.error is not None and join.error.type == "WorkspaceConflict"
        _conflict_named(join.error.message, plan)
        assert join.commit is None

    workspace = harness.settings.workspace
    named = re.search(r"refs/dplan/[^\s,;]+", join.error.message)
    assert named is not None, join.error.message
    ref = named.group().rstrip(".")  # the ref the message names, where a person pushes
    assert ref == resolution_ref(plan.id, "join")
    resolution = _resolve(
        workspace, tmp_path / "operator", rows["w1"].commit, rows["w2"].commit, ref
    )
    assert _rev(workspace, ref) == resolution

    await operator.resume(plan.id, "join")
    final = await asyncio.wait_for(handle.result(), WAIT_S)
    assert final.status is PlanStatus.COMPLETED
    # The join carried on from the resolution: it read both lines and wrote on top of it.
    assert await reads(harness.store, final, "join") == ["one\ntwo\n"]
    joined = by_id(final)["join"].commit
    assert joined is not None and _parents(workspace, joined) == [resolution]
    assert final.workspace is not None and final.workspace.result == joined
    assert result_text(workspace, plan.id, "shared.txt") == "one\ntwo\n"
    assert result_text(workspace, plan.id, "joined.txt") == "joined\n"


async def test_writers_of_different_files_are_both_seen_by_their_dependent(
    harness: Harness,
) -> None:
    plan = _plan(
        "apart",
        _task("w1", "Write a " + write("a.txt", "from w1\n")),
        _task("w2", "Write b " + write("b.txt", "from w2\n")),
        _task("join", "Read both " + read("a.txt") + read("b.txt"), "w1", "w2"),
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is None and report.status is PlanStatus.COMPLETED
    assert await reads(harness.store, report, "join") == ["from w1\n", "from w2\n"]
    rows = by_id(report)
    workspace = harness.settings.workspace
    # The join started from the merge of both writers (it made no commit of its own).
    merge = rows["join"].commit
    assert merge is not None
    assert _parents(workspace, merge) == [rows["w1"].commit, rows["w2"].commit]
    assert result_paths(workspace, plan.id) == ["README.md", "a.txt", "b.txt"]
    assert result_text(workspace, plan.id, "a.txt") == "from w1\n"
    assert result_text(workspace, plan.id, "b.txt") == "from w2\n"


# --------------------------------------------------------------------------- rollback

THEN_400 = "{then-400}"


@dataclass
class FailsAfterWriting:
    """The usual agent, except that a task marked ``{then-400}`` gets a 400 for its next
    LLM call once a tool answered, while ``failing``; a retried attempt finds it fixed."""

    failing: bool = True
    agent: AgentScenario = field(default_factory=AgentScenario)

    def __call__(self, request: ChatRequest) -> Reply:
        answered = any(m.get("role") == "tool" for m in since_last_user(request.messages))
        if self.failing and THEN_400 in request.last_user_text and answered:
            return HttpError(status=400)
        return self.agent(request)


async def test_a_subtask_that_writes_then_fails_leaves_nothing_and_is_retried_from_its_base(
    harness: Harness,
) -> None:
    scenario = FailsAfterWriting()
    harness.provider.scenario = scenario
    plan = _plan(
        "rollback",
        _task("ok", "Write ok " + write("ok.txt", "ok\n")),
        _task("bad", "Write then fail " + write("failed.txt", "half done\n") + THEN_400, "ok"),
    )
    handle = await start_plan_workflow(harness.client, plan, harness.task_queue)
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), WAIT_S)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "PlanFailed"
    report = PlanReport.model_validate(cause.details[0])
    assert report.status is PlanStatus.FAILED
    rows = by_id(report)
    ok, bad = rows["ok"].commit, rows["bad"]
    assert bad.status is SubtaskStatus.FAILED and bad.error is not None
    assert bad.error.type == "BadRequest"
    workspace = harness.settings.workspace

    # Nothing of it in the plan's result: what completed is there, the failed write not.
    assert report.workspace is not None and report.workspace.result == ok
    assert result_text(workspace, plan.id, "ok.txt") == "ok\n"
    assert result_text(workspace, plan.id, "failed.txt") is None
    # Its attempt is inspectable under its own ref: the write, on top of its base.
    run_id = handle.first_execution_run_id
    assert run_id is not None
    attempt = attempt_ref(plan.id, subtask_tree(plan_run_id(plan.id, run_id), "bad", 0))
    assert bad.commit is not None and _rev(workspace, attempt) == bad.commit
    assert git(workspace, "show", f"{attempt}:failed.txt").stdout == "half done\n"
    assert _parents(workspace, bad.commit) == [ok]

    # Retried, it runs again from its base (ok's result), not from the failed attempt.
    scenario.failing = False
    operator = Client(harness.client, harness.settings)
    assert await operator.retry(plan.id) == ["bad"]
    final = await asyncio.wait_for(operator.report(plan.id), WAIT_S)
    assert final.status is PlanStatus.COMPLETED
    again = by_id(final)["bad"]
    assert again.commit is not None and again.commit != bad.commit
    assert _parents(workspace, again.commit) == [ok]
    assert [name for name, _ in await answers(harness.store, final, "bad")] == ["write_file"]
    assert _rev(workspace, attempt) == bad.commit  # the failed attempt's ref as it was
    assert result_text(workspace, plan.id, "failed.txt") == "half done\n"
    assert result_text(workspace, plan.id, "ok.txt") == "ok\n"


# --------------------------------------------------------------------------- two plans at once


def _dirty_checkout(repo: Path) -> None:
    """``repo`` (the harness's workspace, a README in it) made a repository as a person
    has it mid-work: a branch besides main, a modified tracked file, a staged new file,
    an untracked one and an ignored one."""
    (repo / "tracked.txt").write_text("committed\n")
    (repo / ".gitignore").write_text("*.log\n")
    gitrepos.git(repo, "init", "-q")
    gitrepos.git(repo, "add", "-A")
    gitrepos.git(repo, "commit", "-qm", "first")
    gitrepos.git(repo, "branch", "feature")
    (repo / "tracked.txt").write_text("an edit not committed yet\n")
    (repo / "staged.txt").write_text("staged, not committed\n")
    gitrepos.git(repo, "add", "staged.txt")
    (repo / "notes.txt").write_text("untracked notes\n")
    (repo / "debug.log").write_text("ignored\n")


def _person_sees(repo: Path) -> dict[str, object]:
    """What a person works with: HEAD, the index, what git status says, every file of the
    checkout, and the branches and tags other than the plans' result branches."""
    refs = gitrepos.git(repo, "for-each-ref", "refs/heads", "refs/tags").splitlines()
    return {
        "HEAD": (
            gitrepos.git(repo, "symbolic-ref", "HEAD"),
            gitrepos.git(repo, "rev-parse", "HEAD"),
        ),
        "index": gitrepos.git(repo, "ls-files", "--stage"),
        "status": gitrepos.git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored"),
        "refs": [r for r in refs if "\trefs/heads/dplan/" not in r],
        "files": {
            p.relative_to(repo).as_posix(): p.read_bytes()
            for p in sorted(repo.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(repo).parts
        },
    }


def _plan_of(name: str, other: str) -> Plan:
    """Write ``<name>.txt``, then look: the file, the other plan's, the checkout's
    uncommitted ones (untracked, staged, ignored), the edited tracked file, the listing."""
    return _plan(
        f"two-{name}",
        _task("write", f"Write {name} " + write(f"{name}.txt", f"{name}\n")),
        _task(
            "look",
            "Look around "
            + "".join(
                read(p)
                for p in (f"{name}.txt", f"{other}.txt", "notes.txt", "staged.txt", "debug.log")
            )
            + read("tracked.txt")
            + '<<list_dir {"path": "."}>>',
            "write",
        ),
    )


async def test_two_plans_at_once_beside_a_dirty_checkout_see_neither_each_other_nor_it(
    harness: Harness,
) -> None:
    repo = harness.settings.workspace
    _dirty_checkout(repo)
    before = _person_sees(repo)
    assert before["status"] != ""  # the checkout is dirty indeed
    plans = {"alpha": _plan_of("alpha", "beta"), "beta": _plan_of("beta", "alpha")}
    handles = {
        name: await start_plan_workflow(harness.client, plan, harness.task_queue)
        for name, plan in plans.items()
    }
    ended = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles.values())), WAIT_S)
    reports = dict(zip(handles, ended, strict=True))

    for name, other in (("alpha", "beta"), ("beta", "alpha")):
        report, plan = reports[name], plans[name]
        assert report.status is PlanStatus.COMPLETED
        looked = await answers(harness.store, report, "look")
        assert [text for tool, text in looked if tool == "read_file"] == [
            f"{name}\n",
            f"error: no such file: {other}.txt",
            "error: no such file: notes.txt",
            "error: no such file: staged.txt",
            "error: no such file: debug.log",
            "committed\n",  # the commit's, not the checkout's edit
        ]
        [listing] = [text for tool, text in looked if tool == "list_dir"]
        listed = {line.split()[0] for line in listing.splitlines()}
        assert f"{name}.txt" in listed and "tracked.txt" in listed
        assert not listed & {f"{other}.txt", "notes.txt", "staged.txt", "debug.log"}, listing
        assert result_paths(repo, plan.id) == [
            ".gitignore",
            "README.md",
            f"{name}.txt",
            "tracked.txt",
        ]
        assert result_text(repo, plan.id, "tracked.txt") == "committed\n"
        # Not in any commit the plan made either, failed attempts included.
        assert plan_paths(repo, plan.id) == {
            ".gitignore",
            "README.md",
            f"{name}.txt",
            "tracked.txt",
        }

    after = _person_sees(repo)
    assert after == before
    branches = gitrepos.git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/dplan/")
    assert sorted(branches.splitlines()) == sorted(f"dplan/{p.id}" for p in plans.values())
