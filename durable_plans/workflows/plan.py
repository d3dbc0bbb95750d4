"""PlanWorkflow: run a plan's subtasks as child workflows in dependency order.

The workflow state is the record of what happened: which subtasks completed (with their
results, calls and usage), which failed and why, which were skipped because a dependency
failed, which were cancelled. The report is built from that state only, its counts add
up by construction, and a plan with a failed subtask ends Failed in Temporal
(``PlanFailed``, report in the details) so Temporal Web never shows a green run that
wasn't.

History stays far from Temporal's limits: children carry only ids and short results, and
when the server suggests continue-as-new the workflow stops starting children, lets the
running ones finish, and continues with its progress carried in the input.

The workspace is a git repository (``workflows.plan_workspace``): the plan resolves its base
commit once and carries it, hands each child the commits its tree starts from, keeps
each subtask's last commit in its row, and, whenever its final report is made (completed,
failed part-way or cancelled), publishes the merge of what completed as the branch
``dplan/<plan-id>``, which the report names.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
)

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from durable_plans._errors import InvalidInput, PlanDataError
    from durable_plans.domain.agents import BUILTIN_CATALOG, MAX_TURNS, SPAWN_TOOL, AgentCatalog
    from durable_plans.domain.checks import CheckRun, failure_line
    from durable_plans.domain.contracts import (
        ACT_BRANCH_SPEND,
        ACT_MERGE_RESULTS,
        ACT_PLAN_DATA_CHECK,
        ACT_PLAN_DATA_SAVE_REPORT,
        ACT_PLAN_DATA_UNPACK,
        ACT_WORKER_FACTS,
        PLAN_WORKFLOW,
        BranchSpendInput,
        BranchSpendOutput,
        MergeResultsInput,
        PlanDataCheckInput,
        PlanDataSaveReportInput,
        PlanDataUnpackInput,
        PlanInput,
        SubtaskFailureDetails,
        SubtaskInput,
        WorkerFacts,
    )
    from durable_plans.domain.failures import (
        FailureType,
        application_error,
        describe_failure,
        invalid_plan_error,
        plan_failed_error,
        subtask_failure_details,
    )
    from durable_plans.domain.frontier import Frontier, WatchedDict
    from durable_plans.domain.ids import (
        attempt_key,
        branch_session_id,
        plan_run_id,
        plan_session_id,
        subtask_scope,
        subtask_workflow_id,
    )
    from durable_plans.domain.inputs import plan_input_from_value
    from durable_plans.domain.models import (
        ErrorInfo,
        ModelUsage,
        Plan,
        PlanReport,
        PlanStatus,
        Subtask,
        SubtaskResult,
        SubtaskStatus,
        Usage,
    )
    from durable_plans.domain.operations import (
        CARRIED_STATE_QUERY,
        PLAN_QUERY,
        SUBTASK_QUERY,
        SubtaskChanges,
    )
    from durable_plans.domain.plan_data import (
        CARRIED_SUBTASKS,
        PACKED_FIELD,
        PackedPlan,
        PlanDataRef,
        pack,
        unpack,
    )
    from durable_plans.domain.plan_loader import MAX_PLAN_BYTES, validate_plan
    from durable_plans.domain.plan_log import LOG_SIGNAL, LogEntry, PlanLog, cancel_entry
    from durable_plans.domain.problems import explain_error
    from durable_plans.domain.replanning import REPLAN_BY, replan_subtask
    from durable_plans.domain.revisions import (
        REVISE_UPDATE,
        Revision,
        RevisionRequest,
        revised_plan,
    )
    from durable_plans.domain.scheduling import (
        DEAD_STATUSES,
        DagIndex,
        blocked_by_failure_at,
    )
    from durable_plans.domain.secrets import scrub_secrets
    from durable_plans.domain.tool_contracts import (
        ACT_LIST_MCP_TOOLS,
        ListMcpToolsInput,
        ListMcpToolsOutput,
    )
    from durable_plans.domain.tools_config import McpServerTools
    from durable_plans.domain.workspace_refs import WorkspaceRef, WorkspaceStart, WorkspaceSummary

from durable_plans.workflows import policies
from durable_plans.workflows.checks import run_check_round
from durable_plans.workflows.pauses import NOT_STARTED, PauseDesk, PauseHandlers
from durable_plans.workflows.plan_webhook import deliver_report
from durable_plans.workflows.plan_workspace import (
    open_base,
    plan_identity,
    publish_result,
    result_commits,
    subtask_identity,
    subtask_tree,
)
from durable_plans.workflows.raw_input import NO_INPUT, decode_input
from durable_plans.workflows.store_ops import store_op
from durable_plans.workflows.subtask import SubtaskWorkflow
from durable_plans.workflows.visibility import PlanVisibility, subtask_search_attributes

T = TypeVar("T")

MAX_RESULT_EXCERPT = 4000
# A plan by reference of more subtasks than this gets summary reports (``PlanReport.
# summary``): status queries, its result, its failure's details and its webhook list this
# many rows at most; the whole report is kept in the session store when it ends.
REPORT_ROWS = 1000
# Children started per scheduling pass at most: each start costs the workflow task a few
# milliseconds, more on a loaded host, and a task must end within the SDK's 2 s.
START_BATCH = 50
# Each run's history is kept under a tenth of Temporal's limits (51,200 events, 50 MiB),
# counting what its running children will add as they finish (each: its completion, and
# its share of workflow tasks, at most this many events of the run's average size).
HISTORY_GOAL_EVENTS = 5_120
HISTORY_GOAL_BYTES = 5 * 1024 * 1024
HISTORY_GOAL_MARGIN = 0.9  # of the goal: the run's last tasks (merge, report) fit after it
EVENTS_PER_RUNNING_CHILD = 4
PAYLOAD_BUDGET_CHARS = 400_000  # carried results stay far below the 512 KiB warning


def excerpt_limit(plan: Plan, *, floor: int = 200) -> int:
    """Per-subtask result size kept in workflow state, so carried progress stays small
    (a plan of thousands takes a lower floor: its whole result is in its branch)."""
    return max(floor, min(MAX_RESULT_EXCERPT, PAYLOAD_BUDGET_CHARS // len(plan.subtasks)))


def excerpt(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [truncated {len(text) - limit} chars; full text in the session]"


def kept_checks(plan: Plan, runs: tuple[CheckRun, ...]) -> tuple[CheckRun, ...]:
    """A row's check runs with their outputs cut to the plan's excerpt size (a plan of
    thousands keeps a few hundred characters of each), so carried rows stay small."""
    limit = excerpt_limit(plan)
    return tuple(
        r if len(r.output) <= limit else r.model_copy(update={"output": r.output[-limit:]})
        for r in runs
    )


def default_session_id(plan: Plan) -> str:
    """The plan's base session (``domain.ids.plan_session_id``)."""
    return plan_session_id(plan.id, plan.session_id)


def failure_of(err: BaseException) -> tuple[SubtaskStatus, ErrorInfo, SubtaskFailureDetails | None]:
    """Turn a child's failure into the report's status, error and what it had spent."""
    cause: BaseException | None = err.cause if isinstance(err, ChildWorkflowError) else err
    if isinstance(cause, CancelledError):
        cancelled = ErrorInfo(type=FailureType.CANCELLED, message="cancelled")
        return SubtaskStatus.CANCELLED, cancelled, None
    if isinstance(cause, ApplicationError):
        # The child's message starts with its type (for Temporal Web's lists); the report
        # gives the type on its own, so the message is said once.
        type_, message = describe_failure(cause)
        error = ErrorInfo(type=type_, message=message)
        return SubtaskStatus.FAILED, error, subtask_failure_details(cause)
    if isinstance(cause, FailureError):
        return SubtaskStatus.FAILED, ErrorInfo(type=type(cause).__name__, message=str(cause)), None
    return SubtaskStatus.FAILED, ErrorInfo(type=type(err).__name__, message=str(err)), None


@workflow.defn(name=PLAN_WORKFLOW)
class PlanWorkflow(PauseHandlers):
    def __init__(self) -> None:
        self._plan: Plan | None = None
        self._dag: DagIndex | None = None  # the plan's graph, built once per run
        self._mcp_tools: tuple[McpServerTools, ...] | None = None
        # Results and running children note every id written or removed; the frontier
        # takes those changes before each scheduling pass (``_sync``), so a pass costs
        # what changed, not the plan's size.
        self._noted: dict[str, None] = {}
        self._results: dict[str, SubtaskResult] = WatchedDict(self._note)
        self._running: dict[str, asyncio.Task[None]] = WatchedDict(self._note)
        self._frontier: Frontier | None = None
        self._check_blocked = True  # a change that may leave a subtask unable to run
        self._branches: dict[str, str] = {}
        self._merged: list[str] = []
        self._merged_ids: set[str] = set()
        self._changed = False
        self._started_at_s = 0.0
        self._cancelled = False
        self._plan_run_id = ""
        self._merge_enabled = True
        self._visibility = PlanVisibility()
        self._inp: PlanInput | None = None
        # Earlier attempts of subtasks being run again (retry, resume): added to their
        # next result. Removed once that result is in.
        self._prior: dict[str, SubtaskResult] = {}
        self._attempt: dict[str, int] = {}  # retries of the attempt each child runs
        # What the worker decided for this run (``WorkerFacts``), in its first activation:
        # whether children's LLM calls run as local activities.
        self._llm_local = False
        # Subtasks held for an operator (``on_failure: pause``), the operators' Updates on
        # them, and the budget those may raise.
        # The decisions taken on the plan, with who and when (``domain/plan_log.py``).
        self._log = PlanLog()
        self.pause_desk = PauseDesk(
            wake=self._wake,
            spent=lambda: self._progress_report().usage,
            log=self._log,
            apply_edit=self._edit_subtask,
        )
        # Subtasks an operator changed while paused (``edit_subtask``): their definitions
        # from then on, carried by continue-as-new and retry.
        self._edited: dict[str, Subtask] = {}
        # How the plan changed while it ran (``domain/revisions.py``); ``_plan`` holds the
        # result. None of them once the run has decided how it ends.
        self._revisions: list[Revision] = []
        self._ending = False
        # Replanners at work (``on_failure: "replan"``): their subtask -> the failure they
        # replan; its dependents wait for them instead of being skipped.
        self._replanning: dict[str, str] = {}
        # The workspace kept in git: the base commit every tree starts from, and what the
        # plan published when it ended.
        self._base: str | None = None
        self._published: WorkspaceSummary | None = None
        # Subtasks by id, and how many leading ones are merged: a plan of thousands looks
        # them up on every start and merge, which a scan of the plan would make quadratic.
        self._subtasks: dict[str, Subtask] = {}
        self._merge_from = 0
        # The plan's own check on the merged result (``domain/checks.py``): its runs, and
        # the failure it ended the plan with.
        # The run was cancelled while it asked its worker (``_ask_worker``).
        self._cancel_held = False
        self._plan_checks: list[CheckRun] = []
        self._check_error: ErrorInfo | None = None

    def _wake(self) -> None:
        """Something changed: the scheduler looks again."""
        self._changed = True

    def _note(self, sid: str) -> None:
        self._noted[sid] = None

    def _status_of(self, sid: str) -> SubtaskStatus:
        """As the report says it: running while its child runs, else its result's."""
        if sid in self._running:
            return SubtaskStatus.RUNNING
        row = self._results.get(sid)
        return row.status if row is not None else SubtaskStatus.PENDING

    def _sync(self) -> Frontier:
        """The frontier, told of every change since the last time."""
        frontier = self._frontier
        assert frontier is not None  # built by run() before anything is scheduled
        while self._noted:
            noted = list(self._noted)
            self._noted.clear()
            for sid in noted:
                status = self._status_of(sid)
                frontier.set(sid, status)
                # Only a subtask turning dead or pending can leave another unable to run.
                if status is SubtaskStatus.PENDING or status in DEAD_STATUSES:
                    self._check_blocked = True
        return frontier

    # ------------------------------------------------------------------ queries

    @workflow.signal(name=LOG_SIGNAL)
    def log_decision(self, entry: LogEntry) -> None:
        """A subtask's (or its sub-agent's) approval decision, for the plan's log."""
        self._log.add(entry)

    @workflow.query
    def status(self) -> PlanReport:
        return self._small(self._report())

    def _summarized(self) -> bool:
        """Whether this plan's reports list only some rows (``REPORT_ROWS``): a plan by
        reference of more subtasks than that, whose full report would not fit a payload."""
        inp, plan = self._inp, self._plan
        return (
            inp is not None
            and plan is not None
            and inp.plan_data is not None
            and len(plan.subtasks) > REPORT_ROWS
        )

    def _small(self, report: PlanReport, ref: PlanDataRef | None = None) -> PlanReport:
        return report.summary(REPORT_ROWS, full_report=ref) if self._summarized() else report

    def _rows(self, plan: Plan, *, every: bool) -> list[SubtaskResult]:
        """The report's rows in plan order: each result, and a pending or running row for
        a subtask without one (``every``), or only for those whose earlier attempts
        spent something (what the totals need)."""
        rows = []
        for st in plan.subtasks:
            done = self._results.get(st.id)
            if done is not None:
                rows.append(done)
            elif every or st.id in self._prior:
                status = SubtaskStatus.RUNNING if st.id in self._running else SubtaskStatus.PENDING
                agent = self._edited[st.id].agent if st.id in self._edited else st.agent
                row = SubtaskResult(id=st.id, status=status, agent=agent)
                rows.append(self._with_prior(row) if st.id in self._prior else row)
        return rows

    def _report(self) -> PlanReport:
        plan = self._plan
        if plan is None:
            return PlanReport.build("", [])
        elapsed = workflow.now().timestamp() - self._started_at_s if self._started_at_s else 0.0
        return PlanReport.build(
            plan.id,
            self._rows(plan, every=True),
            duration_s=max(elapsed, 0.0),
            started_at_s=self._started_at_s or None,
            cancelled=self._cancelled,
            workspace=self._workspace_summary(),
            checks=tuple(self._plan_checks),
            error=self._check_error,
            log=self._log.entries,
            log_omitted=self._log.omitted,
            revisions=tuple(self._revisions),
            forked_from=self._inp.forked_from if self._inp is not None else None,
            replanning=self._replanning.values(),
        )

    def _progress_report(self) -> PlanReport:
        """What visibility says while the plan runs (completed, failed, tokens, cost): the
        report's totals without a row for every subtask not yet run. On a plan of
        thousands of subtasks the full report's pass (a pydantic row per pending subtask)
        held a workflow task past the SDK's deadlock bound on a loaded host. Rows are
        summed in plan order, as ``_report``'s are, so the values (and the upserts) are
        the same."""
        plan = self._plan
        if plan is None:
            return PlanReport.build("", [])
        return PlanReport.build(
            plan.id,
            self._rows(plan, every=False),
            cancelled=self._cancelled,
            replanning=self._replanning.values(),
        )

    def _workspace_summary(self) -> WorkspaceSummary | None:
        """The published result once the plan ended; until then the base it started from."""
        if self._published is not None:
            return self._published
        return WorkspaceSummary(base=self._base) if self._base is not None else None

    def _paused(self) -> dict[str, str]:
        """The pause desk's summary, without a pass over the results when none paused."""
        if not self._sync().counts[SubtaskStatus.PAUSED]:
            return {}
        return self.pause_desk.summary()

    def _with_prior(self, result: SubtaskResult) -> SubtaskResult:
        """``result`` counting what earlier attempts of its subtask spent."""
        prior = self._prior.get(result.id)
        if prior is None:
            return result
        return result.model_copy(
            update={
                "llm_calls": prior.llm_calls + result.llm_calls,
                "usage": prior.usage + result.usage,
                "models": ModelUsage.merged(prior.models, result.models),
                "retries": prior.retries + 1,
            }
        )

    def _finished(self, plan: Plan) -> bool:
        """Every subtask of ``plan`` terminal, counted by the frontier."""
        counts = self._sync().counts
        waiting = (SubtaskStatus.PENDING, SubtaskStatus.RUNNING, SubtaskStatus.PAUSED)
        return not any(counts[s] for s in waiting)

    @workflow.query(name=CARRIED_STATE_QUERY)
    def carried_state(self) -> PlanInput:
        """What a continuation of this run starts from; ``dplan retry`` reads it (from a
        replay, once the run has ended) to start a new run that keeps what completed."""
        if self._inp is None or self._plan is None:
            raise ApplicationError("the plan has not started yet")
        return self._carry(self._inp)

    def _edit_subtask(self, sid: str, changes: SubtaskChanges) -> None:
        edited = self._subtasks[sid].model_copy(
            update={name: getattr(changes, name) for name in changes.fields}
        )
        self._subtasks[sid] = self._edited[sid] = edited

    @workflow.query(name=SUBTASK_QUERY)
    def subtask_definition(self, sid: str) -> Subtask:
        """The subtask as it runs now: an operator's edit included (the run's input, which
        the page reads, holds it as the plan started)."""
        found = self._subtasks.get(sid)
        if found is None:
            raise ApplicationError(f"no subtask {sid!r}")
        return found

    @workflow.query(name=PLAN_QUERY)
    def plan_definition(self) -> Plan:
        """The plan as it runs now: what revisions added and removed, and operators'
        edits (the page draws it; the run's input holds the plan as it started)."""
        plan = self._plan
        if plan is None:
            raise ApplicationError("the plan has not started yet")
        subtasks = tuple(self._subtasks.get(s.id, s) for s in plan.subtasks)
        return plan.model_copy(update={"subtasks": subtasks})

    # ------------------------------------------------------------------ revisions

    @workflow.update(name=REVISE_UPDATE)
    def revise_plan(self, request: RevisionRequest) -> Revision:
        """Add subtasks to the running plan, or remove ones not yet started
        (``domain/revisions.py``): the scheduler takes the revised plan at its next pass.
        A request whose ``key`` was seen (an agent's call sent again after a crash) gets
        the revision it made then, and changes nothing."""
        earlier = self._revision_keyed(request.key)
        if earlier is not None:
            return earlier
        plan, _ = self._revised(request)
        assert plan is not None  # the validator accepted it
        removed = tuple(dict.fromkeys(request.remove))
        revision = Revision(
            number=len(self._revisions) + 1,
            at_s=workflow.now().timestamp(),
            by=request.by,
            subtask=request.subtask,
            reason=scrub_secrets(request.reason),
            added=tuple(s.id for s in request.add),
            removed=removed,
            key=request.key,
        )
        for sid in removed:
            self._edited.pop(sid, None)
        self._take_plan(plan)
        self._revisions.append(revision)
        detail = revision.describe() + (f" ({revision.reason})" if revision.reason else "")
        self._log.add(
            LogEntry.of(
                revision.at_s, "revised", by=request.by, subtask=request.subtask, detail=detail
            )
        )
        self._wake()
        return revision

    @revise_plan.validator
    def _validate_revision(self, request: RevisionRequest) -> None:
        if self._revision_keyed(request.key) is not None:
            return
        _, problems = self._revised(request)
        if problems:
            raise application_error(
                FailureType.INVALID_INPUT, "revision refused: " + "; ".join(problems), problems
            )

    def _revision_keyed(self, key: str) -> Revision | None:
        return next((r for r in self._revisions if key and r.key == key), None)

    def _revised(self, request: RevisionRequest) -> tuple[Plan | None, list[str]]:
        """The plan ``request`` would make, and what stops it, as the plan stands now."""
        plan = self._plan
        if plan is None or self._frontier is None:
            return None, [NOT_STARTED]
        if self._ending:
            return plan, [f"plan {plan.id!r} has ended: a revision would change nothing"]
        if self._inp is not None and self._inp.plan_data is not None:
            return plan, [
                f"plan {plan.id!r} runs by reference (its plan file is too big to travel "
                "whole): it cannot be revised yet"
            ]
        started = {
            sid: self._status_of(sid) for sid in (*self._results, *self._running, *self._prior)
        }
        return revised_plan(plan, request, statuses=started, known_agents=self.pause_desk.agents)

    def _take_plan(self, plan: Plan) -> None:
        """Run ``plan`` from now on: its graph and frontier are built again (a revision is
        rare; a scheduling pass stays the cost of what changed), told every subtask's
        state."""
        edited = self._edited
        self._plan = self.pause_desk.plan = plan
        self._subtasks = {s.id: edited.get(s.id, s) for s in plan.subtasks}
        self._dag = DagIndex(plan)
        self._frontier = Frontier(self._dag)
        for sid in (*self._results, *self._running):
            self._note(sid)
        self._check_blocked = True
        self._visibility.memo(plan)

    def _carry(self, inp: PlanInput) -> PlanInput:
        plan = self._plan or inp.plan  # revised, when a revision changed it
        if self._edited:
            edited = self._edited
            plan = plan.model_copy(
                update={"subtasks": tuple(edited.get(s.id, s) for s in plan.subtasks)}
            )
        return PlanInput(
            plan=plan,
            agents=inp.agents,
            merge_results=inp.merge_results,
            results=tuple(self._results[s.id] for s in plan.subtasks if s.id in self._results),
            merged=tuple(self._merged),
            branches=tuple(self._branches.items()),
            started_at_s=self._started_at_s,
            max_completions_per_run=inp.max_completions_per_run,
            prior=tuple(self._prior[s.id] for s in plan.subtasks if s.id in self._prior),
            budget=self.pause_desk.budget if self.pause_desk.budget != plan.budget else None,
            paused_since=self.pause_desk.carried(plan),
            workspace_base=self._base,
            mcp_tools=self._mcp_tools,
            plan_data=inp.plan_data,
            log=self._log.entries,
            log_omitted=self._log.omitted,
            revisions=tuple(self._revisions),
            forked_from=inp.forked_from,
        )

    def _continued(self, inp: PlanInput) -> PlanInput:
        """The next run's input: for a plan by reference, the carried progress packed
        (it grows with every subtask, and compresses well), with the lean plan's subtasks,
        so a 10,000-subtask plan's continue-as-new input, and the next run's started
        event, stay a fraction of one payload."""
        carried = self._carry(inp)
        if carried.plan_data is None:
            return carried
        wrapper: dict[str, object] = {
            "results": [r.model_dump(mode="json", exclude_defaults=True) for r in carried.results],
            "merged": list(carried.merged),
            "branches": [list(b) for b in carried.branches],
            "prior": [r.model_dump(mode="json", exclude_defaults=True) for r in carried.prior],
        }
        wrapper[CARRIED_SUBTASKS] = [
            s.model_dump(mode="json", exclude_defaults=True) for s in carried.plan.subtasks
        ]
        update: dict[str, object] = {
            "results": (),
            "merged": (),
            "branches": (),
            "prior": (),
            "plan": carried.plan.model_copy(update={"subtasks": ()}),
        }
        return carried.model_copy(update={**update, "carried": pack(wrapper)})

    @staticmethod
    def _unpacked_carry(inp: PlanInput) -> PlanInput:
        if inp.carried is None:
            return inp
        try:
            value = unpack(inp.carried, limit=MAX_PLAN_BYTES)
            # Only the carried rows are validated: the plan (thousands of subtasks) was,
            # when the input was decoded, and a task must not take seconds doing it twice;
            # its subtasks, when they were packed with the rows, are validated here.
            plan = inp.plan
            if CARRIED_SUBTASKS in value:
                subtasks = tuple(Subtask.model_validate(s) for s in value[CARRIED_SUBTASKS])
                plan = plan.model_copy(update={"subtasks": subtasks})
            return inp.model_copy(
                update={
                    "plan": plan,
                    "results": tuple(SubtaskResult.model_validate(r) for r in value["results"]),
                    "merged": tuple(str(m) for m in value["merged"]),
                    "branches": tuple((str(a), str(b)) for a, b in value["branches"]),
                    "prior": tuple(SubtaskResult.model_validate(r) for r in value["prior"]),
                    "carried": None,
                }
            )
        except (PlanDataError, ValueError, KeyError, TypeError) as err:
            line = f"carried: {str(err).splitlines()[0]}"
            raise invalid_plan_error(f"invalid plan {inp.plan.id!r}: {line}", [line]) from None

    # ------------------------------------------------------------------ run

    def _decode(self, raw: RawValue) -> PlanInput | PackedPlan:
        """The run's input, or a non-retryable ``InvalidPlan`` listing every problem.

        A plan by reference is checked by an activity (``_by_reference``), so it is only
        decoded here: checking thousands of subtasks field by field in the sandbox takes
        longer than a workflow task may."""
        workflow_id = workflow.info().workflow_id
        try:
            value = decode_input(raw, what="the plan file's JSON object")
            if isinstance(value, dict) and PACKED_FIELD in value:
                try:
                    return PackedPlan.model_validate(value[PACKED_FIELD])
                except ValidationError as err:
                    raise InvalidInput(
                        [f"{PACKED_FIELD}: {explain_error(err.errors()[0])}"]
                    ) from None
            if isinstance(value, dict) and value.get("plan_data") is not None:
                try:
                    return PlanInput.model_validate(value)
                except ValidationError as err:
                    raise InvalidInput([explain_error(e) for e in err.errors()[:20]]) from None
            return plan_input_from_value(value, workflow_id=workflow_id)
        except InvalidInput as err:
            raise invalid_plan_error(
                f"invalid plan {workflow_id!r}: " + "; ".join(err.problems), err.problems
            ) from None

    async def _by_reference(self, decoded: PlanInput | PackedPlan) -> PlanInput:
        """The run's input with the plan by reference, checked by a local activity: a
        packed plan is unpacked, validated and stored, and the run goes on with its lean
        form; a reference is checked (there, unchanged, the plan this run holds, valid).
        Any failure ends the plan with its one line."""
        if isinstance(decoded, PackedPlan):
            workflow_id = workflow.info().workflow_id
            unpacked: PlanInput = await self._plan_data_op(
                workflow_id,
                ACT_PLAN_DATA_UNPACK,
                PlanDataUnpackInput(packed=decoded, workflow_id=workflow_id),
                PlanInput,
            )
            return unpacked
        inp = self._unpacked_carry(decoded)
        assert inp.plan_data is not None
        catalog = AgentCatalog(agents=inp.agents) if inp.agents else BUILTIN_CATALOG
        check = PlanDataCheckInput(
            ref=inp.plan_data, lean=inp.plan, known_agents=tuple(sorted(catalog.names()))
        )
        await self._plan_data_op(inp.plan.id, ACT_PLAN_DATA_CHECK, check, PlanDataRef)
        return inp

    @staticmethod
    async def _plan_data_op(plan_id: str, activity: str, arg: object, result: type[T]) -> T:
        """A plan-data local activity; its failure (a local activity's arrives unwrapped)
        ends the plan with the activity's one line: ``InvalidPlan`` as it is."""
        try:
            out: T = await store_op(activity, arg, result_type=result)
        except (ActivityError, ApplicationError) as err:
            cause = err.cause if isinstance(err, ActivityError) else err
            if isinstance(cause, ApplicationError) and cause.type == FailureType.INVALID_PLAN:
                problems = cause.details[0] if cause.details else [cause.message]
                raise invalid_plan_error(cause.message, list(problems)) from None
            why = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
            raise ApplicationError(
                f"plan {plan_id!r} cannot run: {why}",
                type=FailureType.PLAN_DATA_UNAVAILABLE.value,
                non_retryable=True,
            ) from None
        return out

    async def _ask_worker(self) -> None:
        """What this run's worker decided for it (``WorkerFacts``): whether its children's
        LLM calls run as local activities and whether it sets the ``Dplan*`` search
        attributes. Asked of the worker itself in a local activity, the run's first command
        (after a plan by reference's own check), so the history records the answer and a
        replay (by a worker with other settings, or ``dplan replay``) takes the same. One
        attempt: should it fail, the failure is recorded as its answer and the run takes
        the defaults (no local calls, no attributes), which cannot fail.

        A cancellation that arrives meanwhile (a plan cancelled as it starts) is held
        until the run is set up (``_cancel_held``), so it ends as a cancelled plan with its
        report, as one cancelled a moment later does."""
        asked = workflow.start_local_activity(
            ACT_WORKER_FACTS,
            result_type=WorkerFacts,
            start_to_close_timeout=policies.WORKER_FACTS_TIMEOUT,
            retry_policy=policies.ONCE,
            local_retry_threshold=policies.LOCAL_RETRY_THRESHOLD,
        )
        try:
            try:
                facts = await asyncio.shield(asked)
            except asyncio.CancelledError:
                self._cancel_held = True
                facts = await asked
        except ActivityError:
            facts = WorkerFacts()
        self._llm_local = facts.llm_local
        self._visibility.enabled = facts.search_attributes

    @workflow.run
    async def run(self, raw: RawValue = NO_INPUT) -> PlanReport:
        """Run the plan in ``raw``: the plan file's JSON as is, or the PlanInput wrapper.

        Taken raw and decoded here, so that any input (not JSON, wrong types, a cycle...)
        fails the workflow at once with ``InvalidPlan`` instead of a retried task.
        """
        decoded = self._decode(raw)
        by_reference = isinstance(decoded, PackedPlan) or decoded.plan_data is not None
        if by_reference:
            inp = await self._by_reference(decoded)
        else:
            assert isinstance(decoded, PlanInput)
            inp = decoded
        plan = inp.plan
        self._plan = plan
        catalog = AgentCatalog(agents=inp.agents) if inp.agents else BUILTIN_CATALOG
        # A plan by reference was validated by its activity (``_by_reference``).
        problems = [] if by_reference else validate_plan(plan, known_agents=catalog.names())
        if problems:
            raise invalid_plan_error(f"invalid plan {plan.id!r}: " + "; ".join(problems), problems)
        self._dag = DagIndex(plan)
        self._subtasks = {s.id: s for s in plan.subtasks}
        # Stable across continue-as-new, new for every fresh run of the same plan id.
        self._plan_run_id = plan_run_id(plan.id, workflow.info().first_execution_run_id)
        # A plan of thousands by reference leaves its base session alone: every subtask's
        # branch starts from a snapshot of it, so thousands of merged results would make
        # each start copy (and each prompt carry) all those before it. Its results are in
        # its subtasks' sessions and its report.
        self._merge_enabled = inp.merge_results and not (
            inp.plan_data is not None and len(plan.subtasks) > REPORT_ROWS
        )
        self._frontier = Frontier(self._dag)
        for r in inp.results:
            self._results[r.id] = r  # noted: the first pass takes them all
        self._merged = list(inp.merged)
        self._merged_ids = set(self._merged)
        self._branches = dict(inp.branches)
        self._prior = {r.id: r for r in inp.prior}
        self._log.carry_in(inp.log, inp.log_omitted)
        self._revisions = list(inp.revisions)
        ended = {r.id for r in inp.results}
        self._replanning = {
            r.added[0]: r.subtask
            for r in self._revisions
            if r.by == REPLAN_BY and r.added and r.added[0] not in ended
        }
        pauses = self.pause_desk
        pauses.open(
            plan,
            self._results,
            self._prior,
            budget=inp.budget or plan.budget,
            paused_since=inp.paused_since,
            agents=frozenset(catalog.names()),
        )
        self._inp = inp
        self._started_at_s = inp.started_at_s or workflow.now().timestamp()
        # Once the state a query reads is set (a status query while the answer is awaited
        # sees the plan), before any command but a plan by reference's check.
        await self._ask_worker()
        self._visibility.start(plan, self._progress_report())
        if pauses.waiting:  # continued while paused: say so in this run too
            self._visibility.progress(self._progress_report, paused=self._paused())

        self._mcp_tools = inp.mcp_tools
        if self._mcp_tools is None:
            self._mcp_tools = await self._list_mcp_tools(plan, catalog)
        try:
            if self._cancel_held:
                raise asyncio.CancelledError
            # Resolved once, then carried: continued and retried runs start from it.
            self._base = inp.workspace_base or await open_base(plan)
            carried_over = await self._drive(plan, inp)
        except asyncio.CancelledError:
            self._ending = True
            plan = self._plan or plan
            now = workflow.now().timestamp()
            self._log.add(cancel_entry(now, workflow.cancellation_reason()))
            await self._cancel_everything(plan)
            await self._publish(plan)
            self._visibility.end(self._report(), PlanStatus.CANCELLED)
            await self._notify(plan, self._small(self._report()))
            raise
        # How the run ends is decided: a revision now would change a plan that has ended
        # (one while the run winds down goes on to the next run, with the rest).
        self._ending = not carried_over
        plan = self._plan or plan
        if carried_over:
            # The memo goes along explicitly: the server starts the next run without one,
            # and until that run's first task upserts it again, ``dplan list`` and Temporal
            # Web would show a paused plan with no goal, no size and no reason.
            workflow.continue_as_new(self._continued(inp), memo=workflow.memo())

        await self._publish(plan)
        if plan.check:
            await self._check_result(plan)
        full = self._report()
        self._visibility.end(full)
        report = full
        if self._summarized():
            # The whole report goes to the store (a local activity: it never enters the
            # history); the result, the failure's details and the webhook get a summary.
            ref = await self._plan_data_op(
                plan.id,
                ACT_PLAN_DATA_SAVE_REPORT,
                PlanDataSaveReportInput(report=full),
                PlanDataRef,
            )
            report = self._small(full, ref)
        await self._notify(plan, report)
        if report.status is PlanStatus.FAILED and self._check_error is not None:
            raise plan_failed_error(
                f"plan {plan.id!r} failed: every subtask completed, but its check failed "
                f"on the merged result: {self._check_error.type}: {self._check_error.message}",
                report,
            )
        if report.status is PlanStatus.FAILED:
            failed = [
                r
                for r in full.subtasks
                if r.status is SubtaskStatus.FAILED and r.replaced_by is None
            ] or [r for r in full.subtasks if r.status is SubtaskStatus.FAILED]
            first = failed[0]
            assert first.error is not None
            raise plan_failed_error(
                f"plan {plan.id!r} failed: {full.counts.failed} of {len(full.subtasks)} "
                f"subtasks failed, {full.counts.skipped} skipped; first failure: "
                f"{first.id}: {first.error.type}: {first.error.message}",
                report,
            )
        return report

    async def _check_result(self, plan: Plan) -> None:
        """The plan's ``check`` on the merged result, once every subtask completed (one
        round: nobody is left to fix it); a failure makes the report ``failed`` with
        ``CheckFailed``. Only a plan with a ``check`` gets here."""
        if self._cancelled or any(
            self._status_of(s.id) is not SubtaskStatus.COMPLETED for s in plan.subtasks
        ):
            return
        published = self._published
        if published is None or published.result is None:
            self._check_error = ErrorInfo(
                type=FailureType.CHECK_FAILED,
                message="the plan's check could not run: its result was not published",
            )
            return
        tree = WorkspaceRef(
            plan_id=plan.id,
            tree="plan-check",
            head=published.result,
            identity=plan_identity(plan.id),
        )
        assert plan.check is not None
        failed = await run_check_round(tree, plan.check, 1, on_run=self._plan_checks.append)
        if failed is not None:
            self._check_error = ErrorInfo(
                type=FailureType.CHECK_FAILED,
                message=f"{failure_line(failed)} on the merged result; its output ends "
                f"with:\n{failed.output[-1500:]}",
            )

    async def _list_mcp_tools(
        self, plan: Plan, catalog: AgentCatalog
    ) -> tuple[McpServerTools, ...] | None:
        """The tools of the MCP servers this plan's agents may use, listed once (an
        activity) and kept in the workflow, and carried on: every replay and every later
        run of this plan sees the same tools. None when no agent uses one (no activity,
        so plans without MCP issue no command for it)."""
        used = {s.agent for s in plan.subtasks}
        agents = [catalog.get(name) for name in sorted(used)]
        if any(SPAWN_TOOL in a.tools for a in agents):  # may start any agent
            agents = list(catalog.agents)
        servers = sorted({entry.partition("/")[0] for a in agents for entry in a.mcp})
        if not servers:
            return None
        try:
            listed: ListMcpToolsOutput = await workflow.execute_activity(
                ACT_LIST_MCP_TOOLS,
                ListMcpToolsInput(servers=tuple(servers)),
                result_type=ListMcpToolsOutput,
                start_to_close_timeout=policies.MCP_LIST_START_TO_CLOSE,
                heartbeat_timeout=policies.SHORT_HEARTBEAT,
                retry_policy=policies.mcp_list_retry(),
            )
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                raise
            why = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
            raise ApplicationError(
                f"plan {plan.id!r} cannot start: listing the tools of MCP servers "
                f"{', '.join(servers)} failed: {why}",
                type=FailureType.MCP_TOOLS_UNAVAILABLE.value,
                non_retryable=True,
            ) from None
        return listed.servers

    async def _publish(self, plan: Plan) -> None:
        """The plan's result branch: what its completed subtasks made, merged in the plan's
        order onto the base; the final report names it (and the memo, for lists)."""
        if self._base is None:
            return
        self._published = await publish_result(
            plan.id, self._base, result_commits(plan, self._results)
        )
        self._visibility.workspace(self._published)

    async def _notify(self, plan: Plan, report: PlanReport) -> None:
        """Tell the plan's webhook how it ended, once the report is final (completed,
        failed or cancelled alike); the outcome goes to the memo (``workflows/plan_webhook.py``),
        and neither the report nor the way the plan ends depends on it."""
        if plan.notify is not None:
            await deliver_report(self._plan_run_id, plan.notify, report)

    async def _drive(self, plan: Plan, inp: PlanInput) -> bool:
        """Schedule until every subtask is terminal; True when it is time to continue-as-new.

        ``_changed`` is cleared before anything that awaits, so a child finishing during
        the merge activity is seen by the scheduling step right after it, and a child
        finishing after that wakes the wait below: no completion is ever missed.
        """
        results_at_start = len(self._results)
        winding_down = False
        while True:
            self._changed = False
            plan = self._plan or plan  # as the latest revision left it
            # Start what became runnable first: the merge activity below would otherwise
            # delay every dependent child by a round trip.
            self._schedule(plan, inp, start_new=not winding_down)
            await self._merge_ready(plan)
            self._schedule(plan, inp, start_new=not winding_down)
            if not self._running:
                if winding_down:
                    return True
                if self._finished(plan):
                    await self._merge_ready(plan)
                    return False
                stuck = [s.id for s in plan.subtasks if s.id not in self._results]
                if self.pause_desk.waiting:
                    # The rest waits for an operator (an update wakes the wait below),
                    # maybe for days: the counts the interval held back are said now.
                    self._visibility.idle(self._progress_report, paused=self._paused())
                else:
                    raise application_error(
                        FailureType.SCHEDULER_STALLED,
                        f"scheduler stalled with {len(stuck)} subtasks neither runnable nor "
                        "blocked: " + ", ".join(stuck[:10]),
                    )
            await workflow.wait_condition(lambda: self._changed)
            self._visibility.progress(self._progress_report, paused=self._paused())
            limit = inp.max_completions_per_run
            done_here = len(self._results) - results_at_start
            if (
                workflow.info().is_continue_as_new_suggested()
                or (limit is not None and done_here >= limit)
                or (done_here > 0 and self._history_near_goal())
            ):
                winding_down = not self._finished(plan)

    def _history_near_goal(self) -> bool:
        """Whether this run's history, with what its running children will add, nears
        ``HISTORY_GOAL_*`` (history length and size are the replayed task's, so a replay
        answers the same)."""
        info = workflow.info()
        events = info.get_current_history_length()
        size = info.get_current_history_size()
        tail = EVENTS_PER_RUNNING_CHILD * len(self._running)
        near = (
            events + tail >= HISTORY_GOAL_MARGIN * HISTORY_GOAL_EVENTS
            or size + tail * size / max(events, 1) >= HISTORY_GOAL_MARGIN * HISTORY_GOAL_BYTES
        )
        return near

    def _schedule(self, plan: Plan, inp: PlanInput, *, start_new: bool) -> None:
        """Skip what can never run, then start what can, up to ``max_parallel`` (no awaits).

        What it starts is ``scheduling.ready_subtasks``'s answer, in its order; the
        frontier gives it without a pass over the plan."""
        frontier = self._sync()
        dag = self._dag
        assert dag is not None
        # Only a failure, cancellation or skip blocks anything, and only a subtask turning
        # dead or pending since the last look can block more: otherwise, no pass.
        blocked = {}
        if self._check_blocked and frontier.any_dead:
            statuses = frontier.statuses()
            for failed in self._replanning.values():  # held for its replanner
                statuses[dag.index_of(failed)] = SubtaskStatus.RUNNING
            blocked = blocked_by_failure_at(dag, statuses)
        self._check_blocked = False
        for sid, root in blocked.items():
            root_status = frontier.status(root).value
            self._results[sid] = SubtaskResult(
                id=sid,
                status=SubtaskStatus.SKIPPED,
                agent=self._subtasks[sid].agent,
                error=ErrorInfo(
                    type=FailureType.DEPENDENCY_FAILED, message=f"{root} {root_status}"
                ),
            )
        if blocked:
            self._sync()
            self._check_blocked = False  # the pass found every subtask they block
        if not start_new:
            return
        # The rest when a child finishes (the next pass, the next task).
        room = min(plan.max_parallel - len(self._running), START_BATCH)
        for sid in frontier.ready(max(room, 0)):
            self._start(plan, sid, inp)

    def _start(self, plan: Plan, sid: str, inp: PlanInput) -> None:
        sub = self._subtasks[sid]
        prior = self._prior.get(sid)
        retries = prior.retries + 1 if prior is not None else 0
        self._attempt[sid] = retries
        child_input = SubtaskInput(
            plan_run_id=self._plan_run_id,
            subtask=sub,
            base_session_id=default_session_id(plan),
            dependency_branches=tuple((d, self._branches[d]) for d in sub.depends_on),
            dependency_descriptions=tuple(self._subtasks[d].description for d in sub.depends_on),
            budget=self.pause_desk.budget,
            agents=inp.agents,
            root_session_id=default_session_id(plan),
            tenant=plan.tenant,
            depth=0,
            llm_local=self._llm_local,
            retries=retries,
            approval=plan.approval,
            mcp_tools=self._mcp_tools or (),
            workspace=self._workspace_start(plan, sid, retries),
            plan_data=inp.plan_data,
            check_rounds=plan.check_rounds,
            report_to=workflow.info().workflow_id,
        )
        self._running[sid] = asyncio.create_task(self._run_child(plan, sid, child_input))

    def _workspace_start(self, plan: Plan, sid: str, retries: int) -> WorkspaceStart | None:
        """Where the attempt's tree starts: the base, and its dependencies' results (all
        completed, or it would not be starting) for the subtask to merge."""
        if self._base is None or self._dag is None:
            return None
        sub = self._subtasks[sid]
        # completed_commits(plan, results, deps), without a pass over the whole plan.
        order = sorted(dict.fromkeys(sub.depends_on), key=self._dag.position.__getitem__)
        parents = tuple(
            (dep, row.commit)
            for dep in order
            if (row := self._results.get(dep)) is not None
            and row.status is SubtaskStatus.COMPLETED
            and row.commit
        )
        return WorkspaceStart(
            plan_id=plan.id,
            tree=subtask_tree(self._plan_run_id, sid, retries),
            base=self._base,
            parents=parents,
            identity=subtask_identity(sub.agent, sid, plan.id),
        )

    async def _run_child(self, plan: Plan, sid: str, child_input: SubtaskInput) -> None:
        agent = child_input.subtask.agent
        try:
            outcome = await workflow.execute_child_workflow(
                SubtaskWorkflow.run,
                child_input,
                id=subtask_workflow_id(plan.id, sid),
                static_summary=f"{agent}: {child_input.subtask.description[:120]}",
                search_attributes=(
                    subtask_search_attributes(plan.id, agent) if self._visibility.enabled else None
                ),
            )
            self._branches[sid] = outcome.branch_session_id
            self._record(
                SubtaskResult(
                    id=sid,
                    status=SubtaskStatus.COMPLETED,
                    agent=agent,
                    result=excerpt(
                        outcome.result,
                        excerpt_limit(plan, floor=80 if self._summarized() else 200),
                    ),
                    llm_calls=outcome.llm_calls,
                    usage=outcome.usage,
                    models=outcome.models,
                    session_id=outcome.branch_session_id,
                    commit=outcome.commit,
                    checks=kept_checks(plan, outcome.checks),
                )
            )
        except asyncio.CancelledError:
            self._record(
                SubtaskResult(
                    id=sid,
                    status=SubtaskStatus.CANCELLED,
                    agent=agent,
                    error=ErrorInfo(type=FailureType.CANCELLED, message="the plan was cancelled"),
                )
            )
            raise
        except (ChildWorkflowError, FailureError) as err:
            status, error, details = failure_of(err)
            result = self._record(
                SubtaskResult(
                    id=sid,
                    status=status,
                    agent=agent,
                    error=error,
                    llm_calls=details.llm_calls if details else 0,
                    usage=details.usage if details else Usage(),
                    models=details.models if details else (),
                    session_id=details.branch_session_id if details else None,
                    commit=details.commit if details else None,
                    checks=kept_checks(plan, details.checks) if details else (),
                )
            )
            self.pause_desk.failed(result, ran_with=child_input.budget)
            self._replan(result)
        finally:
            self._replan_ended(sid)
            self._running.pop(sid, None)
            self._changed = True

    def _replan(self, result: SubtaskResult) -> None:
        """A failure under ``on_failure: "replan"``: add a subtask for the plan's replanner
        (``domain/replanning.py``), which revises the plan around it; at most
        ``max_replans`` times in a plan, and never for a plan run by reference (which
        cannot be revised yet)."""
        plan = self._plan
        inp = self._inp
        if (
            plan is None
            or inp is None
            or result.status is not SubtaskStatus.FAILED
            or plan.on_failure_of(result.id) != "replan"
            or self._ending
            or self._cancelled
            or inp.plan_data is not None
        ):
            return
        used = sum(1 for r in self._revisions if r.by == REPLAN_BY)
        now = workflow.now().timestamp()
        error = result.error
        why = f"{error.type}: {error.message}" if error is not None else "failed"
        if used >= plan.replans_allowed:
            self._log.add(
                LogEntry.of(
                    now,
                    "revised",
                    by=REPLAN_BY,
                    subtask=result.id,
                    detail=f"not replanned: max_replans ({plan.replans_allowed}) reached",
                )
            )
            return
        replanner = replan_subtask(plan, result, self._results, self._running, used + 1)
        revision = Revision(
            number=len(self._revisions) + 1,
            at_s=now,
            by=REPLAN_BY,
            subtask=result.id,
            reason=scrub_secrets(f"{result.id} failed: {why}")[:500],
            added=(replanner.id,),
        )
        self._take_plan(plan.model_copy(update={"subtasks": (*plan.subtasks, replanner)}))
        self._revisions.append(revision)
        self._replanning[replanner.id] = result.id
        self._log.add(
            LogEntry.of(
                now,
                "revised",
                by=REPLAN_BY,
                subtask=result.id,
                detail=f"{revision.describe()} to replan ({revision.reason})",
            )
        )

    def _replan_ended(self, sid: str) -> None:
        """Replanner ``sid`` ended: the failure it replanned is ``replaced_by`` it when it
        revised the plan, and what still depends on the failure is skipped as usual."""
        failed = self._replanning.pop(sid, None)
        if failed is None:
            return
        row = self._results.get(failed)
        revised = any(r.subtask == sid for r in self._revisions)
        if revised and row is not None and row.status is SubtaskStatus.FAILED:
            self._results[failed] = row.model_copy(update={"replaced_by": sid})
        self._check_blocked = True
        self._note(failed)

    def _record(self, result: SubtaskResult) -> SubtaskResult:
        """Keep a child's outcome, with its earlier attempts' spend added."""
        result = self._with_prior(result)
        self._prior.pop(result.id, None)
        self._results[result.id] = result
        return result

    async def _merge_ready(self, plan: Plan) -> None:
        """Merge completed results into the base session in declaration order.

        A result waits for every subtask declared before it to finish, so the base
        session's order does not depend on which child happened to finish first.
        """
        merged = self._merged_ids
        batch: list[tuple[str, str]] = []
        subtasks = plan.subtasks
        while self._merge_from < len(subtasks) and subtasks[self._merge_from].id in merged:
            self._merge_from += 1  # merged ids only ever grow: the prefix only lengthens
        for st in subtasks[self._merge_from :]:
            if st.id in merged:
                continue
            result = self._results.get(st.id)
            if result is None or result.status is SubtaskStatus.PAUSED:
                break
            if result.status is SubtaskStatus.COMPLETED and st.id in self._branches:
                batch.append((st.id, self._branches[st.id]))
            self._merged.append(st.id)
            merged.add(st.id)
        if batch and self._merge_enabled:
            await store_op(
                ACT_MERGE_RESULTS,
                MergeResultsInput(
                    plan_run_id=self._plan_run_id,
                    base_session_id=default_session_id(plan),
                    entries=tuple(batch),
                ),
            )

    async def _record_cancelled_spend(self, plan: Plan, started: list[str]) -> None:
        """A cancelled child reports nothing back, yet its calls happened and were billed:
        read its stored answers and their usage from its branch, and name the branch."""
        cancelled = [
            sid
            for sid in started
            if (r := self._results.get(sid)) is not None and r.status is SubtaskStatus.CANCELLED
        ]
        if not cancelled:
            return
        base = default_session_id(plan)
        keys = {sid: attempt_key(sid, self._attempt.get(sid, 0)) for sid in cancelled}
        branches = {sid: branch_session_id(base, self._plan_run_id, keys[sid]) for sid in cancelled}
        out: BranchSpendOutput = await store_op(
            ACT_BRANCH_SPEND,
            BranchSpendInput(
                entries=tuple(
                    (sid, branches[sid], subtask_scope(self._plan_run_id, keys[sid]), MAX_TURNS)
                    for sid in cancelled
                )
            ),
            result_type=BranchSpendOutput,
        )
        for spend in out.spends:
            row = self._results[spend.subtask_id]
            before = row.llm_calls, row.usage  # earlier attempts' (``_record``)
            self._results[spend.subtask_id] = row.model_copy(
                update={
                    "llm_calls": before[0] + spend.llm_calls,
                    "usage": before[1] + spend.usage,
                    "session_id": branches[spend.subtask_id] if spend.branch_exists else None,
                }
            )

    async def _cancel_everything(self, plan: Plan) -> None:
        self._cancelled = True
        running = dict(self._running)
        for task in running.values():
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
        await self._record_cancelled_spend(plan, list(running))
        self.pause_desk.cancel_all()
        for st in plan.subtasks:
            if st.id not in self._results:
                prior = self._prior.get(st.id)  # resumed, but never started again
                self._results[st.id] = SubtaskResult(
                    id=st.id,
                    status=SubtaskStatus.CANCELLED,
                    agent=st.agent,
                    error=ErrorInfo(
                        type=FailureType.CANCELLED, message="the plan was cancelled first"
                    ),
                    llm_calls=prior.llm_calls if prior else 0,
                    usage=prior.usage if prior else Usage(),
                    models=prior.models if prior else (),
                    retries=prior.retries if prior else 0,
                )
