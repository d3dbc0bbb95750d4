"""What the page shows of a plan, read through the typed client and Temporal.

* the plan itself (subtasks, descriptions, dependencies): the input of its latest run,
  from the run's first history event (a retry's input carries the plan it runs);
* where each subtask stands: ``Client.status`` (the report);
* when each ran, and the sub-agents each spawned: the plan's child workflows from
  visibility (``WorkflowId STARTS_WITH 'PLAN/'``: a subtask is ``PLAN/SUBTASK``, a
  sub-agent ``PLAN/SUBTASK/AGENT-TURN-INDEX``), so the timeline needs no worker.

Each function returns plain JSON-ready dicts; the page draws them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from durable_plans.client import Client, PendingCall, PlanSummary, RunSummary
from durable_plans.domain.checks import CheckRun
from durable_plans.domain.models import Plan, PlanReport, SubtaskResult, Usage
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.temporal_client import ui_base_for, web_url

__all__ = [
    "PlanDefinitions",
    "approval_json",
    "plan_json",
    "report_json",
    "result_json",
    "run_json",
    "summary_json",
    "timeline_json",
]

_CHILD_LIMIT = 5000


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def usage_json(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "tokens": usage.prompt_tokens + usage.completion_tokens,
        "cost_usd": usage.cost_usd,
    }


def summary_json(row: PlanSummary) -> dict[str, Any]:
    """A row of the plans list: what ``dplan list --json`` prints, and the goal scrubbed."""
    data = row.to_json()
    if isinstance(data.get("goal"), str):
        data["goal"] = scrub_secrets(data["goal"])
    return data


def result_json(result: SubtaskResult) -> dict[str, Any]:
    return {
        "id": result.id,
        "status": result.status.value,
        "agent": result.agent,
        "result": scrub_secrets(result.result) if result.result is not None else None,
        "error": (
            {"type": result.error.type, "message": scrub_secrets(result.error.message)}
            if result.error is not None
            else None
        ),
        "llm_calls": result.llm_calls,
        "usage": usage_json(result.usage),
        "session_id": result.session_id,
        "retries": result.retries,
        "commit": result.commit,
        "checks": [check_json(c) for c in result.checks],
    }


def check_json(run: CheckRun) -> dict[str, Any]:
    """One check run (``domain/checks.py``), its output scrubbed like every text shown."""
    data = run.model_dump(mode="json")
    data["output"] = scrub_secrets(run.output)
    return data


def report_json(report: PlanReport) -> dict[str, Any]:
    workspace = report.workspace
    return {
        "plan_id": report.plan_id,
        "status": report.status.value,
        "counts": report.counts.model_dump(),
        "usage": usage_json(report.usage),
        "duration_s": report.duration_s,
        "subtasks": [result_json(r) for r in report.subtasks],
        "workspace": workspace.model_dump(mode="json") if workspace is not None else None,
        "checks": [check_json(c) for c in report.checks],
        "error": (
            {"type": report.error.type, "message": scrub_secrets(report.error.message)}
            if report.error is not None
            else None
        ),
        # Newest first: what an operator reads first is what was decided last.
        "log": [entry.model_dump(mode="json") for entry in reversed(report.log)],
        "log_omitted": report.log_omitted,
        "revisions": [revision.model_dump(mode="json") for revision in report.revisions],
        "forked_from": report.forked_from.model_dump() if report.forked_from else None,
    }


def run_json(run: RunSummary) -> dict[str, Any]:
    return {
        "number": run.number,
        "run_id": run.run_id,
        "status": run.status,
        "started": _iso(run.started_at),
        "closed": _iso(run.closed_at),
        "executions": run.executions,
        "latest": run.latest,
    }


def approval_json(call: PendingCall) -> dict[str, Any]:
    return {
        "plan": call.plan,
        "call": call.call,
        "subtask": call.subtask,
        "agent": call.agent,
        "tool": call.tool,
        "arguments": call.arguments,  # scrubbed by the workflow
        "since": call.since,
        "timeout_s": call.timeout_s,
    }


def plan_json(
    plan: Plan, settings_ui_base: str, namespace: str, run: str | None = None
) -> dict[str, Any]:
    url = web_url(settings_ui_base, namespace, plan.id)
    if run:  # an earlier run: Temporal Web's page of that execution, not the latest's
        url += f"/{quote(run, safe='')}/history"
    return {
        "id": plan.id,
        "goal": scrub_secrets(plan.goal),
        "max_parallel": plan.max_parallel,
        "subtasks": [
            {
                "id": s.id,
                "description": scrub_secrets(s.description),
                "agent": s.agent,
                "depends_on": list(s.depends_on),
            }
            for s in plan.subtasks
        ],
        "temporal_url": url,
    }


@dataclass
class PlanDefinitions:
    """Plans read from their runs' first events, cached by run (a run's input is fixed)."""

    client: Client
    _by_run: dict[tuple[str, str], Plan] = field(default_factory=dict)
    first_run: dict[str, str] = field(default_factory=dict)
    """Each plan's first run id (of its latest execution chain): names its branches."""

    @property
    def ui_base(self) -> str:
        return ui_base_for(self.client.settings)

    async def plan(self, plan_id: str, run_id: str | None = None) -> Plan:
        """The plan its latest run runs (or execution ``run_id`` ran); ``PlanNotFound``
        for an unknown id or run."""
        if run_id:
            earlier = await self.client.plan_run(plan_id, known=self._by_run, run=run_id)
            self._by_run[(plan_id, earlier.run_id)] = earlier.plan
            return earlier.plan
        run = await self.client.plan_run(plan_id, known=self._by_run)
        self.first_run[plan_id] = run.first_run_id
        self._by_run[(plan_id, run.run_id)] = run.plan
        return run.plan


async def timeline_json(client: Client, plan_id: str) -> dict[str, Any]:
    """Every run of each subtask and sub-agent workflow of the plan, oldest first.

    ``available`` is False (with ``reason``) when visibility cannot be asked; the page
    then says so instead of drawing an empty timeline."""
    rows: list[dict[str, Any]] = []
    prefix = f"{plan_id}/"
    query = f"WorkflowId STARTS_WITH '{plan_id}/'"
    ui_base = ui_base_for(client.settings)
    namespace = client.settings.temporal_namespace
    try:
        async for execution in client.temporal.list_workflows(query, limit=_CHILD_LIMIT):
            path = execution.id.removeprefix(prefix).split("/")
            status = execution.status
            rows.append(
                {
                    "workflow_id": execution.id,
                    "subtask": path[0],
                    "path": path,
                    "started": _iso(execution.start_time),
                    "closed": _iso(execution.close_time),
                    "status": _status_name(status),
                    "temporal_url": web_url(ui_base, namespace, execution.id),
                }
            )
    except RPCError as err:
        return {"available": False, "reason": f"visibility refused the query: {err.message}"}
    rows.sort(key=lambda r: (r["started"] or "", r["workflow_id"]))
    return {"available": True, "runs": rows}


def _status_name(status: WorkflowExecutionStatus | None) -> str:
    if status is None:
        return "unknown"
    return {
        WorkflowExecutionStatus.RUNNING: "running",
        WorkflowExecutionStatus.COMPLETED: "completed",
        WorkflowExecutionStatus.FAILED: "failed",
        WorkflowExecutionStatus.CANCELED: "cancelled",
        WorkflowExecutionStatus.TERMINATED: "terminated",
        WorkflowExecutionStatus.TIMED_OUT: "timed_out",
        WorkflowExecutionStatus.CONTINUED_AS_NEW: "continued_as_new",
    }.get(status, status.name.lower())


def subtask_lookup(report: PlanReport, subtask: str) -> SubtaskResult | None:
    return next((r for r in report.subtasks if r.id == subtask), None)
