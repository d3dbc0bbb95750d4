"""Tool execution as an activity: one call in, one tool message appended to the branch.

A tool's failure is an answer for the model, not a crashed workflow: anything the model
can cause (bad arguments, an unknown tool, a refused path) comes back as an ``error:``
tool result. The tool message id is deterministic, so a retried activity never answers a
call twice, which would make the next request invalid for a strict provider.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from durable_plans.activities import observe
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.tool_calls import pending_call, store_answer
from durable_plans.activities.tool_catalog import refuse_call
from durable_plans.activities.workspace import Workspace
from durable_plans.activities.workspace_tools import execute_workspace_tool
from durable_plans.domain.contracts import ACT_RUN_TOOL, ToolCallInput, ToolCallOutput
from durable_plans.domain.tool_contracts import ToolCallAt
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings


class ToolActivities:
    def __init__(self, store: SessionStore, settings: Settings) -> None:
        self._store = store
        self._settings = settings

    @activity.defn(name=ACT_RUN_TOOL)
    async def run_tool(self, inp: ToolCallInput) -> ToolCallOutput:
        with observe.tool_span():
            async with heartbeating():
                return await self._run_tool(inp)

    async def _run_tool(self, inp: ToolCallInput) -> ToolCallOutput:
        at = ToolCallAt(
            session_id=inp.session_id,
            message_id=inp.message_id,
            call_index=inp.call_index,
            scope=inp.scope,
            turn=inp.turn,
        )
        call = await pending_call(self._store, at)
        if isinstance(call, ToolCallOutput):
            return call  # answered by an earlier attempt: never twice
        name = call.function.name
        # An operator who approved the call may have replaced its arguments.
        arguments = inp.arguments if inp.arguments is not None else call.function.arguments

        # The workflow carries out the other tools itself; what reaches here is a file tool,
        # or a call the agent may not make (a tool it lacks, or one that does not exist).
        result = refuse_call(name, inp.allowed_tools)
        if result is None:
            workspace = Workspace(self._settings.workspace)
            result = await asyncio.to_thread(execute_workspace_tool, name, arguments, workspace)
        answer = await store_answer(self._store, at, call, result)
        observe.tool_call(name, result.ok)
        return answer
