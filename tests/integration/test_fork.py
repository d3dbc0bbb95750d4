"""A plan forked from one of its steps (``Client.fork``, ``dplan fork``) on a real dev
server: only that step and what follows it ask the model, the original's report stays
byte for byte the same, and both plans' result branches exist."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from durable_plans.client import Client, Refused, SubtaskChanges
from durable_plans.domain.models import ForkedFrom, PlanStatus
from durable_plans.testing import FakeProvider
from tests.integration.conftest import Harness
from tests.integration.plans import by_id, make_plan
from tests.integration.replay import assert_replays

pytestmark = pytest.mark.integration

DPLAN = Path(sys.executable).parent / "dplan"

CHAIN = [
    ("one", "Step one", []),
    ("two", "Step two", ["one"]),
    ("three", "Step three", ["two"]),
    ("four", "Step four", ["three"]),
]


def asked(provider: FakeProvider, since: int) -> set[str]:
    """The tasks (last user message) the model was asked about after request ``since``."""
    tasks = set()
    for request in provider.requests[since:]:
        users = [m for m in request.messages if m.get("role") == "user"]
        tasks.add(str(users[-1].get("content")))
    return tasks


async def test_a_fork_from_the_middle_reruns_only_that_step_and_what_follows(
    harness: Harness,
) -> None:
    plan = make_plan(CHAIN, prefix="fork")
    first = await (await harness.start(plan)).result()
    assert first.status is PlanStatus.COMPLETED
    client = Client(harness.client, harness.settings)
    before = (await client.status(plan.id)).model_dump_json()
    since = len(harness.provider.requests)

    fork = await client.fork(
        plan.id,
        "three",
        changes={"three": SubtaskChanges(description="Step three, the other way")},
        new_id=f"{plan.id}-b",
    )
    assert (fork.plan_id, fork.rerun) == (f"{plan.id}-b", ["three", "four"])
    report = await client.report(fork.plan_id)

    assert report.status is PlanStatus.COMPLETED
    assert report.forked_from == ForkedFrom(plan=plan.id, subtask="three")
    assert asked(harness.provider, since) == {"Step three, the other way", "Step four"}
    rows, old = by_id(report), by_id(first)
    for kept in ("one", "two"):  # reused: the same result, session and commit
        assert rows[kept] == old[kept]
    assert rows["three"].result != old["three"].result  # it ran again, changed
    assert [e.kind for e in report.log][:1] == ["forked"]
    # The original is untouched: its report, and its result branch beside the fork's.
    assert (await client.status(plan.id)).model_dump_json() == before
    assert first.workspace is not None and report.workspace is not None
    for branch in (first.workspace.branch, report.workspace.branch):
        assert branch
        found = subprocess.run(  # noqa: ASYNC221 - a git lookup of milliseconds
            ["git", "rev-parse", "--verify", f"refs/heads/{branch}"],
            cwd=harness.settings.workspace,
            capture_output=True,
            text=True,
        )
        assert found.returncode == 0, (branch, found.stderr)
    assert first.workspace.branch != report.workspace.branch
    assert await assert_replays(harness.client, [fork.plan_id]) >= 1


async def test_a_fork_names_what_it_cannot_do(harness: Harness) -> None:
    plan = make_plan(CHAIN[:2], prefix="fork-bad")
    await (await harness.start(plan)).result()
    client = Client(harness.client, harness.settings)
    with pytest.raises(Refused, match=r"no subtask|unknown"):
        await client.fork(plan.id, "nine")
    with pytest.raises(Refused, match="exists already"):
        await client.fork(plan.id, "two", new_id=plan.id)


async def test_dplan_fork_starts_the_fork_and_names_a_step_the_plan_lacks(
    harness: Harness,
) -> None:
    plan = make_plan(CHAIN[:2], prefix="fork-cli")
    await (await harness.start(plan)).result()
    env = harness.cli_env()

    def dplan(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(DPLAN), *args], env=env, capture_output=True, text=True, timeout=120
        )

    missing = await asyncio.to_thread(dplan, "fork", plan.id, "--from", "nine")
    started = await asyncio.to_thread(
        dplan, "fork", plan.id, "--from", "two", "--id", f"{plan.id}-cli", "--no-wait"
    )
    assert missing.returncode == 1 and "error:" in missing.stderr and "nine" in missing.stderr
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == f"{plan.id}-cli"
    assert f"forked plan '{plan.id}' at two as '{plan.id}-cli': runs two" in started.stderr
    report = await Client(harness.client, harness.settings).report(f"{plan.id}-cli")
    assert report.status is PlanStatus.COMPLETED and report.forked_from is not None
