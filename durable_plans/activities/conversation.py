"""Activities of a conversation outside plans: append, switch agent, check a plan, read,
undo a turn.

The agent switch rewrites the session: tool traffic goes, user, system and
plain assistant messages stay, the last result is kept once and a note is added. It
first snapshots the session under an id derived from the note, and computes the switch
from that snapshot, so a retried activity produces the same history and the same report
(and the snapshot remains as the record of what the session was before the switch).
Undoing a turn works the same way: snapshot, then cut the turn off that snapshot.
"""

from __future__ import annotations

import json

from temporalio import activity

from durable_plans._errors import PlanValidationError
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.orchestration_tools import ORCHESTRATION_REGISTRY, SwitchAgentArgs
from durable_plans.activities.tool_registry import ToolResult
from durable_plans.domain.history import switch_agent_cleanup
from durable_plans.domain.ids import switch_snapshot_id, tool_message_id
from durable_plans.domain.models import Message, Plan, SessionMeta, ToolCall
from durable_plans.domain.plan_loader import plan_from_data
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.domain.session_contracts import (
    ACT_ANSWER_TOOL,
    ACT_CHECK_PLAN,
    ACT_CHECK_SWITCH,
    ACT_READ_HISTORY,
    ACT_SESSION_APPEND,
    ACT_SWITCH_CONTEXT,
    ACT_UNDO_MESSAGES,
    CREATE_PLAN_TOOL,
    SWITCH_TOOL,
    AgentSwitchResult,
    CheckPlanCallInput,
    CheckPlanCallOutput,
    CheckSwitchCallInput,
    CheckSwitchCallOutput,
    PlanStartedInput,
    ReadHistoryInput,
    SessionAppendInput,
    SwitchContextInput,
    UndoMessagesInput,
    UndoMessagesOutput,
)
from durable_plans.session_store import SessionStore

HISTORY_CONTENT_CHARS = 2000
UNDO_EXCERPT_CHARS = 200


def model_written_checks(plan: Plan) -> list[str]:
    """A plan the model writes may not name checks: they run commands with no allowlist
    and no approval (domain/checks.py); the agents file's checks still apply."""
    why = "a plan made by create_plan cannot name check commands (the agents file's apply)"
    lines = [f"check: {why}"] if plan.check is not None else []
    lines += [
        f"subtasks[{i}] (id {s.id!r}): check: {why}"
        for i, s in enumerate(plan.subtasks)
        if s.check is not None
    ]
    return lines


class ConversationActivities:
    def __init__(self, store: SessionStore) -> None:
        self._store = store

    @activity.defn(name=ACT_SESSION_APPEND)
    async def session_append(self, inp: SessionAppendInput) -> int:
        async with heartbeating():
            await self._store.create_session(SessionMeta(session_id=inp.session_id))
            return await self._store.append(
                inp.session_id,
                [
                    m.model_copy(update={"content": scrub_secrets(m.content)}) if m.content else m
                    for m in inp.messages
                ],
            )

    @activity.defn(name=ACT_SWITCH_CONTEXT)
    async def switch_agent_context(self, inp: SwitchContextInput) -> AgentSwitchResult:
        async with heartbeating():
            store = self._store
            await store.create_session(SessionMeta(session_id=inp.session_id))
            snap = switch_snapshot_id(inp.note_id)
            await store.snapshot(inp.session_id, snap)
            before = await store.read_snapshot(snap)
            after, report = switch_agent_cleanup(
                before,
                from_agent=inp.from_agent,
                to_agent=inp.to_agent,
                reason=inp.reason or None,
                note_id=inp.note_id,
            )
            await store.replace(inp.session_id, after)
            meta = await store.get_session(inp.session_id)
            await store.update_session(meta.model_copy(update={"agent": inp.to_agent}))
            return AgentSwitchResult(
                from_agent=inp.from_agent,
                to_agent=inp.to_agent,
                removed_count=report.removed_count,
                preserved_result=report.preserved_result,
                context_message=report.context_message,
                final_message_count=report.final_message_count,
            )

    @activity.defn(name=ACT_CHECK_PLAN)
    async def check_plan_call(self, inp: CheckPlanCallInput) -> CheckPlanCallOutput:
        """Validate a ``create_plan`` call; problems go back to the model as the tool result."""
        async with heartbeating():
            history = await self._store.read(inp.session_id)
            own_id = tool_message_id(inp.scope, inp.turn, inp.call_index)
            assistant = next((m for m in history if m.id == inp.message_id), None)
            if assistant is None or not assistant.tool_calls:
                raise ValueError(f"no assistant tool call {inp.message_id} in {inp.session_id}")
            call = assistant.tool_calls[inp.call_index]
            problems: list[str]
            try:
                data = json.loads(call.function.arguments or "{}")
            except json.JSONDecodeError as exc:
                problems = [f"arguments are not valid JSON (line {exc.lineno}, column {exc.colno})"]
            else:
                if not isinstance(data, dict):
                    problems = ["arguments must be a JSON object with goal and subtasks"]
                else:
                    # The conversation decides where the plan runs and what it is called.
                    data = {**data, "id": inp.plan_id, "session_id": inp.session_id}
                    try:
                        plan = plan_from_data(data, known_agents=inp.known_agents)
                    except PlanValidationError as err:
                        problems = list(err.problems)
                    else:
                        problems = model_written_checks(plan)
                        if not problems:
                            return CheckPlanCallOutput(plan_json=plan.model_dump_json())
            left = inp.attempts_left - 1
            advice = (
                f"Fix them and call {CREATE_PLAN_TOOL} again ({left} attempts left)."
                if left > 0
                else "No attempts are left: answer the user without a plan and say why."
            )
            text = "error: the plan is invalid:\n" + "\n".join(f"- {p}" for p in problems)
            await self._store.append(
                inp.session_id,
                [
                    Message(
                        id=own_id,
                        role="tool",
                        tool_call_id=call.id,
                        name=CREATE_PLAN_TOOL,
                        content=scrub_secrets(f"{text}\n{advice}"),
                    )
                ],
            )
            return CheckPlanCallOutput(problems=tuple(problems))

    async def _call(self, session_id: str, message_id: str, index: int) -> ToolCall:
        history = await self._store.read(session_id)
        assistant = next((m for m in history if m.id == message_id), None)
        if assistant is None or not assistant.tool_calls:
            raise ValueError(f"no assistant tool call {message_id} in {session_id}")
        return assistant.tool_calls[index]

    async def _answer(self, session_id: str, own_id: str, call: ToolCall, content: str) -> None:
        await self._store.append(
            session_id,
            [
                Message(
                    id=own_id,
                    role="tool",
                    tool_call_id=call.id,
                    name=call.function.name,
                    content=scrub_secrets(content),
                )
            ],
        )

    @activity.defn(name=ACT_CHECK_SWITCH)
    async def check_switch_call(self, inp: CheckSwitchCallInput) -> CheckSwitchCallOutput:
        """Validate a ``switch_agent`` call and answer it; the switch itself happens after
        the turn (switching now would remove tool traffic the running turn still needs)."""
        async with heartbeating():
            call = await self._call(inp.session_id, inp.message_id, inp.call_index)
            own_id = tool_message_id(inp.scope, inp.turn, inp.call_index)
            parsed = ORCHESTRATION_REGISTRY.parse(SWITCH_TOOL, call.function.arguments)
            if isinstance(parsed, ToolResult):
                await self._answer(inp.session_id, own_id, call, parsed.content)
                return CheckSwitchCallOutput()
            assert isinstance(parsed, SwitchAgentArgs)
            if parsed.agent not in inp.known_agents:
                refusal = (
                    f"error: unknown agent {parsed.agent!r}; known agents: "
                    f"{', '.join(inp.known_agents)}"
                )
            elif parsed.agent == inp.current_agent:
                refusal = f"error: the {parsed.agent} agent is already the current agent"
            else:
                refusal = None
            if refusal is not None:
                await self._answer(inp.session_id, own_id, call, refusal)
                return CheckSwitchCallOutput()
            await self._answer(
                inp.session_id,
                own_id,
                call,
                f"ok: the conversation passes to the {parsed.agent} agent after this answer",
            )
            return CheckSwitchCallOutput(
                target=parsed.agent, reason=parsed.reason, confidence=parsed.confidence
            )

    @activity.defn(name=ACT_ANSWER_TOOL)
    async def answer_tool_call(self, inp: PlanStartedInput) -> None:
        """Write a tool result the workflow composed (e.g. "plan X started")."""
        async with heartbeating():
            own_id = tool_message_id(inp.scope, inp.turn, inp.call_index)
            await self._store.append(
                inp.session_id,
                [
                    Message(
                        id=own_id,
                        role="tool",
                        tool_call_id=inp.tool_call_id,
                        name=CREATE_PLAN_TOOL,
                        content=scrub_secrets(inp.text),
                    )
                ],
            )

    @activity.defn(name=ACT_READ_HISTORY)
    async def read_history(self, inp: ReadHistoryInput) -> list[Message]:
        messages = await self._store.read(inp.session_id)
        tail = messages[-inp.limit :]
        return [
            m.model_copy(update={"content": m.content[:HISTORY_CONTENT_CHARS]})
            if m.content and len(m.content) > HISTORY_CONTENT_CHARS
            else m
            for m in tail
        ]

    @activity.defn(name=ACT_UNDO_MESSAGES)
    async def undo_turn_messages(self, inp: UndoMessagesInput) -> UndoMessagesOutput:
        """Remove a turn: its user message and everything written after it (the answer,
        tool calls and results, notes). Cut from a snapshot taken first, so a retry
        removes exactly the same messages and answers the same."""
        async with heartbeating():
            store = self._store
            await store.create_session(SessionMeta(session_id=inp.session_id))
            await store.snapshot(inp.session_id, inp.snapshot_id)
            before = await store.read_snapshot(inp.snapshot_id)
            at = next((i for i, m in enumerate(before) if m.id == inp.user_message_id), None)
            if at is None:
                return UndoMessagesOutput(found=False)
            await store.replace(inp.session_id, before[:at])
            text = " ".join((before[at].content or "").split())
            if len(text) > UNDO_EXCERPT_CHARS:
                text = text[: UNDO_EXCERPT_CHARS - 1] + "…"
            return UndoMessagesOutput(found=True, text=text, removed=len(before) - at)
