"""DAG scheduling helpers: ordering, readiness, failure propagation, critical paths."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_plans.domain.models import Plan, Subtask, SubtaskStatus
from durable_plans.domain.scheduling import (
    DagIndex,
    blocked_by_failure,
    critical_path,
    critical_path_length,
    find_cycles,
    format_cycle,
    newly_ready,
    ready_subtasks,
    topological_order,
    transitive_dependents,
)

P = SubtaskStatus.PENDING
R = SubtaskStatus.RUNNING
C = SubtaskStatus.COMPLETED
F = SubtaskStatus.FAILED
S = SubtaskStatus.SKIPPED
X = SubtaskStatus.CANCELLED


def make_plan(*spec: tuple[str, Sequence[str]]) -> Plan:
    return Plan(
        id="p",
        subtasks=tuple(Subtask(id=i, description=i, depends_on=tuple(d)) for i, d in spec),
    )


def diamond() -> Plan:
    """deps -> {api, home, settings} -> integrate -> tests, plus an independent docs."""
    return make_plan(
        ("deps", []),
        ("api", ["deps"]),
        ("home", ["deps"]),
        ("settings", ["deps"]),
        ("docs", []),
        ("integrate", ["api", "home", "settings"]),
        ("tests", ["integrate"]),
    )


def chain(n: int) -> Plan:
    return make_plan(*((f"s{i}", [f"s{i - 1}"] if i else []) for i in range(n)))


def wide(n: int) -> Plan:
    """One root, n - 2 parallel middles, one sink that needs them all."""
    middles = [f"m{i}" for i in range(n - 2)]
    return make_plan(("root", []), *((m, ["root"]) for m in middles), ("sink", middles))


class Node:
    def __init__(self, id: str, *deps: str) -> None:
        self.id = id
        self.depends_on = deps


# --------------------------------------------------------------------------- index


def test_index_rejects_duplicate_ids_and_unknown_dependencies() -> None:
    with pytest.raises(ValueError, match="duplicate subtask id 'a'"):
        DagIndex(make_plan(("a", []), ("a", [])))
    with pytest.raises(ValueError, match="subtask 'b' of plan 'p' depends on unknown subtask 'z'"):
        DagIndex(make_plan(("a", []), ("b", ["z"])))


def test_index_adjacency_follows_declaration_order() -> None:
    index = DagIndex(diamond())
    assert index.dependents[index.index_of("deps")] == (1, 2, 3)
    assert index.dependencies[index.index_of("integrate")] == (1, 2, 3)
    with pytest.raises(KeyError, match="no subtask with id 'nope'"):
        index.index_of("nope")


def test_duplicate_dependency_entries_count_once() -> None:
    plan = make_plan(("a", []), ("b", ["a", "a"]))
    assert ready_subtasks(plan, {"a": C}) == ["b"]


# --------------------------------------------------------------------------- topological order


def test_topological_order_of_a_diamond_prefers_declaration_order() -> None:
    assert topological_order(diamond()) == [
        "deps",
        "api",
        "home",
        "settings",
        "docs",
        "integrate",
        "tests",
    ]


def test_topological_order_puts_dependencies_first_even_when_declared_later() -> None:
    plan = make_plan(("c", ["b"]), ("b", ["a"]), ("a", []), ("d", []))
    assert topological_order(plan) == ["a", "b", "c", "d"]


def test_topological_order_names_a_cycle() -> None:
    plan = make_plan(("root", []), ("x", ["root", "z"]), ("y", ["x"]), ("z", ["y"]))
    with pytest.raises(ValueError, match=r"dependency cycle: x -> z -> y -> x"):
        topological_order(plan)


def test_topological_order_of_a_2000_chain_declared_backwards() -> None:
    n = 2000
    plan = make_plan(*((f"s{i}", [f"s{i - 1}"] if i else []) for i in reversed(range(n))))
    assert topological_order(plan) == [f"s{i}" for i in range(n)]


# --------------------------------------------------------------------------- cycles


def test_no_cycles_in_a_dag() -> None:
    assert find_cycles(diamond().subtasks) == []


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ([Node("a", "a")], [["a"]]),
        ([Node("a", "b"), Node("b", "a")], [["a", "b"]]),
        ([Node("a", "b"), Node("b", "c"), Node("c", "a")], [["a", "b", "c"]]),
        ([Node("a", "b"), Node("b", "c"), Node("c", "d"), Node("d", "a")], [["a", "b", "c", "d"]]),
    ],
)
def test_cycles_of_length_one_to_four(nodes: list[Node], expected: list[list[str]]) -> None:
    assert find_cycles(nodes) == expected


def test_two_separate_cycles_each_once() -> None:
    nodes = [
        Node("a", "b"),
        Node("b", "a"),
        Node("m"),
        Node("c", "e"),
        Node("d", "c"),
        Node("e", "d"),
    ]
    assert find_cycles(nodes) == [["a", "b"], ["c", "e", "d"]]


def test_self_loop_inside_a_larger_cycle_is_reported_separately() -> None:
    assert find_cycles([Node("a", "a", "b"), Node("b", "a")]) == [["a"], ["a", "b"]]


def test_cycles_ignore_unknown_dependencies_and_respect_the_limit() -> None:
    nodes = [Node("a", "ghost", "b"), Node("b", "a"), Node("c", "d"), Node("d", "c")]
    assert find_cycles(nodes) == [["a", "b"], ["c", "d"]]
    assert find_cycles(nodes, limit=1) == [["a", "b"]]


def test_a_2000_ring_is_one_cycle() -> None:
    n = 2000
    nodes = [Node(f"s{i}", f"s{(i + 1) % n}") for i in range(n)]
    (cycle,) = find_cycles(nodes)
    assert cycle == [f"s{i}" for i in range(n)]


def test_format_cycle() -> None:
    assert format_cycle(["a"]) == "a -> a"
    assert format_cycle(["a", "b", "c"]) == "a -> b -> c -> a"
    assert format_cycle(list("abcdef"), limit=3) == "a -> b -> ... -> f -> a (6 subtasks)"
    with pytest.raises(ValueError, match="at least one"):
        format_cycle([])


# --------------------------------------------------------------------------- readiness


def test_ready_subtasks_start_with_the_roots() -> None:
    assert ready_subtasks(diamond(), {}) == ["deps", "docs"]


def test_ready_subtasks_fan_out_after_a_dependency_completes() -> None:
    statuses = {"deps": C, "docs": R}
    assert ready_subtasks(diamond(), statuses) == ["api", "home", "settings"]


def test_ready_subtasks_wait_for_every_dependency() -> None:
    plan = diamond()
    statuses = {"deps": C, "docs": C, "api": C, "home": C, "settings": R}
    assert ready_subtasks(plan, statuses) == []
    statuses["settings"] = C
    assert ready_subtasks(plan, statuses) == ["integrate"]


def test_failed_dependency_never_makes_anything_ready() -> None:
    statuses = {"deps": C, "docs": C, "api": F, "home": C, "settings": C}
    assert ready_subtasks(diamond(), statuses) == []


def test_non_pending_subtasks_are_never_ready() -> None:
    statuses = {"deps": R, "docs": X}
    assert ready_subtasks(diamond(), statuses) == []


def test_unknown_status_ids_are_an_error() -> None:
    with pytest.raises(ValueError, match="unknown subtask ids: 'ghost'"):
        ready_subtasks(diamond(), {"ghost": C})


def test_prebuilt_index_gives_the_same_answers() -> None:
    plan = diamond()
    index = DagIndex(plan)
    statuses = {"deps": C}
    assert ready_subtasks(index, statuses) == ready_subtasks(plan, statuses)
    assert topological_order(index) == topological_order(plan)
    assert critical_path(index) == critical_path(plan)


def test_ready_subtasks_on_a_2000_chain_move_one_at_a_time() -> None:
    plan = chain(2000)
    index = DagIndex(plan)
    statuses: dict[str, SubtaskStatus] = {}
    for i in range(2000):
        assert ready_subtasks(index, statuses) == [f"s{i}"]
        statuses[f"s{i}"] = C
    assert ready_subtasks(index, statuses) == []


def test_ready_subtasks_on_a_wide_dag() -> None:
    plan = wide(2000)
    ready = ready_subtasks(plan, {"root": C})
    assert len(ready) == 1998
    assert ready[:2] == ["m0", "m1"] and ready[-1] == "m1997"
    done = {"root": C, **dict.fromkeys(ready, C)}
    assert ready_subtasks(plan, done) == ["sink"]


def test_newly_ready_looks_only_at_the_completed_subtasks_dependents() -> None:
    plan = diamond()
    statuses = {"deps": C, "docs": C}
    assert newly_ready(plan, statuses, "deps") == ["api", "home", "settings"]
    assert newly_ready(plan, statuses, "docs") == []
    statuses |= {"api": C, "home": C}
    assert newly_ready(plan, statuses, "home") == []  # settings still pending
    statuses["settings"] = C
    assert newly_ready(plan, statuses, "settings") == ["integrate"]


def test_newly_ready_requires_the_subtask_to_be_completed() -> None:
    with pytest.raises(ValueError, match="'deps' is not COMPLETED"):
        newly_ready(diamond(), {"deps": R}, "deps")
    with pytest.raises(KeyError, match="no subtask with id 'ghost'"):
        newly_ready(diamond(), {}, "ghost")


def test_newly_ready_walks_a_2000_chain_quickly() -> None:
    index = DagIndex(chain(2000))
    statuses: dict[str, SubtaskStatus] = {"s0": C}
    # CPU time of this process (as below): what the code costs, whatever else the machine
    # runs meanwhile; a quadratic walk would take seconds, linear takes ~0.06 s.
    started = time.process_time()
    for i in range(1, 2000):
        assert newly_ready(index, statuses, f"s{i - 1}") == [f"s{i}"]
        statuses[f"s{i}"] = C
    assert newly_ready(index, statuses, "s1999") == []
    assert time.process_time() - started < 0.5


# --------------------------------------------------------------------------- failure propagation


def test_failure_blocks_everything_downstream_with_the_root_cause() -> None:
    statuses = {"deps": C, "docs": C, "api": F, "home": C, "settings": R}
    assert blocked_by_failure(diamond(), statuses) == {"integrate": "api", "tests": "api"}


def test_failure_at_the_root_blocks_the_whole_branch_only() -> None:
    assert blocked_by_failure(diamond(), {"deps": F}) == {
        "api": "deps",
        "home": "deps",
        "settings": "deps",
        "integrate": "deps",
        "tests": "deps",
    }


def test_root_cause_is_followed_through_skipped_subtasks() -> None:
    statuses = {"deps": F, "api": S, "home": S, "settings": S}
    assert blocked_by_failure(diamond(), statuses) == {"integrate": "deps", "tests": "deps"}


def test_skipped_without_a_dead_dependency_is_its_own_root() -> None:
    assert blocked_by_failure(chain(3), {"s0": S}) == {"s1": "s0", "s2": "s0"}


def test_cancelled_dependency_blocks_too() -> None:
    assert blocked_by_failure(chain(3), {"s0": C, "s1": X}) == {"s2": "s1"}


def test_a_failed_root_is_preferred_over_a_cancelled_one() -> None:
    plan = make_plan(("a", []), ("b", []), ("c", ["a", "b"]))
    assert blocked_by_failure(plan, {"a": X, "b": F}) == {"c": "b"}
    assert blocked_by_failure(plan, {"a": F, "b": F}) == {"c": "a"}


def test_nothing_blocked_without_failures() -> None:
    assert blocked_by_failure(diamond(), {"deps": C, "api": R}) == {}


def test_blocked_on_a_2000_chain() -> None:
    blocked = blocked_by_failure(chain(2000), {"s0": C, "s1": F})
    assert len(blocked) == 1998
    assert set(blocked.values()) == {"s1"}
    assert next(iter(blocked)) == "s2"


# --------------------------------------------------------------------------- dependents


def test_transitive_dependents_of_a_diamond() -> None:
    plan = diamond()
    assert transitive_dependents(plan, "deps") == ["api", "home", "settings", "integrate", "tests"]
    assert transitive_dependents(plan, "home") == ["integrate", "tests"]
    assert transitive_dependents(plan, "tests") == []
    assert transitive_dependents(plan, "docs") == []


def test_transitive_dependents_of_an_unknown_id() -> None:
    with pytest.raises(KeyError, match="no subtask with id 'nope'"):
        transitive_dependents(diamond(), "nope")


def test_transitive_dependents_on_a_2000_chain() -> None:
    assert transitive_dependents(chain(2000), "s1") == [f"s{i}" for i in range(2, 2000)]


# --------------------------------------------------------------------------- critical path


def test_critical_path_of_a_diamond_counts_subtasks() -> None:
    plan = diamond()
    assert critical_path_length(plan) == 4.0
    # Ties between the three middles go to the dependency listed first.
    assert critical_path(plan) == ["deps", "api", "integrate", "tests"]


def test_critical_path_follows_the_weights() -> None:
    plan = diamond()
    durations = {"deps": 2.0, "api": 1.0, "home": 5.0, "settings": 3.0, "docs": 4.0}
    assert critical_path_length(plan, durations) == 2.0 + 5.0 + 1.0 + 1.0
    assert critical_path(plan, durations) == ["deps", "home", "integrate", "tests"]
    durations["docs"] = 30.0
    assert critical_path(plan, durations) == ["docs"]
    assert critical_path_length(plan, durations) == 30.0


def test_critical_path_of_chain_and_wide_dags() -> None:
    assert critical_path_length(chain(2000)) == 2000.0
    assert critical_path(chain(2000)) == [f"s{i}" for i in range(2000)]
    assert critical_path_length(wide(2000)) == 3.0
    assert critical_path(wide(2000)) == ["root", "m0", "sink"]


def test_critical_path_of_an_empty_plan() -> None:
    plan = Plan(id="p", subtasks=())
    assert critical_path_length(plan) == 0.0
    assert critical_path(plan) == []


@pytest.mark.parametrize(
    ("durations", "message"),
    [
        ({"ghost": 1.0}, "durations name unknown subtask id 'ghost'"),
        ({"deps": -1.0}, "duration of 'deps' must be a finite non-negative number, got -1.0"),
        ({"deps": math.nan}, "duration of 'deps' must be a finite non-negative number, got nan"),
    ],
)
def test_bad_durations_are_named(durations: Mapping[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        critical_path_length(diamond(), durations)


def test_all_helpers_on_2000_subtasks_are_fast() -> None:
    plan = make_plan(*((f"s{i}", [f"s{j}" for j in range(max(0, i - 10), i)]) for i in range(2000)))
    started = time.process_time()
    index = DagIndex(plan)
    topological_order(index)
    critical_path(index)
    ready_subtasks(index, {})
    blocked_by_failure(index, {"s0": F})
    transitive_dependents(index, "s0")
    elapsed = time.process_time() - started
    assert elapsed < 1.0, f"scheduling helpers took {elapsed:.2f}s of CPU on 2000 subtasks"


# --------------------------------------------------------------------------- properties


@st.composite
def random_dags(draw: st.DrawFn) -> Plan:
    """A DAG over n subtasks: edges only go to lower ranks, declared in a shuffled order."""
    n = draw(st.integers(min_value=1, max_value=25))
    deps = [
        draw(st.lists(st.integers(0, i - 1), max_size=4, unique=True)) if i else []
        for i in range(n)
    ]
    order = draw(st.permutations(range(n)))
    return make_plan(*((f"t{i}", [f"t{j}" for j in deps[i]]) for i in order))


@settings(max_examples=200, deadline=None)
@given(plan=random_dags(), data=st.data())
def test_completing_ready_subtasks_runs_the_whole_plan_in_dependency_order(
    plan: Plan, data: st.DataObject
) -> None:
    statuses: dict[str, SubtaskStatus] = {}
    finished: list[str] = []
    while len(finished) < len(plan.subtasks):
        ready = ready_subtasks(plan, statuses)
        assert ready, "a DAG with unfinished subtasks always has a ready one"
        for sid in ready:
            assert statuses.get(sid, P) is P
            assert all(statuses.get(d) is C for d in plan.subtask(sid).depends_on)
        batch = data.draw(st.lists(st.sampled_from(ready), min_size=1, unique=True))
        unlocked: list[str] = []
        for sid in batch:
            statuses[sid] = C
            finished.append(sid)
        for sid in batch:
            unlocked.extend(u for u in newly_ready(plan, statuses, sid) if u not in unlocked)
        # The incremental answer agrees with recomputing from scratch.
        still_ready = [sid for sid in ready if sid not in batch]
        assert sorted(ready_subtasks(plan, statuses)) == sorted(still_ready + unlocked)
    assert sorted(finished) == sorted(s.id for s in plan.subtasks)
    position = {sid: i for i, sid in enumerate(finished)}
    for s in plan.subtasks:
        assert all(position[d] < position[s.id] for d in s.depends_on)
    assert ready_subtasks(plan, statuses) == []


@settings(max_examples=200, deadline=None)
@given(plan=random_dags(), data=st.data())
def test_a_failure_blocks_exactly_its_transitive_dependents(
    plan: Plan, data: st.DataObject
) -> None:
    failed = data.draw(st.sampled_from([s.id for s in plan.subtasks]))
    blocked = blocked_by_failure(plan, {failed: F})
    dependents = transitive_dependents(plan, failed)
    assert list(blocked) == dependents  # same members, both in declaration order
    assert set(blocked.values()) <= {failed}
    order = topological_order(plan)
    assert sorted(order) == sorted(s.id for s in plan.subtasks)
    seen: set[str] = set()
    for sid in order:
        assert set(plan.subtask(sid).depends_on) <= seen
        seen.add(sid)
