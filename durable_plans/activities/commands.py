"""``run_command``: a guarded shell for agents that must run a test, git or a build.

Every command runs in the worker's sandbox (``activities/sandbox.py``, ``DPLAN_SANDBOX``):
bubblewrap by default, where it sees its tree, the toolchain and nothing else of the
worker. The guard here comes first, sandbox or not; it keeps an agent's ordinary mistakes
and a careless model's reach inside the workspace (alone, with ``DPLAN_SANDBOX=none``, it
does not contain hostile code: ``python -c`` can still open any file the worker can):

- argv, never a shell string: no expansion, no pipes, no ``;``; the program is a bare
  name on the agent's allowlist, found on a fixed PATH (the worker's venv, then the
  system's), never a path the model chose;
- the working directory and every argument that names a path (absolute, with ``..``,
  or an existing entry, symlinks followed) must lie inside the workspace;
- the environment is built from scratch (PATH, HOME = workspace, locale): no worker
  secret can leak through it, and the output is scrubbed anyway;
- the limits of ``sandbox.run_limited``: a timeout that kills everything it started, a
  process limit, an address-space and a file-size limit, output capped (head and tail).

A policy the loader let run without approval because of the sandbox
(``require_sandbox``) is refused by a worker whose ``DPLAN_SANDBOX`` is ``none``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field
from temporalio import activity

from durable_plans._errors import SandboxUnavailable
from durable_plans.activities.file_jail import MAX_PATH_CHARS, FileJail, ToolRefused
from durable_plans.activities.git_workspace import GitWorkspace, tool_commit_message
from durable_plans.activities.git_workspace_activities import in_thread, leased_tree
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.sandbox import minimal_environment, run_sandboxed, safe_path
from durable_plans.activities.tool_calls import pending_call, store_answer
from durable_plans.activities.tool_registry import ToolArgs, ToolRegistry, ToolResult, ToolSpec
from durable_plans.domain.contracts import ToolCallOutput
from durable_plans.domain.tool_contracts import ACT_RUN_COMMAND, CommandCallInput
from durable_plans.domain.tools_config import RUN_COMMAND_TOOL, CommandPolicy
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings


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
    workspace: FileJail
    policy: CommandPolicy
    settings: Settings = field(default_factory=Settings)


def clean_environment(workspace: FileJail, tmp: str) -> dict[str, str]:
    """A new environment, nothing inherited: the worker's secrets cannot leak through it."""
    return minimal_environment(workspace.root, tmp)


def _shown(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def check_arguments(args: list[str], cwd: Path, workspace: FileJail) -> None:
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


async def run_guarded(args: RunCommandArgs, ctx: CommandContext) -> ToolResult:
    """Run one command under the guard, in the sandbox; refusals raise ToolRefused (an
    ``error:`` result)."""
    workspace, policy = ctx.workspace, ctx.policy
    if policy.require_sandbox and ctx.settings.sandbox == "none":
        raise ToolRefused(UNCONFINED_REFUSAL)
    program = resolve_program(args.argv[0], policy)
    cwd = workspace.resolve(args.cwd)
    if not cwd.is_dir():
        raise ToolRefused(f"cwd {_shown(args.cwd)} is not a directory in the workspace")
    check_arguments(args.argv[1:], cwd, workspace)
    timeout = min(args.timeout_s or policy.timeout_s, policy.timeout_s)
    try:
        outcome = await run_sandboxed(
            [program, *args.argv[1:]],
            workspace.root,
            policy=policy.sandbox,
            timeout_s=timeout,
            settings=ctx.settings,
            cwd=cwd,
        )
    except SandboxUnavailable as err:
        raise ToolRefused(str(err)) from None
    shown = " ".join(args.argv)[:200]
    if outcome.timed_out:
        return ToolResult.error(
            f"`{shown}` timed out after {timeout:g}s and was killed; output so far:\n"
            f"{outcome.output}"
        )
    code = outcome.exit_code
    status = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
    return ToolResult(True, f"$ {shown}\n{status}\n{outcome.output}")


UNCONFINED_REFUSAL = (
    "refused: this agent's commands may run without approval only in a sandbox, and this "
    "worker runs DPLAN_SANDBOX=none; start the plan with DPLAN_SANDBOX=none too (its "
    "commands then ask for approval) or set approval_required in its run_command table"
)


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
                context = CommandContext(
                    FileJail(self._settings.workspace), inp.policy, self._settings
                )
                result = await COMMAND_REGISTRY.execute(call.function.name, arguments, context)
                return await store_answer(self._store, inp.call, call, result)
            async with leased_tree(self._git, inp.workspace) as lease:
                await in_thread(lease.mark_changing)
                context = CommandContext(FileJail(lease.path), inp.policy, self._settings)
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
