"""Pause instead of fail: a plan held on a failed subtask until an operator decides.

``on_failure: "pause"`` keeps the plan Running with the subtask paused (status, search
attributes, memo and ``dplan list`` say so and why) while independent subtasks carry on;
``dplan resume`` runs it again on a fresh branch, ``dplan skip`` fails it for good,
``dplan budget`` raises the budget and resumes what paused on it, ``pause_timeout_s``
fails it when nobody decides. The SIGKILL case runs its worker as a real process.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from durable_plans.cli.list_command import list_command
from durable_plans.cli.operate_command import budget_command, edit_command, subtask_command
from durable_plans.client import Client as PlansClient
from durable_plans.client._plans import plan_status
from durable_plans.client._visibility import list_plans
from durable_plans.domain import search_attributes as sa
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Budget, Plan, PlanReport, PlanStatus, SubtaskStatus
from durable_plans.domain.operations import CARRIED_STATE_QUERY
from durable_plans.testing import FakeProvider
from tests.integration.chaos_support import DevServer
from tests.integration.conftest import provider_settings, running_worker
from tests.integration.plans import by_id, make_plan
from tests.integration.step_in_support import NEEDS_KEY, KeyGate, Rig, gated_rig
from tests.integration.workers import WorkerProcess, forget_sticky_worker, worker_env

pytestmark = pytest.mark.integration

TURNS = 2
PLAN = [
    ("a", "task-a Inspect the repository", []),
    ("c", f"task-c Call the weather API {NEEDS_KEY}", ["a"]),
    ("d", "task-d Render the forecast", ["c"]),
    ("e", "task-e Write the changelog", ["a"]),
]


def pausing(plan: Plan, **fields: Any) -> Plan:
    return plan.model_copy(update={"on_failure": "pause", **fields})


@pytest.fixture
async def gate_provider() -> AsyncIterator[tuple[KeyGate, FakeProvider]]:
    gate = KeyGate()
    async with FakeProvider(gate, latency_ms=0) as provider:
        yield gate, provider


@pytest.fixture
async def rig(client: Client, tmp_path: Path) -> AsyncIterator[Rig]:
    async with gated_rig(client, tmp_path, "pause") as rig:
        yield rig


async def until(
    handle: WorkflowHandle[Any, PlanReport], check: Callable[[PlanReport], bool]
) -> PlanReport:
    """The first status report ``check`` accepts (the test's own timeout bounds it)."""
    while True:
        report: PlanReport | None = None
        # No worker may be answering right now (between a kill and the next start).
        with contextlib.suppress(Exception):
            report = await handle.query("status", result_type=PlanReport)
        if report is not None and check(report):
            return report
        await asyncio.sleep(0.1)


async def paused_in_temporal(client: Client, plan_id: str) -> Mapping[str, Any]:
    """The plan's memo, once its search attributes and memo say it is paused."""
    while True:
        described = await client.get_workflow_handle(plan_id).describe()
        memo = await described.memo()
        if described.typed_search_attributes.get(sa.STATUS) == "paused" and memo.get(
            sa.PAUSED_MEMO
        ):
            return memo
        await asyncio.sleep(0.1)


async def listed_as_paused(client: Client, plan_id: str) -> bool:
    rows, _ = await list_plans(client, status="paused")
    return any(r.plan_id == plan_id for r in rows)


def paused_on(sid: str, *others_completed: str) -> Callable[[PlanReport], bool]:
    def check(report: PlanReport) -> bool:
        rows = by_id(report)
        return rows[sid].status is SubtaskStatus.PAUSED and all(
            rows[o].status is SubtaskStatus.COMPLETED for o in others_completed
        )

    return check


async def test_pause_survives_sigkill_and_continue_as_new_then_resume_completes(
    temporal_env: WorkflowEnvironment,
    client: Client,
    gate_provider: tuple[KeyGate, FakeProvider],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gate, provider = gate_provider
    settings = provider_settings(client, provider, tmp_path, prefix="pause-kill")
    env = worker_env(settings.temporal_address, tmp_path, provider, settings.task_queue)
    plan = pausing(make_plan(PLAN, prefix="pause-kill"))
    first = WorkerProcess(env, tmp_path / "worker-1.log").start()
    second: WorkerProcess | None = None
    try:
        first.wait_ready()
        rig = Rig(client, settings, gate)
        # One completion per run: the plan continues as new around the pause.
        handle = await rig.start(plan, max_completions_per_run=1)
        report = await until(handle, paused_on("c", "a", "e"))
        assert report.status is PlanStatus.PAUSED
        rows = by_id(report)
        assert rows["c"].error is not None and rows["c"].error.type == "Authentication"
        assert rows["d"].status is SubtaskStatus.PENDING  # waits; not skipped

        # Temporal says so too: search attribute and memo (why). The query may answer from
        # the workflow task that paused c before that task's commands are recorded, so
        # this waits for them.
        memo = await paused_in_temporal(client, plan.id)
        assert "Authentication" in memo[sa.PAUSED_MEMO]["c"]
        # Visibility is eventually consistent (and the plan continues as new around the
        # pause, so the listed run changes under the test): wait until the list has
        # caught up with the reason. Were the reason never listed, the test times out.
        while True:
            if await listed_as_paused(client, plan.id):
                listing = list_command(
                    status="paused", query=None, json_output=False, limit=50, settings=settings
                )
                assert await listing == 0
                if f"{plan.id}: c paused — Authentication" in capsys.readouterr().out:
                    break
            await asyncio.sleep(0.1)

        first.kill()
        gate.fix()
        # The workflows' next tasks go to the task queue, not to the dead worker's sticky
        # queue (where a query waits out the SDK's 10 s first).
        await forget_sticky_worker(client, settings.task_queue)
        second = WorkerProcess(env, tmp_path / "worker-2.log").start()
        # Still paused after the kill (the state is the workflow's, not the worker's). Only
        # the second worker can answer; the query is asked while it starts.
        after_kill = asyncio.ensure_future(until(handle, paused_on("c")))
        try:
            await asyncio.to_thread(second.wait_ready)
            report = await after_kill
        finally:
            after_kill.cancel()
        assert by_id(report)["c"].status is SubtaskStatus.PAUSED

        before = gate.count("task-a", "task-c", "task-d", "task-e")
        assert await subtask_command("resume", plan.id, "c", settings=settings) == 0
        assert "resumed" in capsys.readouterr().out
        final = await handle.result()
        after = gate.count("task-a", "task-c", "task-d", "task-e")
        assert final.status is PlanStatus.COMPLETED
        rows = by_id(final)
        assert rows["c"].retries == 1 and rows["c"].llm_calls == 1 + TURNS
        # The log came through the kill and every continue-as-new: the pause, who resumed.
        assert [(e.kind, e.subtask) for e in final.log] == [("paused", "c"), ("resumed", "c")]
        assert final.log[0].detail.startswith("Authentication: ") and final.log[1].by
        assert {k: after[k] - before[k] for k in after} == {
            "task-a": 0,
            "task-c": TURNS,
            "task-d": TURNS,
            "task-e": 0,
        }
        # Continued as new at least once while it ran (one completion per run).
        runs = [
            e
            async for e in client.get_workflow_handle(
                plan.id, run_id=handle.first_execution_run_id
            ).fetch_history_events()
        ]
        assert runs[-1].HasField("workflow_execution_continued_as_new_event_attributes")
        described = await client.get_workflow_handle(plan.id).describe()
        assert described.typed_search_attributes.get(sa.STATUS) == "completed"
        assert sa.PAUSED_MEMO not in await described.memo()
    finally:
        first.stop()
        if second is not None:
            second.stop()


async def test_operator_requests_are_validated(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = pausing(make_plan(PLAN, prefix="pause-check"))
    handle = await rig.start(plan)
    await until(handle, paused_on("c", "a", "e"))

    async def refused(*call: Any) -> str:
        action, subtask = call
        assert await subtask_command(action, plan.id, subtask, settings=rig.settings) == 1
        return capsys.readouterr().err

    assert "has no subtask 'zz'" in await refused("resume", "zz")
    assert "subtask 'a' of plan" in await refused("skip", "a")
    assert "is not paused (it is completed)" in await refused("resume", "a")
    code = await budget_command(plan.id, max_tokens=None, max_cost_usd=None, settings=rig.settings)
    assert code == 2 and "name a new limit" in capsys.readouterr().err

    # Skip: failed for good, its dependent skipped, the plan fails.
    assert (
        await subtask_command("skip", plan.id, "c", operator="ops@test", settings=rig.settings) == 0
    )
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    report = await plan_status(rig.client, plan.id)
    rows = by_id(report)
    assert rows["c"].status is SubtaskStatus.FAILED
    assert rows["c"].error is not None and "skipped by ops@test" in rows["c"].error.message
    assert rows["d"].status is SubtaskStatus.SKIPPED
    assert report.counts.completed == 2
    # Refused requests leave no trace in the log; the pause and the skip do.
    assert [(e.kind, e.subtask, e.by) for e in report.log] == [
        ("paused", "c", ""),
        ("skipped", "c", "ops@test"),
    ]
    # A finished plan takes no more decisions.
    assert "is not running" in await refused("resume", "c")


async def test_a_paused_subtask_is_edited_and_runs_again_while_the_plan_goes_on(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    """``dplan edit``: what cannot be right is refused, nothing changed; an edit that
    drops the failing part runs the subtask again, its dependent after it, and the edit
    travels with the plan (one completion per run: it continues as new around it)."""
    plan = pausing(make_plan(PLAN, prefix="pause-edit"))
    handle = await rig.start(plan, max_completions_per_run=1)
    await until(handle, paused_on("c", "a", "e"))

    async def edit(*words: str, subtask: str = "c") -> tuple[int, str]:
        code = await edit_command(
            plan.id, subtask, list(words), operator="ops@test", settings=rig.settings
        )
        said = capsys.readouterr()
        return code, said.out + said.err

    code, said = await edit()
    assert code == 2 and "name a change" in said
    code, said = await edit("colour=red")
    assert code == 2 and "colour" in said
    code, said = await edit("agent=nobody")
    assert code == 1 and "unknown agent 'nobody'" in said, said
    code, said = await edit("description=Again", subtask="a")
    assert code == 1 and "is not paused (it is completed)" in said, said
    assert by_id(await plan_status(rig.client, plan.id))["c"].status is SubtaskStatus.PAUSED

    fixed = "task-c Call the weather API from its cache"
    code, said = await edit(f"description={fixed}")
    assert code == 0 and "subtask 'c' changed (description) and resumed" in said, said
    final = await handle.result()
    assert final.status is PlanStatus.COMPLETED
    rows = by_id(final)
    assert rows["c"].retries == 1 and rows["d"].status is SubtaskStatus.COMPLETED
    assert [(e.kind, e.subtask, e.by, e.detail) for e in final.log] == [
        ("paused", "c", "", final.log[0].detail),
        ("edited", "c", "ops@test", "changed description; resumed"),
    ]
    # The plan as it ended holds the edit (what a retry would start from).
    carried = await handle.query(CARRIED_STATE_QUERY, result_type=PlanInput)
    assert {s.id: s.description for s in carried.plan.subtasks}["c"] == fixed
    plans = PlansClient(rig.client, rig.settings)
    current = await plans.current_subtask(plan.id, "c")
    assert current is not None and current.description == fixed
    assert await plans.current_subtask(plan.id, "zz") is None


async def test_budget_pause_then_raise_completes(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    # One token: the first call is allowed (nothing spent yet), the second is refused.
    plan = pausing(
        make_plan([("a", "task-a Inspect the repository", [])], prefix="pause-budget"),
        budget=Budget(max_tokens=1),
    )
    handle = await rig.start(plan)
    report = await until(handle, paused_on("a"))
    error = by_id(report)["a"].error
    assert error is not None and error.type == "BudgetExceeded"

    # A limit the plan has already spent cannot help: refused, and nothing resumes.
    spent = report.usage.total_tokens
    assert spent > 1
    code = await budget_command(plan.id, max_tokens=spent, max_cost_usd=None, settings=rig.settings)
    err = capsys.readouterr().err
    assert code == 1 and f"is not above the {spent:,} tokens the plan has spent" in err, err
    assert by_id(await plan_status(rig.client, plan.id))["a"].status is SubtaskStatus.PAUSED

    code = await budget_command(
        plan.id, max_tokens=1_000_000, max_cost_usd=None, settings=rig.settings
    )
    assert code == 0
    assert "resumed: a" in capsys.readouterr().out
    final = await handle.result()
    assert final.status is PlanStatus.COMPLETED
    assert by_id(final)["a"].retries == 1
    assert [(e.kind, e.detail) for e in final.log] == [
        ("paused", f"BudgetExceeded: {error.message}"),
        ("budget", "max_tokens 1,000,000; resumed a"),
    ]
    # One answer before the refusal, then the fresh attempt's two.
    assert rig.gate.count("task-a") == {"task-a": 1 + TURNS}


async def test_cancelling_a_paused_plan_cancels_the_paused_subtask_saying_why(rig: Rig) -> None:
    plan = pausing(make_plan(PLAN, prefix="pause-cancel"))
    handle = await rig.start(plan)
    await until(handle, paused_on("c", "a", "e"))
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    # The closed plan's own state (the query replays it on the worker).
    report = await handle.query("status", result_type=PlanReport)
    rows = by_id(report)
    assert report.status is PlanStatus.CANCELLED
    assert rows["c"].status is SubtaskStatus.CANCELLED and rows["c"].error is not None
    assert rows["c"].error.message.startswith(
        "the plan was cancelled while this subtask was paused (Authentication: "
    ), rows["c"].error.message
    assert rows["d"].status is SubtaskStatus.CANCELLED  # waited on c, never started
    assert rows["a"].status is rows["e"].status is SubtaskStatus.COMPLETED
    described = await rig.client.get_workflow_handle(plan.id).describe()
    assert described.typed_search_attributes.get(sa.STATUS) == "cancelled"
    assert sa.PAUSED_MEMO not in await described.memo()
    # A cancel request from outside dplan (no reason given) is logged as such.
    assert [(e.kind, e.by, e.detail) for e in report.log][1:] == [
        ("cancelled", "", "a cancel request without a reason")
    ]


@pytest.mark.parametrize("per_run", [None, 1], ids=["one-run", "continued-as-new"])
async def test_pause_timeout_fails_the_subtask(rig: Rig, per_run: int | None) -> None:
    """With one completion per run the plan continues as new around the pause, most
    likely carrying it, and its timer, into a later run (unless the timer fires before e
    completes)."""
    plan = pausing(make_plan(PLAN, prefix="pause-timeout"), pause_timeout_s=2.0)
    handle = await rig.start(plan, max_completions_per_run=per_run)
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    report = await plan_status(rig.client, plan.id)
    rows = by_id(report)
    assert rows["c"].status is SubtaskStatus.FAILED
    assert rows["c"].error is not None and "pause_timeout_s=2" in rows["c"].error.message
    assert rows["d"].status is SubtaskStatus.SKIPPED
    assert rows["e"].status is SubtaskStatus.COMPLETED
    assert [(e.kind, e.subtask, e.by) for e in report.log] == [
        ("paused", "c", ""),
        ("timed_out", "c", "timeout"),
    ]


async def test_paused_plan_survives_a_server_restart(
    gate_provider: tuple[KeyGate, FakeProvider], tmp_path: Path
) -> None:
    """The dev server SIGKILLed and restarted on its database while the plan is paused:
    a worker on the restarted server still finds it paused, and resume completes it."""
    gate, provider = gate_provider
    server = DevServer(tmp_path / "temporal.db", tmp_path / "temporal.log").start()
    try:
        client = await server.wait_ready()
        settings = provider_settings(client, provider, tmp_path, prefix="pause-srv")
        plan = pausing(make_plan(PLAN, prefix="pause-srv"))
        async with running_worker(client, settings):
            handle = await Rig(client, settings, gate).start(plan)
            await until(handle, paused_on("c", "a", "e"))
        server.signal(signal.SIGKILL)
        server.start()
        client = await server.wait_ready()
        gate.fix()
        async with running_worker(client, settings):
            handle = client.get_workflow_handle(plan.id, result_type=PlanReport)
            assert by_id(await until(handle, paused_on("c")))["d"].status is SubtaskStatus.PENDING
            assert await subtask_command("resume", plan.id, "c", settings=settings) == 0
            final = await handle.result()
        assert final.status is PlanStatus.COMPLETED
        assert gate.count("task-a") == {"task-a": TURNS}  # a was not asked again
    finally:
        server.stop()
