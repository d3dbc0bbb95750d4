"""The workspace's activities: a plan's base, a subtask's starting tree, the plan's result
branch; and how the tool activities hold a tree and report a workspace failure.

Git runs in worker threads (``activities/git_workspace.py`` blocks); a tree is locked
while a call works in it, and the lock is let go even when the activity is cancelled
while git was still taking it. Failures reach the workflow as ``ApplicationError``:

- ``WorkspaceConflict`` (non-retryable, details ``WorkspaceConflictDetails``): the
  dependencies changed the same lines; the message says where to push a resolution;
- ``WorkspaceUnavailable`` (non-retryable): the repository or remote cannot be used as
  configured, or a stale writer was refused;
- ``WorkspaceBusy`` (retryable): the remote did not answer this time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_plans._errors import WorkspaceBusy, WorkspaceConflict, WorkspaceError
from durable_plans.activities.git_workspace import GitWorkspace, TreeLease
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.domain.contracts import (
    ACT_WORKSPACE_MERGE,
    ACT_WORKSPACE_OPEN,
    ACT_WORKSPACE_PUBLISH,
)
from durable_plans.domain.failures import FailureType, application_error
from durable_plans.domain.workspace_refs import (
    WorkspaceMergeInput,
    WorkspaceMergeOutput,
    WorkspaceOpenInput,
    WorkspaceOpenOutput,
    WorkspacePublishInput,
    WorkspaceRef,
    WorkspaceSummary,
)

__all__ = [
    "WORKSPACE_BUSY",
    "WorkspaceActivities",
    "in_thread",
    "leased_tree",
    "workspace_errors",
    "workspace_failure",
]

_T = TypeVar("_T")

WORKSPACE_BUSY = "WorkspaceBusy"
"""The type of a retryable workspace failure (a remote that did not answer this time)."""


def workspace_failure(err: WorkspaceError) -> ApplicationError:
    """The Temporal failure for a workspace error (see the module's docstring)."""
    if isinstance(err, WorkspaceConflict):
        return application_error(FailureType.WORKSPACE_CONFLICT, str(err), err.details)
    if isinstance(err, WorkspaceBusy):
        return application_error(WORKSPACE_BUSY, str(err), non_retryable=False)
    # WorkspaceUnavailable, and any other kind: no retry would change it.
    return application_error(FailureType.WORKSPACE_UNAVAILABLE, str(err))


@contextlib.contextmanager
def workspace_errors() -> Iterator[None]:
    """Turn a workspace error raised inside into its Temporal failure."""
    try:
        yield
    except WorkspaceError as err:
        raise workspace_failure(err) from None


async def in_thread(fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` in a worker thread, its workspace errors turned into failures."""
    with workspace_errors():
        return await asyncio.to_thread(fn, *args)


def _close_when_done(future: Future[TreeLease]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()


@contextlib.asynccontextmanager
async def leased_tree(git: GitWorkspace, ref: WorkspaceRef) -> AsyncIterator[TreeLease]:
    """``ref``'s tree, materialised and locked for the duration (workspace errors turned
    into failures). Cancelled while git is still taking the tree, the lock it ends up
    with is let go as soon as it has it."""
    loop = asyncio.get_running_loop()
    pending: Future[TreeLease] = Future()
    # Running from the start: a cancelled await must not cancel it (the lease it will
    # hold could then not be handed over, and its lock would never be let go).
    pending.set_running_or_notify_cancel()

    def take() -> None:
        try:
            pending.set_result(git.checkout(ref))
        except BaseException as err:  # handed to the awaiting side
            pending.set_exception(err)

    loop.run_in_executor(None, take)
    with workspace_errors():
        try:
            lease = await asyncio.wrap_future(pending)
        except asyncio.CancelledError:
            pending.add_done_callback(_close_when_done)
            raise
    try:
        yield lease
    finally:
        lease.close()


class WorkspaceActivities:
    """The plan-level workspace steps; each is idempotent (same input, same answer)."""

    def __init__(self, git: GitWorkspace) -> None:
        self._git = git

    @activity.defn(name=ACT_WORKSPACE_OPEN)
    async def workspace_open(self, inp: WorkspaceOpenInput) -> WorkspaceOpenOutput:
        """The commit the plan starts from (its requested base, or the repository's HEAD)."""
        async with heartbeating():
            base = await in_thread(self._git.open_plan, inp.plan_id, inp.requested_base)
        return WorkspaceOpenOutput(base=base)

    @activity.defn(name=ACT_WORKSPACE_MERGE)
    async def workspace_merge(self, inp: WorkspaceMergeInput) -> WorkspaceMergeOutput:
        """A subtask's starting commit: its dependencies' results merged onto the base."""
        async with heartbeating():
            commit = await in_thread(self._git.merge, inp)
        return WorkspaceMergeOutput(commit=commit)

    @activity.defn(name=ACT_WORKSPACE_PUBLISH)
    async def workspace_publish(self, inp: WorkspacePublishInput) -> WorkspaceSummary:
        """The plan's result branch, set to the merge of its completed subtasks' commits."""
        async with heartbeating():
            return await in_thread(self._git.publish, inp)
