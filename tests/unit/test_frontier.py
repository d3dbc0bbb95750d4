"""The frontier gives ``ready_subtasks``'s answer after any sequence of changes, and the
watched dict reports every write, so the plan's incremental scheduling starts exactly
what the whole-plan pass started (and recorded histories replay)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_plans.domain.frontier import Frontier, WatchedDict
from durable_plans.domain.models import Plan, Subtask, SubtaskStatus
from durable_plans.domain.scheduling import (
    DagIndex,
    blocked_by_failure,
    blocked_by_failure_at,
    ready_subtasks,
)

ALL = list(SubtaskStatus)


def plan_of(deps: list[list[int]]) -> Plan:
    """Subtask i depends on the earlier ones listed (repeats allowed: they count once)."""
    return Plan(
        id="p",
        goal="g",
        subtasks=tuple(
            Subtask(
                id=f"s{i}",
                description="d",
                agent="coder",
                depends_on=tuple(f"s{j}" for j in d),
            )
            for i, d in enumerate(deps)
        ),
    )


@st.composite
def dags(draw: st.DrawFn) -> list[list[int]]:
    n = draw(st.integers(1, 25))
    return [draw(st.lists(st.integers(0, i - 1), max_size=4)) if i else [] for i in range(n)]


@settings(max_examples=300, deadline=None)
@given(deps=dags(), data=st.data())
def test_ready_matches_the_whole_plan_pass_after_any_changes(
    deps: list[list[int]], data: st.DataObject
) -> None:
    plan = plan_of(deps)
    dag = DagIndex(plan)
    frontier = Frontier(dag)
    statuses: dict[str, SubtaskStatus] = {}
    for _ in range(data.draw(st.integers(0, 60))):
        sid = f"s{data.draw(st.integers(0, len(deps) - 1))}"
        status = data.draw(st.sampled_from(ALL))
        frontier.set(sid, status)
        statuses[sid] = status
        expected = ready_subtasks(dag, statuses)
        limit = data.draw(st.integers(0, len(deps) + 1))
        assert frontier.ready(limit) == expected[:limit]
        # Asking does not take: the same answer again until something changes.
        assert frontier.ready(len(deps)) == expected
        whole = Counter({SubtaskStatus.PENDING: len(deps)})
        for s in statuses.values():
            whole[SubtaskStatus.PENDING] -= 1
            whole[s] += 1
        assert +frontier.counts == +whole
        assert frontier.statuses() == dag.statuses_by_position(statuses)
        assert blocked_by_failure_at(dag, frontier.statuses()) == blocked_by_failure(dag, statuses)


def test_a_fan_out_is_ready_in_declaration_order_and_leaves_as_it_starts() -> None:
    frontier = Frontier(DagIndex(plan_of([[], [0], [0], [0], [1, 2]])))
    assert frontier.ready(10) == ["s0"]
    frontier.set("s0", SubtaskStatus.RUNNING)
    assert frontier.ready(10) == []
    frontier.set("s0", SubtaskStatus.COMPLETED)
    assert frontier.ready(2) == ["s1", "s2"]
    frontier.set("s1", SubtaskStatus.RUNNING)
    assert frontier.ready(10) == ["s2", "s3"]
    frontier.set("s1", SubtaskStatus.COMPLETED)
    frontier.set("s2", SubtaskStatus.COMPLETED)
    assert frontier.ready(10) == ["s3", "s4"]
    # A completed dependency run again (resumed) holds its dependent back.
    frontier.set("s2", SubtaskStatus.PENDING)
    assert frontier.ready(10) == ["s2", "s3"]
    assert frontier.any_dead is False
    frontier.set("s3", SubtaskStatus.SKIPPED)
    assert frontier.any_dead is True
    assert frontier.status("s3") is SubtaskStatus.SKIPPED


def test_unknown_ids_are_refused_by_name() -> None:
    frontier = Frontier(DagIndex(plan_of([[]])))
    with pytest.raises(KeyError, match="'nope'"):
        frontier.set("nope", SubtaskStatus.RUNNING)


def test_the_watched_dict_reports_each_write_and_removal() -> None:
    seen: list[str] = []
    d: dict[str, int] = WatchedDict(seen.append, [("a", 1)])
    assert seen == []  # what it starts with is the caller's to say
    d["b"] = 2
    d["a"] = 3
    assert d.pop("b") == 2
    assert d.pop("missing", None) is None
    del d["a"]
    assert seen == ["b", "a", "b", "a"]
    assert d == {}
    with pytest.raises(KeyError):
        d.pop("missing")
    for name in ("update", "setdefault", "clear", "popitem"):
        with pytest.raises(TypeError, match="item assignment, pop and del only"):
            getattr(d, name)()
