"""Recurring plans as Temporal Schedules, on a real dev server: a schedule every second
starts plans (ordinary ones, found by ``dplan list --schedule``), ``pause`` stops it,
``trigger`` starts one at once, and ``--overlap skip`` skips a run while one is running."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from durable_plans.client import Client, Refused
from durable_plans.domain.models import PlanStatus
from durable_plans.testing import FakeProvider
from tests.integration.conftest import Harness, harness_on

pytestmark = pytest.mark.integration

DPLAN = Path(sys.executable).parent / "dplan"
WAIT_S = 60.0  # a bound on waiting, never asserted


def plan_file(tmp_path: Path, description: str) -> Path:
    path = tmp_path / f"plan-{uuid.uuid4().hex[:6]}.json"
    path.write_text(
        json.dumps({"goal": "nightly", "subtasks": [{"id": "bump", "description": description}]})
    )
    return path


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.2)


async def actions(client: Client, schedule_id: str) -> tuple[int, int, bool]:
    """(runs started, runs skipped for overlap, paused), from the schedule itself."""
    described = await client.temporal.get_schedule_handle(schedule_id).describe()
    info = described.info
    return info.num_actions, info.num_actions_skipped_overlap, described.schedule.state.paused


async def test_a_schedule_starts_plans_pauses_and_is_triggered(
    harness: Harness, tmp_path: Path
) -> None:
    client = Client(harness.client, harness.settings)
    sid = f"nightly-{uuid.uuid4().hex[:6]}"
    env = harness.cli_env()

    def dplan(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(DPLAN), *args], env=env, capture_output=True, text=True, timeout=120
        )

    created = await asyncio.to_thread(
        dplan, "schedule", "create", sid, str(plan_file(tmp_path, "Bump the pins")), "--every", "1s"
    )
    assert created.returncode == 0, created.stderr
    try:

        async def three() -> bool:
            return (await actions(client, sid))[0] >= 3

        await until(three, "the schedule never started three plans")
        await client.pause_schedule(sid)

        async def paused() -> bool:
            return (await actions(client, sid))[2]

        await until(paused, "the schedule never paused")
        before = (await actions(client, sid))[0]
        await asyncio.sleep(3)  # three intervals: a paused schedule starts nothing
        assert (await actions(client, sid))[0] == before
        await client.trigger_schedule(sid)

        async def triggered() -> bool:
            return (await actions(client, sid))[0] == before + 1

        await until(triggered, "trigger started no plan")
        listed = await asyncio.to_thread(dplan, "schedule", "list", "--json")
        rows = {r["schedule_id"]: r for r in json.loads(listed.stdout)}
        plans = rows[sid]["recent_plans"]
        reports = [await client.report(p) for p in plans]

        async def all_listed() -> bool:
            found = await asyncio.to_thread(dplan, "list", "--schedule", sid, "--json")
            return found.returncode == 0 and set(plans) <= {
                r["plan_id"] for r in json.loads(found.stdout)
            }

        await until(all_listed, "dplan list --schedule never listed the plans")
        with pytest.raises(Refused, match="exists already"):
            await client.create_schedule(
                sid, plan_file(tmp_path, "Again"), every=timedelta(seconds=5)
            )
    finally:
        await client.delete_schedule(sid)
    assert rows[sid]["paused"] is True and rows[sid]["spec"].startswith("every")
    assert len(plans) >= before + 1
    assert all(p.startswith(f"{sid}-") for p in plans)  # SCHEDULE_ID-<time>
    assert {r.status for r in reports} == {PlanStatus.COMPLETED}
    with pytest.raises(Refused, match="no schedule"):
        await client.pause_schedule(sid)


async def overlap_skips(client: Client, tmp: Path) -> tuple[int, int]:
    """(runs started, runs skipped) of a 1 s schedule of 4 s plans with ``--overlap skip``,
    once it has skipped one."""
    sid = f"slow-{uuid.uuid4().hex[:6]}"
    await client.create_schedule(
        sid, plan_file(tmp, "Take a while [slow:4000]"), every=timedelta(seconds=1)
    )
    try:

        async def skipped() -> bool:
            return (await actions(client, sid))[1] >= 1

        await until(skipped, "no run was ever skipped")
        started, skips, _ = await actions(client, sid)
    finally:
        await client.delete_schedule(sid)
    return started, skips


@pytest.fixture(scope="module", autouse=True)
async def overlap_run(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[asyncio.Task[tuple[int, int]]]:
    """The overlap scenario, which mostly waits on the schedule's seconds, in the
    background from the module's start, on a worker and provider of its own; its test
    awaits and checks it."""
    tmp = tmp_path_factory.mktemp("overlap")
    async with (
        FakeProvider(latency_ms=0) as provider,
        harness_on(temporal_env.client, provider, tmp) as h,
    ):
        client = Client(h.client, h.settings)
        task = asyncio.create_task(overlap_skips(client, tmp), name="overlap-skip")
        try:
            yield task
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_overlap_skip_skips_a_run_while_one_runs(
    overlap_run: asyncio.Task[tuple[int, int]],
) -> None:
    started, skips = await asyncio.wait_for(asyncio.shield(overlap_run), timeout=2 * WAIT_S)
    assert started >= 1 and skips >= 1


async def test_a_plans_priority_and_tenant_reach_its_subtasks(
    harness: Harness,
) -> None:
    """``priority`` and ``tenant`` become the Temporal priority of the plan's run: its key
    and its fairness key, which its subtasks inherit (and their activities from them)."""
    client = Client(harness.client, harness.settings)
    plan = {
        "id": f"urgent-{uuid.uuid4().hex[:6]}",
        "priority": 1,
        "tenant": "team-a",
        "subtasks": [{"id": "fix", "description": "Fix it now"}],
    }
    await client.start(plan)
    report = await client.report(str(plan["id"]))
    assert report.status is PlanStatus.COMPLETED
    plan_history = await harness.client.get_workflow_handle(str(plan["id"])).fetch_history()
    child_history = await harness.client.get_workflow_handle(f"{plan['id']}/fix").fetch_history()
    for history in (plan_history, child_history):
        started = history.events[0].workflow_execution_started_event_attributes
        assert (started.priority.priority_key, started.priority.fairness_key) == (1, "team-a")
