"""Tenants' daily caps (``DPLAN_TENANTS``) on a real dev server with the fake provider.

A tenant's spend is its ledger in the shared session store, charged once per answer the
provider delivered; a call past the cap is not sent. The crash test kills a real
``dplan-worker`` while one of the capped tenant's calls is at the provider: the ledger
still equals the provider's own log, the subtask pauses on the cap while another tenant's
plan completes, and raising the cap in the file resumes it without an operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowFailureError

from durable_plans.client import Client, StatusUnavailable
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, SubtaskStatus, Usage
from durable_plans.domain.tenants import ledger_of
from durable_plans.settings import Settings
from durable_plans.testing._fake_provider import RecordedRequest
from tests.integration.conftest import provider_settings, running_worker
from tests.integration.gates import GatedProvider
from tests.integration.plans import by_id, make_plan, start_plan_workflow
from tests.integration.replay import assert_replays
from tests.integration.stored import opened_store
from tests.integration.workers import WorkerProcess, new_workspace, worker_env

pytestmark = pytest.mark.integration

DPLAN = Path(sys.executable).parent / "dplan"
WAIT_S = 120.0  # a bound on waiting, never asserted
USED = re.compile(r"has used ([\d,]+) of its ([\d,]+) tokens today \((\S+) UTC\)")


@pytest.fixture
async def provider() -> AsyncIterator[GatedProvider]:
    p = GatedProvider(latency_ms=0, hold_s=60.0)
    async with p:
        yield p


def caps_file(path: Path, **tokens: int) -> Path:
    """A tenants file capping each tenant named at so many tokens a day."""
    lines = ["recheck_s = 0.5"]
    for tenant, cap in tokens.items():
        lines += [f'[tenants."{tenant}"]', f"tokens = {cap}"]
    # Written whole under another name, then renamed: a worker never reads half a file.
    part = path.with_suffix(".part")
    part.write_text("\n".join(lines) + "\n")
    part.replace(path)
    return path


def served(requests: Iterable[RecordedRequest], marker: str) -> Usage:
    """What the provider delivered to requests of the plan whose tasks say ``marker``."""
    total = Usage()
    for r in requests:
        if r.completed and r.usage and any(marker in str(m.get("content")) for m in r.messages):
            total += Usage(
                prompt_tokens=r.usage["prompt_tokens"],
                completion_tokens=r.usage["completion_tokens"],
            )
    return total


async def ledger(store_path: Path, tenant: str, days: Iterable[date]) -> Usage:
    async with opened_store(store_path) as store:
        total = Usage()
        for day in sorted(set(days)):
            total += await store.total_usage(ledger_of(tenant, day))
        return total


def tenant_plan(rows: list[tuple[str, str, list[str]]], tenant: str, **fields: object) -> Plan:
    plan = make_plan(rows, prefix=f"tenant-{tenant}")
    return plan.model_copy(update={"tenant": tenant, **fields})


async def paused(plans: Client, plan_id: str, sid: str, deadline: float) -> PlanReport:
    """The plan's report once ``sid`` is paused (the status query may go unanswered for a
    while after a worker died: its sticky queue is asked first)."""
    while True:
        assert time.monotonic() < deadline, f"{sid} never paused"
        with contextlib.suppress(StatusUnavailable):
            report = await plans.status(plan_id)
            if by_id(report)[sid].status is SubtaskStatus.PAUSED:
                return report
        await asyncio.sleep(0.1)


async def dplan(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``dplan ARGS`` in a process of its own, with the workers' environment."""
    return await asyncio.to_thread(
        subprocess.run,
        [str(DPLAN), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def today() -> date:
    return datetime.now(UTC).date()


async def test_a_capped_tenant_stops_at_its_cap_across_a_sigkill_and_resumes_when_raised(
    client: TemporalClient, provider: GatedProvider, tmp_path: Path
) -> None:
    new_workspace(tmp_path, "# tenants\n")
    tenants = caps_file(tmp_path / "tenants.toml", **{"team-a": 10_000_000})
    env = worker_env(client, tmp_path, provider, f"tenants-{uuid.uuid4().hex[:8]}")
    env["DPLAN_TENANTS"] = str(tenants)
    days = [today()]
    capped = tenant_plan(
        [
            ("s1", "alpha one: inspect the repository", []),
            ("s2", "alpha two: write the module", ["s1"]),
            ("s3", "alpha three: sum up", ["s2"]),
        ],
        "team-a",
        on_failure="pause",
    )
    other = tenant_plan(
        [("b1", "beta one: read the notes", []), ("b2", "beta two: list the files", [])],
        "team-b",
    )
    # s2's first request is held at the provider: the worker dies while it is there.
    held = provider.gate(
        "s2", 2, lambda messages: any("alpha two" in str(m.get("content")) for m in messages)
    )
    first = WorkerProcess(env, tmp_path / "worker-1.log").start()
    second: WorkerProcess | None = None
    try:
        first.wait_ready()
        handle = await start_plan_workflow(client, capped, env["DPLAN_TASK_QUEUE"])
        other_handle = await start_plan_workflow(client, other, env["DPLAN_TASK_QUEUE"])
        deadline = time.monotonic() + WAIT_S
        while held.arrived < 1:
            assert time.monotonic() < deadline, "s2 never asked the provider"
            await asyncio.sleep(0.05)
        first.kill()
        # The cap is now exactly what team-a has been charged: the call asked again
        # after the crash would pass it, so it must not be sent.
        spent = await ledger(tmp_path / "sessions.db", "team-a", days)
        assert spent.total_tokens > 0
        caps_file(tenants, **{"team-a": spent.total_tokens})
        second = WorkerProcess(env, tmp_path / "worker-2.log").start()
        second.wait_ready()
        settings = Settings(
            temporal_address=env["TEMPORAL_ADDRESS"], task_queue=env["DPLAN_TASK_QUEUE"]
        )
        plans = Client(client, settings)
        report = await paused(plans, capped.id, "s2", deadline)
        held.release()  # the answer goes out to the dead worker's closed connection

        error = by_id(report)["s2"].error
        assert error is not None and error.type == "TenantBudgetExceeded", error
        found = re.search(
            r"has used ([\d,]+) of its ([\d,]+) tokens today \((\S+) UTC\)", error.message
        )
        assert found, error.message
        used, cap = (int(found.group(i).replace(",", "")) for i in (1, 2))
        days.append(date.fromisoformat(found.group(3)))
        assert used == cap == spent.total_tokens
        # The ledger is what the provider delivered, the answer lost with the worker
        # not included (it was never delivered, the connection being gone).
        assert (await ledger(tmp_path / "sessions.db", "team-a", days)) == served(
            provider.completions(), "alpha"
        )
        other_report: PlanReport = await asyncio.wait_for(other_handle.result(), WAIT_S)
        assert other_report.status is PlanStatus.COMPLETED

        caps_file(tenants, **{"team-a": 10_000_000})  # raised: s2 runs again by itself
        final: PlanReport = await asyncio.wait_for(handle.result(), WAIT_S)
    finally:
        first.stop()
        if second is not None:
            second.stop()

    days.append(today())
    assert final.status is PlanStatus.COMPLETED, final.counts
    assert by_id(final)["s2"].retries == 1
    assert [(e.kind, e.by, e.subtask) for e in final.log] == [
        ("paused", "", "s2"),
        ("resumed", "tenant cap", "s2"),
    ]
    requests = provider.completions()
    assert (await ledger(tmp_path / "sessions.db", "team-a", days)) == served(requests, "alpha")
    assert (await ledger(tmp_path / "sessions.db", "team-b", days)) == served(requests, "beta")
    assert served(requests, "beta").total_tokens > 0
    # The pause, the looks at the cap and the resume replay as they ran.
    assert await assert_replays(client, [capped.id]) >= 1

    # `dplan tenants` says the same, beside each cap (team-c: given, never charged).
    listed = await dplan(env, "tenants", "team-c", "--json", "--day", days[-1].isoformat())
    assert listed.returncode == 0, listed.stderr
    rows = {row["tenant"]: row for row in json.loads(listed.stdout)}
    assert list(rows) == ["team-a", "team-c"]
    if len(set(days)) == 1:  # the whole test within one UTC day: one ledger to compare
        assert rows["team-a"]["used"]["prompt_tokens"] == served(requests, "alpha").prompt_tokens
    assert rows["team-a"]["cap"] == {"tokens": 10_000_000, "usd": None}
    assert rows["team-c"] == {
        "tenant": "team-c",
        "day": days[-1].isoformat(),
        "used": Usage().model_dump(mode="json"),
        "cap": None,
    }
    bad = await dplan(env, "tenants", "--day", "yesterday")
    assert bad.returncode == 2 and "--day: expected YYYY-MM-DD, got 'yesterday'" in bad.stderr


async def test_with_on_failure_fail_the_plan_fails_on_the_cap_and_nothing_is_sent(
    client: TemporalClient, provider: GatedProvider, tmp_path: Path
) -> None:
    tenants = caps_file(tmp_path / "tenants.toml", **{"team-z": 0})
    settings = provider_settings(client, provider, tmp_path, tenants_file=tenants)
    plan = tenant_plan([("z1", "zeta one: inspect the repository", [])], "team-z")
    async with running_worker(client, settings):
        handle = await start_plan_workflow(client, plan, settings.task_queue)
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), WAIT_S)
        report = await Client(client, settings).status(plan.id)
    assert report.status is PlanStatus.FAILED
    error = by_id(report)["z1"].error
    assert error is not None and error.type == "TenantBudgetExceeded"
    assert "tenant 'team-z' has used 0 of its 0 tokens today" in error.message
    assert served(provider.completions(), "zeta") == Usage()
