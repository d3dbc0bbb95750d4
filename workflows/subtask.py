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
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from domain.agents import agent_spec
    from domain.contracts import (
        ACT_BEGIN_SUBTASK,
        ACT_CALL_LLM,
        ACT_END_SUBTASK,
        ACT_RUN_TOOL,
        BeginSubtaskInput,
        BeginSubtaskOutput,
        EndSubtaskInput,
        LlmCallInput,
        LlmCallOutput,
        SubtaskFailureDetails,
        SubtaskInput,
        SubtaskOutcome,
        ToolCallInput,
        ToolCallOutput,
    )
    from domain.ids import snapshot_id
    from domain.models import Usage

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
        spec = agent_spec(sub.agent)
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
            ),
            result_type=BeginSubtaskOutput,
            start_to_close_timeout=policies.SESSION_START_TO_CLOSE,
            heartbeat_timeout=policies.SHORT_HEARTBEAT,
            retry_policy=policies.SESSION_RETRY,
        )

        succeeded = False
        try:
            answer = await self._agent_loop(
                branch, sub.agent, spec.tools, scope, inp.max_turns or spec.max_turns
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
        self, branch: str, agent: str, tools: tuple[str, ...], scope: str, max_turns: int
    ) -> str:
        while self._turn < max_turns:
            self._phase = "thinking"
            # Counted before the call: a call that fails still happened (and may be billed).
            self._llm_calls += 1
            out: LlmCallOutput = await workflow.execute_activity(
                ACT_CALL_LLM,
                LlmCallInput(
                    session_id=branch, agent=agent, scope=scope, turn=self._turn, tools=tools
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
            await asyncio.gather(
                *(
                    workflow.execute_activity(
                        ACT_RUN_TOOL,
                        ToolCallInput(
                            session_id=branch,
                            message_id=out.message_id,
                            call_index=i,
                            scope=scope,
                            turn=self._turn,
                            agent=agent,
                        ),
                        result_type=ToolCallOutput,
                        start_to_close_timeout=policies.TOOL_START_TO_CLOSE,
                        heartbeat_timeout=policies.SHORT_HEARTBEAT,
                        retry_policy=policies.TOOL_RETRY,
                    )
                    for i in range(len(out.tool_calls))
                )
            )
            self._turn += 1
        raise SubtaskFailed(
            "MaxTurnsReached", f"no final answer after {max_turns} turns (max_turns={max_turns})"
        )
