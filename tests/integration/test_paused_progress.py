"""A paused plan's listing shows its true counts, and its history replays.

Progress upserts are held back to one per ``PROGRESS_INTERVAL``; a change held back is
said by the next one. A plan that waits for an operator with nothing running has no next
one, so it says what it held back before it waits (``PlanVisibility.idle``).

The interval is made an hour long here, so that every completion after the pause is
held back whatever the machine's speed: without ``idle`` the listing would show the
counts of the moment the plan paused for as long as it waits. The plan runs one subtask
at a time and the failing one first, so it pauses before anything completes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.workflow import NondeterminismError

from durable_plans.cli.replay_command import make_replayer, replay_history
from durable_plans.client._visibility import list_plans
from durable_plans.domain.models import Plan, PlanReport, SubtaskStatus
from durable_plans.plugin import PASSTHROUGH_MODULES
from durable_plans.workflows import visibility
from durable_plans.workflows.visibility import PlanVisibility
from tests.integration.conftest import Harness
from tests.integration.plans import by_id, make_plan

pytestmark = pytest.mark.integration

VISIBILITY_WAIT_S = 20.0
STEPS = [
    ("c", "task-c Call the weather API [fail:401]", []),
    ("a", "task-a Inspect the repository", []),
    ("b", "task-b Write the tests", []),
    ("e", "task-e Write the changelog", []),
    ("d", "task-d Render the forecast", ["c"]),
]
COMPLETED = ("a", "b", "e")


@pytest.fixture(autouse=True)
def hour_long_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    # The workflows read the constant from this very module: it is passed through the
    # sandbox, so the worker's and the replayer's workflows see the patched value.
    assert "durable_plans.workflows.visibility" in PASSTHROUGH_MODULES
    monkeypatch.setattr(visibility, "PROGRESS_INTERVAL", timedelta(hours=1))


def paused_plan() -> Plan:
    plan = make_plan(STEPS, prefix="idle-progress", max_parallel=1)
    return plan.model_copy(update={"on_failure": "pause"})


async def until_waiting_for_operator(handle: WorkflowHandle[Any, PlanReport]) -> None:
    """Until c is paused, a, b and e completed, and d still waits on c (the test's own
    timeout bounds it)."""
    while True:
        rows = by_id(await handle.query("status", result_type=PlanReport))
        if rows["c"].status is SubtaskStatus.PAUSED and all(
            rows[sid].status is SubtaskStatus.COMPLETED for sid in COMPLETED
        ):
            assert rows["d"].status is SubtaskStatus.PENDING
            return
        await asyncio.sleep(0.1)


async def listed(client: Client, plan_id: str, ok: Callable[[Any], bool]) -> Any:
    """The plan's row (as ``dplan list`` shows it) once ``ok`` accepts it: visibility
    is eventually consistent."""
    deadline = time.monotonic() + VISIBILITY_WAIT_S
    while True:
        rows, _ = await list_plans(client, query=f'WorkflowId = "{plan_id}"')
        row = rows[0] if rows else None
        if row is not None and ok(row):
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"the listing never showed the expected row; last: {row!r}")
        await asyncio.sleep(0.1)


async def test_a_paused_plan_is_listed_with_its_true_counts(harness: Harness) -> None:
    plan = paused_plan()
    handle = await harness.start(plan)
    try:
        await until_waiting_for_operator(handle)
        row = await listed(harness.client, plan.id, lambda r: r.completed == len(COMPLETED))
        assert (row.status, row.completed, row.total) == ("paused", 3, 5)
        assert row.paused is not None and list(row.paused) == ["c"]
        assert row.paused["c"].startswith("Authentication: ")

        # Said by the idle upsert (the interval held every completion back), which replays.
        history = await handle.fetch_history()
        result = await replay_history(make_replayer(), history)
        assert result.replay_failure is None, result.replay_failure

        # What the replay checks: the same history against a plan that does not say its
        # held-back counts when it goes idle is not deterministic.
        def silent(self: PlanVisibility, report: Any, *, paused: dict[str, str]) -> None:
            return None

        with pytest.MonkeyPatch.context() as change:
            change.setattr(PlanVisibility, "idle", silent)
            with pytest.raises(NondeterminismError):
                await make_replayer().replay_workflow(history)
    finally:
        await handle.terminate("test over")
