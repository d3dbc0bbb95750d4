"""Tool calls that wait for a person, in durable workflow state.

A workflow that runs an agent loop (SubtaskWorkflow, SessionWorkflow) mixes in
``ApprovalHandlers``: the ``approve_tool_call`` and ``reject_tool_call`` Updates and the
``approvals`` query. The loop hands a call that needs approval to ``ApprovalDesk.ask``,
which waits on workflow state until an Update decides it (or ``timeout_s`` passes: a
durable timer). Nothing lives outside the history: a worker killed while a call waits
replays the wait (and any decision, since accepted Updates are history events too), and a
plan's continue-as-new never touches it (running subtasks keep running).

Validators reject an unknown or already decided call before anything is recorded; two
operators deciding at once may both pass a validator, so the handler checks again before
it records, and exactly one decision wins (the other Update fails, naming the winner).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from durable_plans.domain.approval_rules import (
        QUERY_APPROVALS,
        TIMEOUT_WHO,
        UPDATE_APPROVE,
        UPDATE_REJECT,
        ApprovalDecision,
        ApprovalPolicy,
        ApproveInput,
        PendingApproval,
        RejectInput,
        WorkflowApprovals,
        edited_arguments_problem,
        local_call_id,
        timeout_reason,
    )
    from durable_plans.domain.contracts import (
        ACT_ANSWER_CALL,
        ACT_DESCRIBE_CALL,
        AnswerCallInput,
        DescribeCallInput,
        DescribeCallOutput,
    )
    from durable_plans.domain.failures import FailureType, application_error
    from durable_plans.domain.plan_log import LOG_SIGNAL, LogEntry

from durable_plans.workflows.store_ops import store_op


@dataclass
class ApprovalDesk:
    """One workflow's waiting calls and decisions, shared by its loop and its handlers."""

    # Prepended to ``TURN.INDEX``: a conversation's turns restart with every message.
    prefix: str = ""
    subtask: str = ""
    pending: dict[str, PendingApproval] = field(default_factory=dict)
    decided: dict[str, ApprovalDecision] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)  # running spawned sub-agents
    # The plan workflow told of every decision here, for its log; empty: none (a
    # conversation, or a sub-agent a conversation spawned).
    report_to: str = ""

    def snapshot(self) -> WorkflowApprovals:
        return WorkflowApprovals(
            workflow_id=workflow.info().workflow_id,
            subtask=self.subtask,
            pending=tuple(self.pending.values()),
            decided=tuple(self.decided.values()),
            children=tuple(self.children),
        )

    # ------------------------------------------------------------------ the waiting side

    async def ask(
        self,
        *,
        session_id: str,
        message_id: str,
        scope: str,
        turn: int,
        index: int,
        agent: str,
        policy: ApprovalPolicy | None,
        editable: bool,
    ) -> ApprovalDecision:
        """Wait for a decision on the ``index``-th call of ``turn``; a rejection (timeout
        included) is already written as the call's tool result when this returns."""
        described: DescribeCallOutput = await store_op(
            ACT_DESCRIBE_CALL,
            DescribeCallInput(session_id=session_id, message_id=message_id, call_index=index),
            result_type=DescribeCallOutput,
        )
        call_id = local_call_id(self.prefix, turn, index)
        timeout_s = policy.timeout_s if policy is not None else None
        self.pending[call_id] = PendingApproval(
            call_id=call_id,
            tool=described.tool,
            arguments=described.arguments,
            agent=agent,
            since=workflow.now().isoformat(),
            timeout_s=timeout_s,
            editable=editable,
        )
        self._show()
        try:
            await workflow.wait_condition(
                lambda: call_id in self.decided,
                timeout=timedelta(seconds=timeout_s) if timeout_s is not None else None,
                timeout_summary=f"approval_timeout of call {call_id} ({described.tool})",
            )
        except TimeoutError:
            self.decided[call_id] = ApprovalDecision(
                call_id=call_id,
                tool=described.tool,
                approved=False,
                who=TIMEOUT_WHO,
                at=workflow.now().isoformat(),
                reason=timeout_reason(timeout_s or 0),
            )
        finally:
            self.pending.pop(call_id, None)
            self._show()
        decision = self.decided[call_id]
        await self._tell_plan(decision)
        if not decision.approved:
            await store_op(
                ACT_ANSWER_CALL,
                AnswerCallInput(
                    session_id=session_id,
                    message_id=message_id,
                    call_index=index,
                    scope=scope,
                    turn=turn,
                    text=rejection_text(decision),
                ),
                summary=f"{described.tool} rejected by {decision.who}"[:200],
            )
        return decision

    async def _tell_plan(self, decision: ApprovalDecision) -> None:
        """Send the decision to the plan's log (``domain/plan_log.py``). A plan that has
        ended cannot take it; the decision stands all the same, in this workflow."""
        if not self.report_to:
            return
        path = workflow.info().workflow_id.removeprefix(self.report_to + "/")
        detail = decision.tool
        if decision.arguments is not None:
            detail += " with replaced arguments"
        if decision.reason:
            detail += f": {decision.reason}"
        entry = LogEntry.of(
            workflow.now().timestamp(),
            "approved" if decision.approved else "rejected",
            by=decision.who,
            subtask=path.partition("/")[0],
            call=f"{path}:{decision.call_id}",
            detail=detail,
        )
        try:
            await workflow.get_external_workflow_handle(self.report_to).signal(LOG_SIGNAL, entry)
        except FailureError as err:
            workflow.logger.warning("the plan's log did not take a decision: %s", err)

    def _show(self) -> None:
        """Temporal Web's "current details": what this workflow waits for, if anything."""
        lines = [
            f"waiting for approval: call {p.call_id} {p.tool}({p.arguments[:200]}) since {p.since}"
            for p in self.pending.values()
        ]
        workflow.set_current_details("\n".join(lines))

    # ------------------------------------------------------------------ the deciding side

    def problem(self, call_id: str, arguments: str | None = None) -> str | None:
        """Why a decision on ``call_id`` cannot be taken now, or None."""
        done = self.decided.get(call_id)
        if done is not None:
            verb = "approved" if done.approved else "rejected"
            return f"call {call_id} ({done.tool}) was already {verb} by {done.who} at {done.at}"
        pending = self.pending.get(call_id)
        if pending is None:
            waiting = ", ".join(self.pending) or "none"
            return f"no tool call {call_id!r} is waiting for approval here (waiting: {waiting})"
        if arguments is not None:
            if not pending.editable:
                return f"the arguments of a {pending.tool} call cannot be replaced (--args)"
            return edited_arguments_problem(arguments)
        return None

    def check(self, call_id: str, arguments: str | None = None) -> None:
        """Raise the Update's failure when the decision cannot be taken."""
        problem = self.problem(call_id, arguments)
        if problem is not None:
            raise application_error(FailureType.APPROVAL_REFUSED, problem)

    def decide(
        self, call_id: str, *, approved: bool, who: str, reason: str = "", arguments: str | None
    ) -> ApprovalDecision:
        # Checked again: a second Update may have passed its validator before this one ran.
        self.check(call_id, arguments)
        decision = ApprovalDecision(
            call_id=call_id,
            tool=self.pending[call_id].tool,
            approved=approved,
            who=who,
            at=workflow.now().isoformat(),
            reason=reason,
            arguments=arguments,
        )
        self.decided[call_id] = decision
        return decision


def rejection_text(decision: ApprovalDecision) -> str:
    """The tool result of a rejected call, worded for the model that made it."""
    if decision.who == TIMEOUT_WHO:
        why = f"nobody approved it in time ({decision.reason})"
    else:
        why = f"{decision.who} rejected it: {decision.reason}"
    return (
        f"error: this {decision.tool} call did not run; {why}. Do not repeat it unchanged: "
        "carry on without it, or take another way that addresses the reason."
    )


def edited_note(decision: ApprovalDecision) -> str:
    """The session note saying an operator replaced a call's arguments before it ran."""
    return (
        f"[approval] {decision.who} approved the {decision.tool} call {decision.call_id} "
        f"with replaced arguments: {(decision.arguments or '')[:1000]}"
    )


class ApprovalHandlers:
    """The approval Updates and query, mixed into a workflow class that runs agent loops."""

    _approval_desk: ApprovalDesk | None = None

    @property
    def approval_desk(self) -> ApprovalDesk:
        if self._approval_desk is None:
            self._approval_desk = ApprovalDesk()
        return self._approval_desk

    @workflow.query(name=QUERY_APPROVALS)
    def approvals(self) -> WorkflowApprovals:
        return self.approval_desk.snapshot()

    @workflow.update(name=UPDATE_APPROVE)
    def approve_tool_call(self, inp: ApproveInput) -> ApprovalDecision:
        return self.approval_desk.decide(
            inp.call_id, approved=True, who=inp.who, arguments=inp.arguments
        )

    @approve_tool_call.validator
    def _validate_approve(self, inp: ApproveInput) -> None:
        self.approval_desk.check(inp.call_id, inp.arguments)

    @workflow.update(name=UPDATE_REJECT)
    def reject_tool_call(self, inp: RejectInput) -> ApprovalDecision:
        return self.approval_desk.decide(
            inp.call_id, approved=False, who=inp.who, reason=inp.reason, arguments=None
        )

    @reject_tool_call.validator
    def _validate_reject(self, inp: RejectInput) -> None:
        self.approval_desk.check(inp.call_id)


__all__ = ["ApprovalDesk", "ApprovalHandlers", "edited_note", "rejection_text"]
