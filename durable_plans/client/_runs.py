"""Every run of a plan: its first start, then each ``dplan retry``.

A plan id keeps one workflow id, so Temporal holds each retry as a new execution of it,
and a long run as a chain of executions linked by continue-as-new. An operator thinks in
runs (the first one failed, the retry completed), so the executions are grouped into
chains here: each begins where Temporal says it began (its ``first_run_id``), or, from a
server that does not say, right after an execution that did not continue as new. A run's
report is its chain's last execution's; ``Client.status(plan, run=...)`` reads it.

Listed from visibility (eventually consistent); the latest execution is described
directly as well, so a retry started a moment ago is never missing, and so is any other
the listing still calls running (it closed a moment ago).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from durable_plans.client._plans import describe_plan
from durable_plans.client._visibility import CLOSED_STATUS_NAMES

__all__ = ["RunSummary", "plan_runs"]

MAX_LISTED = 500  # executions read per plan: hundreds of retries and continuations


@dataclass(frozen=True)
class RunSummary:
    """One run of a plan: a start or a retry, with its continue-as-new executions."""

    number: int  # 1 for the first start, 2 for the first retry, ...
    run_id: str  # its last execution's: the one whose report is the run's
    first_run_id: str
    status: str  # that execution's: running, completed, failed, cancelled, terminated...
    started_at: datetime
    closed_at: datetime | None
    executions: int  # 1, plus one per continue-as-new
    latest: bool  # the plan's current run (what ``status`` without a run reads)


def _status_name(status: WorkflowExecutionStatus | None) -> str:
    """As ``dplan list`` says it (running, completed, failed, cancelled, ...)."""
    if status is None:
        return "unknown"
    if status is WorkflowExecutionStatus.RUNNING:
        return "running"
    return CLOSED_STATUS_NAMES.get(status, status.name.lower())


def _first_run_of(execution: WorkflowExecution) -> str:
    return execution.raw_info.first_run_id if execution.raw_info is not None else ""


async def plan_runs(client: Client, plan_id: str) -> list[RunSummary]:
    """The plan's runs, oldest first; ``PlanNotFound`` when it has none."""
    latest = await describe_plan(client, plan_id)
    found: dict[str, WorkflowExecution] = {latest.run_id: latest}
    query = f"WorkflowId = '{plan_id}'"  # a plan id is letters, digits and _.- only
    async for execution in client.list_workflows(query, limit=MAX_LISTED):
        found.setdefault(execution.run_id, execution)
    # Only the latest execution can be running: one listed so has closed since, and the
    # listing has not caught up (a retry a moment after its run ended, a continue-as-new
    # just done). Described, its status is the server's own.
    stale = [
        run_id
        for run_id, e in found.items()
        if e.status == WorkflowExecutionStatus.RUNNING and run_id != latest.run_id
    ]
    described = await asyncio.gather(
        *(client.get_workflow_handle(plan_id, run_id=run_id).describe() for run_id in stale)
    )
    found.update(zip(stale, described, strict=True))
    ordered = sorted(found.values(), key=lambda e: (e.start_time, e.run_id))
    chains: list[list[WorkflowExecution]] = []
    for execution in ordered:
        first = _first_run_of(execution)
        previous = chains[-1][-1] if chains else None
        continues = previous is not None and (
            first == (_first_run_of(chains[-1][0]) or chains[-1][0].run_id)
            if first
            else previous.status == WorkflowExecutionStatus.CONTINUED_AS_NEW
        )
        if continues:
            chains[-1].append(execution)
        else:
            chains.append([execution])
    runs = []
    for number, chain in enumerate(chains, start=1):
        last = chain[-1]
        runs.append(
            RunSummary(
                number=number,
                run_id=last.run_id,
                first_run_id=chain[0].run_id,
                status=_status_name(last.status),
                started_at=chain[0].start_time,
                closed_at=last.close_time,
                executions=len(chain),
                latest=last.run_id == latest.run_id,
            )
        )
    return runs
