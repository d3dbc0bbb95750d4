"""An operator steps into a plan: resume, skip, raise the budget, retry.

``resume``, ``skip`` and ``raise_budget`` are Updates of the running PlanWorkflow: its
validators refuse what cannot be done (an unknown subtask, one that is not paused, a
budget naming no limit) before anything is written, and the caller gets that sentence.
``retry`` starts a new run of a finished plan (same workflow id) from the state the last
run reached, read through the ``carried_state`` query: what completed is kept, what
failed, was skipped or cancelled runs again. With changes (edit and re-run) the new run's
plan has the edited subtasks, which run again with their dependents; who changed which
fields is recorded in the new run's memo (``EDITS_MEMO``), kept by every later retry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from durable_plans._errors import InvalidArgument, OperatorError, Refused
from durable_plans.client._plans import describe_plan, plan_input_arg, plan_priority, query_plan
from durable_plans.domain.agents import BUILTIN_CATALOG, AgentCatalog
from durable_plans.domain.contracts import PLAN_TASK_TIMEOUT, PLAN_WORKFLOW, PlanInput
from durable_plans.domain.failures import describe_failure
from durable_plans.domain.models import PlanReport
from durable_plans.domain.operations import (
    CARRIED_STATE_QUERY,
    EDITS_MEMO,
    MAX_KEPT_EDITS,
    NOT_STARTED,
    SubtaskChanges,
    SubtaskEdit,
    change_problems,
    fork_input,
    retry_input,
    with_agents_of,
)
from durable_plans.domain.plan_loader import ID_RULE, is_valid_id, validate_plan
from durable_plans.domain.plan_log import LogEntry, PlanLog
from durable_plans.domain.problems import describe
from durable_plans.domain.secrets import scrub_secrets

__all__ = ["check_changes", "plan_edits", "start_retry", "update_running_plan"]

T = TypeVar("T")


async def _status(client: Client, plan_id: str) -> WorkflowExecutionStatus:
    status = (await describe_plan(client, plan_id)).status
    assert status is not None
    return status


# How long an Update refused as NOT_STARTED (a run that just began) is sent again.
NOT_STARTED_WAIT_S = 10.0


async def update_running_plan(
    client: Client, plan_id: str, name: str, arg: Any, result_type: type[T]
) -> T:
    """Run Update ``name`` on a running plan; every refusal becomes ``Refused``."""
    status = await _status(client, plan_id)
    if status != WorkflowExecutionStatus.RUNNING:
        raise Refused(
            f"plan '{plan_id}' is not running (it is {status.name.lower()}): "
            f"retry it to run what did not complete (dplan retry {plan_id})"
        )
    handle = client.get_workflow_handle(plan_id)
    deadline = time.monotonic() + NOT_STARTED_WAIT_S
    while True:
        try:
            result: T = await handle.execute_update(name, arg, result_type=result_type)
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            if not isinstance(cause, ApplicationError):
                raise Refused(str(cause)) from err
            message = describe_failure(cause)[1]
            if message == NOT_STARTED and time.monotonic() < deadline:
                # The plan just continued as new: its new run answers in a moment.
                await asyncio.sleep(0.1)
                continue
            details = cause.details[0] if cause.details else None
            problems = tuple(str(p) for p in details) if isinstance(details, list) else ()
            raise Refused(message, problems) from err
        return result


def check_changes(
    changes: Mapping[str, object] | None, catalog: AgentCatalog
) -> dict[str, SubtaskChanges]:
    """``changes`` as ``SubtaskChanges`` (data is read as one), or ``InvalidArgument`` in
    one line naming every problem that does not depend on the plan: an unknown field, an
    empty description, an agent ``catalog`` does not have, a model that cannot be one."""
    checked: dict[str, SubtaskChanges] = {}
    problems: list[str] = []
    for subtask, value in (changes or {}).items():
        if isinstance(value, SubtaskChanges):
            change = value
        elif isinstance(value, Mapping):
            try:
                change = SubtaskChanges.from_fields(value)
            except OperatorError as err:
                problems.append(f"subtask {subtask!r}: {err}")
                continue
        else:
            problems.append(
                f"subtask {subtask!r}: changes must be a SubtaskChanges, got {describe(value)}"
            )
            continue
        problems += change_problems(subtask, change, catalog.names())
        checked[subtask] = change
    if problems:
        raise InvalidArgument("; ".join(problems))
    return checked


async def plan_edits(client: Client, plan_id: str) -> list[SubtaskEdit]:
    """Who changed which subtask fields in edits and re-runs of the plan, oldest first,
    from its memo (no worker needed); empty for a plan never edited."""
    return await _edits_of(await describe_plan(client, plan_id))


async def _edits_of(description: WorkflowExecutionDescription) -> list[SubtaskEdit]:
    try:
        raw: Any = await description.memo_value(EDITS_MEMO, None)
        return [SubtaskEdit.model_validate(item) for item in raw or ()]
    except Exception:  # undecodable here (another codec or version): nothing to show
        return []


async def _carried_state(
    client: Client, plan_id: str, description: WorkflowExecutionDescription
) -> PlanInput:
    """What the plan's last run reached; the plan must have ended. The query replays the
    closed run on a worker, so one must be polling the task queue."""
    if description.status == WorkflowExecutionStatus.RUNNING:
        raise Refused(
            f"plan '{plan_id}' is still running: a paused subtask is resumed "
            f"(dplan resume {plan_id} SUBTASK); cancel the plan first to retry it whole"
        )
    return await query_plan(client.get_workflow_handle(plan_id), CARRIED_STATE_QUERY, PlanInput)


def _logged_retry(
    new_input: PlanInput, rerun: list[str], changes: Mapping[str, SubtaskChanges], by: str
) -> PlanInput:
    """The new run's input with the retry, and each edit, added to the plan's log."""
    now = time.time()
    runs = ", ".join(rerun)
    entries = [LogEntry.of(now, "retried", by=by, detail=f"runs again: {runs}")]
    entries += [
        LogEntry.of(now, "edited", by=by, subtask=sid, detail="changed " + ", ".join(change.fields))
        for sid, change in changes.items()
    ]
    log = PlanLog(new_input.log, new_input.log_omitted)
    log.extend(entries)
    return new_input.model_copy(update={"log": log.entries, "log_omitted": log.omitted})


def _with_edits_checked(new_input: PlanInput, catalog: AgentCatalog | None, what: str) -> PlanInput:
    """``new_input`` after edits, with the agents they bring in (from ``catalog``) and the
    plan checked again: ``InvalidArgument`` naming ``what`` and each problem."""
    try:
        new_input = with_agents_of(new_input, catalog or BUILTIN_CATALOG)
    except KeyError as err:  # an agent check_changes was not asked about
        raise InvalidArgument(str(err)) from None
    fixed = AgentCatalog(agents=new_input.agents) if new_input.agents else BUILTIN_CATALOG
    problems = validate_plan(new_input.plan, known_agents=fixed.names())
    if problems:
        raise InvalidArgument(f"{what} is invalid", problems)
    return new_input


async def start_retry(
    client: Client,
    plan_id: str,
    task_queue: str,
    also: Iterable[str] = (),
    *,
    changes: Mapping[str, SubtaskChanges] | None = None,
    catalog: AgentCatalog | None = None,
    by: str = "",
) -> tuple[PlanInput, list[str]]:
    """Start the new run; returns its input and the subtasks that run again.

    ``changes`` (checked by ``check_changes``) edit subtasks first; an agent they bring in
    comes from ``catalog``, and the edit is recorded under ``by``'s name."""
    description = await describe_plan(client, plan_id)
    state = await _carried_state(client, plan_id, description)
    try:
        new_input, rerun = retry_input(state, also, changes)
    except OperatorError as err:
        raise Refused(str(err)) from err
    edits = await _edits_of(description)
    if changes:
        new_input = _with_edits_checked(new_input, catalog, f"the edited plan {plan_id!r}")
        at = datetime.now(UTC).isoformat(timespec="seconds")
        edits += [
            SubtaskEdit(subtask=sid, fields=change.fields, by=by, at=at)
            for sid, change in changes.items()
        ]
    new_input = _logged_retry(new_input, rerun, changes or {}, by)
    goal = new_input.plan.goal
    summary = f"retry: {scrub_secrets(goal)[:100]}" if goal else None
    if changes:
        summary = f"edit and re-run ({', '.join(changes)[:60]}) by {by[:40]}" + (
            f": {scrub_secrets(goal)[:60]}" if goal else ""
        )
    await client.start_workflow(
        PLAN_WORKFLOW,
        await plan_input_arg(new_input),  # packed when too big to travel whole
        id=plan_id,
        task_queue=task_queue,
        result_type=PlanReport,
        task_timeout=PLAN_TASK_TIMEOUT,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        priority=plan_priority(new_input.plan),
        static_summary=summary,
        memo=(
            {EDITS_MEMO: [e.model_dump(mode="json") for e in edits[-MAX_KEPT_EDITS:]]}
            if edits
            else None
        ),
    )
    return new_input, rerun


@dataclass(frozen=True)
class ForkedPlan:
    """A fork just started (``Client.fork``): its plan id, and what runs again in it."""

    plan_id: str
    rerun: list[str]


async def start_fork(
    client: Client,
    plan_id: str,
    from_subtask: str,
    new_id: str,
    task_queue: str,
    *,
    changes: Mapping[str, SubtaskChanges] | None = None,
    catalog: AgentCatalog | None = None,
    by: str = "",
) -> list[str]:
    """Start plan ``new_id``, a fork of ``plan_id`` from ``from_subtask`` (``fork_input``);
    returns the subtasks that run again. The original is only read: its carried state,
    from its worker (a running plan answers as it stands, an ended one by a replay)."""
    if not is_valid_id(new_id):
        raise InvalidArgument(f"--id {new_id!r}: {ID_RULE}")
    await describe_plan(client, plan_id)  # PlanNotFound, in the CLI's words
    state = await query_plan(client.get_workflow_handle(plan_id), CARRIED_STATE_QUERY, PlanInput)
    try:
        new_input, rerun = fork_input(
            state, from_subtask, new_id, changes=changes, by=by, at_s=time.time()
        )
    except OperatorError as err:
        raise Refused(str(err)) from err
    if changes:
        new_input = _with_edits_checked(new_input, catalog, f"the edited fork of {plan_id!r}")
    goal = new_input.plan.goal
    try:
        await client.start_workflow(
            PLAN_WORKFLOW,
            await plan_input_arg(new_input),
            id=new_id,
            task_queue=task_queue,
            result_type=PlanReport,
            task_timeout=PLAN_TASK_TIMEOUT,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            # A fork never takes an id that was ever used: not the original's, nor any.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            priority=plan_priority(new_input.plan),
            static_summary=f"fork of {plan_id} from {from_subtask} by {by[:40]}"
            + (f": {scrub_secrets(goal)[:60]}" if goal else ""),
            memo={"goal": scrub_secrets(goal)[:200], "subtask_count": len(new_input.plan.subtasks)},
        )
    except WorkflowAlreadyStartedError:
        raise Refused(f"a plan with id '{new_id}' exists already: choose another --id") from None
    return rerun
