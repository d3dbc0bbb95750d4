"""``spawn_subagent`` around a nested SubtaskWorkflow: open the child session, report back.

The child runs as a child workflow (so Temporal Web shows the tree); these activities are
its edges. ``prepare_spawn`` validates the call and creates the child session linked to
its parent (root and depth recorded) or writes the refusal as the tool result;
``finish_spawn`` writes the child's summary (or error) as the tool result and ends the
child session; ``append_notes`` pushes the ``[sub-agent …]`` notes into the parent's
session after the turn's tool results, where a system message cannot split a tool block.
"""

from __future__ import annotations

from temporalio import activity

from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.orchestration_tools import ORCHESTRATION_REGISTRY, SpawnArgs
from durable_plans.activities.tool_registry import ToolResult
from durable_plans.domain.agents import SPAWN_TOOL
from durable_plans.domain.contracts import (
    ACT_APPEND_NOTES,
    ACT_FINISH_SPAWN,
    ACT_PREPARE_SPAWN,
    MAX_SUBAGENT_DEPTH,
    AppendNotesInput,
    FinishSpawnInput,
    PrepareSpawnInput,
    PrepareSpawnOutput,
)
from durable_plans.domain.ids import child_session_id, note_message_id, tool_message_id
from durable_plans.domain.models import Message, SessionMeta
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.session_store import SessionNotFound, SessionStore


class SubagentActivities:
    def __init__(self, store: SessionStore) -> None:
        self._store = store

    async def _tool_answer(
        self, session_id: str, own_id: str, tool_call_id: str, content: str
    ) -> None:
        await self._store.append(
            session_id,
            [
                Message(
                    id=own_id,
                    role="tool",
                    tool_call_id=tool_call_id,
                    name=SPAWN_TOOL,
                    content=scrub_secrets(content),
                )
            ],
        )

    @activity.defn(name=ACT_PREPARE_SPAWN)
    async def prepare_spawn(self, inp: PrepareSpawnInput) -> PrepareSpawnOutput:
        async with heartbeating():
            return await self._prepare_spawn(inp)

    async def _prepare_spawn(self, inp: PrepareSpawnInput) -> PrepareSpawnOutput:
        history = await self._store.read(inp.session_id)
        own_id = tool_message_id(inp.scope, inp.turn, inp.call_index)
        assistant = next((m for m in history if m.id == inp.message_id), None)
        if assistant is None or not assistant.tool_calls:
            raise ValueError(f"no assistant tool call {inp.message_id} in {inp.session_id}")
        call = assistant.tool_calls[inp.call_index]
        answered = next((m for m in history if m.id == own_id), None)

        parsed = ORCHESTRATION_REGISTRY.parse(SPAWN_TOOL, call.function.arguments)
        refusal: str | None = None
        if isinstance(parsed, ToolResult):
            refusal = parsed.content
        else:
            assert isinstance(parsed, SpawnArgs)
            if parsed.agent not in inp.known_agents:
                refusal = (
                    f"error: unknown agent {parsed.agent!r}; known agents: "
                    f"{', '.join(inp.known_agents)}"
                )
            elif inp.depth + 1 > MAX_SUBAGENT_DEPTH:
                refusal = (
                    f"error: sub-agent depth limit reached: this agent is at depth {inp.depth} "
                    f"and sub-agents nest at most {MAX_SUBAGENT_DEPTH} deep; do the work "
                    "yourself or return to your parent"
                )
        if refusal is not None:
            if answered is None:
                await self._tool_answer(inp.session_id, own_id, call.id, refusal)
            return PrepareSpawnOutput(refusal=refusal)

        assert isinstance(parsed, SpawnArgs)
        child = child_session_id(inp.session_id, inp.scope, inp.turn, inp.call_index)
        await self._store.create_session(
            SessionMeta(
                session_id=child,
                agent=parsed.agent,
                parent_session_id=inp.session_id,
                root_session_id=inp.root_session_id or inp.session_id,
                depth=inp.depth + 1,
            )
        )
        return PrepareSpawnOutput(child_session_id=child, agent=parsed.agent, task=parsed.task)

    @activity.defn(name=ACT_FINISH_SPAWN)
    async def finish_spawn(self, inp: FinishSpawnInput) -> None:
        async with heartbeating():
            own_id = tool_message_id(inp.scope, inp.turn, inp.call_index)
            content = inp.text if inp.ok else f"error: sub-agent failed: {inp.text}"
            await self._tool_answer(inp.session_id, own_id, inp.tool_call_id, content)
            try:
                meta = await self._store.get_session(inp.child_session_id)
            except SessionNotFound:
                return
            if not meta.ended:
                await self._store.update_session(meta.model_copy(update={"ended": True}))

    @activity.defn(name=ACT_APPEND_NOTES)
    async def append_notes(self, inp: AppendNotesInput) -> int:
        async with heartbeating():
            notes = [
                Message(
                    id=note_message_id(inp.scope, inp.turn, i),
                    role="system",
                    content=scrub_secrets(note),
                )
                for i, note in enumerate(inp.notes)
            ]
            return await self._store.append(inp.session_id, notes)
