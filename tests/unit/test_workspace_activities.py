"""The tool activities with a workspace, and the workspace activities, on real git and a
real SQLite session store, run in Temporal's ActivityEnvironment.

``run_tool`` and ``run_command`` given a tree work in it and return the commit of what
they changed; a retried call that finds its answer stored still returns that commit;
without a tree they work in the worker's workspace directory as before. The workspace
activities turn a conflict, an unusable repository and a remote that did not answer into
the failures the workflows act on.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from durable_plans.activities.commands import CommandActivities
from durable_plans.activities.git_workspace import GitWorkspace
from durable_plans.activities.git_workspace_activities import (
    WORKSPACE_BUSY,
    WorkspaceActivities,
    leased_tree,
)
from durable_plans.activities.tools import ToolActivities
from durable_plans.domain.contracts import ToolCallInput, ToolCallOutput
from durable_plans.domain.failures import FailureType
from durable_plans.domain.models import FunctionCall, Message, SessionMeta, ToolCall
from durable_plans.domain.tool_contracts import CommandCallInput, ToolCallAt
from durable_plans.domain.tools_config import CommandPolicy
from durable_plans.domain.workspace_refs import (
    GitIdentity,
    WorkspaceConflictDetails,
    WorkspaceMergeInput,
    WorkspaceOpenInput,
    WorkspacePublishInput,
    WorkspaceRef,
)
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from tests.gitrepos import files_at, free_port, git, user_repo

PLAN = "plan-7"
SESSION = "plan-7:a"
AGENT = GitIdentity(name="coder", email="coder@dplan.invalid")
AT = 1_800_000_000.0
PY = Path(sys.executable).name


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_session_store(str(tmp_path / "sessions.db"))
    await opened.create_session(SessionMeta(session_id=SESSION))
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(workspace=user_repo(tmp_path / "repo"), state_dir=tmp_path / "state")


async def ask(
    store: SessionStore, message_id: str, name: str, arguments: dict[str, object]
) -> None:
    """The model's assistant message holding one call of ``name``."""
    call = ToolCall(
        id=f"call-{message_id}", function=FunctionCall(name=name, arguments=json.dumps(arguments))
    )
    await store.append(SESSION, [Message(id=message_id, role="assistant", tool_calls=(call,))])


def tool_input(message_id: str, turn: int, workspace: WorkspaceRef | None) -> ToolCallInput:
    return ToolCallInput(
        session_id=SESSION,
        message_id=message_id,
        call_index=0,
        scope="a",
        turn=turn,
        allowed_tools=("read_file", "write_file", "list_dir"),
        workspace=workspace,
        at_s=AT + turn,
    )


def ref(head: str, tree: str = "a@0") -> WorkspaceRef:
    return WorkspaceRef(plan_id=PLAN, tree=tree, head=head, identity=AGENT)


async def open_base(settings: Settings) -> str:
    acts = WorkspaceActivities(GitWorkspace.from_settings(settings))
    out = await ActivityEnvironment().run(acts.workspace_open, WorkspaceOpenInput(plan_id=PLAN))
    return out.base


async def test_run_tool_commits_a_write_that_a_fresh_tree_reads_back(
    store: SessionStore, settings: Settings, tmp_path: Path
) -> None:
    base = await open_base(settings)
    acts = ToolActivities(store, settings)
    env = ActivityEnvironment()
    await ask(store, "m1", "write_file", {"path": "docs/out.md", "content": "written\n"})
    wrote: ToolCallOutput = await env.run(acts.run_tool, tool_input("m1", 1, ref(base)))
    assert wrote.ok and wrote.commit is not None
    # The retried call finds its answer stored, and still returns the commit it made.
    again: ToolCallOutput = await env.run(acts.run_tool, tool_input("m1", 1, ref(base)))
    assert again == wrote
    # Another worker (its own state directory, an empty tree) reads the file at that commit.
    other = ToolActivities(store, settings.with_overrides(state_dir=tmp_path / "other-state"))
    await ask(store, "m2", "read_file", {"path": "docs/out.md"})
    read: ToolCallOutput = await env.run(
        other.run_tool, tool_input("m2", 2, ref(wrote.commit, "b@0"))
    )
    assert read.ok and read.commit is None
    assert read.summary == "written\n"
    # Nothing of it reached the person's checkout.
    assert not (settings.workspace / "docs").exists()
    # A read-only call at the base does not see it: the base is untouched.
    await ask(store, "m3", "read_file", {"path": "docs/out.md"})
    missing: ToolCallOutput = await env.run(other.run_tool, tool_input("m3", 3, ref(base, "c@0")))
    assert not missing.ok and "no such file" in missing.summary


async def test_run_tool_without_a_workspace_works_in_the_directory_as_before(
    store: SessionStore, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    settings = Settings(workspace=plain, state_dir=tmp_path / "state")
    acts = ToolActivities(store, settings)
    await ask(store, "m1", "write_file", {"path": "x.txt", "content": "x"})
    out: ToolCallOutput = await ActivityEnvironment().run(acts.run_tool, tool_input("m1", 1, None))
    assert out.ok and out.commit is None
    assert (plain / "x.txt").read_text() == "x"
    assert not (plain / ".git").exists() and not (tmp_path / "state").exists()


async def test_run_command_commits_what_the_command_changed(
    store: SessionStore, settings: Settings
) -> None:
    base = await open_base(settings)
    acts = CommandActivities(store, settings)
    script = (
        "import os;os.mkdir('made');open('made/by.txt','w').write('command');os.remove('README.md')"
    )
    await ask(store, "m1", "run_command", {"argv": [PY, "-c", script]})
    inp = CommandCallInput(
        call=ToolCallAt(session_id=SESSION, message_id="m1", call_index=0, scope="a", turn=1),
        policy=CommandPolicy(allow=(PY,), approval_required=False),
        workspace=ref(base),
        at_s=AT,
    )
    env = ActivityEnvironment()
    out: ToolCallOutput = await env.run(acts.run_command, inp)
    assert out.ok and "exit code 0" in out.summary and out.commit is not None
    files = files_at(settings.workspace / ".git", out.commit)
    assert files["made/by.txt"] == "command" and "README.md" not in files
    assert (await env.run(acts.run_command, inp)).commit == out.commit
    # A command that changes nothing makes no commit.
    await ask(store, "m2", "run_command", {"argv": [PY, "-c", "print('hi')"]})
    quiet = inp.model_copy(
        update={
            "call": inp.call.model_copy(update={"message_id": "m2", "turn": 2}),
            "workspace": ref(out.commit),
        }
    )
    assert (await env.run(acts.run_command, quiet)).commit is None


async def test_a_conflict_fails_the_merge_with_its_details(settings: Settings) -> None:
    gw = GitWorkspace.from_settings(settings)
    acts = WorkspaceActivities(gw)
    env = ActivityEnvironment()
    base = await open_base(settings)
    heads = []
    for tree, text in (("a@0", "from a\n"), ("b@0", "from b\n")):
        with gw.checkout(ref(base, tree)) as lease:
            lease.mark_changing()
            (lease.path / "shared.txt").write_text(text)
            heads.append(lease.commit(f"{tree} turn 1.0: write_file", AT))
    parents = (("a", heads[0]), ("b", heads[1]))
    merge = WorkspaceMergeInput(
        plan_id=PLAN, subtask="join", base=base, parents=parents, at_s=AT, identity=AGENT
    )
    with pytest.raises(ApplicationError) as caught:
        await env.run(acts.workspace_merge, merge)
    err = caught.value
    assert err.type == FailureType.WORKSPACE_CONFLICT and err.non_retryable
    assert "shared.txt changed by subtasks a and b" in err.message
    details = err.details[0]
    assert isinstance(details, WorkspaceConflictDetails)
    assert details.files == ("shared.txt",) and details.subtasks == ("a", "b")
    publish = WorkspacePublishInput(
        plan_id=PLAN, base=base, commits=parents, at_s=AT, identity=AGENT
    )
    summary = await env.run(acts.workspace_publish, publish)
    assert summary.left_out == ("b",) and summary.branch == f"dplan/{PLAN}"
    assert git(settings.workspace, "rev-parse", f"dplan/{PLAN}") == summary.result


async def test_an_unusable_base_or_remote_is_a_failure_of_its_own_kind(
    settings: Settings, tmp_path: Path
) -> None:
    env = ActivityEnvironment()
    acts = WorkspaceActivities(GitWorkspace.from_settings(settings))
    with pytest.raises(ApplicationError) as caught:
        await env.run(acts.workspace_open, WorkspaceOpenInput(plan_id=PLAN, requested_base="nope"))
    assert caught.value.type == FailureType.WORKSPACE_UNAVAILABLE and caught.value.non_retryable
    offline = settings.with_overrides(
        workspace_remote=f"git://127.0.0.1:{free_port()}/work.git", state_dir=tmp_path / "s2"
    )
    busy = WorkspaceActivities(GitWorkspace.from_settings(offline))
    with pytest.raises(ApplicationError) as caught:
        await env.run(busy.workspace_open, WorkspaceOpenInput(plan_id=PLAN))
    assert caught.value.type == WORKSPACE_BUSY and not caught.value.non_retryable


async def test_a_tree_taken_by_a_cancelled_activity_is_let_go(settings: Settings) -> None:
    """Cancelled while git waits for the tree (another call holds it), the activity must
    not keep the lock it gets afterwards: the next call on the tree would wait forever."""
    gw = GitWorkspace.from_settings(settings)
    at = ref(await open_base(settings))
    holder = gw.checkout(at)
    entered = asyncio.Event()

    async def take() -> None:
        async with leased_tree(gw, at):
            entered.set()

    waiting = asyncio.create_task(take())
    await asyncio.sleep(0.2)  # most likely blocked on the lock by now; either way is fine
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not entered.is_set()
    holder.close()
    # The cancelled side's lock, once it got it, is let go: this checkout returns.
    again = await asyncio.wait_for(asyncio.to_thread(gw.checkout, at), timeout=60)
    again.close()
