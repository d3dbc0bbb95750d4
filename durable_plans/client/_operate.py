"""An operator steps into a plan: resume, skip, raise the budget, retry.

``resume``, ``skip`` and ``raise_budget`` are Updates of the running PlanWorkflow: its
validators refuse what cannot be done (an unknown subtask, one that is not paused, a
budget naming no limit) before anything is written, and the caller gets that sentence.
``retry`` starts a new run of a finished plan (same workflow id) from the state the last
run reached, read through the ``carried_state`` query: what completed is kept, what
failed, was skipped or cancelled runs again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError

from durable_plans._errors import Refused
from durable_plans.client._plans import describe_plan, query_plan
from durable_plans.domain.contracts import PLAN_WORKFLOW, PlanInput
from durable_plans.domain.failures import describe_failure
from durable_plans.domain.models import PlanReport
from durable_plans.domain.operations import CARRIED_STATE_QUERY, OperatorError, retry_input
from durable_plans.domain.secrets import scrub_secrets

__all__ = ["start_retry", "update_running_plan"]

T = TypeVar("T")


async def _status(client: Client, plan_id: str) -> WorkflowExecutionStatus:
    status = (await describe_plan(client, plan_id)).status
    assert status is not None
    return status


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
    try:
        result: T = await handle.execute_update(name, arg, result_type=result_type)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        if isinstance(cause, ApplicationError):
            raise Refused(describe_failure(cause)[1]) from err
        raise Refused(str(cause)) from err
    return result


async def _carried_state(client: Client, plan_id: str) -> PlanInput:
    """What the plan's last run reached; the plan must have ended. The query replays the
    closed run on a worker, so one must be polling the task queue."""
    if await _status(client, plan_id) == WorkflowExecutionStatus.RUNNING:
        raise Refused(
            f"plan '{plan_id}' is still running: a paused subtask is resumed "
            f"(dplan resume {plan_id} SUBTASK); cancel the plan first to retry it whole"
        )
    return await query_plan(client.get_workflow_handle(plan_id), CARRIED_STATE_QUERY, PlanInput)


async def start_retry(
    client: Client, plan_id: str, task_queue: str, also: Iterable[str] = ()
) -> tuple[PlanInput, list[str]]:
    """Start the new run; returns its input and the subtasks that run again."""
    state = await _carried_state(client, plan_id)
    try:
        new_input, rerun = retry_input(state, also)
    except OperatorError as err:
        raise Refused(str(err)) from err
    goal = new_input.plan.goal
    await client.start_workflow(
        PLAN_WORKFLOW,
        new_input,
        id=plan_id,
        task_queue=task_queue,
        result_type=PlanReport,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        static_summary=f"retry: {scrub_secrets(goal)[:100]}" if goal else None,
    )
    return new_input, rerun
