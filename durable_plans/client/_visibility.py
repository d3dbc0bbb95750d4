"""Finding plans: ``list_plans`` reads Temporal visibility, newest first (``dplan list``,
``Client.list``), with or without the search attributes.

The attributes are defined in ``domain/search_attributes.py`` and registered and checked
in ``namespace_setup.py`` (below the client: the worker checks them at start).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from durable_plans._errors import ListQueryError, SearchAttributesUnavailable
from durable_plans.domain import search_attributes as sa
from durable_plans.domain.contracts import PLAN_WORKFLOW
from durable_plans.namespace_setup import one_line, registered_attributes

__all__ = [
    "CLOSED_STATUS_NAMES",
    "ListQueryError",
    "PlanSummary",
    "list_plans",
    "plan_query",
    "tenant_filter",
]

# What ``dplan list --status`` filters on when the attributes are missing: Temporal's own
# execution status (no "paused" there: a paused plan is Running).
_EXECUTION_STATUS = {
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Canceled",
    "canceled": "Canceled",
    "terminated": "Terminated",
    "timed_out": "TimedOut",
}
# What ``dplan list`` calls each way a run closed.
CLOSED_STATUS_NAMES = {
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
    WorkflowExecutionStatus.CONTINUED_AS_NEW: "continued_as_new",
}


# --------------------------------------------------------------------------- dplan list


@dataclass(frozen=True)
class PlanSummary:
    """One plan as ``Client.list`` and ``dplan list`` show it. Fields the server cannot
    give (no attributes registered, or a plan started before they were) are None."""

    plan_id: str
    status: str
    completed: int | None
    total: int | None
    tokens: int | None
    cost_usd: float | None
    started: datetime
    closed: datetime | None
    duration_s: float | None
    goal: str | None
    # Subtasks paused on a failure and why ({id: "Type: message"}), from the memo.
    paused: dict[str, str] | None = None
    # The execution listed: a retried plan is listed once per run, each its last
    # execution (``Client.status(plan, run=...)`` reads that run's report).
    run_id: str = ""
    # The plan's ``tenant`` (``DplanTenant``, else the memo); None: it has none.
    tenant: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["started"] = self.started.isoformat()
        data["closed"] = self.closed.isoformat() if self.closed else None
        return data


def plan_query(
    *, status: str | None, query: str | None, with_attributes: bool, tenant: str | None = None
) -> str:
    """The visibility query for ``dplan list``: plans only, ``--status`` by our attribute
    when it is registered (it knows ``paused``), else by Temporal's execution status,
    ``--tenant`` by ``DplanTenant`` when registered (else ``list_plans`` reads the memo),
    and ``--query`` passed through as is."""
    # A continue-as-new chain is one plan: only its latest run is listed.
    parts = [f'WorkflowType = "{PLAN_WORKFLOW}"', 'ExecutionStatus != "ContinuedAsNew"']
    if status:
        wanted = status.strip().lower()
        if with_attributes and wanted in {s.value for s in sa.VisibilityStatus}:
            parts.append(f'{sa.STATUS.name} = "{wanted}"')
        elif wanted in _EXECUTION_STATUS:
            parts.append(f'ExecutionStatus = "{_EXECUTION_STATUS[wanted]}"')
        else:
            known = sorted({*(s.value for s in sa.VisibilityStatus), *_EXECUTION_STATUS})
            raise ListQueryError(f"unknown status {status!r}; one of: {', '.join(known)}")
    wanted_tenant = tenant_filter(tenant)
    if wanted_tenant is not None and with_attributes:
        parts.append(f'{sa.TENANT.name} = "{wanted_tenant}"')
    if query and query.strip():
        parts.append(f"({query.strip()})")
    # No ORDER BY: SQL visibility (the dev server, most self-hosted servers) rejects it;
    # ``list_plans`` sorts instead.
    return " AND ".join(parts)


# Longest tenant a plan may have (``Plan.tenant``): a longer one matches no plan.
_TENANT_CHARS = 64


def tenant_filter(tenant: str | None) -> str | None:
    """``--tenant`` as matched: stripped, None when not given. Refused (``ListQueryError``)
    when empty, longer than a plan's tenant may be, or holding a double quote, backslash or
    control character: it goes into a double-quoted string of the query, where one of
    those could end the string or change its meaning."""
    if tenant is None:
        return None
    wanted = tenant.strip()
    if not wanted:
        raise ListQueryError("tenant must not be empty")
    if len(wanted) > _TENANT_CHARS:
        raise ListQueryError(f"tenant is at most {_TENANT_CHARS} characters, not {len(wanted)}")
    if any(c in '"\\' or not c.isprintable() for c in wanted):
        raise ListQueryError(
            f"tenant {wanted!r} cannot be filtered on: no double quotes, backslashes or "
            "control characters"
        )
    return wanted


async def list_plans(
    client: Client,
    *,
    status: str | None = None,
    query: str | None = None,
    limit: int = 50,
    tenant: str | None = None,
) -> tuple[list[PlanSummary], bool]:
    """Plans newest first and whether the search attributes were there to read.

    Without them, rows come from what every server has: execution status, start and close
    time, and the memo (goal, subtask count, tenant) the workflow sets itself; ``tenant``
    then filters on the memo here, reading on until ``limit`` plans match.
    """
    try:
        with_attributes = not sa.missing_from(await registered_attributes(client))
    except SearchAttributesUnavailable:
        with_attributes = False
    visibility_query = plan_query(
        status=status, query=query, with_attributes=with_attributes, tenant=tenant
    )
    # Not in the query: the server cannot read the memo, so every plan is read.
    memo_tenant = None if with_attributes else tenant_filter(tenant)
    rows: list[PlanSummary] = []
    try:
        if memo_tenant is None:
            async for execution in client.list_workflows(visibility_query, limit=limit):
                rows.append(await _row(execution))
        else:
            async for execution in client.list_workflows(visibility_query):
                row = await _row(execution)
                if row.tenant == memo_tenant:
                    rows.append(row)
                    if len(rows) >= limit:
                        break
    except RPCError as err:
        if err.status in (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.FAILED_PRECONDITION):
            reason = re.sub(r"^invalid query:\s*", "", one_line(err.message), flags=re.I)
            raise ListQueryError(f"invalid query: {reason}") from err
        raise
    # The server lists running plans first, then by close time: newest start first here.
    rows.sort(key=lambda row: row.started, reverse=True)
    return rows, with_attributes


async def _row(execution: WorkflowExecution) -> PlanSummary:
    attrs = execution.typed_search_attributes
    memo: Mapping[str, Any] = {}
    try:
        memo = await execution.memo()
    except Exception:  # an undecodable memo (another codec) must not hide the plan
        memo = {}
    # DplanStatus says "running" until the workflow's last upsert; a plan terminated or
    # timed out never makes that upsert, so Temporal's status wins once it has closed.
    attr_status = attrs.get(sa.STATUS)
    exec_status = execution.status
    if exec_status is None or exec_status == WorkflowExecutionStatus.RUNNING:
        status = attr_status or "running"
    elif attr_status and attr_status != sa.VisibilityStatus.RUNNING:
        status = attr_status
    else:
        status = CLOSED_STATUS_NAMES.get(exec_status, exec_status.name.lower())
    paused = memo.get(sa.PAUSED_MEMO)
    paused = {str(k): str(v) for k, v in paused.items()} if isinstance(paused, dict) else None
    if paused and status == sa.VisibilityStatus.RUNNING:  # attributes not registered
        status = sa.VisibilityStatus.PAUSED.value
    total = memo.get("subtask_count")
    goal = attrs.get(sa.GOAL) or memo.get("goal")
    tenant = attrs.get(sa.TENANT) or memo.get("tenant")
    closed = execution.close_time
    return PlanSummary(
        plan_id=execution.id,
        status=status,
        completed=_int_or_none(attrs.get(sa.COMPLETED)),
        total=total if isinstance(total, int) else None,
        tokens=_int_or_none(attrs.get(sa.TOKENS)),
        cost_usd=attrs.get(sa.COST_USD),
        started=execution.start_time,
        closed=closed,
        duration_s=(closed - execution.start_time).total_seconds() if closed else None,
        goal=goal if isinstance(goal, str) else None,
        paused=paused or None,
        run_id=execution.run_id,
        tenant=tenant if isinstance(tenant, str) and tenant else None,
    )


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None
