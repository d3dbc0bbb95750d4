"""Tool execution as an activity: one call in, one tool message appended to the branch.

A tool's failure is an answer for the model, not a crashed workflow: anything the model
can cause (bad arguments, an unknown tool, a refused path) comes back as an ``error:``
tool result. The tool message id is deterministic, so a retried activity never answers a
call twice, which would make the next request invalid for a strict provider.

With a workspace in the input the call works in that tree (``activities/git_workspace``):
a tool that may change files ends with a commit of the whole tree, made before the answer
is stored, and its id returns with the answer; a retried call that finds its answer
stored returns the commit its earlier attempt made. Without one (a loop given no tree) it
works in the worker's workspace directory.
"""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import activity

from durable_plans.activities import observe
from durable_plans.activities.file_jail import FileJail
from durable_plans.activities.file_tools import execute_workspace_tool
from durable_plans.activities.git_workspace import GitWorkspace, NeedsTree, tool_commit_message
from durable_plans.activities.git_workspace_activities import in_thread
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.tool_calls import pending_call, store_answer
from durable_plans.activities.tool_catalog import READ_ONLY_TOOLS, refuse_call
from durable_plans.activities.tool_registry import ToolResult
from durable_plans.domain.contracts import ACT_RUN_TOOL, ToolCallInput, ToolCallOutput
from durable_plans.domain.tool_contracts import ToolCallAt
from durable_plans.domain.workspace_refs import WorkspaceRef
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings


class ToolActivities:
    def __init__(
        self, store: SessionStore, settings: Settings, git: GitWorkspace | None = None
    ) -> None:
        self._store = store
        self._settings = settings
        self._git = git or GitWorkspace.from_settings(settings)

    @activity.defn(name=ACT_RUN_TOOL)
    async def run_tool(self, inp: ToolCallInput) -> ToolCallOutput:
        with observe.tool_span():
            async with heartbeating():
                return await self._run_tool(inp)

    async def _run_tool(self, inp: ToolCallInput) -> ToolCallOutput:
        at = ToolCallAt.of(inp)
        call = await pending_call(self._store, at)
        if isinstance(call, ToolCallOutput):
            # Answered by an earlier attempt: never twice, but with the commit it made.
            if inp.workspace is None or call.name in READ_ONLY_TOOLS:
                return call
            message = tool_commit_message(
                inp.workspace.tree, inp.turn, inp.call_index, call.name, inp.scope
            )
            made = await in_thread(self._git.answered_commit, inp.workspace, message)
            return call.model_copy(update={"commit": made})
        name = call.function.name
        # An operator who approved the call may have replaced its arguments.
        arguments = inp.arguments if inp.arguments is not None else call.function.arguments

        # The workflow carries out the other tools itself; what reaches here is a file tool,
        # or a call the agent may not make (a tool it lacks, or one that does not exist).
        result = refuse_call(name, inp.allowed_tools)
        commit: str | None = None
        if result is None:
            if inp.workspace is None:
                workspace = FileJail(self._settings.workspace)
                result = await asyncio.to_thread(execute_workspace_tool, name, arguments, workspace)
            else:
                done, commit = await in_thread(self._in_tree, inp, inp.workspace, name, arguments)
                result = done
        answer = await store_answer(self._store, at, call, result)
        observe.tool_call(name, result.ok)
        return answer if commit is None else answer.model_copy(update={"commit": commit})

    def _in_tree(
        self, inp: ToolCallInput, ref: WorkspaceRef, name: str, arguments: str
    ) -> tuple[ToolResult, str | None]:
        """Run the call in ``ref``'s tree (in a worker thread); a call that may change
        files ends with a commit of the whole tree."""
        changing = name not in READ_ONLY_TOOLS
        if not changing:
            # A read needs no tree: the commit's objects answer, unless this host has the
            # tree already or the commit's files may differ from its checkout.
            files = self._git.files_at(ref)
            if files is not None:
                with contextlib.suppress(NeedsTree):
                    return execute_workspace_tool(name, arguments, files), None
        with self._git.checkout(ref) as lease:
            if changing:
                lease.mark_changing()
            result = execute_workspace_tool(name, arguments, FileJail(lease.path))
            if not changing:
                return result, None
            message = tool_commit_message(ref.tree, inp.turn, inp.call_index, name, inp.scope)
            return result, lease.commit(message, inp.at_s)
