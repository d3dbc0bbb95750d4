"""The activities behind a conversation's files and ``/undo``, on real git and a real
SQLite session store, run in Temporal's ActivityEnvironment: cutting a turn's messages off
the session (the same cut, and the same answer, when retried), and setting the
conversation's branch (forward after a turn, back after an undo) with the files that
changed on the way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from durable_plans.activities.chat_branch import ChatWorkspaceActivities
from durable_plans.activities.conversation import UNDO_EXCERPT_CHARS, ConversationActivities
from durable_plans.activities.git_workspace import GitWorkspace
from durable_plans.domain.models import FunctionCall, Message, SessionMeta, ToolCall
from durable_plans.domain.session_contracts import (
    ChatPublishInput,
    UndoMessagesInput,
    UndoMessagesOutput,
)
from durable_plans.domain.workspace_refs import GitIdentity, WorkspaceRef
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import open_session_store
from durable_plans.workflows.chat_workspace import chat_plan_id
from tests.gitrepos import files_at, git, user_repo, user_view

SESSION = "s-undo"
PLAN = chat_plan_id(SESSION)
AGENT = GitIdentity(name="coder (dplan)", email="s-undo@chat.dplan")
AT = 1_800_000_000.0

EARLIER = [
    Message(id="u0", role="user", content="first"),
    Message(
        id="a0",
        role="assistant",
        tool_calls=(ToolCall(id="c0", function=FunctionCall(name="list_dir")),),
    ),
    Message(id="t0", role="tool", content="README.md", tool_call_id="c0", name="list_dir"),
    Message(id="a0b", role="assistant", content="Done: first."),
]
LAST_TURN = [
    Message(id="u1", role="user", content="  write   the\nnotes  "),
    Message(
        id="a1",
        role="assistant",
        content="writing",
        tool_calls=(ToolCall(id="c1", function=FunctionCall(name="write_file")),),
    ),
    Message(id="t1", role="tool", content="wrote notes.txt", tool_call_id="c1", name="write_file"),
    Message(id="a1b", role="assistant", content="Done: notes."),
    Message(id="p1", role="system", content="[plan p completed] ..."),
]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_session_store(str(tmp_path / "sessions.db"))
    await opened.create_session(SessionMeta(session_id=SESSION))
    try:
        yield opened
    finally:
        await opened.close()


def undo_input(user_message_id: str) -> UndoMessagesInput:
    return UndoMessagesInput(
        session_id=SESSION,
        user_message_id=user_message_id,
        snapshot_id=f"{user_message_id}:before-undo",
    )


async def test_a_turn_is_cut_off_with_everything_after_it_and_a_retry_cuts_the_same(
    store: SessionStore,
) -> None:
    await store.append(SESSION, [*EARLIER, *LAST_TURN])
    acts = ConversationActivities(store)
    env = ActivityEnvironment()

    cut: UndoMessagesOutput = await env.run(acts.undo_turn_messages, undo_input("u1"))
    assert cut == UndoMessagesOutput(found=True, text="write the notes", removed=5)
    assert await store.read(SESSION) == EARLIER
    # Retried after it had cut (its answer lost): the same messages, the same answer.
    again = await env.run(acts.undo_turn_messages, undo_input("u1"))
    assert again == cut
    assert await store.read(SESSION) == EARLIER

    # A turn whose messages are gone already leaves the session as it is.
    gone = await env.run(acts.undo_turn_messages, undo_input("u-never"))
    assert gone == UndoMessagesOutput(found=False)
    assert await store.read(SESSION) == EARLIER

    # The first turn: the session is empty afterwards.
    first = await env.run(acts.undo_turn_messages, undo_input("u0"))
    assert (first.text, first.removed) == ("first", 4)
    assert await store.read(SESSION) == []


async def test_a_long_message_is_given_back_as_an_excerpt(store: SessionStore) -> None:
    await store.append(SESSION, [Message(id="u9", role="user", content="x" * 5000)])
    cut = await ActivityEnvironment().run(
        ConversationActivities(store).undo_turn_messages, undo_input("u9")
    )
    assert len(cut.text) == UNDO_EXCERPT_CHARS and cut.text.endswith("…")
    assert cut.removed == 1


async def test_the_branch_follows_the_head_forward_and_back_naming_the_files(
    tmp_path: Path,
) -> None:
    repo = user_repo(tmp_path / "repo")
    before = user_view(repo)
    gw = GitWorkspace(repo, tmp_path / "state")
    base = gw.open_plan(PLAN, None)
    with gw.checkout(WorkspaceRef(plan_id=PLAN, tree="k@0", head=base, identity=AGENT)) as tree:
        (tree.path / "notes.txt").write_text("notes\n")
        (tree.path / "shared.txt").write_text("changed\n")
        head = tree.commit("turn 0", AT)
    assert head is not None
    acts = ChatWorkspaceActivities(gw)
    env = ActivityEnvironment()

    def publish(at: str, since: str | None) -> ChatPublishInput:
        return ChatPublishInput(
            plan_id=PLAN, base=base, head=at, since=since, at_s=AT, identity=AGENT
        )

    forward = await env.run(acts.chat_publish, publish(head, base))
    assert forward.branch == f"dplan/chat/{SESSION}"
    assert forward.files == ("notes.txt", "shared.txt")
    assert git(repo, "rev-parse", f"refs/heads/{forward.branch}") == head
    assert await env.run(acts.chat_publish, publish(head, base)) == forward  # a retry

    back = await env.run(acts.chat_publish, publish(base, head))
    assert back.files == ("notes.txt", "shared.txt")
    assert git(repo, "rev-parse", f"refs/heads/{back.branch}") == base
    assert files_at(repo / ".git", base) == files_at(repo / ".git", back.branch)
    # Without ``since`` nothing is listed; the branch stays where it is.
    assert (await env.run(acts.chat_publish, publish(base, None))).files == ()
    # The person's checkout, branches and index: as they were (but for the new branch).
    after = user_view(repo)
    assert {k: v for k, v in after.items() if k != "refs"} == {
        k: v for k, v in before.items() if k != "refs"
    }
    assert str(after["refs"]).replace(f"{base} commit\trefs/heads/{back.branch}\n", "") == str(
        before["refs"]
    )


async def test_with_a_remote_the_branch_moves_back_there_and_another_host_lists_the_files(
    tmp_path: Path,
) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(user_repo(tmp_path / "repo")), str(remote))
    one = GitWorkspace(tmp_path / "unused", tmp_path / "host1", remote=str(remote))
    base = one.open_plan(PLAN, None)
    with one.checkout(WorkspaceRef(plan_id=PLAN, tree="k@0", head=base, identity=AGENT)) as tree:
        (tree.path / "notes.txt").write_text("notes\n")
        head = tree.commit("turn 0", AT)
    assert head is not None
    env = ActivityEnvironment()

    def publish(at: str, since: str) -> ChatPublishInput:
        return ChatPublishInput(
            plan_id=PLAN, base=base, head=at, since=since, at_s=AT, identity=AGENT
        )

    forward = await env.run(ChatWorkspaceActivities(one).chat_publish, publish(head, base))
    assert git(remote, "rev-parse", f"refs/heads/{forward.branch}") == head
    # Another host, its cache empty: it fetches the commits it lacks to list the files,
    # and the remote's branch goes back to the base (a lease on where it was, not a push
    # refused for not being a fast-forward).
    two = GitWorkspace(tmp_path / "unused", tmp_path / "host2", remote=str(remote))
    back = await env.run(ChatWorkspaceActivities(two).chat_publish, publish(base, head))
    assert back.files == ("notes.txt",)
    assert git(remote, "rev-parse", f"refs/heads/{back.branch}") == base
