"""A conversation's branch: set to the conversation's head after a turn or an undo, and
the files that changed on the way.

The conversation's head only ever descends from its base (turns add commits, an undo goes
back to an ancestor), so setting the branch is the plan's publish with one commit: no merge
commit is ever made, and the branch names exactly the commit the workflow carries. Unlike a
tree's ref, the branch may move back: it is what a person looks at, and after an undo it
shows the files as they were before the undone turn.
"""

from __future__ import annotations

from temporalio import activity

from durable_plans.activities.git_workspace import GitWorkspace
from durable_plans.activities.git_workspace_activities import in_thread
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.domain.session_contracts import (
    ACT_CHAT_PUBLISH,
    ChatPublishInput,
    ChatPublishOutput,
)
from durable_plans.domain.workspace_refs import WorkspacePublishInput

__all__ = ["ChatWorkspaceActivities"]

# How the head is named among the "subtasks" a publish folds: one, the conversation.
_CONVERSATION = "conversation"


class ChatWorkspaceActivities:
    """Idempotent: the same input sets the branch to the same commit and lists the same
    files (a branch already there is left as it is)."""

    def __init__(self, git: GitWorkspace) -> None:
        self._git = git

    @activity.defn(name=ACT_CHAT_PUBLISH)
    async def chat_publish(self, inp: ChatPublishInput) -> ChatPublishOutput:
        """The conversation's branch set to its head, and the files changed since ``since``."""
        async with heartbeating():
            summary = await in_thread(
                self._git.publish,
                WorkspacePublishInput(
                    plan_id=inp.plan_id,
                    base=inp.base,
                    commits=((_CONVERSATION, inp.head),),
                    at_s=inp.at_s,
                    identity=inp.identity,
                ),
            )
            files: tuple[str, ...] = ()
            if inp.since is not None and inp.since != inp.head:
                files = await in_thread(self._git.changed_files, inp.plan_id, inp.since, inp.head)
        if summary.result != inp.head or summary.branch is None:
            # Only a head that does not descend from the base could be merged instead;
            # the workflow never hands one over, so this is a bug, said as such.
            raise RuntimeError(
                f"conversation {inp.plan_id}: its branch was set to {summary.result}, "
                f"not to its head {inp.head}"
            )
        return ChatPublishOutput(branch=summary.branch, files=files)
