"""Helpers shared by the plan tests: build plans, run them, read their reports."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from durable_plans.domain.contracts import PLAN_TASK_TIMEOUT, PlanInput
from durable_plans.domain.models import Plan, PlanReport, Subtask


def make_plan(
    subtasks: Sequence[tuple[str, str, Sequence[str]]],
    *,
    session_id: str | None = None,
    max_parallel: int = 4,
    agent: str = "coder",
    prefix: str = "plan",
) -> Plan:
    """``subtasks`` as (id, description, depends_on); ids get no prefix, the plan does."""
    return Plan(
        id=f"{prefix}-{uuid.uuid4().hex[:10]}",
        goal="integration test plan",
        session_id=session_id,
        max_parallel=max_parallel,
        subtasks=tuple(
            Subtask(id=sid, description=desc, agent=agent, depends_on=tuple(deps))
            for sid, desc, deps in subtasks
        ),
    )


async def start_plan_workflow(
    client: Client, plan: Plan, task_queue: str, **input_fields: Any
) -> WorkflowHandle[Any, PlanReport]:
    """Start ``plan`` on ``task_queue`` under its own id; ``input_fields`` are the other
    ``PlanInput`` fields (agents, budget...)."""
    return await client.start_workflow(
        "PlanWorkflow",
        PlanInput(plan=plan, **input_fields),
        id=plan.id,
        task_queue=task_queue,
        result_type=PlanReport,
        task_timeout=PLAN_TASK_TIMEOUT,  # as the client starts a plan
    )


async def run_plan(
    client: Client, plan: Plan, task_queue: str, **input_fields: Any
) -> tuple[PlanReport, ApplicationError | None]:
    """Run to the end; a failed plan returns its report from the PlanFailed details."""
    handle = await start_plan_workflow(client, plan, task_queue, **input_fields)
    try:
        return await handle.result(), None
    except WorkflowFailureError as err:
        cause = err.cause
        assert isinstance(cause, ApplicationError), f"unexpected failure cause: {cause!r}"
        if cause.type != "PlanFailed":
            raise
        return PlanReport.model_validate(cause.details[0]), cause


async def workflow_status(client: Client, workflow_id: str) -> WorkflowExecutionStatus.ValueType:
    desc = await client.get_workflow_handle(workflow_id).describe()
    assert desc.status is not None
    return desc.status.value  # type: ignore[return-value]


def by_id(report: PlanReport) -> dict[str, Any]:
    return {r.id: r for r in report.subtasks}
