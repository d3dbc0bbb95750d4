"""The search attributes' definitions and the pure parts of ``dplan list``."""

from __future__ import annotations

import pytest

from durable_plans._errors import ListQueryError
from durable_plans.cli.list_command import render_duration
from durable_plans.client._visibility import plan_query
from durable_plans.domain import search_attributes as sa


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
        "DplanAgent=Keyword",
    }


def test_missing_means_absent_or_of_another_type() -> None:
    registered = {key.name: int(key.indexed_value_type) for key in sa.ALL}
    assert sa.missing_from(registered) == ()
    registered[sa.TOKENS.name] = int(sa.GOAL.indexed_value_type)
    del registered[sa.AGENT.name]
    assert {key.name for key in sa.missing_from(registered)} == {"DplanTokens", "DplanAgent"}


def test_status_filters_by_attribute_when_registered_else_by_execution_status() -> None:
    with_attrs = plan_query(status="failed", query=None, with_attributes=True)
    assert 'DplanStatus = "failed"' in with_attrs and 'WorkflowType = "PlanWorkflow"' in with_attrs
    without = plan_query(status="Cancelled", query="DplanTokens > 5", with_attributes=False)
    assert 'ExecutionStatus = "Canceled"' in without and without.endswith("(DplanTokens > 5)")
    with pytest.raises(ListQueryError, match="unknown status 'asleep'"):
        plan_query(status="asleep", query=None, with_attributes=True)


@pytest.mark.parametrize(
    ("seconds", "shown"), [(None, "-"), (3.24, "3.2s"), (75, "1m15s"), (7260, "2h01m")]
)
def test_durations_read_at_a_glance(seconds: float | None, shown: str) -> None:
    assert render_duration(seconds) == shown
