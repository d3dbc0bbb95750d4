"""Subtasks held for an operator, in durable workflow state.

A plan with ``on_failure: "pause"`` does not fail a subtask that failed: ``PauseDesk``
holds it (status ``paused``, the error kept) while the rest of the plan carries on, until
an operator decides through one of the ``PauseHandlers`` Updates: ``resume_subtask`` runs
it again on a fresh branch, ``skip_subtask`` fails it for good, ``raise_budget`` sets new
limits and resumes what paused on the old ones. A plan with ``pause_timeout_s`` fails a
subtask nobody decided on in time (a durable timer per pause).

The plan's results are PlanWorkflow's; the desk changes only the rows of the subtasks it
holds or lets go, and wakes the scheduler whenever it does. Everything lives in the
workflow's state and history: a pause survives a worker's death, and a continue-as-new
carries it on (``carried``, then ``open`` in the next run, which starts its timers again).

Validators refuse a decision the plan cannot take (an unknown subtask, one that is not
paused, a budget that lowers a limit) before anything is written to the history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from durable_plans._errors import OperatorError
    from durable_plans.domain.contracts import ACT_TENANT_ROOM, TenantRoom, TenantRoomInput
    from durable_plans.domain.failures import FailureType, application_error
    from durable_plans.domain.models import (
        Budget,
        ErrorInfo,
        Plan,
        SubtaskResult,
        SubtaskStatus,
        Usage,
    )
    from durable_plans.domain.operations import (
        EDIT_UPDATE,
        NOT_STARTED,
        RAISE_BUDGET_UPDATE,
        RESUME_UPDATE,
        SKIP_UPDATE,
        BudgetRequest,
        EditRequest,
        SubtaskChanges,
        SubtaskRequest,
        budget_problem,
        change_problems,
        merged_budget,
        paused_problem,
    )
    from durable_plans.domain.plan_log import LogEntry, PlanLog

from durable_plans.workflows.policies import TENANT_ROOM_RETRY, TENANT_ROOM_TIMEOUT

__all__ = ["NOT_STARTED", "PauseDesk", "PauseHandlers", "refused"]


def refused(message: str) -> ApplicationError:
    """An operator's update that cannot be carried out (its validator's answer)."""
    return application_error(FailureType.INVALID_INPUT, message)


@dataclass
class PauseDesk:
    """One plan's paused subtasks, the limits its subtasks start with, and the timers that
    end pauses nobody decided on; shared by the plan's scheduler and its Updates."""

    # The scheduler's wake-up: called after every change to the plan's results.
    wake: Callable[[], None]
    plan: Plan | None = None
    # The plan's results and its subtasks' earlier attempts (PlanWorkflow's, shared).
    results: dict[str, SubtaskResult] = field(default_factory=dict)
    prior: dict[str, SubtaskResult] = field(default_factory=dict)
    # The limits subtasks start with from now on: the plan's, until an operator raises them.
    budget: Budget | None = None
    # What the plan has spent so far, as its report says (a budget must be above it).
    spent: Callable[[], Usage] = Usage
    since: dict[str, float] = field(default_factory=dict)  # paused subtask → when
    timers: list[asyncio.Task[None]] = field(default_factory=list)
    # The plan's log of decisions (PlanWorkflow's, shared): pauses and what ended them.
    log: PlanLog = field(default_factory=PlanLog)
    # Changes a paused subtask's definition (PlanWorkflow's: its next start runs it).
    apply_edit: Callable[[str, SubtaskChanges], None] = lambda sid, changes: None
    agents: frozenset[str] = frozenset()  # the agents the plan runs with

    def open(
        self,
        plan: Plan,
        results: dict[str, SubtaskResult],
        prior: dict[str, SubtaskResult],
        *,
        budget: Budget | None,
        paused_since: tuple[tuple[str, float], ...],
        agents: frozenset[str] = frozenset(),
    ) -> None:
        """The run's start: the plan's state, and the pauses a previous run carried over,
        their timers counting from when each pause began."""
        self.plan = plan
        self.results = results
        self.prior = prior
        self.budget = budget
        self.agents = agents
        self.since = dict(paused_since)
        for sid, since in self.since.items():
            self._watch(sid, since)
            self._watch_tenant(sid, since)

    @property
    def waiting(self) -> bool:
        """Whether any subtask waits for an operator."""
        return bool(self.since)

    def summary(self) -> dict[str, str]:
        """Paused subtask → why (``Type: message``), as the memo shows it."""
        return {
            sid: f"{r.error.type}: {r.error.message}"
            for sid, r in self.results.items()
            if r.status is SubtaskStatus.PAUSED and r.error is not None
        }

    def carried(self, plan: Plan) -> tuple[tuple[str, float], ...]:
        """The pauses a continuation of this run takes over, in the plan's order."""
        return tuple((s.id, self.since[s.id]) for s in plan.subtasks if s.id in self.since)

    # ------------------------------------------------------------------ the plan's side

    def failed(self, result: SubtaskResult, *, ran_with: Budget | None) -> None:
        """A subtask failed (its result recorded): held for an operator when its plan says
        ``on_failure: pause``, or run again at once when it ran out of a budget that an
        operator has raised since it started."""
        plan = self.plan
        assert plan is not None
        if result.status is not SubtaskStatus.FAILED or plan.on_failure_of(result.id) != "pause":
            return
        error = result.error
        out_of_budget = error is not None and error.type == FailureType.BUDGET_EXCEEDED
        why = f"{error.type}: {error.message}" if error is not None else ""
        now = workflow.now().timestamp()
        if out_of_budget and ran_with != self.budget:
            self._resume(result.id)
            self.log.add(
                LogEntry.of(
                    now,
                    "resumed",
                    subtask=result.id,
                    detail=f"at once: the budget was raised after it started ({why})",
                )
            )
            return
        self.results[result.id] = result.model_copy(update={"status": SubtaskStatus.PAUSED})
        self.since[result.id] = now
        self._watch(result.id, now)
        self.log.add(LogEntry.of(now, "paused", subtask=result.id, detail=why))
        self._watch_tenant(result.id, now)

    def cancel_all(self) -> None:
        """The plan was cancelled: every paused subtask ends cancelled, saying why."""
        for sid, paused in list(self.results.items()):
            if paused.status is SubtaskStatus.PAUSED and paused.error is not None:
                self.results[sid] = paused.model_copy(
                    update={
                        "status": SubtaskStatus.CANCELLED,
                        "error": ErrorInfo(
                            type=FailureType.CANCELLED,
                            message="the plan was cancelled while this subtask was paused "
                            f"({paused.error.type}: {paused.error.message})",
                        ),
                    }
                )
        self.since.clear()

    # ------------------------------------------------------------------ the operator's side

    def check_paused(self, request: SubtaskRequest) -> None:
        """Refuse (``InvalidInput``, naming the problem) a decision on a subtask that is
        not paused here."""
        if self.plan is None:
            raise refused(NOT_STARTED)
        problem = paused_problem(self.plan, self.results, request.subtask)
        if problem is not None:
            raise refused(problem)

    def check_budget(self, request: BudgetRequest) -> None:
        """Refuse a budget request that sets no limit, or a limit the plan has spent."""
        if self.plan is None:
            raise refused(NOT_STARTED)
        try:
            merged_budget(self.budget, request)
        except OperatorError as err:
            raise refused(str(err)) from None
        problem = budget_problem(request, self.spent())
        if problem is not None:
            raise refused(problem)

    def check_edit(self, request: EditRequest) -> None:
        """Refuse an edit of a subtask that is not paused here, or changes that cannot be
        made (no field, an empty description, an agent the plan lacks, a bad model)."""
        self.check_paused(SubtaskRequest(subtask=request.subtask))
        problems = change_problems(request.subtask, request.changes, self.agents)
        if problems:
            raise refused("; ".join(problems))

    def edit(self, request: EditRequest) -> str:
        """Change the paused subtask, then run it again (on a fresh branch, as resume)."""
        fields = ", ".join(request.changes.fields)
        self.apply_edit(request.subtask, request.changes)
        self._resume(request.subtask)
        self._logged(
            "edited", request, subtask=request.subtask, detail=f"changed {fields}; resumed"
        )
        workflow.logger.info("subtask %s edited by %s", request.subtask, request.by or "?")
        return f"subtask {request.subtask!r} changed ({fields}) and resumed"

    def resume(self, request: SubtaskRequest) -> str:
        self._resume(request.subtask)
        self._logged("resumed", request, subtask=request.subtask)
        workflow.logger.info("subtask %s resumed by %s", request.subtask, request.by or "?")
        return f"subtask {request.subtask!r} resumed"

    def skip(self, request: SubtaskRequest) -> str:
        who = f" by {request.by}" if request.by else ""
        self._fail(request.subtask, f"skipped{who} while paused")
        self._logged("skipped", request, subtask=request.subtask)
        workflow.logger.info("subtask %s skipped by %s", request.subtask, request.by or "?")
        return f"subtask {request.subtask!r} failed for good; its dependents are skipped"

    def raise_budget(self, request: BudgetRequest) -> list[str]:
        self.budget = merged_budget(self.budget, request)
        resumed = [
            sid
            for sid, r in self.results.items()
            if r.status is SubtaskStatus.PAUSED
            and r.error is not None
            and r.error.type == FailureType.BUDGET_EXCEEDED
        ]
        for sid in resumed:
            self._resume(sid)
        limits = []
        if request.max_tokens is not None:
            limits.append(f"max_tokens {request.max_tokens:,}")
        if request.max_cost_usd is not None:
            limits.append(f"max_cost_usd ${request.max_cost_usd:g}")
        detail = ", ".join(limits)
        if resumed:
            detail += f"; resumed {', '.join(resumed)}"
        self._logged("budget", request, detail=detail)
        self.wake()
        workflow.logger.info("budget set to %s by %s", self.budget, request.by or "?")
        return resumed

    def _logged(
        self,
        kind: Literal["resumed", "skipped", "budget", "edited"],
        request: SubtaskRequest | BudgetRequest | EditRequest,
        *,
        subtask: str = "",
        detail: str = "",
    ) -> None:
        now = workflow.now().timestamp()
        self.log.add(LogEntry.of(now, kind, by=request.by, subtask=subtask, detail=detail))

    # ------------------------------------------------------------------ changes

    def _resume(self, sid: str) -> None:
        """Back to pending with its attempt so far as the prior one: the scheduler starts it
        again (its dependencies completed before it first ran)."""
        self.prior[sid] = self.results.pop(sid)
        self.since.pop(sid, None)
        self.wake()

    def _fail(self, sid: str, why: str) -> None:
        """Failed for good, the pause's reason kept and ``why`` added to it."""
        paused = self.results[sid]
        assert paused.error is not None
        self.results[sid] = paused.model_copy(
            update={
                "status": SubtaskStatus.FAILED,
                "error": paused.error.model_copy(
                    update={"message": f"{paused.error.message} ({why})"}
                ),
            }
        )
        self.since.pop(sid, None)
        self.wake()

    def _watch(self, sid: str, since: float) -> None:
        """A timer for the pause that began at ``since``, when the plan has a timeout."""
        plan = self.plan
        assert plan is not None
        if plan.pause_timeout_s is None:
            return
        remaining = plan.pause_timeout_s - (workflow.now().timestamp() - since)
        self.timers.append(asyncio.create_task(self._time_out(sid, since, max(remaining, 0.0))))

    def _watch_tenant(self, sid: str, since: float) -> None:
        """For a pause on the tenant's daily cap: resume once the cap has room again."""
        plan = self.plan
        paused = self.results.get(sid)
        assert plan is not None
        if (
            plan.tenant is None
            or paused is None
            or paused.error is None
            or paused.error.type != FailureType.TENANT_BUDGET_EXCEEDED
        ):
            return
        self.timers.append(asyncio.create_task(self._await_tenant_room(sid, since, plan.tenant)))

    async def _await_tenant_room(self, sid: str, since: float, tenant: str) -> None:
        """Ask the workers (``activities/tenant_caps.py``) whether ``tenant`` has room, then
        every ``recheck_s`` the caps file sets, until it has or the pause ends otherwise;
        raising the cap (or a new day) resumes the subtask, as an operator's resume would."""

        def decided() -> bool:
            return self.since.get(sid) != since

        while not decided():
            room = await workflow.execute_activity(
                ACT_TENANT_ROOM,
                TenantRoomInput(tenant=tenant),
                result_type=TenantRoom,
                start_to_close_timeout=TENANT_ROOM_TIMEOUT,
                retry_policy=TENANT_ROOM_RETRY,
            )
            if decided():
                return
            if room.room:
                self._resume(sid)
                now = workflow.now().timestamp()
                detail = f"tenant {tenant!r} has room again ({room.why or 'within its cap'})"
                self.log.add(
                    LogEntry.of(now, "resumed", by="tenant cap", subtask=sid, detail=detail)
                )
                return
            try:
                await workflow.wait_condition(decided, timeout=room.recheck_s)
            except TimeoutError:
                continue

    async def _time_out(self, sid: str, since: float, seconds: float) -> None:
        """Fail a subtask still paused (the same pause) when its time is up."""

        def decided() -> bool:
            return self.since.get(sid) != since

        try:
            await workflow.wait_condition(decided, timeout=seconds)
            return
        except TimeoutError:
            pass
        paused = self.results.get(sid)
        if decided() or paused is None or paused.error is None:
            return
        plan = self.plan
        assert plan is not None
        why = f"paused longer than pause_timeout_s={plan.pause_timeout_s:g}"
        self._fail(sid, why)
        now = workflow.now().timestamp()
        self.log.add(LogEntry.of(now, "timed_out", by="timeout", subtask=sid, detail=why))


class PauseHandlers:
    """The operators' Updates on a plan's paused subtasks, mixed into PlanWorkflow."""

    pause_desk: PauseDesk  # set by the workflow's ``__init__``

    @workflow.update(name=RESUME_UPDATE)
    def resume_subtask(self, request: SubtaskRequest) -> str:
        """Run a paused subtask again, on a fresh branch from the base session."""
        return self.pause_desk.resume(request)

    @resume_subtask.validator
    def _validate_resume(self, request: SubtaskRequest) -> None:
        self.pause_desk.check_paused(request)

    @workflow.update(name=SKIP_UPDATE)
    def skip_subtask(self, request: SubtaskRequest) -> str:
        """Fail a paused subtask for good: its dependents are skipped, the plan will fail."""
        return self.pause_desk.skip(request)

    @skip_subtask.validator
    def _validate_skip(self, request: SubtaskRequest) -> None:
        self.pause_desk.check_paused(request)

    @workflow.update(name=EDIT_UPDATE)
    def edit_subtask(self, request: EditRequest) -> str:
        """Change a paused subtask (description, agent, model) and run it again."""
        return self.pause_desk.edit(request)

    @edit_subtask.validator
    def _validate_edit(self, request: EditRequest) -> None:
        self.pause_desk.check_edit(request)

    @workflow.update(name=RAISE_BUDGET_UPDATE)
    def raise_budget(self, request: BudgetRequest) -> list[str]:
        """Set new limits for subtasks started from now on and resume every subtask that
        paused on the budget; returns the ids resumed."""
        return self.pause_desk.raise_budget(request)

    @raise_budget.validator
    def _validate_budget(self, request: BudgetRequest) -> None:
        self.pause_desk.check_budget(request)
