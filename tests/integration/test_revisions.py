"""A running plan revised by an operator (``Client.revise``, ``dplan add``), on a real dev
server with the fake provider: subtasks added after one that is running wait for it and
run; a subtask not yet started is removed; a revision that breaks a rule is refused with
each problem, and changes nothing; every revision survives continue-as-new, and is in the
report, the log and the history (which replays)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from temporalio.client import Client as TemporalClient
from temporalio.testing import WorkflowEnvironment

from durable_plans.client import Client, Refused
from durable_plans.client._operator import default_operator
from durable_plans.domain.models import PlanStatus, Subtask, SubtaskStatus
from durable_plans.domain.revision_record import Revision
from durable_plans.domain.revisions import REVISE_UPDATE, RevisionRequest
from durable_plans.settings import Settings
from durable_plans.testing import FakeProviderProcess
from tests.integration.conftest import Harness
from tests.integration.gates import GatedProvider, first_call_of
from tests.integration.plans import by_id, make_plan, run_plan, start_plan_workflow
from tests.integration.replay import assert_replays
from tests.integration.stored import opened_store, subtask_messages, tool_answers
from tests.integration.test_ui import ui_for
from tests.integration.workers import WorkerProcess, new_workspace, worker_env

pytestmark = pytest.mark.integration

DPLAN = Path(sys.executable).parent / "dplan"
WAIT_S = 60.0  # a bound on waiting for the plan, never asserted


@pytest.fixture
async def provider() -> AsyncIterator[GatedProvider]:
    p = GatedProvider(latency_ms=0, hold_s=40.0)
    async with p:
        yield p


async def test_subtasks_added_while_one_runs_wait_for_it_and_a_pending_one_is_removed(
    harness: Harness, tmp_path: Path
) -> None:
    assert isinstance(harness.provider, GatedProvider)
    held = harness.provider.gate("lead", 99, first_call_of("Survey the modules"))
    plan = make_plan(
        [
            ("lead", "Survey the modules", []),
            ("guess", "Write the three modules the plan guessed", ["lead"]),
            ("docs", "Document them", ["guess"]),
        ],
        prefix="revise",
    )
    # Continue-as-new after every two completions: the revision is carried across runs.
    handle = await harness.start(plan, max_completions_per_run=2)
    client = Client(harness.client, harness.settings)
    try:
        deadline = time.monotonic() + WAIT_S
        while held.arrived < 1:  # lead's first call is held: lead is running
            assert time.monotonic() < deadline, "lead never called the model"
            await asyncio.sleep(0.05)

        # One refusal naming every problem; nothing changes.
        bad = [
            Subtask(id="guess", description="again", depends_on=("lead",)),
            Subtask(id="x", description="x", agent="wizard", depends_on=("lead",)),
            Subtask(id="y", description="y", depends_on=("z",)),
            Subtask(id="z", description="z", depends_on=("y",)),
        ]
        with pytest.raises(Refused) as refused:
            await client.revise(plan.id, add=bad, remove=["lead"])
        problems = refused.value.problems
        assert len(problems) == 4, problems
        assert any("'lead' is running" in p for p in problems), problems
        assert any("duplicate id 'guess'" in p and p.startswith("add[0]") for p in problems)
        assert any("unknown agent 'wizard'" in p and p.startswith("add[1]") for p in problems)
        assert any(p.startswith("cycle:") for p in problems), problems
        assert [r.id for r in (await client.status(plan.id)).subtasks] == ["lead", "guess", "docs"]

        # From the CLI, as an operator would: ten modules found, the guessed docs dropped.
        added = [
            {"id": f"m{i}", "description": f"Write module {i}", "depends_on": ["lead"]}
            for i in range(10)
        ]
        path = tmp_path / "add.json"
        path.write_text(json.dumps({"subtasks": added}))
        command: list[str] = [str(DPLAN), "add", plan.id, str(path), "--remove", "docs"]
        done = await asyncio.to_thread(
            lambda: subprocess.run(
                [*command, "--reason", "eleven modules"],
                env=harness.cli_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().startswith(f"revision 1 of plan '{plan.id}': added m0, m1")
        now = await client.status(plan.id)
        rows = by_id(now)
        assert "docs" not in rows
        assert {rows[f"m{i}"].status for i in range(10)} == {SubtaskStatus.PENDING}
        assert rows["lead"].status is SubtaskStatus.RUNNING
        # The page's data draws the revised plan: the added subtasks, with their
        # dependencies and definitions, not the plan the run started with.
        async with ui_for(harness) as ui, aiohttp.ClientSession() as http:
            async with http.get(f"{ui.url}api/plans/{plan.id}") as resp:
                assert resp.status == 200
                page = await resp.json()
            async with http.get(f"{ui.url}api/plans/{plan.id}/subtasks/m3") as resp:
                assert resp.status == 200, await resp.text()
        drawn = {s["id"]: s for s in page["plan"]["subtasks"]}
        assert list(drawn) == ["lead", "guess", *(f"m{i}" for i in range(10))]
        assert drawn["m3"]["depends_on"] == ["lead"]
        assert page["report"]["revisions"][0]["removed"] == ["docs"]
    finally:
        held.release()
    report = await handle.result()

    assert report.status is PlanStatus.COMPLETED
    assert [r.id for r in report.subtasks] == ["lead", "guess", *(f"m{i}" for i in range(10))]
    assert report.counts.completed == 12
    (revision,) = report.revisions
    assert revision.added == tuple(f"m{i}" for i in range(10))
    assert revision.removed == ("docs",)
    assert (revision.number, revision.reason) == (1, "eleven modules")
    assert revision.by == default_operator()
    revised = [e for e in report.log if e.kind == "revised"]
    assert len(revised) == 1 and revised[0].detail.endswith("removed docs (eleven modules)")
    # It continued as new after the revision (the runs after the first carried it), and
    # every run replays.
    assert await assert_replays(harness.client, [plan.id]) >= 2


async def test_a_revision_of_an_ended_plan_is_refused(harness: Harness) -> None:
    plan = make_plan([("only", "Do the one thing", [])], prefix="revise-ended")
    await (await harness.start(plan)).result()
    client = Client(harness.client, harness.settings)
    with pytest.raises(Refused, match="is not running"):
        await client.revise(plan.id, add=[Subtask(id="more", description="more")])


async def test_an_orchestrator_adds_ten_subtasks_after_itself_once_its_mistakes_are_named(
    harness: Harness,
) -> None:
    """The agent's first revision has one of every mistake and is refused with each, one
    line apiece, changing nothing; its second adds ten subtasks that depend on it, which
    run after it completes."""
    plan = make_plan(
        [
            ("lead", "Survey the modules [bad-revise] [revise:10:lead]", []),
            ("tail", "Sum up", ["lead"]),
        ],
        agent="orchestrator",
        prefix="revise-agent",
    )
    report = await (await harness.start(plan)).result()

    assert report.status is PlanStatus.COMPLETED, report.counts
    added = [f"lead-{i}" for i in range(10)]
    assert [r.id for r in report.subtasks] == ["lead", "tail", *added]
    assert report.counts.completed == 12
    (revision,) = report.revisions
    assert (revision.by, revision.subtask, revision.added) == (
        "agent orchestrator",
        "lead",
        tuple(added),
    )
    assert revision.reason == "lead found 10 modules"
    answers = [
        m.content or ""
        for m in tool_answers(await subtask_messages(harness.store, report, "lead"))
        if m.name == "revise_plan"
    ]
    refusal, accepted = answers
    lines = [line for line in refusal.splitlines() if line.startswith("- ")]
    assert len(lines) == 4, refusal
    assert "- remove: subtask 'lead' is running" in refusal
    assert "add[1] (id 'x'): unknown agent 'wizard'" in refusal
    assert "- cycle: y -> z -> y" in refusal
    assert accepted.startswith("revision 1 made: added lead-0, lead-1")
    # The ten ran after the subtask that added them: each started with lead's result.
    for sid in added:
        seen = await subtask_messages(harness.store, report, sid)
        assert any("Revised: revision 1 made" in (m.content or "") for m in seen), sid
    assert await assert_replays(harness.client, [plan.id]) >= 1


async def test_a_request_sent_again_with_its_key_gets_the_first_revision(harness: Harness) -> None:
    """What an agent's retried call does (a new Update id, the same key): the plan
    answers with the revision it made, and adds nothing twice."""
    assert isinstance(harness.provider, GatedProvider)
    held = harness.provider.gate("hold", 99, first_call_of("Hold on"))
    plan = make_plan([("lead", "Hold on", [])], prefix="revise-key")
    handle = await harness.start(plan)
    try:
        deadline = time.monotonic() + WAIT_S
        while held.arrived < 1:
            assert time.monotonic() < deadline, "lead never called the model"
            await asyncio.sleep(0.05)
        request = RevisionRequest(
            add=(Subtask(id="more", description="More", depends_on=("lead",)),), key="call-1"
        )
        first, again = [
            await handle.execute_update(
                REVISE_UPDATE, request, id=f"update-{n}", result_type=Revision
            )
            for n in (1, 2)
        ]
    finally:
        held.release()
    report = await handle.result()
    assert first == again and first.number == 1
    assert [r.id for r in report.subtasks] == ["lead", "more"]
    assert len(report.revisions) == 1


async def killed_once_revised(client: TemporalClient, tmp_path: Path) -> None:
    """SIGKILL as soon as the plan holds the agent's revision (its tool answer written or
    not yet): the next worker finishes the plan with the ten subtasks, once each. The
    processes start and stop in a thread: this runs beside the module's other tests."""
    new_workspace(tmp_path, "# revise crash\n")
    plan = make_plan(
        [("lead", "Survey the modules [revise:10:lead]", []), ("tail", "Sum up", ["lead"])],
        agent="orchestrator",
        prefix="revise-crash",
    )
    provider = FakeProviderProcess(tmp_path / "requests.jsonl", latency_ms=200)
    await asyncio.to_thread(provider.start)
    try:
        env = worker_env(client, tmp_path, provider, f"revise-{uuid.uuid4().hex[:8]}")
        first = WorkerProcess(env, tmp_path / "worker-1.log")
        second: WorkerProcess | None = None
        try:
            await asyncio.to_thread(lambda: first.start().wait_ready())
            handle = await start_plan_workflow(client, plan, env["DPLAN_TASK_QUEUE"])
            settings = Settings(
                temporal_address=env["TEMPORAL_ADDRESS"], task_queue=env["DPLAN_TASK_QUEUE"]
            )
            plans = Client(client, settings)
            deadline = time.monotonic() + WAIT_S
            while not (await plans.status(plan.id)).revisions:
                assert time.monotonic() < deadline, "the agent never revised the plan"
                await asyncio.sleep(0.05)
            first.kill()
            second = replacement = WorkerProcess(env, tmp_path / "worker-2.log")
            await asyncio.to_thread(lambda: replacement.start().wait_ready())
            report = await asyncio.wait_for(handle.result(), timeout=180)
        finally:
            await asyncio.to_thread(first.stop)
            if second is not None:
                await asyncio.to_thread(second.stop)
    finally:
        await asyncio.to_thread(provider.stop)

    assert report.status is PlanStatus.COMPLETED, report.counts
    added = [f"lead-{i}" for i in range(10)]
    assert [r.id for r in report.subtasks] == ["lead", "tail", *added]
    assert len(report.revisions) == 1
    async with opened_store(tmp_path / "sessions.db") as store:
        answers = [
            m
            for m in tool_answers(await subtask_messages(store, report, "lead"))
            if m.name == "revise_plan"
        ]
    assert len(answers) == 1 and answers[0].content
    assert answers[0].content.startswith("revision 1 made")


@pytest.fixture(scope="module", autouse=True)
async def revised_then_killed(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[asyncio.Task[None]]:
    """The crash round in the background from the module's start: it mostly waits (on
    worker processes starting, on the killed worker's tasks timing out), so the module's
    other tests run meanwhile; its test, last in the file, awaits it."""
    round_ = killed_once_revised(temporal_env.client, tmp_path_factory.mktemp("revise-crash"))
    task = asyncio.create_task(round_, name="revise-crash")
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


REPLAN_PLAN = [
    ("base", "Lay the groundwork", []),
    (
        "bad",
        "Build it the old way [fail:400:tool=write_file] [revise:1:base] [remove:ship]",
        ["base"],
    ),
    ("ship", "Ship what bad built", ["bad"]),
]


@pytest.mark.parametrize("max_replans", [2, 0])
async def test_a_failure_is_replanned_around_and_the_plan_completes(
    harness: Harness, max_replans: int
) -> None:
    """``on_failure: "replan"``: the orchestrator, told of the 400, removes the failed
    subtask's dependent and adds another way, which completes; the failure stays in the
    report, replaced. With ``max_replans: 0`` the plan fails as it always did."""
    plan = make_plan(REPLAN_PLAN, prefix="replan").model_copy(
        update={"on_failure": "replan", "max_replans": max_replans}
    )
    if max_replans == 0:
        report, failure = await run_plan(harness.client, plan, harness.task_queue)
        assert report.status is PlanStatus.FAILED and failure is not None
        assert by_id(report)["bad"].replaced_by is None
        assert by_id(report)["ship"].status is SubtaskStatus.SKIPPED
        assert report.revisions == ()
        assert any("max_replans (0) reached" in e.detail for e in report.log)
        return
    assert isinstance(harness.provider, GatedProvider)
    replanner = harness.provider.gate(
        "replanner", 2, lambda messages: "You are the replanner" in str(messages[-1].get("content"))
    )
    handle = await harness.start(plan)
    deadline = time.monotonic() + WAIT_S
    while replanner.arrived < 1:
        assert time.monotonic() < deadline, "the replanner never asked the model"
        await asyncio.sleep(0.05)
    # While the replanner works, the failure is held: the plan is running, not failed.
    held = await Client(harness.client, harness.settings).status(plan.id)
    assert held.status is PlanStatus.RUNNING, held.counts
    assert by_id(held)["bad"].status is SubtaskStatus.FAILED and held.counts.failed == 1
    replanner.release()
    report = await handle.result()

    assert report.status is PlanStatus.COMPLETED, report.counts
    rows = by_id(report)
    assert list(rows) == ["base", "bad", "replan-1", "base-0"]
    assert rows["bad"].status is SubtaskStatus.FAILED  # never hidden
    assert rows["bad"].error is not None and rows["bad"].error.type == "BadRequest"
    assert rows["bad"].replaced_by == "replan-1"
    assert (report.counts.failed, report.counts.completed) == (1, 3)
    asked, revised = report.revisions
    assert (asked.by, asked.subtask, asked.added) == (
        "the plan (on_failure: replan)",
        "bad",
        ("replan-1",),
    )
    assert asked.reason.startswith("bad failed: ")
    assert (revised.by, revised.subtask) == ("agent orchestrator", "replan-1")
    assert (revised.added, revised.removed) == (("base-0",), ("ship",))
    # The replanner was told the goal, the failure and where the plan stood.
    prompt = next(
        m.content or ""
        for m in await subtask_messages(harness.store, report, "replan-1")
        if m.role == "user"
    )
    assert "Its subtask 'bad' failed" in prompt and "Its error: BadRequest: " in prompt
    assert "- ship: pending, coder, after bad" in prompt
    assert await assert_replays(harness.client, [plan.id]) >= 1


# Last in the file: its round ran in the background while the tests above did.
async def test_a_worker_killed_once_the_revision_is_made_adds_nothing_twice(
    revised_then_killed: asyncio.Task[None],
) -> None:
    await asyncio.wait_for(asyncio.shield(revised_then_killed), timeout=300)
