"""Finding plans: registering the search attributes, checking them, listing plans.

The attributes themselves are defined in ``domain/search_attributes.py``; this is the part
that talks to a server about them:

* ``registered_attributes`` / ``check_search_attributes``: which are there (the worker
  asks at start, and tells its workflows whether to set them);
* ``setup_search_attributes``: register what is missing (``dplan setup``), idempotently;
* ``list_plans``: plans from Temporal visibility, newest first (``dplan list``), with or
  without the attributes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from durable_plans._errors import DurablePlansError, InvalidArgument
from durable_plans.activities.log import get_logger
from durable_plans.domain import search_attributes as sa
from durable_plans.domain.contracts import PLAN_WORKFLOW

__all__ = [
    "ListQueryError",
    "PlanSummary",
    "SearchAttributesUnavailable",
    "check_search_attributes",
    "list_plans",
    "plan_query",
    "registered_attributes",
    "setup_search_attributes",
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
_CLOSED_STATUS_NAMES = {
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
    WorkflowExecutionStatus.CONTINUED_AS_NEW: "continued_as_new",
}


class SearchAttributesUnavailable(DurablePlansError):
    """The server would not say which attributes it has, or would not add them."""


class ListQueryError(InvalidArgument):
    """The server rejected a visibility query; the message says why, in one line."""


async def registered_attributes(client: Client) -> dict[str, int]:
    """Custom search attributes of the client's namespace: name → ``IndexedValueType``."""
    try:
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError as err:
        raise SearchAttributesUnavailable(_one_line(err.message)) from err
    return dict(response.custom_attributes)


async def check_search_attributes(client: Client) -> bool:
    """Whether every attribute of ``sa.ALL`` is registered; says what is missing otherwise.

    Called by each worker at start (``DurablePlansPlugin.run_worker``): its workflows set
    the attributes only when this is true, since setting an unregistered one fails the
    workflow task. Exactly one warning line when they are missing or cannot be checked,
    naming the fix; silence when all is well.
    """
    log = get_logger(component="worker")
    try:
        registered = await registered_attributes(client)
    except SearchAttributesUnavailable as err:
        log.warning(
            "worker.search_attributes_unchecked",
            namespace=client.namespace,
            reason=str(err),
            note="plans run without search attributes (run `dplan setup` if they are missing)",
        )
        return False
    missing = sa.missing_from(registered)
    if missing:
        log.warning(
            "worker.search_attributes_missing",
            namespace=client.namespace,
            missing=[key.name for key in missing],
            note=(
                "plans run without search attributes (not findable by status, goal or cost "
                "in `temporal workflow list --query`); register them with `dplan setup`"
            ),
        )
        return False
    return True


async def setup_search_attributes(client: Client) -> tuple[list[str], list[str]]:
    """Register the attributes the namespace lacks; ``(added, already there)`` by name.

    Idempotent: a second call adds nothing. An attribute registered under our name with
    another type cannot be fixed by adding, so it is an error that names it.
    """
    registered = await registered_attributes(client)
    wrong_type = [
        f"{key.name} is {_type_name(registered[key.name])}, expected {key.indexed_value_type.name}"
        for key in sa.ALL
        if key.name in registered and registered[key.name] != int(key.indexed_value_type)
    ]
    if wrong_type:
        raise SearchAttributesUnavailable(
            "registered with another type (remove them first): " + "; ".join(wrong_type)
        )
    to_add = [key for key in sa.ALL if key.name not in registered]
    if to_add:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=client.namespace,
                    search_attributes={
                        key.name: IndexedValueType.ValueType(int(key.indexed_value_type))
                        for key in to_add
                    },
                )
            )
        except RPCError as err:
            raise SearchAttributesUnavailable(_one_line(err.message)) from err
    present = [key.name for key in sa.ALL if key.name in registered]
    return [key.name for key in to_add], present


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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["started"] = self.started.isoformat()
        data["closed"] = self.closed.isoformat() if self.closed else None
        return data


def plan_query(*, status: str | None, query: str | None, with_attributes: bool) -> str:
    """The visibility query for ``dplan list``: plans only, ``--status`` by our attribute
    when it is registered (it knows ``paused``), else by Temporal's execution status, and
    ``--query`` passed through as is."""
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
    if query and query.strip():
        parts.append(f"({query.strip()})")
    # No ORDER BY: SQL visibility (the dev server, most self-hosted servers) rejects it;
    # ``list_plans`` sorts instead.
    return " AND ".join(parts)


async def list_plans(
    client: Client,
    *,
    status: str | None = None,
    query: str | None = None,
    limit: int = 50,
) -> tuple[list[PlanSummary], bool]:
    """Plans newest first and whether the search attributes were there to read.

    Without them, rows come from what every server has: execution status, start and close
    time, and the memo (goal, subtask count) the workflow sets itself.
    """
    try:
        with_attributes = not sa.missing_from(await registered_attributes(client))
    except SearchAttributesUnavailable:
        with_attributes = False
    visibility_query = plan_query(status=status, query=query, with_attributes=with_attributes)
    rows: list[PlanSummary] = []
    try:
        async for execution in client.list_workflows(visibility_query, limit=limit):
            rows.append(await _row(execution))
    except RPCError as err:
        if err.status in (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.FAILED_PRECONDITION):
            reason = re.sub(r"^invalid query:\s*", "", _one_line(err.message), flags=re.I)
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
        status = _CLOSED_STATUS_NAMES.get(exec_status, exec_status.name.lower())
    paused = memo.get(sa.PAUSED_MEMO)
    paused = {str(k): str(v) for k, v in paused.items()} if isinstance(paused, dict) else None
    if paused and status == sa.VisibilityStatus.RUNNING:  # attributes not registered
        status = sa.VisibilityStatus.PAUSED.value
    total = memo.get("subtask_count")
    goal = attrs.get(sa.GOAL) or memo.get("goal")
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
    )


def _type_name(value: int) -> str:
    try:
        return SearchAttributeIndexedValueType(value).name
    except ValueError:
        return f"type {value}"


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()[:300]


def attribute_names(keys: Sequence[SearchAttributeKey[Any]]) -> str:
    return ", ".join(key.name for key in keys)
