"""The ``run_check`` activity: one check command on a throwaway copy of a tree.

The copy is the tree's commit read into a temporary directory (``git read-tree -u`` on an
index of its own), removed afterwards: what a check writes (caches, reports, a test's
files) is never committed and never seen by the subtask's own tree. The activity is
idempotent, so a worker that dies mid-check has it run again, from a fresh copy, by the
next; a finished check's result is in the workflow's history and never runs again.

Every command runs through ``activities/sandbox.run_sandboxed``, as ``run_command`` does:
under bubblewrap with no network where a sandbox is in force (``DPLAN_SANDBOX``), and never
unconfined where one is required but missing (``SandboxUnavailable`` fails the subtask with
its one sentence).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_plans._errors import SandboxUnavailable
from durable_plans.activities.git_workspace import GitWorkspace
from durable_plans.activities.git_workspace_activities import in_thread
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.sandbox import CommandOutcome, run_sandboxed
from durable_plans.domain.checks import (
    ACT_APPEND_CHECK_FEEDBACK,
    ACT_RUN_CHECK,
    MAX_CHECK_OUTPUT_CHARS,
    CheckFeedbackInput,
    CheckInput,
    CheckRun,
)
from durable_plans.domain.failures import FailureType
from durable_plans.domain.ids import message_id
from durable_plans.domain.models import Message
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.domain.tools_config import SandboxPolicy
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings


async def _run_one(
    argv: list[str],
    tree_dir: Path,
    timeout_s: float,
    settings: Settings,
    sandbox: SandboxPolicy | None = None,
) -> CommandOutcome:
    """Run one check command on ``tree_dir`` in the worker's sandbox (``DPLAN_SANDBOX``),
    as ``sandbox`` allows (None: no network, the default limits); no sandbox where one is required:
    ``SandboxUnavailable``, a non-retryable failure carrying its one sentence (the check is
    never run unconfined)."""
    try:
        outcome = await run_sandboxed(
            argv,
            tree_dir,
            policy=sandbox or SandboxPolicy(),
            timeout_s=timeout_s,
            settings=settings,
        )
    except SandboxUnavailable as err:
        raise ApplicationError(
            str(err), type=FailureType.SANDBOX_UNAVAILABLE, non_retryable=True
        ) from None
    # What failed is at the end: the tail is what the model, the report and history keep.
    return replace(outcome, output=outcome.output[-MAX_CHECK_OUTPUT_CHARS:])


@contextlib.contextmanager
def throwaway_copy(git: GitWorkspace, plan_id: str, commit: str) -> Iterator[Path]:
    """``commit``'s files in a new temporary directory, removed when the block ends."""
    root = Path(tempfile.mkdtemp(prefix="dplan-check-"))
    try:
        tree = root / "tree"
        tree.mkdir()
        git.ensure_commit(plan_id, commit)
        git.git.run("read-tree", "--reset", "-u", commit, work_tree=tree, index=root / "index")
        yield tree
    finally:
        shutil.rmtree(root, ignore_errors=True)


class CheckActivities:
    def __init__(
        self, store: SessionStore, settings: Settings, git: GitWorkspace | None = None
    ) -> None:
        self._store = store
        self._settings = settings
        self._git = git or GitWorkspace.from_settings(settings)

    @activity.defn(name=ACT_RUN_CHECK)
    async def run_check(self, inp: CheckInput) -> CheckRun:
        ref = inp.workspace
        async with heartbeating():
            copy = throwaway_copy(self._git, ref.plan_id, ref.head)
            tree = await in_thread(copy.__enter__)
            try:
                outcome = await _run_one(
                    list(inp.argv), tree, inp.timeout_s, self._settings, inp.sandbox
                )
            finally:
                await asyncio.to_thread(copy.__exit__, None, None, None)
        output = outcome.output
        if outcome.timed_out:
            output = f"{output}\n[timed out after {inp.timeout_s:g}s and killed]"
        return CheckRun(
            argv=inp.argv,
            exit_code=outcome.exit_code,
            output=scrub_secrets(output[-MAX_CHECK_OUTPUT_CHARS:]),
            duration_s=round(outcome.duration_s, 3),
            round=inp.round,
            timed_out=outcome.timed_out,
        )

    @activity.defn(name=ACT_APPEND_CHECK_FEEDBACK)
    async def append_check_feedback(self, inp: CheckFeedbackInput) -> int:
        """The failed check, as a user message the model reads on its next call."""
        message = Message(
            id=message_id(inp.scope, f"check-{inp.round}"),
            role="user",
            content=scrub_secrets(inp.text),
        )
        return await self._store.append(inp.session_id, [message])
