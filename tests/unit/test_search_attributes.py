"""The search attributes' definitions and the pure parts of ``dplan list``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from durable_plans._errors import ListQueryError
from durable_plans.cli.list_command import _print_table, render_duration
from durable_plans.client import _visibility
from durable_plans.client._visibility import PlanSummary, list_plans, plan_query
from durable_plans.domain import search_attributes as sa
from durable_plans.domain.models import Plan, Subtask
from durable_plans.workflows.visibility import plan_memo


def test_names_are_prefixed_unique_and_typed_as_documented() -> None:
    names = [key.name for key in sa.ALL]
    assert len(set(names)) == len(names) and all(n.startswith("Dplan") for n in names)
    args = sa.dev_server_args()
    assert args[::2] == ["--search-attribute"] * len(sa.ALL)
    assert set(args[1::2]) == {
        "DplanPlanId=Keyword",
        "DplanStatus=Keyword",
        "DplanGoal=Text",
        "DplanCompleted=Int",
        "DplanFailed=Int",
        "DplanTokens=Int",
        "DplanCostUsd=Double",
        "DplanTenant=Keyword",
        "DplanAgent=Keyword",
    }
    assert sa.TENANT in sa.PLAN_ATTRIBUTES and sa.TENANT not in sa.SUBTASK_ATTRIBUTES


def test_missing_means_absent_or_of_another_type() -> None:
    registered = {key.name: int(key.indexed_value_type) for key in sa.ALL}
    assert sa.missing_from(registered) == ()
    registered[sa.TOKENS.name] = int(sa.GOAL.indexed_value_type)
    del registered[sa.AGENT.name]
    del registered[sa.TENANT.name]
    assert {key.name for key in sa.missing_from(registered)} == {
        "DplanTokens",
        "DplanAgent",
        "DplanTenant",
    }


def test_status_filters_by_attribute_when_registered_else_by_execution_status() -> None:
    with_attrs = plan_query(status="failed", query=None, with_attributes=True)
    assert 'DplanStatus = "failed"' in with_attrs and 'WorkflowType = "PlanWorkflow"' in with_attrs
    without = plan_query(status="Cancelled", query="DplanTokens > 5", with_attributes=False)
    assert 'ExecutionStatus = "Canceled"' in without and without.endswith("(DplanTokens > 5)")
    with pytest.raises(ListQueryError, match="unknown status 'asleep'"):
        plan_query(status="asleep", query=None, with_attributes=True)


def test_tenant_filters_by_attribute_only_when_registered() -> None:
    with_attrs = plan_query(
        status="failed", query="DplanTokens > 5", with_attributes=True, tenant=" team-a "
    )
    assert with_attrs.split(" AND ")[2:] == [
        'DplanStatus = "failed"',
        'DplanTenant = "team-a"',
        "(DplanTokens > 5)",
    ]
    # Without the attribute the server cannot filter: list_plans reads the memo instead.
    without = plan_query(status=None, query=None, with_attributes=False, tenant="team-a")
    assert "DplanTenant" not in without and "team-a" not in without
    assert "DplanTenant" not in plan_query(status=None, query=None, with_attributes=True)


@pytest.mark.parametrize(
    ("tenant", "error"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("t" * 65, "at most 64 characters"),
        ('team" OR DplanStatus = "failed', "no double quotes"),
        ("team\\", "backslashes"),
        ("team\na", "control characters"),
    ],
)
def test_a_tenant_that_could_break_out_of_the_query_is_refused(tenant: str, error: str) -> None:
    for with_attributes in (True, False):
        with pytest.raises(ListQueryError, match=error):
            plan_query(status=None, query=None, with_attributes=with_attributes, tenant=tenant)


def _plan(tenant: str | None) -> Plan:
    return Plan(
        id="p",
        goal="ship it",
        tenant=tenant,
        subtasks=(Subtask(id="a", description="do a", agent="coder"),),
    )


def test_the_memo_names_the_tenant_only_when_the_plan_has_one() -> None:
    # Exactly today's memo without one: recorded histories replay against it.
    assert plan_memo(_plan(None)) == {"goal": "ship it", "subtask_count": 1}
    assert plan_memo(_plan("team-a")) == {"goal": "ship it", "subtask_count": 1, "tenant": "team-a"}


@dataclass
class _Execution:
    """What ``list_plans`` reads of a listed workflow."""

    id: str
    memo_data: dict[str, Any]
    start_time: datetime
    typed_search_attributes: TypedSearchAttributes = TypedSearchAttributes.empty
    status: WorkflowExecutionStatus = WorkflowExecutionStatus.COMPLETED
    run_id: str = "run"
    close_time: datetime | None = None

    async def memo(self) -> dict[str, Any]:
        return self.memo_data


@dataclass
class _Temporal:
    executions: list[_Execution]
    queries: list[tuple[str, int | None]] = field(default_factory=list)

    async def list_workflows(
        self, query: str, limit: int | None = None
    ) -> AsyncIterator[_Execution]:
        self.queries.append((query, limit))
        for execution in self.executions[:limit]:
            yield execution


async def test_without_attributes_the_tenant_is_matched_on_the_memo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def nothing_registered(client: object) -> dict[str, int]:
        return {}

    monkeypatch.setattr(_visibility, "registered_attributes", nothing_registered)
    t0 = datetime(2025, 11, 23, 10, tzinfo=UTC)
    temporal = _Temporal(
        [
            _Execution(f"p{i}", {"goal": "g", "subtask_count": 1, **tenant}, t0 + timedelta(i))
            for i, tenant in enumerate(
                [{"tenant": "team-a"}, {}, {"tenant": "team-b"}, {"tenant": "team-a"}, {}]
            )
        ]
    )
    rows, with_attributes = await list_plans(cast(Client, temporal), tenant="team-a", limit=50)
    assert not with_attributes
    assert [(r.plan_id, r.tenant) for r in rows] == [("p3", "team-a"), ("p0", "team-a")]
    # Read past the limit (the server cannot filter), stopped once it is reached.
    ((query, limit),) = temporal.queries
    assert limit is None and "DplanTenant" not in query
    rows, _ = await list_plans(cast(Client, temporal), tenant="team-a", limit=1)
    assert [r.plan_id for r in rows] == ["p0"]
    rows, _ = await list_plans(cast(Client, temporal), limit=50)
    assert [r.tenant for r in rows] == [None, "team-a", "team-b", None, "team-a"]


async def test_the_attribute_wins_over_the_memo_for_a_rows_tenant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def all_registered(client: object) -> dict[str, int]:
        return {key.name: int(key.indexed_value_type) for key in sa.ALL}

    monkeypatch.setattr(_visibility, "registered_attributes", all_registered)
    attrs = TypedSearchAttributes([SearchAttributePair(sa.TENANT, "team-a")])
    now = datetime.now(UTC)
    temporal = _Temporal([_Execution("p", {"tenant": "stale"}, now, typed_search_attributes=attrs)])
    rows, with_attributes = await list_plans(cast(Client, temporal), tenant="team-a")
    assert with_attributes and [r.tenant for r in rows] == ["team-a"]
    assert rows[0].to_json()["tenant"] == "team-a"
    ((query, limit),) = temporal.queries
    assert 'DplanTenant = "team-a"' in query and limit == 50


def _summary(plan_id: str, tenant: str | None) -> PlanSummary:
    started = datetime(2025, 11, 23, 10, tzinfo=UTC)
    return PlanSummary(
        plan_id=plan_id,
        status="completed",
        completed=1,
        total=1,
        tokens=10,
        cost_usd=0.001,
        started=started,
        closed=started + timedelta(seconds=3),
        duration_s=3.0,
        goal="g",
        tenant=tenant,
    )


def test_dplan_list_has_a_tenant_column_only_when_a_plan_has_a_tenant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _print_table([_summary("p1", None), _summary("p2", None)], with_attributes=True)
    assert "TENANT" not in capsys.readouterr().out
    _print_table([_summary("p1", "team-a"), _summary("p2", None)], with_attributes=True)
    header, first, second = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["PLAN", "TENANT", "STATUS"]
    assert first.split()[:3] == ["p1", "team-a", "completed"]
    assert second.split()[:3] == ["p2", "-", "completed"]


@pytest.mark.parametrize(
    ("seconds", "shown"), [(None, "-"), (3.24, "3.2s"), (75, "1m15s"), (7260, "2h01m")]
)
def test_durations_read_at_a_glance(seconds: float | None, shown: str) -> None:
    assert render_duration(seconds) == shown
