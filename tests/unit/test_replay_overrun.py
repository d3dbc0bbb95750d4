"""A replay that only overran the SDK's deadlock timeout is replayed again, not reported.

The timeout counts wall time, so a loaded host (a garbage collection, a starved thread)
overruns it in code that is fine; a real deadlock overruns every time. A scripted replayer
gives each replay's outcome, so what is checked is how many replays are made and which
failure is kept.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import cast

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, WorkflowReplayResult
from temporalio.workflow import NondeterminismError

from durable_plans.cli.replay_command import (
    DEADLOCK_CODE,
    REPLAY_ATTEMPTS,
    RunHistory,
    overran,
    replay_history,
    replay_runs,
)

OVERRUN = RuntimeError(
    f"Workflow activation completion failed: {DEADLOCK_CODE} Potential deadlock detected: "
    "workflow didn't yield within 2 second(s)."
)


class ScriptedReplayer:
    """Answers each replay with the next failure of ``script`` (None: it replays)."""

    def __init__(self, *script: Exception | None) -> None:
        self._script: Iterator[Exception | None] = iter(script)
        self.replays = 0

    def _next(self, history: WorkflowHistory) -> WorkflowReplayResult:
        self.replays += 1
        return WorkflowReplayResult(history=history, replay_failure=next(self._script))

    async def replay_workflow(
        self, history: WorkflowHistory, *, raise_on_replay_failure: bool = True
    ) -> WorkflowReplayResult:
        assert not raise_on_replay_failure
        return self._next(history)

    @asynccontextmanager
    async def workflow_replay_iterator(
        self, histories: AsyncIterator[WorkflowHistory]
    ) -> AsyncIterator[AsyncIterator[WorkflowReplayResult]]:
        async def results() -> AsyncIterator[WorkflowReplayResult]:
            async for history in histories:
                yield self._next(history)

        yield results()


def history(workflow_id: str = "plan-1") -> WorkflowHistory:
    return WorkflowHistory(workflow_id=workflow_id, events=[])


async def replayed(replayer: ScriptedReplayer) -> WorkflowReplayResult:
    return await replay_history(cast(Replayer, replayer), history())


def test_only_the_deadlock_code_counts_as_an_overrun() -> None:
    assert overran(OVERRUN)
    assert not overran(None)
    assert not overran(NondeterminismError("nondeterminism: activity type changed"))


async def test_an_overrun_then_a_clean_replay_is_clean() -> None:
    replayer = ScriptedReplayer(OVERRUN, None)
    assert (await replayed(replayer)).replay_failure is None
    assert replayer.replays == 2


async def test_an_overrun_every_time_is_reported_after_the_last_attempt() -> None:
    replayer = ScriptedReplayer(*[OVERRUN] * REPLAY_ATTEMPTS)
    assert (await replayed(replayer)).replay_failure is OVERRUN
    assert replayer.replays == REPLAY_ATTEMPTS


async def test_a_nondeterministic_replay_is_reported_at_once() -> None:
    changed = NondeterminismError("nondeterminism: activity type changed")
    replayer = ScriptedReplayer(changed, None)
    assert (await replayed(replayer)).replay_failure is changed
    assert replayer.replays == 1


async def test_replay_runs_replays_only_the_run_that_overran() -> None:
    runs = [RunHistory(f"plan-{i}", 0, history(f"plan-{i}")) for i in range(3)]
    changed = NondeterminismError("nondeterminism: activity type changed")
    # plan-0 replays; plan-1 overruns, and its second replay (made before plan-2's) is
    # clean; plan-2 is not deterministic.
    replayer = ScriptedReplayer(None, OVERRUN, None, changed)
    seen: list[str] = []
    outcomes = await replay_runs(
        runs, cast(Replayer, replayer), on_outcome=lambda o: seen.append(o.run.workflow_id)
    )
    assert [o.failure for o in outcomes] == [None, None, changed]
    assert replayer.replays == 4
    assert seen == ["plan-0", "plan-1", "plan-2"]
