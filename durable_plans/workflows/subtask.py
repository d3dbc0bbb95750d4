"""SubtaskWorkflow: one agent loop on its own session branch, truthful about the outcome.

``completed`` is returned only for a real final answer; an LLM error after retries, an
empty answer or the turn limit make the workflow fail, with the cause attached, so
Temporal Web and the plan report show the same truth. The branch is closed in
every case, cancellation included. The loop itself lives in ``workflows.agent_loop``.

With a workspace (``SubtaskInput.workspace``) the subtask works on a tree of its own: from
the plan's base, its one dependency's result, or the merge of several (a conflict fails
the subtask with ``WorkspaceConflict``, which ``on_failure: pause`` holds for an operator's
resolution); its result is the tree's last commit, and a failure names its attempt's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from durable_plans.domain.agents import BUILTIN_CATALOG, REVISE_PLAN_TOOL, AgentCatalog
    from durable_plans.domain.checks import (
        DEFAULT_CHECK_ROUNDS,
        CheckRun,
        failure_line,
        feedback_message,
        shown,
    )
    from durable_plans.domain.contracts import (
        ACT_END_SUBTASK,
        SUBTASK_WORKFLOW,
        BeginSubtaskInput,
        EndSubtaskInput,
        SubtaskFailureDetails,
        SubtaskInput,
        SubtaskOutcome,
    )
    from durable_plans.domain.failures import (
        FailureType,
        activity_failure,
        subtask_failed_error,
    )
    from durable_plans.domain.ids import (
        attempt_key,
        branch_session_id,
        snapshot_id,
        subtask_scope,
    )
    from durable_plans.domain.workspace_refs import WorkspaceRef

from durable_plans.workflows.agent_loop import AgentLoop, LoopFailed
from durable_plans.workflows.approval_desk import ApprovalHandlers
from durable_plans.workflows.checks import run_check_round, tell_the_model
from durable_plans.workflows.live import release
from durable_plans.workflows.plan_workspace import WorkspaceStepFailed, start_head
from durable_plans.workflows.revise_tool import revise_plan_tool
from durable_plans.workflows.store_ops import store_op

# What a passing check's run keeps of its output in the outcome and the report.
PASSED_OUTPUT_CHARS = 500


@workflow.defn(name=SUBTASK_WORKFLOW)
class SubtaskWorkflow(ApprovalHandlers):
    @workflow.init
    def __init__(self, inp: SubtaskInput) -> None:
        self._loop: AgentLoop | None = None
        # The LLM calls' live text, for dplan run/status --follow (workflows/live.py).
        self._stream = WorkflowStream()
        # Its check runs, every round's (none without a check: ``domain/checks.py``).
        self._checks: list[CheckRun] = []

    @workflow.query
    def progress(self) -> dict[str, object]:
        loop = self._loop
        if loop is None:
            return {"phase": "starting", "turn": 0, "llm_calls": 0, "usage": {}}
        progress: dict[str, object] = {
            "phase": loop.phase,
            "turn": loop.turn,
            "llm_calls": loop.llm_calls,
            "usage": loop.usage.model_dump(),
            "latest": loop.latest,
        }
        if self._checks:
            progress["checks"] = [c.model_dump(mode="json") for c in self._checks]
        return progress

    @workflow.run
    async def run(self, inp: SubtaskInput) -> SubtaskOutcome:
        sub = inp.subtask
        catalog = AgentCatalog(agents=inp.agents) if inp.agents else BUILTIN_CATALOG
        spec = catalog.get(sub.agent)
        if sub.model is not None:  # this subtask's own model (an edit and re-run's)
            spec = spec.model_copy(update={"model": sub.model})
        root = inp.root_session_id or inp.base_session_id
        # A retried or resumed attempt works on a branch of its own, from the base.
        key = attempt_key(sub.id, inp.retries)
        branch = branch_session_id(inp.base_session_id, inp.plan_run_id, key)
        snap = snapshot_id(inp.base_session_id, inp.plan_run_id, key)
        scope = subtask_scope(inp.plan_run_id, key)
        revise = revise_plan_tool(inp, branch, scope) if REVISE_PLAN_TOOL in spec.tools else None
        loop = AgentLoop(
            session_id=branch,
            scope=scope,
            spec=spec,
            catalog=catalog,
            root_session_id=root,
            budget=inp.budget,
            tenant=inp.tenant,
            depth=inp.depth,
            child_scope=scope,
            approvals=self.approval_desk,
            approval=inp.approval,
            mcp_servers=inp.mcp_tools,
            custom_tools={REVISE_PLAN_TOOL: revise} if revise is not None else {},
        )
        self.approval_desk.subtask = sub.id
        self.approval_desk.report_to = inp.report_to
        self._loop = loop
        # Its checks: its own, else its agent's (``domain/checks.py``); a spawned sub-agent
        # (depth > 0) is not gated by its agent's: its parent's checks judge the result.
        agent_checks = spec.check if inp.depth == 0 else None
        checks = sub.check if sub.check is not None else agent_checks
        rounds = sub.check_rounds or spec.check_rounds or inp.check_rounds or DEFAULT_CHECK_ROUNDS

        begin = BeginSubtaskInput(
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
            retries=inp.retries,
            plan_data=inp.plan_data,
        )

        def end(succeeded: bool) -> EndSubtaskInput:
            return EndSubtaskInput(
                base_session_id=inp.base_session_id,
                branch_session_id=branch,
                snapshot_id=snap,
                succeeded=succeeded,
            )

        # The first LLM call builds the branch and the answering one closes it: no local
        # activity of their own (each costs about a workflow task).
        loop.begin = begin
        # A checked subtask's branch is closed once its checks passed (below).
        loop.close_on_answer = None if checks else end(True)
        loop.llm_local = inp.llm_local

        def failure_details() -> SubtaskFailureDetails:
            return SubtaskFailureDetails(
                llm_calls=loop.llm_calls,
                models=loop.models,
                usage=loop.usage,
                branch_session_id=branch,
                commit=loop.head,
                checks=tuple(self._checks),
            )

        succeeded = False
        try:
            start = inp.workspace
            if start is not None:
                if len(start.parents) > 1:
                    loop.phase = "merging " + ", ".join(sid for sid, _ in start.parents)
                head = await start_head(start, sub.id, local=loop.llm_local)
                loop.workspace = WorkspaceRef(
                    plan_id=start.plan_id, tree=start.tree, head=head, identity=start.identity
                )
            max_turns = inp.max_turns or spec.max_turns
            answer = await loop.run(max_turns)
            if checks:
                answer = await self._verified(loop, answer, checks, rounds, max_turns)
            succeeded = True
            return SubtaskOutcome(
                result=answer,
                llm_calls=loop.llm_calls,
                models=loop.models,
                usage=loop.usage,
                branch_session_id=branch,
                commit=loop.head,
                checks=tuple(self._checks),
            )
        except WorkspaceStepFailed as failure:
            raise subtask_failed_error(failure.type, failure.message, failure_details()) from None
        except LoopFailed as failure:
            raise subtask_failed_error(failure.type, failure.message, failure_details()) from None
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                # The activity was cancelled because this workflow is being cancelled:
                # end Cancelled, not Failed, so the plan reports the truth.
                raise asyncio.CancelledError() from err
            type_, message = activity_failure(err)
            raise subtask_failed_error(type_, message, failure_details()) from err
        finally:
            if not loop.branch_closed:
                loop.phase = "closing"
                # Runs on cancellation too: the cancel request was delivered already, so
                # this activity is scheduled normally and the branch is never left open.
                await store_op(ACT_END_SUBTASK, end(succeeded))
            await release(self._stream)

    def _keep(self, run: CheckRun) -> None:
        """A check run, for the outcome: a passing run's output cut to its last lines (what
        failed is what a reader needs), so many rounds stay a small payload."""
        if run.passed and len(run.output) > PASSED_OUTPUT_CHARS:
            run = run.model_copy(update={"output": run.output[-PASSED_OUTPUT_CHARS:]})
        self._checks.append(run)

    async def _verified(
        self,
        loop: AgentLoop,
        answer: str,
        checks: tuple[tuple[str, ...], ...],
        rounds: int,
        max_turns: int,
    ) -> str:
        """The answer once every check passed on the tree's last commit; a failed check
        goes back to the model as a user message and the loop goes on, ``rounds`` failed
        rounds at most (then ``CheckFailed``)."""
        round_ = 1
        while True:
            if loop.workspace is None:
                raise LoopFailed(
                    FailureType.CHECK_FAILED,
                    "checks need the workspace kept in git; this run has no tree to check",
                )

            def starting(argv: Sequence[str]) -> None:
                loop.phase = f"checking: {shown(argv)}"[:200]

            loop.phase = "checking"
            failed = await run_check_round(
                loop.workspace,
                checks,
                round_,
                on_run=self._keep,
                on_start=starting,
                sandbox=loop.spec.run_command.sandbox if loop.spec.run_command else None,
            )
            if failed is None:
                loop.phase = "checked"
                return answer
            if round_ >= rounds:
                raise LoopFailed(
                    FailureType.CHECK_FAILED,
                    f"{failure_line(failed)} in {rounds} of {rounds} round(s); its output "
                    f"ends with:\n{failed.output[-1500:]}",
                )
            loop.phase = "told of a failed check"
            await tell_the_model(
                loop.session_id, loop.scope, round_, feedback_message(failed, rounds - round_)
            )
            round_ += 1
            answer = await loop.run(max_turns)
