"""``Client``: every operation on plans, typed, returning values and raising one hierarchy.

The ``dplan`` command line is a layer over this class and nothing more: what a person can
do from a terminal, a service can do from Python with the same rules and the same
sentences when something is refused. Temporal stays visible (``client.temporal``) for
callers who need more, but nothing here asks them to know workflow names, queries or
updates.
"""

from __future__ import annotations

import asyncio
import builtins
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from os import PathLike
from pathlib import Path
from typing import Any

import temporalio.client
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.service import RPCError, RPCStatusCode

from durable_plans._errors import (
    AgentsFileError,
    InvalidArgument,
    InvalidPlan,
    PlanNotFound,
    PlanValidationError,
    Refused,
    StatusUnavailable,
)
from durable_plans.activities.plan_data import stored_report
from durable_plans.client._approvals import (
    PendingCall,
    check_decision,
    decide,
    pending_calls,
    pending_calls_everywhere,
)
from durable_plans.client._conversations import (
    Conversation,
    check_session_id,
    open_conversation,
)
from durable_plans.client._live import PlanWatch
from durable_plans.client._operate import (
    ForkedPlan,
    check_changes,
    plan_edits,
    start_fork,
    start_retry,
    update_running_plan,
)
from durable_plans.client._operator import default_operator
from durable_plans.client._plans import (
    PlanRun,
    describe_plan,
    notification_outcome,
    plan_run,
    plan_status,
    query_status,
    start_plan,
    wait_for_report,
    with_default_budget,
    worker_count,
)
from durable_plans.client._runs import RunSummary, plan_runs
from durable_plans.client._schedules import (
    ScheduleSummary,
    act_on_schedule,
    create_schedule,
    list_schedules,
)
from durable_plans.client._visibility import PlanSummary, list_plans
from durable_plans.client._watch import PlanEvent, watch_plan
from durable_plans.connection import QUERY_RPC_TIMEOUT
from durable_plans.domain.agents import AgentCatalog
from durable_plans.domain.agents_loader import load_catalog
from durable_plans.domain.approval_rules import ApprovalDecision
from durable_plans.domain.models import DeliveryOutcome, Message, Plan, PlanReport, Subtask
from durable_plans.domain.operations import (
    EDIT_UPDATE,
    PLAN_QUERY,
    RAISE_BUDGET_UPDATE,
    RESUME_UPDATE,
    SKIP_UPDATE,
    SUBTASK_QUERY,
    BudgetRequest,
    EditRequest,
    SubtaskChanges,
    SubtaskEdit,
    SubtaskRequest,
)
from durable_plans.domain.plan_data import size_problems
from durable_plans.domain.plan_loader import load_plan_file, plan_from_data, validate_plan
from durable_plans.domain.plan_log import cancel_reason
from durable_plans.domain.revisions import REVISE_UPDATE, Revision, RevisionRequest
from durable_plans.domain.tenants import TenantSpend, ledger_of, read_tenants
from durable_plans.namespace_setup import setup_search_attributes
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from durable_plans.temporal_client import connect
from durable_plans.workspace_gc import GcReport, collect

__all__ = ["Client", "agents_of", "load_plan"]

PlanSource = Plan | Mapping[str, Any] | str | PathLike[str]


def load_plan(source: PlanSource, *, agents: AgentCatalog | None = None) -> Plan:
    """A validated plan from a ``Plan``, the plan file's data, or a path to the file.

    Raises ``InvalidPlan`` with one line per problem (unique ids, known dependencies and
    agents, no cycle ...), the same lines ``dplan validate`` prints."""
    known = (agents or load_catalog(None)).names()
    try:
        if isinstance(source, Plan):
            problems = validate_plan(source, known_agents=known)
            if problems:
                raise PlanValidationError(problems)
            plan = source
        elif isinstance(source, Mapping):
            plan = plan_from_data(dict(source), known_agents=known)
        else:
            plan = load_plan_file(Path(source), known_agents=known)
        too_big = size_problems(plan, packed=False)  # what would stop it from being carried
        if too_big:
            raise PlanValidationError(too_big)
        return plan
    except PlanValidationError as err:
        raise InvalidPlan("invalid plan", err.problems) from None


def agents_of(settings: Settings) -> AgentCatalog:
    """The built-in agents merged with ``DPLAN_AGENTS``'s file; ``InvalidArgument`` naming
    the file and its problems when it cannot be used."""
    try:
        return load_catalog(settings.agents_file, sandboxed=settings.sandbox != "none")
    except AgentsFileError as err:
        raise InvalidArgument(
            f"invalid agents file: {settings.agents_file}", err.problems
        ) from None


class Client:
    """A connection to the plans of one Temporal namespace and task queue.

    ``operator`` is who the workflows record as deciding (approvals, resume, skip,
    budget): ``user@host`` by default, a service's own name when it acts for people.
    """

    def __init__(
        self,
        temporal: temporalio.client.Client,
        settings: Settings | None = None,
        *,
        operator: str | None = None,
    ) -> None:
        self._temporal = temporal
        self._settings = settings if settings is not None else Settings.from_env()
        self._operator = operator or default_operator()
        self._agents: AgentCatalog | None = None
        self._plan_store: SessionStore | None = None
        self._opened_store: SessionStore | None = None
        self._store_lock = asyncio.Lock()

    def use_plan_store(self, store: SessionStore | None) -> None:
        """The workers' session store, for a client that can reach it (``--embedded``):
        a big plan is put there and sent by reference, so no payload limit applies to
        it. Without it a big plan is sent packed (``domain.plan_data``)."""
        self._plan_store = store

    @classmethod
    async def connect(
        cls, settings: Settings | None = None, *, operator: str | None = None
    ) -> Client:
        """Connect with ``settings`` (default: the environment, as ``dplan`` reads it).

        Raises ``TemporalUnreachable`` naming the address and what to change."""
        resolved = settings if settings is not None else Settings.from_env()
        who = operator or default_operator()
        return cls(await connect(resolved, identity=who), resolved, operator=who)

    @property
    def temporal(self) -> temporalio.client.Client:
        """The Temporal client underneath, wired by ``DurablePlansPlugin``."""
        return self._temporal

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def operator(self) -> str:
        return self._operator

    # ------------------------------------------------------------------ plans

    def agents(self) -> AgentCatalog:
        """The agents plans start with: the built-ins merged with ``DPLAN_AGENTS``."""
        if self._agents is None:
            self._agents = agents_of(self._settings)
        return self._agents

    async def start(self, plan: PlanSource) -> str:
        """Validate and start ``plan``; returns its id (the workflow id).

        The agent catalog and the default budget are fixed in the plan's input now, so
        every worker that picks it up runs the same agents under the same limits.
        Raises ``InvalidPlan`` or ``PlanAlreadyRunning``."""
        agents = self.agents()
        valid = load_plan(plan, agents=agents)
        await start_plan(
            self._temporal, valid, self._settings, catalog=agents, store=self._plan_store
        )
        return valid.id

    async def create_schedule(
        self,
        schedule_id: str,
        plan: PlanSource,
        *,
        cron: str | None = None,
        every: timedelta | None = None,
        overlap: str = "skip",
        paused: bool = False,
    ) -> None:
        """A Temporal Schedule that starts ``plan`` (validated now) as a new plan on
        ``cron`` or ``every``; each run's id is ``SCHEDULE_ID-<time>``. ``overlap`` says
        what a run that comes while the last still runs does: ``skip``, ``buffer-one``
        or ``allow-all``. ``Refused`` when the id is taken."""
        agents = self.agents()
        valid = with_default_budget(load_plan(plan, agents=agents), self._settings)
        await create_schedule(
            self._temporal,
            schedule_id,
            valid,
            agents,
            self._settings.task_queue,
            cron=cron,
            every=every,
            overlap=overlap,
            paused=paused,
        )

    async def schedules(self) -> builtins.list[ScheduleSummary]:
        """Every schedule of the namespace, by id, with its next runs and latest plans."""
        return await list_schedules(self._temporal)

    async def pause_schedule(self, schedule_id: str) -> None:
        await act_on_schedule(self._temporal, schedule_id, "pause")

    async def unpause_schedule(self, schedule_id: str) -> None:
        await act_on_schedule(self._temporal, schedule_id, "unpause")

    async def trigger_schedule(self, schedule_id: str) -> None:
        """Start one run now, whatever the overlap policy says."""
        await act_on_schedule(self._temporal, schedule_id, "trigger")

    async def delete_schedule(self, schedule_id: str) -> None:
        """Remove the schedule; the plans it started stay."""
        await act_on_schedule(self._temporal, schedule_id, "delete")

    async def plan_run(
        self,
        plan_id: str,
        *,
        known: Mapping[tuple[str, str], Plan] | None = None,
        run: str | None = None,
    ) -> PlanRun:
        """The plan its latest run runs (read from that run's input; a retry with changes
        runs an edited plan), or execution ``run`` ran, with the execution's id and its
        chain's first run id. ``known`` maps ``(plan_id, run_id)`` to plans read before,
        so only a new run is fetched. ``PlanNotFound`` for an unknown id or run."""
        return await plan_run(self._temporal, plan_id, known, run)

    async def runs(self, plan_id: str) -> builtins.list[RunSummary]:
        """Every run of the plan, oldest first: its first start, then each retry, each
        with its status and times and the id ``status(plan_id, run=...)`` reads it by.
        ``PlanNotFound`` for an unknown id."""
        return await plan_runs(self._temporal, plan_id)

    async def report(self, plan_id: str) -> PlanReport:
        """Wait for the plan to end and return its report, however it ended (completed,
        failed, cancelled, terminated). Raises ``InvalidPlan`` for a plan the workflow
        refused to run."""
        await describe_plan(self._temporal, plan_id)
        return await wait_for_report(self._plan_handle(plan_id))

    async def status(self, plan_id: str, *, run: str | None = None) -> PlanReport:
        """The plan's report now: live while it runs, final once it ended. ``run`` (a
        ``RunSummary.run_id`` from ``runs``) reads an earlier run's report instead of the
        latest's: a retried plan's first run, say."""
        return await plan_status(self._temporal, plan_id, run)

    async def full_report(self, plan_id: str) -> PlanReport:
        """The plan's final report with every subtask's row. A plan of more than 1,000
        subtasks reports a summary (``PlanReport.omitted`` rows left out) naming the whole
        report (``full_report``), kept in the workers' session store: read from the
        store given to ``use_plan_store``, else from ``DPLAN_SESSION_STORE`` (which must
        then be the workers' store); an ``ApplicationError`` ``PlanDataUnavailable`` when
        it is not there."""
        report = await self.report(plan_id)
        if report.full_report is None:
            return report
        if self._plan_store is not None:
            return await stored_report(self._plan_store, report.full_report)
        store = await open_session_store(self._settings.session_store)
        try:
            return await stored_report(store, report.full_report)
        finally:
            await store.close()

    async def list(
        self,
        *,
        status: str | None = None,
        query: str | None = None,
        limit: int = 50,
        tenant: str | None = None,
    ) -> builtins.list[PlanSummary]:
        """Plans of the namespace, newest first, from Temporal visibility (eventually
        consistent: a change shows up within a second or so). ``status`` is ``running``,
        ``paused``, ``completed``, ``failed``, ``cancelled`` ...; ``query`` is a visibility
        query added as is; ``tenant`` keeps one tenant's plans."""
        if limit < 1:
            raise InvalidArgument(f"limit must be at least 1, not {limit}")
        rows, _ = await self.list_plans(status=status, query=query, limit=limit, tenant=tenant)
        return rows

    async def list_plans(
        self,
        *,
        status: str | None = None,
        query: str | None = None,
        limit: int = 50,
        tenant: str | None = None,
    ) -> tuple[builtins.list[PlanSummary], bool]:
        """``list``'s rows, and whether the namespace's search attributes were used (when
        not, goal, progress and cost are unknown and ``paused`` comes from the memo).
        ``tenant``: only that tenant's plans (``DplanTenant``, else the memo)."""
        return await list_plans(
            self._temporal, status=status, query=query, limit=limit, tenant=tenant
        )

    async def setup_search_attributes(self) -> tuple[builtins.list[str], builtins.list[str]]:
        """Register the search attributes the namespace lacks; ``(added, already there)``
        by name. Idempotent; ``SearchAttributesUnavailable`` when the server refuses."""
        return await setup_search_attributes(self._temporal)

    async def cancel(self, plan_id: str) -> None:
        """Ask a running plan to stop: running subtasks are cancelled, the report says
        so. Raises ``Refused`` for a plan that has already ended."""
        description = await describe_plan(self._temporal, plan_id)
        if description.status != WorkflowExecutionStatus.RUNNING:
            state = description.status.name.lower() if description.status else "closed"
            raise Refused(f"plan '{plan_id}' is not running (it is {state})")
        # The reason names the operator: the plan's log says who cancelled it.
        await self._plan_handle(plan_id).cancel(reason=cancel_reason(self._operator))

    async def live_status(self, plan_id: str) -> PlanReport:
        """The running plan's own answer to its ``status`` query, with a bounded wait
        (``StatusUnavailable`` when no worker answers): what a progress display polls.
        Unlike ``status`` it asks nothing else first, so it is one call per poll."""
        return await query_status(self._temporal.get_workflow_handle(plan_id))

    def live(self, plan_id: str, *, at_most: int | None = None, streams: bool = True) -> PlanWatch:
        """What the plan's running subtasks do now (their step and latest text), for a
        display that shows them: ``at_most`` of them (None: all), with their live
        streams when ``streams``."""
        return PlanWatch(self._temporal, plan_id, at_most=at_most, streams=streams)

    async def notification(self, plan_id: str) -> DeliveryOutcome | None:
        """How the plan's webhook delivery went, from its memo; None when it has none."""
        return await notification_outcome(self._temporal, plan_id)

    async def worker_count(self) -> int:
        """How many workers polled this client's task queue in the last two minutes."""
        return await worker_count(self._temporal, self._settings.task_queue)

    def watch(self, plan_id: str, *, poll_interval_s: float = 0.5) -> AsyncIterator[PlanEvent]:
        """The plan's events until it ends: subtask state changes, streamed text, calls
        waiting for approval, and last the final report (``PlanEnded``)."""
        return watch_plan(self._temporal, plan_id, poll_interval_s=poll_interval_s)

    # ------------------------------------------------------------------ operating

    async def retry(
        self,
        plan_id: str,
        subtasks: builtins.list[str] | None = None,
        *,
        changes: Mapping[str, SubtaskChanges] | None = None,
    ) -> builtins.list[str]:
        """Run a finished plan again under the same id, keeping what completed: its
        failed, skipped and cancelled subtasks run again (and ``subtasks``, with what
        depends on them). Returns the subtasks that run again; ``report`` waits for it.

        ``changes`` edits subtasks first (edit and re-run: a new description, agent or
        model); each edited one runs again with its dependents, whether it had completed
        or failed, and the plan's memo records which fields this operator changed
        (``edits``). ``InvalidArgument`` names an empty description, an agent this
        client's catalogue (``agents``) lacks or a bad model before anything is asked;
        ``Refused`` a subtask the plan does not have, or a plan still running."""
        checked = check_changes(changes, self.agents()) if changes else {}
        _, rerun = await start_retry(
            self._temporal,
            plan_id,
            self._settings.task_queue,
            subtasks or (),
            changes=checked,
            catalog=self.agents() if checked else None,
            by=self._operator,
        )
        return rerun

    async def fork(
        self,
        plan_id: str,
        from_subtask: str,
        *,
        changes: Mapping[str, SubtaskChanges] | None = None,
        new_id: str | None = None,
    ) -> ForkedPlan:
        """A new plan made from ``plan_id`` at ``from_subtask``: that subtask (edited by
        ``changes``, keyed by subtask id) and what depends on it run again, with whatever
        had not completed; every other completed subtask is reused, with no model call.
        The original run, its report and its branch are untouched; the fork's report
        says ``forked_from``. ``new_id`` defaults to ``PLAN-fork-XXXXXX``."""
        checked = check_changes(changes, self.agents()) if changes else {}
        fork_id = new_id or f"{plan_id[:110]}-fork-{secrets.token_hex(3)}"
        rerun = await start_fork(
            self._temporal,
            plan_id,
            from_subtask,
            fork_id,
            self._settings.task_queue,
            changes=checked,
            catalog=self.agents() if checked else None,
            by=self._operator,
        )
        return ForkedPlan(plan_id=fork_id, rerun=rerun)

    async def edits(self, plan_id: str) -> builtins.list[SubtaskEdit]:
        """Who changed which subtask fields in the plan's edits and re-runs (oldest
        first), from its memo: readable once it ended too, without a worker."""
        return await plan_edits(self._temporal, plan_id)

    async def resume(self, plan_id: str, subtask: str) -> str:
        """Run a subtask paused on its failure again; returns the workflow's sentence."""
        request = SubtaskRequest(subtask=subtask, by=self._operator)
        return await update_running_plan(self._temporal, plan_id, RESUME_UPDATE, request, str)

    async def current_subtask(self, plan_id: str, subtask: str) -> Subtask | None:
        """The plan's subtask as it runs now (an operator's ``edit`` included, which the
        run's input does not show); None when the plan cannot say (no worker answers, no
        such subtask)."""
        handle = self._temporal.get_workflow_handle(plan_id)
        try:
            found: Subtask = await handle.query(
                SUBTASK_QUERY, subtask, result_type=Subtask, rpc_timeout=QUERY_RPC_TIMEOUT
            )
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError, RPCError):
            return None
        return found

    async def current_plan(self, plan_id: str) -> Plan | None:
        """The plan as it runs now (revisions and edits included, which the run's input
        does not show); None when the plan cannot say (no worker answers)."""
        handle = self._temporal.get_workflow_handle(plan_id)
        try:
            found: Plan = await handle.query(
                PLAN_QUERY, result_type=Plan, rpc_timeout=QUERY_RPC_TIMEOUT
            )
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError, RPCError):
            return None
        return found

    async def edit(self, plan_id: str, subtask: str, changes: SubtaskChanges) -> str:
        """Change a paused subtask (its description, agent or model) and run it again,
        while the rest of the plan carries on; returns the workflow's sentence. The plan
        refuses (``Refused``) a subtask that is not paused, an agent it does not run
        with, an empty description or a bad model; ``InvalidArgument`` when ``changes``
        change nothing."""
        if not changes.fields:
            raise InvalidArgument("name a change: description, agent or model")
        request = EditRequest(subtask=subtask, changes=changes, by=self._operator)
        return await update_running_plan(self._temporal, plan_id, EDIT_UPDATE, request, str)

    async def revise(
        self,
        plan_id: str,
        *,
        add: Sequence[Subtask] = (),
        remove: Sequence[str] = (),
        reason: str = "",
    ) -> Revision:
        """Change a running plan: ``add`` subtasks (they may depend on any of its subtasks,
        and start once those completed), ``remove`` ones not yet started. Checked as a plan
        file is, against the plan as it stands: ``Refused`` lists every problem
        (``problems``, one line each) and nothing changes. Recorded with this client's
        operator in the report's ``revisions`` and the log."""
        if not add and not remove:
            raise InvalidArgument("name a change: subtasks to add and/or ids to remove")
        request = RevisionRequest(
            add=tuple(add), remove=tuple(remove), by=self._operator, reason=reason[:500]
        )
        return await update_running_plan(self._temporal, plan_id, REVISE_UPDATE, request, Revision)

    async def skip(self, plan_id: str, subtask: str) -> str:
        """Give up on a paused subtask: it and its dependents are skipped."""
        request = SubtaskRequest(subtask=subtask, by=self._operator)
        return await update_running_plan(self._temporal, plan_id, SKIP_UPDATE, request, str)

    async def raise_budget(
        self, plan_id: str, *, max_tokens: int | None = None, max_cost_usd: float | None = None
    ) -> builtins.list[str]:
        """New limits for a running plan (a limit left out keeps its value); subtasks
        paused on the budget resume. Returns the ones that resumed."""
        if max_tokens is None and max_cost_usd is None:
            raise InvalidArgument("name a new limit: max_tokens and/or max_cost_usd")
        for name, value in (("max_tokens", max_tokens), ("max_cost_usd", max_cost_usd)):
            if value is not None and value < 0:
                raise InvalidArgument(f"{name} must be zero or more, not {value:g}")
        request = BudgetRequest(max_tokens=max_tokens, max_cost_usd=max_cost_usd, by=self._operator)
        resumed: builtins.list[str] = await update_running_plan(
            self._temporal, plan_id, RAISE_BUDGET_UPDATE, request, builtins.list
        )
        return resumed

    # ------------------------------------------------------------------ the state directory

    async def gc(self, *, older_than: timedelta | None = None, dry_run: bool = False) -> GcReport:
        """Remove the trees (checked-out files and their state) of plans that ended more
        than ``older_than`` ago (default ``DPLAN_TREE_RETENTION``) from this host's state
        directory (``DPLAN_STATE_DIR``); ``dry_run`` only says what would go.

        Temporal decides what ended: a running or paused plan, one Temporal does not know,
        and everything while it cannot be reached, are kept; commits and refs always stay
        (``durable_plans.workspace_gc``). The worker does the same on its own schedule."""
        retention = older_than if older_than is not None else self._settings.tree_retention
        if retention is None:
            raise InvalidArgument(
                "DPLAN_TREE_RETENTION is 'never': name a retention with older_than"
            )
        if retention < timedelta(0):
            raise InvalidArgument("older_than must not be negative")
        return await collect(self._temporal, self._settings.state_dir, retention, dry_run=dry_run)

    # ------------------------------------------------------------------ approvals

    async def approvals(self, plan_id: str | None = None) -> builtins.list[PendingCall]:
        """Tool calls waiting for a person: of one plan, or of every running plan."""
        if plan_id is not None:
            return await self._pending(plan_id)
        return await pending_calls_everywhere(self._temporal)

    async def approve(
        self, plan_id: str, call: str, *, arguments: str | None = None
    ) -> ApprovalDecision:
        """Let a waiting call run, with ``arguments`` (a JSON object) replacing the
        model's when given. Raises ``Refused`` when it cannot be decided, naming who
        decided first when someone did."""
        check_decision(call, arguments)
        return await decide(
            self._temporal, plan_id, call, approve=True, who=self._operator, arguments=arguments
        )

    async def reject(self, plan_id: str, call: str, *, reason: str) -> ApprovalDecision:
        """Refuse a waiting call; the model reads ``reason`` as the tool's result."""
        if not reason.strip():
            raise InvalidArgument("a rejection needs a reason: the model reads it")
        check_decision(call, None)
        return await decide(
            self._temporal, plan_id, call, approve=False, who=self._operator, reason=reason
        )

    # ------------------------------------------------------------------ conversations

    async def conversation(self, session_id: str, *, agent: str | None = None) -> Conversation:
        """Attach to the running conversation ``session_id`` or start it (with ``agent``,
        else the catalogue's default); ``Conversation.started`` says which. Raises
        ``InvalidArgument`` for an id that cannot be one and ``SessionEnded`` for a
        conversation finished with ``/end``."""
        problem = check_session_id(session_id)
        if problem is not None:
            raise InvalidArgument(problem)
        return await open_conversation(
            self._temporal,
            session_id,
            catalog=self.agents(),
            budget=self._settings.default_budget,
            task_queue=self._settings.task_queue,
            operator=self._operator,
            agent=agent,
        )

    async def messages(self, session_id: str) -> builtins.list[Message]:
        """A conversation's messages (a chat, or a subtask's branch), read from the
        workers' session store: the one given to ``use_plan_store``, else
        ``DPLAN_SESSION_STORE`` opened on first use and kept until ``close``. Raises
        ``SessionNotFound`` for a conversation the store does not hold."""
        store = await self._session_store()
        return await store.read(session_id)

    async def tenant_spend(
        self, tenants: Sequence[str] = (), *, day: date | None = None
    ) -> builtins.list[TenantSpend]:
        """What each tenant spent on ``day`` (UTC; default today) and its cap: the tenants
        ``DPLAN_TENANTS`` names and ``tenants``, from the workers' session store (as
        ``messages`` reads it). Raises ``TenantsConfigError`` for a file that cannot be
        used, as a worker would refuse it."""
        caps = read_tenants(self._settings.tenants_file) if self._settings.tenants_file else None
        names = sorted({*(caps.tenants if caps else ()), *tenants})
        when = day or datetime.now(UTC).date()
        store = await self._session_store()
        return [
            TenantSpend(
                tenant=name,
                day=when,
                used=await store.total_usage(ledger_of(name, when)),
                cap=caps.cap_of(name) if caps else None,
            )
            for name in names
        ]

    async def close(self) -> None:
        """Close what this client opened itself (the session store ``messages`` reads);
        the Temporal connection is the SDK's and closes with the process."""
        async with self._store_lock:
            if self._opened_store is not None:
                await self._opened_store.close()
                self._opened_store = None

    # ------------------------------------------------------------------ helpers

    async def _session_store(self) -> SessionStore:
        if self._plan_store is not None:
            return self._plan_store
        async with self._store_lock:
            if self._opened_store is None:
                self._opened_store = await open_session_store(self._settings.session_store)
            return self._opened_store

    def _plan_handle(self, plan_id: str) -> WorkflowHandle[Any, PlanReport]:
        return self._temporal.get_workflow_handle(plan_id, result_type=PlanReport)

    async def _pending(self, plan_id: str) -> builtins.list[PendingCall]:
        try:
            return await pending_calls(self._temporal, plan_id)
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise PlanNotFound(plan_id, self._temporal.namespace) from None
            if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                raise StatusUnavailable(
                    f"plan '{plan_id}' did not answer; is a worker running (dplan-worker)?"
                ) from None
            raise
