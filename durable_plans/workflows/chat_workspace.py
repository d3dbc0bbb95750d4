"""A conversation's files in workflow code: where they start, whose commits they are, the
branch that shows them, and where the conversation goes on after an undo.

A conversation works like a subtask that never ends: one tree in the workspace
repository, from the repository's HEAD when its first turn came, each tool call that
changes files a commit on it (``AgentLoop`` with a workspace). Its refs live under
``refs/dplan/chat/<session-id>/`` and its branch is ``<prefix>chat/<session-id>``.

Every git step is an activity, so what the files were at each turn is in the history.
Deterministic: no I/O, workflow time only.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from durable_plans.domain.contracts import ACT_WORKSPACE_OPEN
    from durable_plans.domain.failures import application_error
    from durable_plans.domain.ids import stable_id
    from durable_plans.domain.session_contracts import (
        ACT_CHAT_PUBLISH,
        ChatPublishInput,
        ChatPublishOutput,
        ChatWorkspace,
    )
    from durable_plans.domain.workspace_refs import (
        GitIdentity,
        WorkspaceOpenInput,
        WorkspaceOpenOutput,
        WorkspaceRef,
    )

from durable_plans.workflows import policies
from durable_plans.workflows.activity_failures import workspace_failure

__all__ = [
    "PublishFailed",
    "chat_identity",
    "chat_plan_id",
    "chat_tree",
    "open_chat_workspace",
    "publish_head",
    "restart_at",
    "with_agent",
]

_LOCAL_CHARS = 64


class PublishFailed(Exception):
    """The branch could not be set (e.g. it is checked out in the repository): the
    conversation goes on at its head all the same, and says why the branch lags."""


def chat_plan_id(session_id: str) -> str:
    """The name the conversation's refs and trees go by: ``chat/<session-id>``, so its
    branch is ``<prefix>chat/<session-id>``, beside the plans' ``<prefix><plan-id>`` (a
    plan id holds no ``/``; only a plan named ``chat`` could not have its branch then, as
    git keeps no branch ``dplan/chat`` beside branches below it)."""
    return f"chat/{session_id}"


def chat_tree(tree_key: str, undos: int) -> str:
    """The tree after ``undos`` undos: a new one each time, since a tree's ref only moves
    forward and the conversation now goes on from an earlier commit."""
    return f"{tree_key}@{undos}"


def chat_identity(agent: str, session_id: str) -> GitIdentity:
    """Who a turn's commits are by: the agent answering, in this conversation."""
    return GitIdentity(name=f"{agent} (dplan)", email=f"{session_id[:_LOCAL_CHARS]}@chat.dplan")


def with_agent(ws: ChatWorkspace, agent: str, session_id: str) -> ChatWorkspace:
    """``ws`` with its commits by ``agent`` from now on."""
    ref = ws.ref.model_copy(update={"identity": chat_identity(agent, session_id)})
    return ws.model_copy(update={"ref": ref})


def restart_at(ws: ChatWorkspace, commit: str) -> ChatWorkspace:
    """``ws`` going on from ``commit`` (an undo), on a new tree."""
    undos = ws.undos + 1
    ref = ws.ref.model_copy(update={"tree": chat_tree(ws.tree_key, undos), "head": commit})
    return ws.model_copy(update={"ref": ref, "undos": undos})


async def open_chat_workspace(session_id: str, agent: str) -> ChatWorkspace:
    """The conversation's files from the repository's HEAD, resolved once (then carried
    across continue-as-new). The tree key hashes the run chain's first run id: a
    conversation started again under its id gets trees of its own."""
    plan_id = chat_plan_id(session_id)
    try:
        out: WorkspaceOpenOutput = await workflow.execute_activity(
            ACT_WORKSPACE_OPEN,
            WorkspaceOpenInput(plan_id=plan_id),
            result_type=WorkspaceOpenOutput,
            start_to_close_timeout=policies.WORKSPACE_START_TO_CLOSE,
            retry_policy=policies.workspace_retry(),
            summary="workspace: resolve the conversation's base",
        )
    except ActivityError as err:
        if isinstance(err.cause, CancelledError):  # the conversation is being cancelled
            raise asyncio.CancelledError() from err
        type_, message = workspace_failure(err)
        raise application_error(
            type_, f"the conversation's workspace: {message}", type_in_message=True
        ) from err
    key = stable_id(workflow.info().first_execution_run_id, length=10)
    return ChatWorkspace(
        ref=WorkspaceRef(
            plan_id=plan_id,
            tree=chat_tree(key, 0),
            head=out.base,
            identity=chat_identity(agent, session_id),
        ),
        base=out.base,
        tree_key=key,
    )


async def publish_head(
    ws: ChatWorkspace, since: str | None
) -> tuple[ChatWorkspace, tuple[str, ...]]:
    """The branch set to the conversation's head, and the files changed since ``since``;
    ``PublishFailed`` (with the reason) when the branch could not be set."""
    try:
        out: ChatPublishOutput = await workflow.execute_activity(
            ACT_CHAT_PUBLISH,
            ChatPublishInput(
                plan_id=ws.ref.plan_id,
                base=ws.base,
                head=ws.ref.head,
                since=since,
                at_s=workflow.now().timestamp(),
                identity=ws.ref.identity,
            ),
            result_type=ChatPublishOutput,
            start_to_close_timeout=policies.WORKSPACE_START_TO_CLOSE,
            retry_policy=policies.workspace_retry(),
            summary="workspace: set the conversation's branch",
        )
    except ActivityError as err:
        if isinstance(err.cause, CancelledError):
            raise asyncio.CancelledError() from err
        type_, message = workspace_failure(err)
        raise PublishFailed(f"{type_}: {message}") from err
    return ws.model_copy(update={"published": ws.ref.head, "branch": out.branch}), out.files
