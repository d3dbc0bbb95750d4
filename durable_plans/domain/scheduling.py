"""Pure DAG helpers that decide what a plan may run next.

PlanWorkflow calls these on every step, so they must be deterministic (results follow the
plan's declaration order, never set or hash order) and cheap for the largest plan the
validator admits: a :class:`DagIndex` is built once in O(V+E) and every query after that is
O(V+E) or better. Callers may pass either a :class:`~domain.models.Plan` or a prebuilt
index to each function.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from durable_plans.domain.models import Plan, SubtaskStatus

# A dependency that ended in one of these can never be satisfied.
DEAD_STATUSES: frozenset[SubtaskStatus] = frozenset(
    {SubtaskStatus.FAILED, SubtaskStatus.SKIPPED, SubtaskStatus.CANCELLED}
)

# Longer cycles are shortened in messages (a 2000-subtask ring would be one huge line).
CYCLE_DISPLAY_LIMIT = 12


class DependencyNode(Protocol):
    """Anything with an id and the ids it depends on (a Subtask, or validator facts)."""

    @property
    def id(self) -> str: ...

    @property
    def depends_on(self) -> Sequence[str]: ...


class DagIndex:
    """Integer adjacency of a plan, in both directions, built once.

    Subtasks are numbered by declaration position; every list below is ordered by that
    position, which is what makes all derived results stable across runs and machines.
    Building the index rejects what no scheduler could handle (duplicate ids, unknown
    dependencies); cycles are allowed here and reported by :meth:`topological_positions`.
    """

    __slots__ = ("_topo", "dependencies", "dependents", "ids", "position")

    def __init__(self, plan: Plan) -> None:
        self.ids: tuple[str, ...] = tuple(s.id for s in plan.subtasks)
        self.position: dict[str, int] = {}
        for i, sid in enumerate(self.ids):
            if sid in self.position:
                raise ValueError(f"plan {plan.id!r} has duplicate subtask id {sid!r}")
            self.position[sid] = i
        dependencies: list[tuple[int, ...]] = []
        dependents: list[list[int]] = [[] for _ in self.ids]
        for i, subtask in enumerate(plan.subtasks):
            deps: dict[int, None] = {}
            for dep in subtask.depends_on:
                j = self.position.get(dep)
                if j is None:
                    raise ValueError(
                        f"subtask {subtask.id!r} of plan {plan.id!r} depends on unknown "
                        f"subtask {dep!r}"
                    )
                deps[j] = None
            dependencies.append(tuple(deps))
            for j in deps:
                dependents[j].append(i)
        self.dependencies: tuple[tuple[int, ...], ...] = tuple(dependencies)
        self.dependents: tuple[tuple[int, ...], ...] = tuple(tuple(d) for d in dependents)
        self._topo: tuple[int, ...] | None = None

    @classmethod
    def of(cls, plan: Plan | DagIndex) -> DagIndex:
        return plan if isinstance(plan, DagIndex) else cls(plan)

    def __len__(self) -> int:
        return len(self.ids)

    def index_of(self, subtask_id: str) -> int:
        try:
            return self.position[subtask_id]
        except KeyError:
            raise KeyError(f"no subtask with id {subtask_id!r} in this plan") from None

    def topological_positions(self) -> tuple[int, ...]:
        """Kahn's algorithm, always taking the earliest-declared ready subtask.

        Cached because a workflow asks for it repeatedly and the plan never changes.
        """
        if self._topo is not None:
            return self._topo
        remaining = [len(d) for d in self.dependencies]
        heap = [i for i, n in enumerate(remaining) if n == 0]
        heapq.heapify(heap)
        order: list[int] = []
        while heap:
            i = heapq.heappop(heap)
            order.append(i)
            for k in self.dependents[i]:
                remaining[k] -= 1
                if remaining[k] == 0:
                    heapq.heappush(heap, k)
        if len(order) != len(self.ids):
            stuck = [
                (self.ids[i], [self.ids[j] for j in self.dependencies[i]])
                for i in range(len(self.ids))
                if remaining[i] > 0
            ]
            cycles = find_cycles(_Node(sid, deps) for sid, deps in stuck)
            shown = format_cycle(cycles[0], limit=CYCLE_DISPLAY_LIMIT) if cycles else "unknown"
            raise ValueError(f"plan has a dependency cycle: {shown}")
        self._topo = tuple(order)
        return self._topo

    def statuses_by_position(self, statuses: Mapping[str, SubtaskStatus]) -> list[SubtaskStatus]:
        """Statuses as a list aligned with positions; a missing entry means PENDING."""
        out = [SubtaskStatus.PENDING] * len(self.ids)
        unknown = [sid for sid in statuses if sid not in self.position]
        if unknown:
            raise ValueError(f"statuses name unknown subtask ids: {', '.join(map(repr, unknown))}")
        for sid, status in statuses.items():
            out[self.position[sid]] = SubtaskStatus(status)
        return out


class _Node:
    __slots__ = ("depends_on", "id")

    def __init__(self, id: str, depends_on: Sequence[str]) -> None:
        self.id = id
        self.depends_on = depends_on


def format_cycle(cycle: Sequence[str], *, limit: int | None = None) -> str:
    """``a -> b -> a``: each subtask depends on the next one.

    With ``limit``, a longer cycle is shortened to its first ``limit - 1`` ids and its
    last one (plus its length), so one problem line stays readable.
    """
    if not cycle:
        raise ValueError("a cycle has at least one subtask")
    if limit is not None and len(cycle) > max(limit, 2):
        shown = [*cycle[: max(limit, 2) - 1], "...", cycle[-1], cycle[0]]
        return " -> ".join(shown) + f" ({len(cycle)} subtasks)"
    return " -> ".join([*cycle, cycle[0]])


def topological_order(plan: Plan | DagIndex) -> list[str]:
    """Ids in an order where every dependency comes first; ties go to declaration order.

    Raises ``ValueError`` naming a cycle when there is no such order.
    """
    index = DagIndex.of(plan)
    return [index.ids[i] for i in index.topological_positions()]


def find_cycles(subtasks: Iterable[DependencyNode], *, limit: int | None = None) -> list[list[str]]:
    """Distinct dependency cycles, each once, covering every subtask that lies on a cycle.

    A cycle ``[a, b, c]`` means a depends on b, b on c, and c on a; a self-dependency is
    ``[a]``. Each cycle starts at its earliest-declared member and the list is ordered by
    that member. Exhaustively listing elementary cycles can be exponential, so instead
    every subtask on a cycle gets the shortest cycle through it, found by BFS inside its
    strongly connected component; duplicates are dropped. Unknown dependency ids are
    ignored (the validator reports them separately); for a repeated id the first
    declaration counts. ``limit`` stops after that many cycles.
    """
    ids: list[str] = []
    raw_deps: list[Sequence[str]] = []
    position: dict[str, int] = {}
    for node in subtasks:
        if node.id in position:
            continue
        position[node.id] = len(ids)
        ids.append(node.id)
        raw_deps.append(node.depends_on)
    edges: list[list[int]] = []
    for deps in raw_deps:
        seen: dict[int, None] = {}
        for dep in deps:
            j = position.get(dep)
            if j is not None:
                seen[j] = None
        edges.append(list(seen))

    component = _strongly_connected_components(edges)
    sizes: dict[int, int] = {}
    for c in component:
        sizes[c] = sizes.get(c, 0) + 1

    cycles: list[list[int]] = []
    seen_cycles: set[tuple[int, ...]] = set()
    covered = [False] * len(ids)
    for i in range(len(ids)):
        if limit is not None and len(cycles) >= limit:
            break
        if i in edges[i]:
            cycles.append([i])
        if covered[i] or sizes[component[i]] < 2:
            continue
        cycle = _shortest_cycle_through(i, edges, component)
        canonical = _rotate_to_min(cycle)
        for k in canonical:
            covered[k] = True
        if tuple(canonical) not in seen_cycles:
            seen_cycles.add(tuple(canonical))
            cycles.append(canonical)
    if limit is not None:
        cycles = cycles[:limit]
    cycles.sort(key=lambda c: c[0])
    return [[ids[k] for k in c] for c in cycles]


def _rotate_to_min(cycle: list[int]) -> list[int]:
    m = cycle.index(min(cycle))
    return cycle[m:] + cycle[:m]


def _shortest_cycle_through(
    start: int, edges: Sequence[Sequence[int]], comp: Sequence[int]
) -> list[int]:
    """Shortest path start -> ... -> start through other nodes of start's component."""
    parent: dict[int, int] = {}
    queue: deque[int] = deque()
    for j in edges[start]:
        if j != start and comp[j] == comp[start] and j not in parent:
            parent[j] = start
            queue.append(j)
    while queue:
        node = queue.popleft()
        for j in edges[node]:
            if comp[j] != comp[start]:
                continue
            if j == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                path.reverse()  # start, ..., node
                return path
            if j not in parent:
                parent[j] = node
                queue.append(j)
    raise AssertionError("a node in a non-trivial strongly connected component is on a cycle")


def _strongly_connected_components(edges: Sequence[Sequence[int]]) -> list[int]:
    """Tarjan's algorithm without recursion (a 2000-long chain would overflow the stack)."""
    n = len(edges)
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    component = [-1] * n
    stack: list[int] = []
    counter = 0
    next_component = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work: list[tuple[int, int]] = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            node, edge_i = work[-1]
            if edge_i < len(edges[node]):
                work[-1] = (node, edge_i + 1)
                nxt = edges[node][edge_i]
                if index[nxt] == -1:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack[nxt] = True
                    work.append((nxt, 0))
                elif on_stack[nxt]:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component[member] = next_component
                    if member == node:
                        break
                next_component += 1
    return component


def ready_subtasks(plan: Plan | DagIndex, statuses: Mapping[str, SubtaskStatus]) -> list[str]:
    """PENDING subtasks whose dependencies have all COMPLETED, in declaration order."""
    index = DagIndex.of(plan)
    status = index.statuses_by_position(statuses)
    return [
        index.ids[i]
        for i in range(len(index))
        if status[i] is SubtaskStatus.PENDING
        and all(status[j] is SubtaskStatus.COMPLETED for j in index.dependencies[i])
    ]


def newly_ready(
    plan: Plan | DagIndex, statuses: Mapping[str, SubtaskStatus], completed_id: str
) -> list[str]:
    """What completing ``completed_id`` made ready: its dependents that are now ready.

    The incremental form of :func:`ready_subtasks` for a workflow that reacts to one
    completion at a time; it touches only the neighbourhood of ``completed_id`` instead of
    the whole plan, so a 2000-subtask plan stays linear overall. ``statuses`` must already
    record ``completed_id`` as COMPLETED.
    """
    index = DagIndex.of(plan)
    done = index.index_of(completed_id)
    if statuses.get(completed_id) != SubtaskStatus.COMPLETED:
        raise ValueError(f"{completed_id!r} is not COMPLETED in the statuses given")

    def status(i: int) -> SubtaskStatus:
        return SubtaskStatus(statuses.get(index.ids[i], SubtaskStatus.PENDING))

    return [
        index.ids[k]
        for k in index.dependents[done]
        if status(k) is SubtaskStatus.PENDING
        and all(status(j) is SubtaskStatus.COMPLETED for j in index.dependencies[k])
    ]


def blocked_by_failure(
    plan: Plan | DagIndex, statuses: Mapping[str, SubtaskStatus]
) -> dict[str, str]:
    """PENDING subtasks that can never run, each mapped to the subtask that caused it.

    The cause is followed through SKIPPED subtasks (which were skipped because of an
    earlier failure) to the FAILED or CANCELLED subtask at the root; a SKIPPED subtask with
    no dead dependency is its own root. When several dependencies are dead, a FAILED root
    is preferred (that is the error worth reporting), then declaration order of the
    dependency. The plan must be acyclic.
    """
    index = DagIndex.of(plan)
    return blocked_by_failure_at(index, index.statuses_by_position(statuses))


def blocked_by_failure_at(index: DagIndex, status: Sequence[SubtaskStatus]) -> dict[str, str]:
    """:func:`blocked_by_failure` for statuses already aligned with positions."""
    root: dict[int, int] = {}  # dead or blocked position -> root-cause position
    for i in index.topological_positions():
        s = status[i]
        if s not in DEAD_STATUSES and s is not SubtaskStatus.PENDING:
            continue
        causes = [root[j] for j in index.dependencies[i] if j in root]
        if causes:
            failed = [c for c in causes if status[c] is SubtaskStatus.FAILED]
            root[i] = failed[0] if failed else causes[0]
        elif s in DEAD_STATUSES:
            root[i] = i
    return {
        index.ids[i]: index.ids[root[i]]
        for i in range(len(index))
        if i in root and status[i] is SubtaskStatus.PENDING
    }


def transitive_dependents(plan: Plan | DagIndex, subtask_id: str) -> list[str]:
    """Every subtask that depends on ``subtask_id`` directly or indirectly, in declaration
    order; these are what a failure of ``subtask_id`` takes down with it."""
    index = DagIndex.of(plan)
    start = index.index_of(subtask_id)
    seen = [False] * len(index)
    seen[start] = True
    queue: deque[int] = deque([start])
    while queue:
        for k in index.dependents[queue.popleft()]:
            if not seen[k]:
                seen[k] = True
                queue.append(k)
    return [index.ids[i] for i in range(len(index)) if seen[i] and i != start]


def _longest_chain(
    plan: Plan | DagIndex, durations: Mapping[str, float] | None
) -> tuple[float, list[str]]:
    index = DagIndex.of(plan)
    weight = [1.0] * len(index)
    for sid, value in (durations or {}).items():
        if sid not in index.position:
            raise ValueError(f"durations name unknown subtask id {sid!r}")
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ValueError(
                f"duration of {sid!r} must be a finite non-negative number, got {value!r}"
            )
        weight[index.position[sid]] = float(value)
    best = [0.0] * len(index)
    via = [-1] * len(index)
    for i in index.topological_positions():
        longest, prev = 0.0, -1
        for j in index.dependencies[i]:
            if prev == -1 or best[j] > longest:
                longest, prev = best[j], j
        best[i] = longest + weight[i]
        via[i] = prev
    if not best:
        return 0.0, []
    end = max(range(len(best)), key=lambda i: (best[i], -i))
    path = [end]
    while via[path[-1]] != -1:
        path.append(via[path[-1]])
    path.reverse()
    return best[end], [index.ids[i] for i in path]


def critical_path_length(
    plan: Plan | DagIndex, durations: Mapping[str, float] | None = None
) -> float:
    """Weight of the heaviest dependency chain: the plan's duration with unlimited
    parallelism. Each subtask weighs ``durations[id]`` or 1.0."""
    return _longest_chain(plan, durations)[0]


def critical_path(plan: Plan | DagIndex, durations: Mapping[str, float] | None = None) -> list[str]:
    """The heaviest chain itself, dependencies first.

    Ties go to the earlier-declared last subtask and, along the way, to the dependency
    listed first, so the answer never depends on iteration order."""
    return _longest_chain(plan, durations)[1]
