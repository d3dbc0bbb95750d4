"""What a plan may start next, kept up to date one change at a time.

``scheduling.ready_subtasks`` answers the question from scratch: a pass over every
subtask. PlanWorkflow asks it after every child's completion, so on a plan of thousands
the passes, not the children, were what its workflow tasks spent their time on (on a
loaded 2-core host one passed the SDK's 2 s deadlock bound). A :class:`Frontier` gives
the same answer, in the same order, at the cost of the subtasks whose status changed
and their neighbours: each subtask's count of dependencies not yet completed, the ready
ones in a heap by declaration position.

:class:`WatchedDict` is how the workflow tells it what changed: its results and running
children are dicts that note every key written or removed, whoever writes it (the
scheduler, a child's completion, an operator's Update on a paused subtask).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TypeVar

from durable_plans.domain.models import SubtaskStatus
from durable_plans.domain.scheduling import DEAD_STATUSES, DagIndex

K = TypeVar("K")
V = TypeVar("V")

PENDING = SubtaskStatus.PENDING
COMPLETED = SubtaskStatus.COMPLETED


class WatchedDict(dict[K, V]):
    """A dict that calls ``changed(key)`` whenever a key is written or removed.

    Only the operations the workflow uses are watched (item assignment, ``pop``,
    deletion); the rest are refused so that no write slips past unnoticed."""

    def __init__(self, changed: Callable[[K], None], items: Iterable[tuple[K, V]] = ()) -> None:
        super().__init__(items)
        self._changed = changed

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self._changed(key)

    def __delitem__(self, key: K) -> None:
        super().__delitem__(key)
        self._changed(key)

    _MISSING = object()

    def pop(self, key: K, default: object = _MISSING) -> V:
        if key in self:
            value = super().pop(key)
            self._changed(key)
            return value
        if default is WatchedDict._MISSING:
            raise KeyError(key)
        return default  # type: ignore[return-value]

    def _unwatched(self, *_: object, **__: object) -> None:
        raise TypeError("WatchedDict takes item assignment, pop and del only")

    update = setdefault = popitem = clear = __ior__ = _unwatched  # type: ignore[assignment]


class Frontier:
    """Every subtask's status by position, and which PENDING ones have all their
    dependencies COMPLETED (ready), in declaration order.

    Feed it each change with :meth:`set`; ask it :meth:`ready`. Counts per status are
    kept too, so "is anything dead?" and "is anything paused?" cost nothing."""

    __slots__ = ("_dag", "_heap", "_ready", "_status", "_unmet", "counts")

    def __init__(self, dag: DagIndex) -> None:
        self._dag = dag
        n = len(dag)
        self._status: list[SubtaskStatus] = [PENDING] * n
        # Dependencies of each subtask not COMPLETED (duplicates were folded by DagIndex).
        self._unmet: list[int] = [len(deps) for deps in dag.dependencies]
        self._ready: set[int] = {i for i in range(n) if self._unmet[i] == 0}
        self._heap: list[int] = sorted(self._ready)  # may hold stale entries, never misses
        self.counts: Counter[SubtaskStatus] = Counter({PENDING: n})

    def status(self, sid: str) -> SubtaskStatus:
        return self._status[self._dag.index_of(sid)]

    def statuses(self) -> list[SubtaskStatus]:
        """Statuses aligned with positions (a copy): for the rare whole-plan pass."""
        return list(self._status)

    def set(self, sid: str, status: SubtaskStatus) -> None:
        i = self._dag.index_of(sid)
        old = self._status[i]
        if old is status:
            return
        self._status[i] = status
        self.counts[old] -= 1
        self.counts[status] += 1
        if old is COMPLETED or status is COMPLETED:
            step = 1 if old is COMPLETED else -1
            for k in self._dag.dependents[i]:
                self._unmet[k] += step
                self._refresh(k)
        self._refresh(i)

    def _refresh(self, i: int) -> None:
        if self._status[i] is PENDING and self._unmet[i] == 0:
            if i not in self._ready:
                self._ready.add(i)
                heapq.heappush(self._heap, i)
        else:
            self._ready.discard(i)

    def ready(self, limit: int) -> list[str]:
        """The first ``limit`` ready subtasks in declaration order (``ready_subtasks``'s
        answer, cut short); they stay ready until their status changes."""
        heap, taken = self._heap, list[int]()
        while heap and len(taken) < limit:
            i = heapq.heappop(heap)
            if i in self._ready and (not taken or taken[-1] != i):
                taken.append(i)
        for i in taken:  # still ready: back in the heap until started
            heapq.heappush(heap, i)
        return [self._dag.ids[i] for i in taken]

    @property
    def any_dead(self) -> bool:
        return any(self.counts[s] for s in DEAD_STATUSES)
