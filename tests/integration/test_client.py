"""``durable_plans.Client`` on a real dev server, as a service embedding it would use it:
start, watch, report, status, list, cancel, the operator's steps and approvals, every
refusal an error of the one hierarchy. The model is the fake provider through litellm."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from durable_plans import (
    ApprovalWaiting,
    Client,
    InvalidPlan,
    PlanAlreadyRunning,
    PlanEnded,
    PlanEvent,
    PlanNotFound,
    PlanReport,
    PlanStatus,
    Refused,
    SubtaskChanged,
    SubtaskStatus,
    TextStreamed,
)
from durable_plans.cli.replay_command import make_replayer, replay_history
from durable_plans.cli.run_command import status_command
from durable_plans.domain.approval_rules import ApprovalPolicy
from tests.integration.conftest import Harness
from tests.integration.plans import make_plan

pytestmark = pytest.mark.integration

WAIT_S = 60.0  # a bound on waiting for a state, never asserted


@pytest.fixture
def plans(harness: Harness) -> Client:
    return Client(harness.client, harness.settings, operator="alice@test")


async def events_until(
    stream: AsyncIterator[PlanEvent], done: type[PlanEvent] | None = None
) -> list[PlanEvent]:
    """Events until one of type ``done`` (or the stream's end), bounded in time."""
    seen: list[PlanEvent] = []

    async def collect() -> None:
        async for event in stream:
            seen.append(event)
            if done is not None and isinstance(event, done):
                return

    await asyncio.wait_for(collect(), WAIT_S)
    return seen


async def status_until(plans: Client, plan_id: str, sid: str, want: SubtaskStatus) -> PlanReport:
    deadline = time.monotonic() + WAIT_S
    while True:
        report = await plans.status(plan_id)
        if {r.id: r.status for r in report.subtasks}.get(sid) is want:
            return report
        assert time.monotonic() < deadline, f"{sid} never became {want}: {report}"
        await asyncio.sleep(0.1)


async def test_start_watch_report_status_and_list(plans: Client) -> None:
    plan = make_plan(
        [("look", "Look at the workspace", []), ("write", "Summarise it", ["look"])],
        prefix="client",
    )
    plan_id = await plans.start(plan.model_dump(mode="json"))
    assert plan_id == plan.id
    with pytest.raises(PlanAlreadyRunning, match=plan.id):
        await plans.start(plan)

    events = await events_until(plans.watch(plan_id))
    assert isinstance(events[-1], PlanEnded)
    assert sum(isinstance(e, PlanEnded) for e in events) == 1
    report = events[-1].report
    assert report.status is PlanStatus.COMPLETED

    changes = [(e.subtask, e.status) for e in events if isinstance(e, SubtaskChanged)]
    for sid in ("look", "write"):
        assert changes.count((sid, SubtaskStatus.COMPLETED)) == 1, changes
    # Dependency order is what the plan guarantees, so it is what the events show.
    assert changes.index(("look", SubtaskStatus.COMPLETED)) < changes.index(
        ("write", SubtaskStatus.COMPLETED)
    )
    for event in events:
        if isinstance(event, TextStreamed):
            assert event.plan_id == plan_id and event.text

    assert await plans.report(plan_id) == report
    assert (await plans.status(plan_id)).status is PlanStatus.COMPLETED
    deadline = time.monotonic() + WAIT_S
    while not (rows := await plans.list(query=f'WorkflowId = "{plan_id}"')):
        assert time.monotonic() < deadline, "the plan never showed up in the listing"
        await asyncio.sleep(0.1)
    assert [r.plan_id for r in rows] == [plan_id]

    with pytest.raises(Refused, match="is not running"):
        await plans.cancel(plan_id)
    with pytest.raises(Refused, match="is not running"):
        await plans.resume(plan_id, "look")


async def test_what_cannot_be_done_is_refused_with_the_reason(plans: Client) -> None:
    with pytest.raises(PlanNotFound, match="no plan with id 'client-nope'"):
        await plans.status("client-nope")
    with pytest.raises(PlanNotFound, match="client-nope"):
        await plans.report("client-nope")
    with pytest.raises(PlanNotFound, match="client-nope"):
        await anext(aiter(plans.watch("client-nope")))
    with pytest.raises(InvalidPlan) as caught:
        await plans.start(make_plan([("a", "x", ["a"])], prefix="client-bad"))
    assert any("cycle" in p for p in caught.value.problems)
    with pytest.raises(ValueError, match="max_tokens must be zero or more"):
        await plans.raise_budget("client-nope", max_tokens=-5)
    with pytest.raises(ValueError, match=r"SUBTASK:TURN\.INDEX"):
        await plans.approve("client-nope", "no-colon")


async def test_pause_skip_and_retry(plans: Client, capsys: pytest.CaptureFixture[str]) -> None:
    plan = make_plan(
        [
            ("a", "Look at the workspace", []),
            ("bad", "This one breaks [fail:400]", []),
            ("after", "Depends on the broken one", ["bad"]),
        ],
        prefix="client-op",
    ).model_copy(update={"on_failure": "pause"})
    await plans.start(plan)
    await status_until(plans, plan.id, "bad", SubtaskStatus.PAUSED)
    with pytest.raises(Refused, match="not paused"):
        await plans.skip(plan.id, "a")

    said = await plans.skip(plan.id, "bad")
    assert "bad" in said
    report = await plans.report(plan.id)
    assert report.status is PlanStatus.FAILED
    statuses = {r.id: r.status for r in report.subtasks}
    assert statuses == {
        "a": SubtaskStatus.COMPLETED,
        "bad": SubtaskStatus.FAILED,
        "after": SubtaskStatus.SKIPPED,
    }

    rerun = await plans.retry(plan.id)
    assert sorted(rerun) == ["after", "bad"]
    await status_until(plans, plan.id, "bad", SubtaskStatus.PAUSED)
    await plans.cancel(plan.id)
    final = await plans.report(plan.id)
    assert final.status is PlanStatus.CANCELLED
    kept = {r.id: r for r in final.subtasks}["a"]
    assert kept.status is SubtaskStatus.COMPLETED
    # Both runs' decisions, in order, with who took each: the retry carried the first's.
    assert [(e.kind, e.subtask, e.by) for e in final.log] == [
        ("paused", "bad", ""),
        ("skipped", "bad", "alice@test"),
        ("retried", "", "alice@test"),
        ("paused", "bad", ""),
        ("cancelled", "", "alice@test"),
    ]
    assert final.log[2].detail == "runs again: bad, after"
    assert [e.at_s for e in final.log] == sorted(e.at_s for e in final.log)
    # Each run is listed and keeps its own report; dplan status reads either.
    listed_runs = await plans.runs(plan.id)
    assert [(r.number, r.status, r.latest) for r in listed_runs] == [
        (1, "failed", False),
        (2, "cancelled", True),
    ]
    first = await plans.status(plan.id, run=listed_runs[0].run_id)
    assert first.status is PlanStatus.FAILED and first.log == final.log[:2]
    settings = plans.settings
    assert await status_command(plan.id, json_output=False, settings=settings, runs=True) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in listed] == [
        ["run", "1", "failed"],
        ["run", "2", "cancelled"],
    ]
    assert listed[0].split()[-1] == listed_runs[0].run_id and listed[1].endswith("(latest)")
    code = await status_command(
        plan.id, json_output=True, settings=settings, run=listed_runs[0].run_id
    )
    assert code == 1  # the report of a failed run
    assert PlanReport.model_validate_json(capsys.readouterr().out) == first
    assert await status_command(plan.id, json_output=False, settings=settings) == 1
    assert (
        f"runs: 2 (this is the latest; `dplan status {plan.id} --runs`)" in capsys.readouterr().out
    )
    # Both runs (the first and the retry), with their pause, skip and cancel, replay.
    replayer = make_replayer()
    runs = [e async for e in plans.temporal.list_workflows(f'WorkflowId = "{plan.id}"')]
    assert len(runs) == 2
    for run in runs:
        history = await plans.temporal.get_workflow_handle(
            plan.id, run_id=run.run_id
        ).fetch_history()
        result = await replay_history(replayer, history)
        assert result.replay_failure is None, f"run {run.run_id}: {result.replay_failure!r}"


async def test_approvals_through_watch_and_a_late_decision_names_the_winner(
    plans: Client, harness: Harness
) -> None:
    plan = make_plan([("w", "Look at the workspace", [])], prefix="client-approve").model_copy(
        update={"approval": ApprovalPolicy(tools=("list_dir",))}
    )
    await plans.start(plan)
    stream = plans.watch(plan.id)
    before = await events_until(stream, ApprovalWaiting)
    waiting = before[-1]
    assert isinstance(waiting, ApprovalWaiting)
    assert (waiting.call.call, waiting.call.tool) == ("w:0.0", "list_dir")
    assert [c.call for c in await plans.approvals(plan.id)] == ["w:0.0"]
    assert "w:0.0" in [c.call for c in await plans.approvals() if c.plan == plan.id]

    decision = await plans.approve(plan.id, "w:0.0")
    assert decision.approved and decision.who == "alice@test"
    after = await events_until(stream)
    assert isinstance(after[-1], PlanEnded)
    assert after[-1].report.status is PlanStatus.COMPLETED
    assert not any(isinstance(e, ApprovalWaiting) for e in after)

    late = Client(harness.client, harness.settings, operator="bob@test")
    with pytest.raises(Refused, match=r"already approved by alice@test at "):
        await late.reject(plan.id, "w:0.0", reason="too late")
