"""The pure parts of a conversation's files in workflow code: the names its refs, trees
and branch go by, who its commits are by, and where it goes on after an undo."""

from __future__ import annotations

from durable_plans.domain.session_contracts import ChatWorkspace
from durable_plans.domain.workspace_refs import WorkspaceRef, result_branch, tree_ref
from durable_plans.workflows.chat_workspace import (
    chat_identity,
    chat_plan_id,
    chat_tree,
    restart_at,
    with_agent,
)

BASE = "a" * 40
HEAD = "b" * 40


def _workspace(session: str = "chat-1a2b3c4d") -> ChatWorkspace:
    return ChatWorkspace(
        ref=WorkspaceRef(
            plan_id=chat_plan_id(session),
            tree=chat_tree("k1", 0),
            head=HEAD,
            identity=chat_identity("coder", session),
        ),
        base=BASE,
        tree_key="k1",
        published=HEAD,
        branch=f"dplan/chat/{session}",
    )


def test_a_conversation_is_named_apart_from_plans() -> None:
    plan_id = chat_plan_id("chat-1a2b3c4d")
    assert result_branch(plan_id) == "dplan/chat/chat-1a2b3c4d"
    assert result_branch(plan_id, "work/") == "work/chat/chat-1a2b3c4d"
    assert tree_ref(plan_id, chat_tree("k1", 2)) == "refs/dplan/chat/chat-1a2b3c4d/trees/k1@2"


def test_an_undo_goes_on_from_the_earlier_commit_on_a_new_tree() -> None:
    ws = _workspace()
    once = restart_at(ws, BASE)
    assert (once.ref.tree, once.ref.head, once.undos) == ("k1@1", BASE, 1)
    # The branch still names what it was set to: publishing it is the workflow's next step.
    assert (once.published, once.branch, once.base) == (HEAD, ws.branch, BASE)
    twice = restart_at(once, BASE)
    assert (twice.ref.tree, twice.undos) == ("k1@2", 2)
    assert tree_ref(once.ref.plan_id, once.ref.tree) != tree_ref(ws.ref.plan_id, ws.ref.tree)


def test_commits_are_by_the_agent_answering_within_the_identity_limits() -> None:
    session = "s" * 128  # the longest session id there is
    ws = with_agent(_workspace(session), "architect", session)
    assert ws.ref.identity.name == "architect (dplan)"
    assert ws.ref.identity.email == f"{'s' * 64}@chat.dplan"
    assert (ws.ref.head, ws.ref.tree) == (HEAD, "k1@0")
