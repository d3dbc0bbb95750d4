"""SessionWorkflow: one long-lived conversation outside plans.

The workflow holds what must be exact and durable — the current agent, the agent-switch
events, the plans started from the conversation, usage — while the messages live in the
session store. Each ``send_message`` update runs the current agent's turn with the same
durable loop as subtasks; turns are serialized so two updates never interleave their
tool traffic. An agent switch (an update, or the ``switch_agent`` tool) cleans the
history through an activity and records an ``agent.switched`` event. The orchestrator's
``create_plan`` tool validates the model's plan (problems go back to it, bounded
attempts) and starts a child PlanWorkflow on this session; its summary is appended to
the conversation, between turns, when it finishes. When the history grows long the
workflow continues-as-new while idle, carrying its state: nothing is lost.

The conversation's files are a tree of its own in the workspace repository
(``workflows.chat_workspace``): each turn's tool calls commit on it, the branch
``<prefix>chat/<session-id>`` is set to its head after a turn that moved it, and the
``undo`` update takes back the last turn: its messages (an activity cuts them off the
session) and its files (the conversation goes on from the commit before it, on a new
tree, and the branch is set there).
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import (
    ActivityError,
    CancelledError,
    ChildWorkflowError,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from durable_plans._errors import InvalidInput
    from durable_plans.domain.agents import BUILTIN_CATALOG, AgentCatalog
    from durable_plans.domain.approval_rules import ApprovalDecision
    from durable_plans.domain.contracts import PLAN_WORKFLOW, PlanInput, ToolCallRef
    from durable_plans.domain.failures import (
        FailureType,
        activity_failure,
        application_error,
        plan_report_of,
    )
    from durable_plans.domain.ids import (
        plan_summary_message_id,
        session_plan_id,
        session_turn_scope,
        switch_note_id,
        user_message_id,
    )
    from durable_plans.domain.inputs import session_input_from_value
    from durable_plans.domain.models import Message, Plan, PlanReport, PlanStatus
    from durable_plans.domain.session_contracts import (
        ACT_ANSWER_TOOL,
        ACT_CHECK_PLAN,
        ACT_CHECK_SWITCH,
        ACT_READ_HISTORY,
        ACT_SESSION_APPEND,
        ACT_SWITCH_CONTEXT,
        ACT_UNDO_MESSAGES,
        CREATE_PLAN_TOOL,
        MAX_PLAN_ATTEMPTS,
        MAX_UNDOABLE_TURNS,
        SIGNAL_END,
        SWITCH_TOOL,
        UNDO_REFUSED,
        AgentSwitchEvent,
        AgentSwitchResult,
        ChatTurn,
        ChatWorkspace,
        CheckPlanCallInput,
        CheckPlanCallOutput,
        CheckSwitchCallInput,
        CheckSwitchCallOutput,
        HistoryInput,
        PlanGoalInput,
        PlanRef,
        PlanStartedInput,
        ReadHistoryInput,
        SendMessageInput,
        SendMessageResult,
        SessionAppendInput,
        SessionInput,
        SessionState,
        SwitchAgentInput,
        SwitchContextInput,
        UndoInput,
        UndoMessagesInput,
        UndoMessagesOutput,
        UndoResult,
    )

from durable_plans.workflows.agent_loop import AgentLoop, CustomTool, LoopFailed
from durable_plans.workflows.approval_desk import ApprovalHandlers
from durable_plans.workflows.chat_workspace import (
    PublishFailed,
    open_chat_workspace,
    publish_head,
    restart_at,
    with_agent,
)
from durable_plans.workflows.live import carried_stream, release
from durable_plans.workflows.raw_input import NO_INPUT, decode_input
from durable_plans.workflows.store_ops import store_op

PLAN_AGENT = "orchestrator"
MAX_CARRIED_DECISIONS = 200  # tool-call decisions a conversation keeps across continue-as-new


def plan_summary(report: PlanReport) -> str:
    c = report.counts
    head = (
        f"[plan {report.plan_id} {report.status.value}] {c.completed} completed, "
        f"{c.failed} failed, {c.skipped} skipped, {c.cancelled} cancelled "
        f"of {len(report.subtasks)}"
    )
    lines = [head]
    for r in report.subtasks:
        detail = r.result if r.result else (f"{r.error.type}: {r.error.message}" if r.error else "")
        lines.append(f"- {r.id} ({r.agent}) {r.status.value}: {detail[:300]}")
    return "\n".join(lines)


@workflow.defn(name="SessionWorkflow")
class SessionWorkflow(ApprovalHandlers):
    @workflow.init
    def __init__(self, raw: RawValue = NO_INPUT) -> None:
        # Taken raw (see workflows/raw_input.py): a bad input must fail the workflow, not
        # its task forever. The problems are kept and raised by run; until then the
        # workflow stands on a placeholder input and refuses every update.
        self._input_problems: tuple[str, ...] = ()
        try:
            inp = session_input_from_value(
                decode_input(raw, what='a session object ({"session_id": ...})')
            )
        except InvalidInput as err:
            self._input_problems = err.problems
            inp = SessionInput(session_id=workflow.info().workflow_id)
        self._session_id = inp.session_id
        self._agent = inp.agent
        self._catalog = AgentCatalog(agents=inp.agents) if inp.agents else BUILTIN_CATALOG
        self._agents = inp.agents
        self._budget = inp.budget
        self._events = list(inp.events)
        self._plans = {p.plan_id: p for p in inp.plans}
        self._handled = inp.messages_handled
        self._handled_at_start = inp.messages_handled
        self._usage = inp.usage
        self._max_per_run = inp.max_messages_per_run
        self._lock = asyncio.Lock()
        self._busy = False
        self._ended = False
        self._running_plans = 0
        self._pending_switch: tuple[str, str, str] | None = None
        self._plan_ids_this_turn: list[str] = []
        self._plan_attempts = 0
        self._followers: list[asyncio.Task[None]] = []
        # Turns admitted and not finished yet (running, or waiting for the lock): undo
        # is refused while there are any, so it never takes back a turn nobody has seen.
        self._open_turns = 0
        self._workspace: ChatWorkspace | None = inp.workspace
        self._turns: list[ChatTurn] = list(inp.turns)
        self.approval_desk.decided = {d.call_id: d for d in inp.approvals}
        # The LLM calls' live text, for dplan chat (workflows/live.py).
        self._stream = WorkflowStream(carried_stream(inp.stream_offset))

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, raw: RawValue = NO_INPUT) -> SessionState:
        if self._input_problems:
            raise application_error(
                FailureType.INVALID_INPUT,
                "invalid session input: " + "; ".join(self._input_problems),
                list(self._input_problems),
            )
        await workflow.wait_condition(lambda: self._ended or self._time_to_continue())
        await release(self._stream)
        await workflow.wait_condition(
            lambda: not self._busy and self._running_plans == 0 and workflow.all_handlers_finished()
        )
        if self._ended:
            return self.state()
        workflow.continue_as_new(
            SessionInput(
                session_id=self._session_id,
                agent=self._agent,
                agents=self._agents,
                budget=self._budget,
                events=tuple(self._events),
                plans=tuple(self._plans.values()),
                messages_handled=self._handled,
                usage=self._usage,
                max_messages_per_run=self._max_per_run,
                approvals=self._recent_decisions(),
                stream_offset=self._stream_offset(),
                workspace=self._workspace,
                turns=tuple(self._turns),
            ),
            # A conversation lives for days: each run is pinned to its build, and the next
            # one starts on the deployment's current build (worker_versioning.py).
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )

    def _stream_offset(self) -> int:
        state = self._stream.get_state()
        return state.base_offset + len(state.log)

    def _recent_decisions(self) -> tuple[ApprovalDecision, ...]:
        return tuple(self.approval_desk.decided.values())[-MAX_CARRIED_DECISIONS:]

    def _time_to_continue(self) -> bool:
        if self._busy or self._running_plans:
            return False
        if self._max_per_run is not None and (
            self._handled - self._handled_at_start >= self._max_per_run
        ):
            return True
        return workflow.info().is_continue_as_new_suggested()

    # ------------------------------------------------------------------ queries, signals

    @workflow.query
    def state(self) -> SessionState:
        return SessionState(
            session_id=self._session_id,
            agent=self._agent,
            messages_handled=self._handled,
            busy=self._busy,
            events=tuple(self._events),
            plans=tuple(self._plans.values()),
            usage=self._usage,
            approvals=self._recent_decisions(),
            commit=self._workspace.ref.head if self._workspace is not None else None,
            branch=self._workspace.branch if self._workspace is not None else None,
            undoable=len(self._turns),
        )

    @workflow.query
    def events(self) -> list[AgentSwitchEvent]:
        return list(self._events)

    @workflow.signal
    def end(self, *unexpected: Any) -> None:
        """End the conversation. ``end`` takes no argument; a sender that passes some is
        still obeyed (and logged), since a handler failing on them would fail the workflow
        task on every retry instead."""
        if unexpected:
            workflow.logger.warning(
                "signal %r: ignoring %d unexpected argument(s)", SIGNAL_END, len(unexpected)
            )
        self._ended = True

    # ------------------------------------------------------------------ updates

    @workflow.update
    async def send_message(self, inp: SendMessageInput) -> SendMessageResult:
        return await self._turn(inp.text, self._agent)

    def _refuse_if_invalid(self) -> None:
        if self._input_problems:
            raise application_error(
                FailureType.INVALID_INPUT,
                "the session was started with an invalid input: " + "; ".join(self._input_problems),
            )

    # Every update has a validator, even one with nothing to check: an argument that does
    # not fit the handler (missing, extra, wrong type) then fails the validator and the
    # update is rejected, instead of being accepted and failing the workflow task.

    @send_message.validator
    def _validate_send(self, inp: SendMessageInput) -> None:
        self._refuse_if_invalid()
        if self._ended:
            raise ValueError(f"session {self._session_id} has ended")

    @workflow.update
    async def plan_goal(self, inp: PlanGoalInput) -> SendMessageResult:
        text = (
            f"Plan this goal with the {CREATE_PLAN_TOOL} tool and start it, then tell me "
            f"briefly what the plan does: {inp.goal}"
        )
        return await self._turn(text, PLAN_AGENT)

    @plan_goal.validator
    def _validate_plan_goal(self, inp: PlanGoalInput) -> None:
        self._validate_send(SendMessageInput(text=inp.goal))

    @workflow.update
    async def switch_agent(self, inp: SwitchAgentInput) -> AgentSwitchResult:
        async with self._lock:
            return await self._switch(inp.target, inp.reason, inp.confidence)

    @switch_agent.validator
    def _validate_switch(self, inp: SwitchAgentInput) -> None:
        self._refuse_if_invalid()
        problem = self._switch_problem(inp.target)
        if problem is not None:
            # Rejected before it is accepted: nothing is recorded in the history.
            raise application_error(FailureType.INVALID_AGENT_SWITCH, problem)

    @workflow.update
    async def history(self, inp: HistoryInput) -> list[Message]:
        result: list[Message] = await store_op(
            ACT_READ_HISTORY,
            ReadHistoryInput(session_id=self._session_id, limit=inp.limit),
            result_type=list[Message],
        )
        return result

    @history.validator
    def _validate_history(self, inp: HistoryInput) -> None:
        self._refuse_if_invalid()

    @workflow.update
    async def undo(self, inp: UndoInput) -> UndoResult:
        async with self._lock:
            # A turn sent after this undo was admitted waits behind it: not a reason to
            # refuse now, but an earlier undo may have taken the last turn meanwhile.
            problem = self._undo_problem(turns_open=False)
            if problem is not None:
                raise application_error(UNDO_REFUSED, problem)
            return await self._undo()

    @undo.validator
    def _validate_undo(self, inp: UndoInput) -> None:
        self._refuse_if_invalid()
        problem = self._undo_problem()
        if problem is not None:
            raise application_error(UNDO_REFUSED, problem)

    # ------------------------------------------------------------------ turns

    async def _turn(self, text: str, agent: str) -> SendMessageResult:
        self._open_turns += 1
        try:
            async with self._lock:
                self._busy = True
                try:
                    return await self._run_turn(text, agent)
                finally:
                    self._busy = False
        finally:
            self._open_turns -= 1

    async def _run_turn(self, text: str, agent: str) -> SendMessageResult:
        if self._workspace is None:
            # Before the turn leaves any trace: a workspace that cannot be used fails the
            # turn with nothing written, and the next one tries again.
            self._workspace = await open_chat_workspace(self._session_id, agent)
        n = self._handled
        self._handled += 1
        scope = session_turn_scope(workflow.info().workflow_id, n)
        await self._append([Message(id=user_message_id(scope), role="user", content=text)])
        ws = self._workspace
        if ws is not None:
            ws = self._workspace = with_agent(ws, agent, self._session_id)
        start = ws.ref.head if ws is not None else None
        self._turns = [*self._turns, ChatTurn(number=n, start=start)][-MAX_UNDOABLE_TURNS:]
        spec = self._catalog.get(agent)
        custom: dict[str, CustomTool] = {SWITCH_TOOL: self._switch_tool(scope)}
        if agent == PLAN_AGENT:
            custom[CREATE_PLAN_TOOL] = self._create_plan_tool(scope)
        loop = AgentLoop(
            session_id=self._session_id,
            scope=scope,
            spec=spec,
            catalog=self._catalog,
            root_session_id=self._session_id,
            budget=self._budget,
            child_scope=scope,
            custom_tools=custom,
            system_prompt=spec.system_prompt,
            approvals=self.approval_desk,
            workspace=ws.ref if ws is not None else None,
        )
        self.approval_desk.prefix = f"{n}."  # turns restart with each message
        self._pending_switch = None
        self._plan_ids_this_turn = []
        self._plan_attempts = 0
        try:
            answer = await loop.run(spec.max_turns)
        except LoopFailed as failure:
            raise application_error(failure.type, failure.message, type_in_message=True) from None
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                raise asyncio.CancelledError() from err
            type_, message = activity_failure(err)
            raise application_error(type_, message, type_in_message=True) from err
        finally:
            self._usage = self._usage + loop.usage
            if ws is not None and loop.workspace is not None:
                # Where the turn left the files, also when it failed: the next turn (or
                # an undo) carries on from there.
                self._workspace = ws.model_copy(update={"ref": loop.workspace})
        files, problem = await self._publish(start)
        if self._pending_switch is not None:
            target, reason, confidence = self._pending_switch
            if self._switch_problem(target) is None:
                await self._switch(target, reason, confidence)
        return SendMessageResult(
            answer=answer,
            agent=agent,
            current_agent=self._agent,
            llm_calls=loop.llm_calls,
            usage=loop.usage,
            plan_ids=tuple(self._plan_ids_this_turn),
            files=files,
            commit=self._workspace.ref.head if self._workspace is not None else None,
            branch=self._workspace.branch if self._workspace is not None else None,
            workspace_problem=problem,
            compactions=tuple(loop.compactions),
        )

    async def _publish(self, since: str | None) -> tuple[tuple[str, ...], str | None]:
        """The branch set to the conversation's head if it is not there yet; the files
        changed since ``since``, and why the branch could not be set (None: it was)."""
        ws = self._workspace
        if ws is None or ws.published == ws.ref.head:
            return (), None
        try:
            self._workspace, files = await publish_head(ws, since)
        except PublishFailed as failure:
            workflow.logger.warning(
                "conversation %s: its branch was not set: %s", self._session_id, failure
            )
            return (), str(failure)
        return files, None

    # ------------------------------------------------------------------ undo

    def _undo_problem(self, *, turns_open: bool = True) -> str | None:
        if self._ended:
            return f"session {self._session_id} has ended"
        if turns_open and self._open_turns:
            return (
                "a turn is running: /undo takes back a finished turn, so wait for its "
                "answer and undo then"
            )
        if not self._turns:
            return "there is no turn to undo: every turn this conversation remembers is undone"
        return None

    async def _undo(self) -> UndoResult:
        """Take the last turn back: its messages, then its files."""
        mark = self._turns[-1]
        user_id = user_message_id(session_turn_scope(workflow.info().workflow_id, mark.number))
        cut: UndoMessagesOutput = await store_op(
            ACT_UNDO_MESSAGES,
            UndoMessagesInput(
                session_id=self._session_id,
                user_message_id=user_id,
                snapshot_id=f"{user_id}:before-undo",
            ),
            result_type=UndoMessagesOutput,
        )
        self._turns = self._turns[:-1]
        files: tuple[str, ...] = ()
        problem: str | None = None
        ws = self._workspace
        if ws is not None and mark.start is not None and mark.start != ws.ref.head:
            # A tree's ref only moves forward: the conversation goes on on a new tree from
            # the commit before the turn; the old tree's ref keeps what was undone.
            undone = ws.ref.head
            self._workspace = restart_at(ws, mark.start)
            files, problem = await self._publish(undone)
        return UndoResult(
            text=cut.text,
            removed=cut.removed,
            files=files,
            commit=self._workspace.ref.head if self._workspace is not None else None,
            branch=self._workspace.branch if self._workspace is not None else None,
            turns_left=len(self._turns),
            workspace_problem=problem,
        )

    async def _append(self, messages: list[Message]) -> None:
        await store_op(
            ACT_SESSION_APPEND,
            SessionAppendInput(session_id=self._session_id, messages=tuple(messages)),
        )

    # ------------------------------------------------------------------ agent switch

    def _switch_problem(self, target: str) -> str | None:
        if target not in self._catalog.names():
            known = ", ".join(self._catalog.names())
            return f"unknown agent {target!r}; known agents: {known}"
        if target == self._agent:
            return f"the {target} agent is already the current agent"
        return None

    async def _switch(self, target: str, reason: str, confidence: str) -> AgentSwitchResult:
        problem = self._switch_problem(target)
        if problem is not None:
            raise application_error(FailureType.INVALID_AGENT_SWITCH, problem)
        source = self._agent
        note_id = switch_note_id(workflow.info().workflow_id, len(self._events))
        result: AgentSwitchResult = await store_op(
            ACT_SWITCH_CONTEXT,
            SwitchContextInput(
                session_id=self._session_id,
                from_agent=source,
                to_agent=target,
                reason=reason,
                note_id=note_id,
            ),
            result_type=AgentSwitchResult,
        )
        self._agent = target
        self._events.append(
            AgentSwitchEvent(
                session_id=self._session_id,
                from_agent=source,
                to_agent=target,
                reason=reason,
                confidence=confidence,
                at=workflow.now().isoformat(),
                removed_count=result.removed_count,
                final_message_count=result.final_message_count,
            )
        )
        return result

    def _switch_tool(self, scope: str) -> CustomTool:
        async def handle(msg_id: str, turn: int, index: int, ref: ToolCallRef) -> str | None:
            asked: CheckSwitchCallOutput = await store_op(
                ACT_CHECK_SWITCH,
                CheckSwitchCallInput(
                    session_id=self._session_id,
                    message_id=msg_id,
                    call_index=index,
                    scope=scope,
                    turn=turn,
                    known_agents=self._catalog.names(),
                    current_agent=self._agent,
                ),
                result_type=CheckSwitchCallOutput,
            )
            if asked.target is not None:
                # Applied after the turn's answer: switching now would remove the tool
                # traffic the running turn still needs.
                self._pending_switch = (asked.target, asked.reason, asked.confidence)
            return None

        return handle

    def _create_plan_tool(self, scope: str) -> CustomTool:
        async def handle(msg_id: str, turn: int, index: int, ref: ToolCallRef) -> str | None:
            return await self._create_plan(scope, msg_id, turn, index, ref)

        return handle

    async def _create_plan(
        self, scope: str, msg_id: str, turn: int, index: int, ref: ToolCallRef
    ) -> str | None:
        attempts_left = MAX_PLAN_ATTEMPTS - self._plan_attempts
        if attempts_left <= 0:
            await self._answer_tool(
                scope, turn, index, ref, "error: no plan attempts are left for this message"
            )
            return None
        plan_id = session_plan_id(self._session_id, scope, turn, index)
        checked: CheckPlanCallOutput = await store_op(
            ACT_CHECK_PLAN,
            CheckPlanCallInput(
                session_id=self._session_id,
                message_id=msg_id,
                call_index=index,
                scope=scope,
                turn=turn,
                known_agents=self._catalog.names(),
                plan_id=plan_id,
                attempts_left=attempts_left,
            ),
            result_type=CheckPlanCallOutput,
        )
        if checked.plan_json is None:
            self._plan_attempts += 1
            return None
        plan = Plan.model_validate_json(checked.plan_json)
        handle = await workflow.start_child_workflow(
            PLAN_WORKFLOW,
            PlanInput(plan=plan, agents=self._agents, merge_results=False),
            id=plan.id,
            result_type=PlanReport,
            # The plan outlives a continue-as-new or the end of the conversation.
            parent_close_policy=ParentClosePolicy.ABANDON,
            static_summary=f"plan from {self._session_id}: {plan.goal[:100]}",
        )
        self._plans[plan.id] = PlanRef(plan_id=plan.id, goal=plan.goal)
        self._plan_ids_this_turn.append(plan.id)
        self._running_plans += 1
        await self._answer_tool(
            scope,
            turn,
            index,
            ref,
            f"ok: plan {plan.id} started with {len(plan.subtasks)} subtasks "
            f"({', '.join(s.id for s in plan.subtasks[:20])}); its report will be added to "
            "this conversation when it finishes.",
        )
        self._followers.append(asyncio.create_task(self._follow_plan(plan, handle)))
        return None

    async def _answer_tool(
        self, scope: str, turn: int, index: int, ref: ToolCallRef, text: str
    ) -> None:
        await store_op(
            ACT_ANSWER_TOOL,
            PlanStartedInput(
                session_id=self._session_id,
                scope=scope,
                turn=turn,
                call_index=index,
                tool_call_id=ref.id,
                text=text,
            ),
        )

    async def _follow_plan(
        self, plan: Plan, handle: workflow.ChildWorkflowHandle[Any, PlanReport]
    ) -> None:
        """Wait for the plan, then add its summary between turns (never inside one)."""
        try:
            report: PlanReport | None
            try:
                report = await handle
            except ChildWorkflowError as err:
                report = plan_report_of(err)
            ref = self._plans[plan.id]
            summary = (
                plan_summary(report)
                if report is not None
                else (f"[plan {plan.id} failed] the plan ended without a report")
            )
            status = report.status if report is not None else PlanStatus.FAILED
            self._plans[plan.id] = ref.model_copy(update={"status": status, "summary": summary})
            async with self._lock:
                await self._append(
                    [
                        Message(
                            id=plan_summary_message_id(workflow.info().workflow_id, plan.id),
                            role="system",
                            content=summary,
                        )
                    ]
                )
        finally:
            self._running_plans -= 1
