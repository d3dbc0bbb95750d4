"""A conversation's files on a real server: each turn's writes are commits on the
conversation's own tree, the branch ``dplan/chat/<session-id>`` shows its head, and the
``undo`` update takes back the last turn, its messages and its files together.

The fake provider's agent plays the ``<<write_file {...}>>`` steps of the user message,
one call per model turn; what the conversation holds is read from the session store and
from git, as a person would look."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from temporalio.client import (
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateStage,
)

from durable_plans.client._approvals import decide_in
from durable_plans.domain.agents import BUILTIN_CATALOG
from durable_plans.domain.approval_rules import QUERY_APPROVALS, ApprovalPolicy, WorkflowApprovals
from durable_plans.domain.session_contracts import (
    SendMessageInput,
    SendMessageResult,
    SessionInput,
    SessionState,
    UndoInput,
    UndoResult,
    session_workflow_id,
)
from durable_plans.domain.workspace_refs import tree_ref
from durable_plans.workflows.chat_workspace import chat_plan_id
from tests.integration.conftest import Harness
from tests.integration.replay import assert_replays
from tests.integration.workspace_files import git, result_paths, result_text
from tests.integration.workspace_steps import write

pytestmark = pytest.mark.integration

WAIT_S = 60.0  # a bound on waiting for the conversation to reach a state, never asserted


async def _start(h: Harness, sid: str, **fields: Any) -> WorkflowHandle[Any, SessionState]:
    return await h.client.start_workflow(
        "SessionWorkflow",
        SessionInput(session_id=sid, agent="coder", **fields),
        id=session_workflow_id(sid),
        task_queue=h.task_queue,
        result_type=SessionState,
    )


async def _send(handle: WorkflowHandle[Any, SessionState], text: str) -> SendMessageResult:
    result: SendMessageResult = await handle.execute_update(
        "send_message", SendMessageInput(text=text), result_type=SendMessageResult
    )
    return result


async def _undo(handle: WorkflowHandle[Any, SessionState]) -> UndoResult:
    result: UndoResult = await handle.execute_update("undo", UndoInput(), result_type=UndoResult)
    return result


async def _refusal(handle: WorkflowHandle[Any, SessionState]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await _undo(handle)
    cause = info.value.cause
    return f"{getattr(cause, 'type', '')}: {getattr(cause, 'message', cause)}"


def _parent(h: Harness, commit: str) -> str:
    return git(h.settings.workspace, "rev-parse", f"{commit}^").stdout.strip()


async def test_undo_takes_back_the_last_turns_files_and_messages_turn_by_turn(
    harness: Harness,
) -> None:
    repo = harness.settings.workspace
    sid = f"s-{uuid.uuid4().hex[:8]}"
    plan_id = chat_plan_id(sid)
    # Two turns per run: the undos and the turns after them cross continue-as-new.
    handle = await _start(harness, sid, max_messages_per_run=2)

    assert await _refusal(handle) == (
        "UndoRefused: there is no turn to undo: every turn this conversation remembers is undone"
    )

    first = await _send(handle, "Start the notes " + write("notes.txt", "one\n"))
    base = _parent(harness, first.commit or "")
    assert first.files == ("notes.txt",)
    assert first.branch == f"dplan/chat/{sid}"
    assert git(repo, "rev-parse", f"refs/heads/dplan/chat/{sid}").stdout.strip() == first.commit
    assert result_text(repo, plan_id, "notes.txt") == "one\n"
    after_first = await harness.store.read(sid)

    second = await _send(
        handle,
        "Change them " + write("notes.txt", "two\n") + " " + write("todo.txt", "later\n"),
    )
    assert second.files == ("notes.txt", "todo.txt")
    assert _parent(harness, _parent(harness, second.commit or "")) == first.commit
    assert result_text(repo, plan_id, "notes.txt") == "two\n"
    after_second = await harness.store.read(sid)

    undone = await _undo(handle)
    assert undone.text.startswith("Change them <<write_file")
    assert undone.removed == len(after_second) - len(after_first)
    assert undone.files == ("notes.txt", "todo.txt")
    assert (undone.commit, undone.branch, undone.turns_left) == (first.commit, first.branch, 1)
    # The branch and the stored conversation are both as they were after the first turn.
    assert result_text(repo, plan_id, "notes.txt") == "one\n"
    assert result_paths(repo, plan_id) == ["README.md", "notes.txt"]
    assert await harness.store.read(sid) == after_first
    state = await handle.query("state", result_type=SessionState)
    assert (state.commit, state.branch, state.undoable) == (first.commit, first.branch, 1)

    # The next turn carries on from the restored commit, on a tree of its own: the undone
    # turn's tree still holds what was undone.
    third = await _send(handle, "Try again " + write("notes.txt", "three\n"))
    assert third.files == ("notes.txt",)
    assert _parent(harness, third.commit or "") == first.commit
    assert result_text(repo, plan_id, "notes.txt") == "three\n"
    assert result_paths(repo, plan_id) == ["README.md", "notes.txt"]
    trees = git(repo, "for-each-ref", "--format=%(objectname)", f"refs/dplan/{plan_id}/trees/")
    assert set(trees.stdout.split()) == {second.commit, third.commit}
    messages = await harness.store.read(sid)
    assert messages[: len(after_first)] == after_first
    assert [m.content for m in messages if m.role == "user"][1] == (
        "Try again " + write("notes.txt", "three\n")
    )

    # Turn by turn back to where the conversation started, then nothing left to undo.
    assert (await _undo(handle)).files == ("notes.txt",)
    assert result_text(repo, plan_id, "notes.txt") == "one\n"
    last = await _undo(handle)
    assert last.text.startswith("Start the notes") and last.files == ("notes.txt",)
    assert (last.commit, last.turns_left) == (base, 0)
    assert result_paths(repo, plan_id) == ["README.md"]
    assert await harness.store.read(sid) == []
    assert "no turn to undo" in await _refusal(handle)

    # The checkout was never touched: only the conversation's branch and refs changed.
    assert git(repo, "status", "--porcelain").stdout == ""
    assert not (repo / "notes.txt").exists()
    assert tree_ref(plan_id, "x").startswith(f"refs/dplan/chat/{sid}/")

    runs = await assert_replays(harness.client, [session_workflow_id(sid)])
    assert runs >= 2  # the conversation continued as new on the way


async def test_undo_is_refused_while_a_turn_is_running(harness: Harness) -> None:
    """A write that waits for a person's approval holds its turn open for as long as it
    waits: the undo sent meanwhile meets a running turn, whatever the timing."""
    coder = BUILTIN_CATALOG.get("coder").model_copy(
        update={"approval": ApprovalPolicy(tools=("write_file",))}
    )
    agents = tuple(coder if a.name == "coder" else a for a in BUILTIN_CATALOG.agents)
    sid = f"s-{uuid.uuid4().hex[:8]}"
    handle = await _start(harness, sid, agents=agents)
    kept = await _start_turn(handle, "Keep this " + write("kept.txt", "kept\n"))
    await _approve(harness, handle)
    assert (await kept.result()).files == ("kept.txt",)

    held = await _start_turn(handle, "Then this " + write("held.txt", "held\n"))
    await _approve(
        harness,
        handle,
        before=lambda: _refusal(handle),
        expect=(
            "UndoRefused: a turn is running: /undo takes back a finished turn, so wait for "
            "its answer and undo then"
        ),
    )
    assert (await held.result()).files == ("held.txt",)

    undone = await _undo(handle)
    assert undone.text.startswith("Then this") and undone.files == ("held.txt",)
    assert result_paths(harness.settings.workspace, chat_plan_id(sid)) == [
        "README.md",
        "kept.txt",
    ]
    await assert_replays(harness.client, [session_workflow_id(sid)])


async def _start_turn(
    handle: WorkflowHandle[Any, SessionState], text: str
) -> WorkflowUpdateHandle[SendMessageResult]:
    return await handle.start_update(
        "send_message",
        SendMessageInput(text=text),
        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
        result_type=SendMessageResult,
    )


async def _approve(
    h: Harness,
    handle: WorkflowHandle[Any, SessionState],
    *,
    before: Callable[[], Awaitable[str]] | None = None,
    expect: str = "",
) -> None:
    """Approve the call the conversation waits for, once it waits; ``before`` runs while
    it still does and must answer ``expect``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        approvals = await handle.query(QUERY_APPROVALS, result_type=WorkflowApprovals)
        if approvals.pending:
            break
        if time.monotonic() > deadline:
            raise AssertionError("no tool call of the conversation waited for approval")
        await asyncio.sleep(0.05)
    if before is not None:
        assert await before() == expect
    await decide_in(h.client, handle.id, approvals.pending[0].call_id, approve=True, who="test")
