"""``run_command``: a guarded shell for agents that must run a test, git or a build.

A guard, not a sandbox: it keeps an agent's ordinary mistakes and a careless model's
reach inside the workspace, it does not contain hostile code (``python -c`` can still
open any file the worker can). What it enforces:

- argv, never a shell string: no expansion, no pipes, no ``;``; the program is a bare
  name on the agent's allowlist, found on a fixed PATH (the worker's venv, then the
  system's), never a path the model chose;
- the working directory and every argument that names a path (absolute, with ``..``,
  or an existing entry, symlinks followed) must lie inside the workspace;
- the environment is built from scratch (PATH, HOME = workspace, locale): no worker
  secret can leak through it, and the output is scrubbed anyway;
- a timeout that kills the whole process group (and pids cgroup, when the worker may
  create one); a process limit (a pids cgroup, or RLIMIT_NPROC for a non-root worker)
  stops a fork bomb; output is capped, keeping its head and tail (where failures are).
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field
from temporalio import activity

from durable_plans.activities.git_workspace import GitWorkspace, tool_commit_message
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.tool_calls import pending_call, store_answer
from durable_plans.activities.tool_registry import ToolArgs, ToolRegistry, ToolResult, ToolSpec
from durable_plans.activities.workspace import MAX_PATH_CHARS, ToolRefused, Workspace
from durable_plans.activities.workspace_activities import in_thread, leased_tree
from durable_plans.domain.contracts import ToolCallOutput
from durable_plans.domain.tool_contracts import ACT_RUN_COMMAND, CommandCallInput
from durable_plans.domain.tools_config import RUN_COMMAND_TOOL, CommandPolicy
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings

MAX_PROCESSES = 64
"""Processes one command may have at once (its pids cgroup, or added to RLIMIT_NPROC)."""
MAX_FILE_BYTES = 256 * 1024 * 1024
KILL_GRACE_S = 5.0
_READ_CHUNK = 65536
_PIDS_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))


class RunCommandArgs(ToolArgs):
    argv: list[str] = Field(
        min_length=1,
        max_length=256,
        description="The program and its arguments, one per element, e.g. "
        '["python", "-m", "unittest", "-v"]. No shell: no pipes, globs or variables.',
    )
    cwd: str = Field(
        default=".",
        max_length=MAX_PATH_CHARS,
        description="Working directory relative to the workspace root.",
    )
    timeout_s: float | None = Field(
        default=None, gt=0, le=3600, description="Seconds before it is killed (capped)."
    )


RUN_COMMAND_DOC = (
    "Run a program in the workspace and return its exit code and output (stdout and "
    "stderr together, head and tail kept when long). Only the programs this agent is "
    "allowed may run; paths must stay inside the workspace; it is killed at its timeout."
)


@dataclass(frozen=True)
class CommandContext:
    workspace: Workspace
    policy: CommandPolicy


def safe_path() -> str:
    """Where programs are looked up: the worker's venv first, then the system's."""
    return os.pathsep.join(
        dict.fromkeys([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    )


def clean_environment(workspace: Workspace, tmp: str) -> dict[str, str]:
    """A new environment, nothing inherited: the worker's secrets cannot leak through it."""
    return {
        "PATH": safe_path(),
        "HOME": str(workspace.root),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": tmp,
    }


def _shown(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def check_arguments(args: list[str], cwd: Path, workspace: Workspace) -> None:
    """Refuse an argument that names a path outside the workspace."""
    for arg in args:
        if "\x00" in arg:
            raise ToolRefused(f"argument {_shown(arg)} contains a NUL byte")
        candidates = [arg]
        if arg.startswith("-") and "=" in arg:
            candidates.append(arg.split("=", 1)[1])
        for c in candidates:
            if not c:
                continue
            if c.startswith(("/", "~")):
                target = Path(c).expanduser()
            elif ".." in Path(c).parts or os.path.lexists(cwd / c):
                target = cwd / c
            else:
                continue
            try:
                real = target.resolve()
            except (OSError, RuntimeError, ValueError):
                raise ToolRefused(f"argument {_shown(arg)} cannot be resolved") from None
            if not real.is_relative_to(workspace.root):
                raise ToolRefused(
                    f"argument {_shown(arg)} names a path outside the workspace; use paths "
                    "relative to the workspace root"
                )


def resolve_program(name: str, policy: CommandPolicy) -> str:
    if "/" in name or name in ("", ".", ".."):
        raise ToolRefused(
            f"program {_shown(name)} must be a bare name from the allowlist, not a path; "
            f"allowed: {', '.join(policy.allow) or 'none'}"
        )
    if name not in policy.allow:
        raise ToolRefused(
            f"program {_shown(name)} is not allowed for this agent; allowed: "
            f"{', '.join(policy.allow) or 'none'}"
        )
    found = shutil.which(name, path=safe_path())
    if found is None:
        raise ToolRefused(f"program {_shown(name)} is not installed on this worker")
    return found


class _PidsCgroup:
    """A pids cgroup for one command, when the worker may create one (else nothing)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        for root in _PIDS_ROOTS:
            if not (root / "pids.max").exists() and not (root / "cgroup.procs").exists():
                continue
            if root == Path("/sys/fs/cgroup") and "pids" not in _read(root / "cgroup.controllers"):
                continue
            path = root / f"dplan-cmd-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(MAX_PROCESSES))
            except OSError:
                with suppress(OSError):
                    path.rmdir()
                continue
            self.path = path
            return

    def join(self) -> None:
        """Called in the child before exec: move itself into the cgroup."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def kill_all(self) -> None:
        """SIGKILL every member until none is left (a fork bomb keeps adding some)."""
        if self.path is None:
            return
        for _ in range(200):
            pids = [int(p) for p in _read(self.path / "cgroup.procs").split()]
            if not pids:
                return
            for pid in pids:
                with suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)  # let the killed exit and leave the group

    def remove(self) -> None:
        if self.path is not None:
            self.kill_all()
            with suppress(OSError):
                self.path.rmdir()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _user_processes() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
    return count


def _child_setup(cgroup: _PidsCgroup, nproc: int | None) -> Callable[[], None]:
    def setup() -> None:
        cgroup.join()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return setup


def _kill_group(pid: int) -> None:
    with suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


class _Capture:
    """Keeps the head and the tail of a stream, counting what it dropped in between."""

    def __init__(self, limit_chars: int) -> None:
        self.limit = max(limit_chars, 100)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        half = self.limit // 2
        room = half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > half:
            self.dropped += len(self.tail) - half
            del self.tail[: len(self.tail) - half]

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if not self.dropped:
            return head + tail
        return f"{head}\n… [{self.dropped} bytes of output omitted] …\n{tail}"


async def run_guarded(args: RunCommandArgs, ctx: CommandContext) -> ToolResult:
    """Run one command under the guard; refusals raise ToolRefused (an ``error:`` result)."""
    workspace, policy = ctx.workspace, ctx.policy
    program = resolve_program(args.argv[0], policy)
    cwd = workspace.resolve(args.cwd)
    if not cwd.is_dir():
        raise ToolRefused(f"cwd {_shown(args.cwd)} is not a directory in the workspace")
    check_arguments(args.argv[1:], cwd, workspace)
    timeout = min(args.timeout_s or policy.timeout_s, policy.timeout_s)
    with tempfile.TemporaryDirectory(prefix="dplan-cmd-") as tmp:
        return await _run(program, args, cwd, timeout, clean_environment(workspace, tmp), policy)


async def _run(
    program: str,
    args: RunCommandArgs,
    cwd: Path,
    limit_s: float,
    env: dict[str, str],
    policy: CommandPolicy,
) -> ToolResult:
    cgroup = _PidsCgroup()
    nproc = None
    if cgroup.path is None and os.getuid() != 0:
        nproc = _user_processes() + MAX_PROCESSES
    capture = _Capture(policy.max_output_chars)
    try:
        proc = await asyncio.create_subprocess_exec(
            program,
            *args.argv[1:],
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_child_setup(cgroup, nproc),
        )
    except OSError as exc:
        cgroup.remove()
        raise ToolRefused(f"could not start {_shown(args.argv[0])}: {exc.strerror}") from None

    async def drain() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(_READ_CHUNK):
            capture.add(chunk)

    reader = asyncio.create_task(drain())
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), limit_s)
        except TimeoutError:
            timed_out = True
    finally:
        # Whatever it left behind (background children, a fork bomb) goes with it.
        _kill_group(proc.pid)
        cgroup.kill_all()
        with suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        try:
            await asyncio.wait_for(reader, KILL_GRACE_S)
        except TimeoutError:
            reader.cancel()  # a process that left the group still holds the pipe
        cgroup.remove()
    output = capture.text()
    shown = " ".join(args.argv)[:200]
    if timed_out:
        return ToolResult.error(
            f"`{shown}` timed out after {limit_s:g}s and was killed; output so far:\n{output}"
        )
    code = proc.returncode
    assert code is not None  # waited for above
    status = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
    return ToolResult(True, f"$ {shown}\n{status}\n{output}")


COMMAND_REGISTRY: ToolRegistry[CommandContext] = ToolRegistry()
COMMAND_REGISTRY.register(RUN_COMMAND_TOOL, RUN_COMMAND_DOC, RunCommandArgs, run_guarded)
COMMAND_TOOLS: dict[str, ToolSpec] = {s.name: s for s in COMMAND_REGISTRY.specs()}


class CommandActivities:
    """The ``run_command`` activity: a regular activity, run at most once unless the
    agent declared its commands idempotent (the workflow sets the retry policy).

    With a workspace in the input the command runs in that tree, and whatever it changed
    (a command may write anything) is committed before its answer is stored; the commit
    returns with the answer, also to a retry that finds the answer stored.
    """

    def __init__(
        self, store: SessionStore, settings: Settings, git: GitWorkspace | None = None
    ) -> None:
        self._store = store
        self._settings = settings
        self._git = git or GitWorkspace.from_settings(settings)

    @activity.defn(name=ACT_RUN_COMMAND)
    async def run_command(self, inp: CommandCallInput) -> ToolCallOutput:
        async with heartbeating():
            call = await pending_call(self._store, inp.call)
            if isinstance(call, ToolCallOutput):
                if inp.workspace is None:
                    return call
                message = self._message(inp, call.name)
                made = await in_thread(self._git.answered_commit, inp.workspace, message)
                return call.model_copy(update={"commit": made})
            arguments = inp.arguments if inp.arguments is not None else call.function.arguments
            if inp.workspace is None:
                context = CommandContext(Workspace(self._settings.workspace), inp.policy)
                result = await COMMAND_REGISTRY.execute(call.function.name, arguments, context)
                return await store_answer(self._store, inp.call, call, result)
            async with leased_tree(self._git, inp.workspace) as lease:
                await in_thread(lease.mark_changing)
                context = CommandContext(Workspace(lease.path), inp.policy)
                result = await COMMAND_REGISTRY.execute(call.function.name, arguments, context)
                message = self._message(inp, call.function.name)
                commit = await in_thread(lease.commit, message, inp.at_s)
            answer = await store_answer(self._store, inp.call, call, result)
            return answer.model_copy(update={"commit": commit})

    @staticmethod
    def _message(inp: CommandCallInput, tool: str) -> str:
        assert inp.workspace is not None
        at = inp.call
        return tool_commit_message(inp.workspace.tree, at.turn, at.call_index, tool, at.scope)
