"""SubtaskWorkflow: one agent loop on its own session branch, truthful about the outcome.

The loop is LLM call → tool calls (run concurrently) → LLM call … until the model answers
without calling a tool. ``completed`` is returned only for a real final answer; an LLM
error after retries, an empty answer or the turn limit make the workflow fail, with the
cause attached, so Temporal Web and the plan report show the same truth (seed 002). The
branch is closed in every case, cancellation included.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
)

with workflow.unsafe.imports_passed_through():
    from domain.agents import BUILTIN_CATALOG, DELEGATE_TOOL, SPAWN_TOOL, AgentCatalog
    from domain.contracts import (
        ACT_APPEND_NOTES,
        ACT_BEGIN_SUBTASK,
        ACT_CALL_LLM,
        ACT_DELEGATE,
        ACT_END_SUBTASK,
        ACT_FINISH_SPAWN,
        ACT_PREPARE_SPAWN,
        ACT_RUN_TOOL,
        AppendNotesInput,
        BeginSubtaskInput,
        BeginSubtaskOutput,
        DelegateInput,
        DelegateOutput,
        EndSubtaskInput,
        FinishSpawnInput,
        LlmCallInput,
        LlmCallOutput,
        PrepareSpawnInput,
        PrepareSpawnOutput,
        SubtaskFailureDetails,
        SubtaskInput,
        SubtaskOutcome,
        ToolCallInput,
        ToolCallOutput,
        ToolCallRef,
    )
    from domain.ids import snapshot_id
    from domain.models import Subtask, Usage

from workflows import policies


def branch_session_id(base_session_id: str, plan_run_id: str, subtask_id: str) -> str:
    return f"{base_session_id}:{plan_run_id}:{subtask_id}:branch"


class SubtaskFailed(Exception):
    """Internal: why the loop stopped without an answer."""

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message


@workflow.defn(name="SubtaskWorkflow")
class SubtaskWorkflow:
    def __init__(self) -> None:
        self._llm_calls = 0
        self._usage = Usage()
        self._turn = 0
        self._phase = "starting"
        self._root = ""

    @workflow.query
    def progress(self) -> dict[str, object]:
        return {
            "phase": self._phase,
            "turn": self._turn,
            "llm_calls": self._llm_calls,
            "usage": self._usage.model_dump(),
        }

    @workflow.run
    async def run(self, inp: SubtaskInput) -> SubtaskOutcome:
        sub = inp.subtask
        catalog = AgentCatalog(agents=inp.agents) if inp.agents else BUILTIN_CATALOG
        spec = catalog.get(sub.agent)
        self._inp = inp
        self._catalog = catalog
        root = inp.root_session_id or inp.base_session_id
        self._root = root
        branch = branch_session_id(inp.base_session_id, inp.plan_run_id, sub.id)
        snap = snapshot_id(inp.base_session_id, inp.plan_run_id, sub.id)
        scope = f"{inp.plan_run_id}/{sub.id}"

        self._phase = "isolating"
        await workflow.execute_activity(
            ACT_BEGIN_SUBTASK,
            BeginSubtaskInput(
                plan_run_id=inp.plan_run_id,
                subtask=sub,
                base_session_id=inp.base_session_id,
                branch_session_id=branch,
                snapshot_id=snap,
                dependency_branches=inp.dependency_branches,
                dependency_descriptions=inp.dependency_descriptions,
                system_prompt=spec.system_prompt,
                root_session_id=root,
                depth=inp.depth,
            ),
            result_type=BeginSubtaskOutput,
            start_to_close_timeout=policies.SESSION_START_TO_CLOSE,
            heartbeat_timeout=policies.SHORT_HEARTBEAT,
            retry_policy=policies.SESSION_RETRY,
        )

        succeeded = False
        try:
            answer = await self._agent_loop(
                branch, spec.name, spec.tools, spec.model, scope, inp.max_turns or spec.max_turns
            )
            succeeded = True
            return SubtaskOutcome(
                result=answer,
                llm_calls=self._llm_calls,
                usage=self._usage,
                branch_session_id=branch,
            )
        except SubtaskFailed as failure:
            raise ApplicationError(
                f"{failure.type}: {failure.message}",
                SubtaskFailureDetails(
                    llm_calls=self._llm_calls, usage=self._usage, branch_session_id=branch
                ),
                type=failure.type,
                non_retryable=True,
            ) from None
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                # The activity was cancelled because this workflow is being cancelled:
                # end Cancelled, not Failed, so the plan reports the truth.
                raise asyncio.CancelledError() from err
            type_ = cause.type if isinstance(cause, ApplicationError) and cause.type else "LlmError"
            message = cause.message if isinstance(cause, ApplicationError) else str(err)
            raise ApplicationError(
                f"{type_}: {message}",
                SubtaskFailureDetails(
                    llm_calls=self._llm_calls, usage=self._usage, branch_session_id=branch
                ),
                type=type_,
                non_retryable=True,
            ) from err
        finally:
            self._phase = "closing"
            # Runs on cancellation too: the cancel request was delivered already, so this
            # activity is scheduled normally and the branch is never left open.
            await workflow.execute_activity(
                ACT_END_SUBTASK,
                EndSubtaskInput(
                    base_session_id=inp.base_session_id,
                    branch_session_id=branch,
                    snapshot_id=snap,
                    succeeded=succeeded,
                ),
                start_to_close_timeout=policies.SESSION_START_TO_CLOSE,
                heartbeat_timeout=policies.SHORT_HEARTBEAT,
                retry_policy=policies.SESSION_RETRY,
            )

    async def _agent_loop(
        self,
        branch: str,
        agent: str,
        tools: tuple[str, ...],
        model: str | None,
        scope: str,
        max_turns: int,
    ) -> str:
        while self._turn < max_turns:
            self._phase = "thinking"
            # Counted before the call: a call that fails still happened (and may be billed).
            self._llm_calls += 1
            out: LlmCallOutput = await workflow.execute_activity(
                ACT_CALL_LLM,
                LlmCallInput(
                    session_id=branch,
                    agent=agent,
                    scope=scope,
                    turn=self._turn,
                    tools=tools,
                    model=model,
                    budget=self._inp.budget,
                    root_session_id=self._root,
                ),
                result_type=LlmCallOutput,
                start_to_close_timeout=policies.LLM_START_TO_CLOSE,
                heartbeat_timeout=policies.LLM_HEARTBEAT,
                retry_policy=policies.LLM_RETRY,
            )
            self._usage = self._usage + out.usage
            if not out.tool_calls:
                if out.content and out.content.strip():
                    return out.content
                raise SubtaskFailed("EmptyAnswer", "the model ended its turn without an answer")
            self._phase = "running tools"
            notes = await asyncio.gather(
                *(
                    self._run_call(branch, tools, scope, out.message_id, i, ref)
                    for i, ref in enumerate(out.tool_calls)
                )
            )
            kept = tuple(n for n in notes if n)
            if kept:
                # After every answer of the turn: a system message must not split a
                # tool-call block, or the next request is invalid for a strict provider.
                await workflow.execute_activity(
                    ACT_APPEND_NOTES,
                    AppendNotesInput(session_id=branch, scope=scope, turn=self._turn, notes=kept),
                    start_to_close_timeout=policies.SESSION_START_TO_CLOSE,
                    heartbeat_timeout=policies.SHORT_HEARTBEAT,
                    retry_policy=policies.SESSION_RETRY,
                )
            self._turn += 1
        raise SubtaskFailed(
            "MaxTurnsReached", f"no final answer after {max_turns} turns (max_turns={max_turns})"
        )

    async def _run_call(
        self,
        branch: str,
        tools: tuple[str, ...],
        scope: str,
        message_id: str,
        index: int,
        ref: ToolCallRef,
    ) -> str | None:
        """Carry out one tool call; returns a note for the parent session, if any."""
        if ref.name == DELEGATE_TOOL and DELEGATE_TOOL in tools:
            delegated: DelegateOutput = await workflow.execute_activity(
                ACT_DELEGATE,
                DelegateInput(
                    session_id=branch,
                    message_id=message_id,
                    call_index=index,
                    scope=scope,
                    turn=self._turn,
                    budget=self._inp.budget,
                    root_session_id=self._root,
                ),
                result_type=DelegateOutput,
                start_to_close_timeout=policies.LLM_START_TO_CLOSE,
                heartbeat_timeout=policies.LLM_HEARTBEAT,
                retry_policy=policies.LLM_RETRY,
            )
            self._usage = self._usage + delegated.usage
            return None
        if ref.name == SPAWN_TOOL and SPAWN_TOOL in tools:
            return await self._spawn(branch, scope, message_id, index, ref)
        await workflow.execute_activity(
            ACT_RUN_TOOL,
            ToolCallInput(
                session_id=branch,
                message_id=message_id,
                call_index=index,
                scope=scope,
                turn=self._turn,
                allowed_tools=tools,
            ),
            result_type=ToolCallOutput,
            start_to_close_timeout=policies.TOOL_START_TO_CLOSE,
            heartbeat_timeout=policies.SHORT_HEARTBEAT,
            retry_policy=policies.TOOL_RETRY,
        )
        return None

    async def _spawn(
        self, branch: str, scope: str, message_id: str, index: int, ref: ToolCallRef
    ) -> str | None:
        """A nested SubtaskWorkflow in its own child session; its summary is the result."""
        inp = self._inp
        turn = self._turn
        prep: PrepareSpawnOutput = await workflow.execute_activity(
            ACT_PREPARE_SPAWN,
            PrepareSpawnInput(
                session_id=branch,
                message_id=message_id,
                call_index=index,
                scope=scope,
                turn=turn,
                depth=inp.depth,
                root_session_id=self._root,
                known_agents=self._catalog.names(),
            ),
            result_type=PrepareSpawnOutput,
            start_to_close_timeout=policies.SESSION_START_TO_CLOSE,
            heartbeat_timeout=policies.SHORT_HEARTBEAT,
            retry_policy=policies.SESSION_RETRY,
        )
        if prep.refusal is not None or prep.child_session_id is None:
            return None  # the refusal is already the tool result; the agent carries on
        assert prep.agent is not None and prep.task is not None
        child_id = f"{prep.agent}-{turn}-{index}"
        child = SubtaskInput(
            plan_run_id=f"{inp.plan_run_id}/{inp.subtask.id}",
            subtask=Subtask(id=child_id, description=prep.task, agent=prep.agent),
            base_session_id=prep.child_session_id,
            budget=inp.budget,
            agents=inp.agents,
            root_session_id=self._root,
            depth=inp.depth + 1,
        )
        try:
            outcome = await workflow.execute_child_workflow(
                SubtaskWorkflow.run,
                child,
                id=f"{workflow.info().workflow_id}/{child_id}",
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
                if cause.details and isinstance(cause.details[0], dict):
                    try:
                        usage = SubtaskFailureDetails.model_validate(cause.details[0]).usage
                    except ValueError:
                        usage = Usage()
            else:
                text = str(cause or err)
            ok = False
        self._usage = self._usage + usage
        await workflow.execute_activity(
            ACT_FINISH_SPAWN,
            FinishSpawnInput(
                session_id=branch,
                scope=scope,
                turn=turn,
                call_index=index,
                tool_call_id=ref.id,
                child_session_id=prep.child_session_id,
                ok=ok,
                text=text,
            ),
            start_to_close_timeout=policies.SESSION_START_TO_CLOSE,
            heartbeat_timeout=policies.SHORT_HEARTBEAT,
            retry_policy=policies.SESSION_RETRY,
        )
        short = prep.child_session_id.removeprefix("sub-")[:8]
        return f"[sub-agent {short} {'result' if ok else 'error'}] {text}"
