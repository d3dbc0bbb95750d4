"""The ``run_check`` activity: one check command on a throwaway copy of a tree.

The copy is the tree's commit read into a temporary directory (``git read-tree -u`` on an
index of its own), removed afterwards: what a check writes (caches, reports, a test's
files) is never committed and never seen by the subtask's own tree. The activity is
idempotent, so a worker that dies mid-check has it run again, from a fresh copy, by the
next; a finished check's result is in the workflow's history and never runs again.

``_run_one`` is the one place a check's command is run: today the guarded runner of
``activities/commands.py`` (clean environment, process-group kill at the timeout, output
capped head and tail); the sandbox (``activities/sandbox.run_sandboxed``) takes its
place there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from temporalio import activity

from durable_plans.activities.commands import (
    KILL_GRACE_S,
    MAX_PROCESSES,
    _Capture,
    _child_setup,
    _kill_group,
    _PidsCgroup,
    _user_processes,
    safe_path,
)
from durable_plans.activities.git_workspace import GitWorkspace
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.workspace_activities import in_thread
from durable_plans.domain.checks import (
    ACT_APPEND_CHECK_FEEDBACK,
    ACT_RUN_CHECK,
    MAX_CHECK_OUTPUT_CHARS,
    CheckFeedbackInput,
    CheckInput,
    CheckRun,
)
from durable_plans.domain.ids import message_id
from durable_plans.domain.models import Message
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings

_READ_CHUNK = 65536


@dataclass(frozen=True)
class CheckOutcome:
    """What running one command gave (the shape of the sandbox's ``CommandOutcome``)."""

    exit_code: int
    output: str
    duration_s: float
    timed_out: bool


def _environment(tree: Path, tmp: str) -> dict[str, str]:
    return {
        "PATH": safe_path(),
        "HOME": str(tree),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": tmp,
    }


async def _run_one(
    argv: list[str], tree_dir: Path, timeout_s: float, settings: Settings
) -> CheckOutcome:
    """Run one check command in ``tree_dir``: THE SEAM for the sandbox. At merge this
    becomes ``run_sandboxed(argv, tree_dir, policy=..., timeout_s=timeout_s,
    settings=settings)`` (its CommandOutcome has the same fields); until then the guard
    of ``activities/commands.py``: a clean environment, a timeout that kills the process
    group (and pids cgroup), a process limit, output capped head and tail."""
    del settings  # the sandbox's policy comes from it
    started = time.monotonic()
    program = shutil.which(argv[0], path=safe_path()) if "/" not in argv[0] else argv[0]
    if program is None:
        return CheckOutcome(127, f"{argv[0]}: not installed on this worker", 0.0, False)
    cgroup = _PidsCgroup()
    nproc = None
    if cgroup.path is None and os.getuid() != 0:
        nproc = _user_processes() + MAX_PROCESSES
    capture = _Capture(MAX_CHECK_OUTPUT_CHARS)
    with tempfile.TemporaryDirectory(prefix="dplan-check-tmp-") as tmp:
        try:
            proc = await asyncio.create_subprocess_exec(
                program,
                *argv[1:],
                cwd=tree_dir,
                env=_environment(tree_dir, tmp),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_child_setup(cgroup, nproc),
            )
        except OSError as exc:
            cgroup.remove()
            return CheckOutcome(126, f"could not start {argv[0]}: {exc.strerror}", 0.0, False)

        async def drain() -> None:
            assert proc.stdout is not None
            while chunk := await proc.stdout.read(_READ_CHUNK):
                capture.add(chunk)

        reader = asyncio.create_task(drain())
        timed_out = False
        try:
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except TimeoutError:
                timed_out = True
        finally:
            _kill_group(proc.pid)
            cgroup.kill_all()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            try:
                await asyncio.wait_for(reader, KILL_GRACE_S)
            except TimeoutError:
                reader.cancel()
            cgroup.remove()
    code = proc.returncode
    assert code is not None
    return CheckOutcome(code, capture.text(), time.monotonic() - started, timed_out)


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
                outcome = await _run_one(list(inp.argv), tree, inp.timeout_s, self._settings)
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
