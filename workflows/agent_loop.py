"""The durable agent loop shared by SubtaskWorkflow and SessionWorkflow.

LLM call → tool calls (run concurrently) → LLM call … until the model answers without
calling a tool. Every step is an activity whose writes carry ids derived from ``scope``
and the turn, so a replayed or retried step never writes twice. The loop only knows ids:
the conversation itself is read and written by the activities.

Tools are dispatched by name: workspace tools run as the local activity ``run_tool``,
delegation as its own LLM activity, ``spawn_subagent`` as a nested SubtaskWorkflow, and a
workflow may add its own (SessionWorkflow's ``switch_agent`` and ``create_plan``) through
``custom_tools``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import ApplicationError, CancelledError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from durable_plans.domain.agents import DELEGATE_TOOL, SPAWN_TOOL, AgentCatalog, AgentSpec
    from durable_plans.domain.contracts import (
        ACT_APPEND_NOTES,
        ACT_CALL_LLM,
        ACT_DELEGATE,
        ACT_FINISH_SPAWN,
        ACT_PREPARE_SPAWN,
        ACT_RUN_TOOL,
        SUBTASK_WORKFLOW,
        AppendNotesInput,
        BeginSubtaskInput,
        DelegateInput,
        DelegateOutput,
        EndSubtaskInput,
        FinishSpawnInput,
        LlmCallInput,
        LlmCallOutput,
        PrepareSpawnInput,
        PrepareSpawnOutput,
        SubtaskInput,
        SubtaskOutcome,
        ToolCallInput,
        ToolCallOutput,
        ToolCallRef,
    )
    from durable_plans.domain.failures import FailureType, subtask_failure_details
    from durable_plans.domain.ids import (
        short_session_id,
        spawned_subtask_id,
        spawned_workflow_id,
    )
    from durable_plans.domain.models import Budget, Subtask, Usage

from durable_plans.workflows import policies, versions
from durable_plans.workflows.store_ops import store_op

# A workflow's own tool: (assistant message id, turn, call index, call) → a note for the
# session, or None. It must write the tool result itself (through an activity).
CustomTool = Callable[[str, int, int, ToolCallRef], Awaitable[str | None]]


class LoopFailed(Exception):
    """The loop stopped without an answer (not an activity error): type and message."""

    def __init__(self, type_: FailureType, message: str) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message


@dataclass
class AgentLoop:
    session_id: str
    scope: str  # with the turn, makes every written message's id
    spec: AgentSpec
    catalog: AgentCatalog
    root_session_id: str
    budget: Budget | None = None
    depth: int = 0
    # Spawned sub-agents' workflows are named under this workflow id and their runs
    # under this scope, so their ids never collide with anyone else's.
    child_scope: str = ""
    custom_tools: Mapping[str, CustomTool] = field(default_factory=dict)
    # Sent with every request but not stored (conversations); subtasks store theirs.
    system_prompt: str | None = None
    # A subtask's branch: built by the first LLM call, closed by the one that answers.
    begin: BeginSubtaskInput | None = None
    close_on_answer: EndSubtaskInput | None = None
    branch_closed: bool = False
    turn: int = 0
    llm_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    phase: str = "starting"

    @property
    def tools(self) -> tuple[str, ...]:
        return (*self.spec.tools, *(t for t in self.custom_tools if t not in self.spec.tools))

    async def run(self, max_turns: int) -> str:
        """The final answer; ``LoopFailed`` or an activity's error otherwise."""
        first_turn = self.turn
        while self.turn - first_turn < max_turns:
            self.phase = "thinking"
            # Counted before the call: a call that fails still happened (and may be billed).
            self.llm_calls += 1
            params = policies.current_parameters()
            out: LlmCallOutput = await workflow.execute_activity(
                ACT_CALL_LLM,
                LlmCallInput(
                    session_id=self.session_id,
                    agent=self.spec.name,
                    scope=self.scope,
                    turn=self.turn,
                    tools=self.tools,
                    model=self.spec.model,
                    system_prompt=self.system_prompt,
                    budget=self.budget,
                    root_session_id=self.root_session_id,
                    begin=self.begin,
                    close_on_answer=self.close_on_answer,
                ),
                result_type=LlmCallOutput,
                start_to_close_timeout=params.llm_start_to_close,
                heartbeat_timeout=params.llm_heartbeat,
                retry_policy=params.llm_retry,
            )
            self.usage = self.usage + out.usage
            self.begin = None  # built: the next calls only read it
            self.branch_closed = self.branch_closed or out.branch_closed
            if not out.tool_calls:
                if out.content and out.content.strip():
                    self.turn += 1
                    return out.content
                raise LoopFailed(
                    FailureType.EMPTY_ANSWER, "the model ended its turn without an answer"
                )
            self.phase = "running tools"
            notes = await asyncio.gather(
                *(self._run_call(out.message_id, i, ref) for i, ref in enumerate(out.tool_calls))
            )
            kept = tuple(n for n in notes if n)
            if kept:
                # After every answer of the turn: a system message must not split a
                # tool-call block, or the next request is invalid for a strict provider.
                await store_op(
                    ACT_APPEND_NOTES,
                    AppendNotesInput(
                        session_id=self.session_id, scope=self.scope, turn=self.turn, notes=kept
                    ),
                )
            self.turn += 1
        raise LoopFailed(
            FailureType.MAX_TURNS_REACHED,
            f"no final answer after {max_turns} turns (max_turns={max_turns})",
        )

    async def _run_call(self, message_id: str, index: int, ref: ToolCallRef) -> str | None:
        """Carry out one tool call; returns a note for the session, if any."""
        tools = self.tools
        custom = self.custom_tools.get(ref.name)
        if custom is not None:
            return await custom(message_id, self.turn, index, ref)
        params = policies.current_parameters()
        if ref.name == DELEGATE_TOOL and DELEGATE_TOOL in tools:
            delegated: DelegateOutput = await workflow.execute_activity(
                ACT_DELEGATE,
                DelegateInput(
                    session_id=self.session_id,
                    message_id=message_id,
                    call_index=index,
                    scope=self.scope,
                    turn=self.turn,
                    budget=self.budget,
                    root_session_id=self.root_session_id,
                ),
                result_type=DelegateOutput,
                start_to_close_timeout=params.llm_start_to_close,
                heartbeat_timeout=params.llm_heartbeat,
                retry_policy=params.llm_retry,
            )
            self.usage = self.usage + delegated.usage
            return None
        if ref.name == SPAWN_TOOL and SPAWN_TOOL in tools:
            return await self._spawn(message_id, index, ref)
        inp = ToolCallInput(
            session_id=self.session_id,
            message_id=message_id,
            call_index=index,
            scope=self.scope,
            turn=self.turn,
            allowed_tools=tools,
        )
        if workflow.patched(versions.FEWER_ROUND_TRIPS):
            # A local activity: workspace tools take milliseconds and are idempotent
            # (atomic writes, reads), so they run inside the workflow task that received
            # the model's answer instead of costing a server round trip and a workflow
            # task of their own. Temporal Web still shows each call, as a local-activity
            # marker with its input and result.
            await workflow.execute_local_activity(
                ACT_RUN_TOOL,
                inp,
                result_type=ToolCallOutput,
                start_to_close_timeout=params.tool_start_to_close,
                retry_policy=params.tool_retry,
            )
        else:  # a run started before the change replays the regular activity it ran
            await workflow.execute_activity(
                ACT_RUN_TOOL,
                inp,
                result_type=ToolCallOutput,
                start_to_close_timeout=params.tool_start_to_close,
                heartbeat_timeout=policies.SHORT_HEARTBEAT,
                retry_policy=params.tool_retry,
            )
        return None

    async def _spawn(self, message_id: str, index: int, ref: ToolCallRef) -> str | None:
        """A nested SubtaskWorkflow in its own child session; its summary is the result.

        Started by its type name, not its class: the loop is part of SubtaskWorkflow, and
        importing that module from here would make the two import each other.
        """
        turn = self.turn
        prep: PrepareSpawnOutput = await store_op(
            ACT_PREPARE_SPAWN,
            PrepareSpawnInput(
                session_id=self.session_id,
                message_id=message_id,
                call_index=index,
                scope=self.scope,
                turn=turn,
                depth=self.depth,
                root_session_id=self.root_session_id,
                known_agents=self.catalog.names(),
            ),
            result_type=PrepareSpawnOutput,
        )
        if prep.refusal is not None or prep.child_session_id is None:
            return None  # the refusal is already the tool result; the agent carries on
        assert prep.agent is not None and prep.task is not None
        child_id = spawned_subtask_id(prep.agent, turn, index)
        child = SubtaskInput(
            plan_run_id=self.child_scope or self.scope,
            subtask=Subtask(id=child_id, description=prep.task, agent=prep.agent),
            base_session_id=prep.child_session_id,
            budget=self.budget,
            agents=self.catalog.agents,
            root_session_id=self.root_session_id,
            depth=self.depth + 1,
        )
        try:
            outcome = await workflow.execute_child_workflow(
                SUBTASK_WORKFLOW,
                child,
                result_type=SubtaskOutcome,
                id=spawned_workflow_id(workflow.info().workflow_id, child_id),
                static_summary=f"sub-agent {prep.agent}: {prep.task[:100]}",
            )
            ok, text, usage = True, outcome.result, outcome.usage
        except ChildWorkflowError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                raise asyncio.CancelledError() from err
            usage = Usage()
            if isinstance(cause, ApplicationError):
                text = f"{cause.type}: {cause.message}" if cause.type else cause.message
                details = subtask_failure_details(cause)
                if details is not None:
                    usage = details.usage
            else:
                text = str(cause or err)
            ok = False
        self.usage = self.usage + usage
        await store_op(
            ACT_FINISH_SPAWN,
            FinishSpawnInput(
                session_id=self.session_id,
                scope=self.scope,
                turn=turn,
                call_index=index,
                tool_call_id=ref.id,
                child_session_id=prep.child_session_id,
                ok=ok,
                text=text,
            ),
        )
        short = short_session_id(prep.child_session_id)
        return f"[sub-agent {short} {'result' if ok else 'error'}] {text}"
