"""Rate limits waited out, on a real dev server: two `dplan-worker` processes against a
provider that allows 2 requests a second (and refuses the rest with 429 and Retry-After)
complete every subtask, and the report shows the time waited (issue 30, item 1).

What is asserted is what the design guarantees, never timing. Every worker is allowed two
attempts per LLM call (``DPLAN_LLM_MAX_ATTEMPTS=2``), and two subtasks' first two requests
are refused whatever the load (``[flaky:429x2:retry-after=2]``): were refusals counted as
attempts, those subtasks would fail. Each of those calls asked for two waits of 2 s
before it was answered, so its subtask reports at least 4 s of ``rate_limited_s``; the
provider's own limit refuses more on top, as many as the machine's speed makes it.

Once with the LLM calls as local activities (the default) and no shared limits, once as
regular activities with ``DPLAN_RATE_LIMITS`` pacing the workers at twice the provider's
real limit (so they still meet its 429s).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from durable_plans.domain.ids import subtask_workflow_id
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, Subtask
from durable_plans.testing import FakeProvider, refused_count
from tests.integration.chaos_support import bounded, in_background, selected_params
from tests.integration.conftest import TimeSkipping, provider_settings, running_worker
from tests.integration.plans import by_id, make_plan, run_plan
from tests.integration.workers import WorkerProcess, new_workspace, worker_env

PROVIDER_RPS = 2.0  # the provider's limit (and its burst: a second's worth)
SUBTASKS = 8  # two LLM calls each
REFUSED_TWICE = ("s0", "s1")  # their first two requests are refused, 2 s each
REFUSAL = "[flaky:429x2:retry-after=2]"


def rate_limited_plan() -> Plan:
    return Plan(
        id=f"patience-{uuid.uuid4().hex[:10]}",
        goal="rate limits waited out",
        max_parallel=SUBTASKS,
        subtasks=tuple(
            Subtask(
                id=f"s{k}",
                description=f"Step {k}: look around and report."
                + (f" {REFUSAL}" if f"s{k}" in REFUSED_TWICE else ""),
            )
            for k in range(SUBTASKS)
        ),
    )


# Each run mostly waits (on its workers' start, on the provider's limit and Retry-After),
# so the module's runs go on side by side in the background from the first test of them;
# each run's test awaits it and checks its result. A run has its own provider, task queue,
# store and worker processes, as it had when the runs were one after the other.
RUN_BOUND_S = 240.0  # a bound on a run, never a timing claim: below pytest's timeout


@dataclass
class Run:
    report: PlanReport
    failure: ApplicationError | None
    provider: FakeProvider


def start_ready(workers: list[WorkerProcess]) -> list[WorkerProcess]:
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.wait_ready()
    return workers


def stop_all(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        worker.stop()


async def two_workers_run(
    client: Client, tmp: Path, local: bool, shared_rpm: int | None, processes: asyncio.Lock
) -> Run:
    """The plan, run by two worker processes against a provider of its own. The workers
    start, wait ready and stop in a thread (they block), one run's at a time (``processes``:
    this process's worker processes are managed by one thread at a time)."""
    async with FakeProvider(requests_per_s=PROVIDER_RPS) as provider:
        queue = f"patience-{uuid.uuid4().hex[:8]}"
        new_workspace(tmp, "# demo\n")
        env = worker_env(client, tmp, provider, queue)
        env["DPLAN_LLM_MAX_ATTEMPTS"] = "2"
        env["DPLAN_LLM_LOCAL"] = "1" if local else "0"
        if shared_rpm is not None:
            env["DPLAN_RATE_LIMITS"] = f"openai/fake-model=rpm:{shared_rpm}"
        workers = [WorkerProcess(env, tmp / f"worker{i}.log") for i in range(2)]
        try:
            async with processes:
                await asyncio.to_thread(start_ready, workers)
            report, failure = await run_plan(client, rate_limited_plan(), queue)
        finally:
            async with processes:
                await asyncio.to_thread(stop_all, workers)
    return Run(report, failure, provider)


@pytest.fixture(scope="module")
async def runs(
    request: pytest.FixtureRequest,
    temporal_env: WorkflowEnvironment,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[dict[tuple[bool, int | None], asyncio.Task[Run]]]:
    """The selected runs of ``test_two_workers_wait_out_a_rate_limited_provider``, running
    in the background, by (local, shared_rpm); the regular activities' run, the longer,
    first (only the module's wall time depends on the order)."""
    test = "test_two_workers_wait_out_"
    selected = list(
        zip(
            selected_params(request, __file__, test, "local"),
            selected_params(request, __file__, test, "shared_rpm"),
            strict=True,
        )
    )
    processes = asyncio.Lock()
    tasks: dict[tuple[bool, int | None], asyncio.Task[Run]] = {}
    for local, shared_rpm in sorted(selected, key=lambda p: p[0]):
        tmp = tmp_path_factory.mktemp(f"patience-{local}-{shared_rpm}")
        run = two_workers_run(temporal_env.client, tmp, local, shared_rpm, processes)
        tasks[local, shared_rpm] = asyncio.create_task(run, name=f"patience-{local}")
    async with in_background(tasks):
        yield tasks


@pytest.mark.parametrize(
    ("local", "shared_rpm"),
    [pytest.param(True, None, id="local-unpaced"), pytest.param(False, 240, id="regular-paced")],
)
async def test_two_workers_wait_out_a_rate_limited_provider(
    runs: dict[tuple[bool, int | None], asyncio.Task[Run]], local: bool, shared_rpm: int | None
) -> None:
    run = await bounded(asyncio.shield(runs[local, shared_rpm]), RUN_BOUND_S, "the plan run")
    report, failure, provider = run.report, run.failure, run.provider
    rows = by_id(report)
    refusals = [r for r in provider.requests if r.status == 429]
    print(
        f"requests {len(provider.requests)}, 429s {len(refusals)} "
        f"(over the limit {refused_count(provider.requests)}), "
        f"rate_limited_s {report.usage.rate_limited_s} "
        f"({', '.join(f'{sid} {row.usage.rate_limited_s}' for sid, row in rows.items())})"
    )
    assert failure is None and report.status is PlanStatus.COMPLETED, [
        (r.id, r.error) for r in report.subtasks if r.error
    ]
    assert report.counts.completed == SUBTASKS
    assert len([r for r in provider.requests if r.kind == "completion"]) == 2 * SUBTASKS
    assert len(refusals) >= 2 * len(REFUSED_TWICE)
    for sid in REFUSED_TWICE:
        assert rows[sid].usage.rate_limited_s >= 4.0
    assert report.usage.rate_limited_s >= 4.0 * len(REFUSED_TWICE)
    assert report.usage.rate_limited_s == round(
        sum(row.usage.rate_limited_s for row in report.subtasks), 3
    )


# --------------------------------------------------------------------------- long waits


async def test_a_local_call_waits_out_a_retry_after_longer_than_the_local_retry_threshold(
    time_skipping: TimeSkipping, tmp_path: Path
) -> None:
    """A local activity's wait past the SDK's ``local_retry_threshold`` (a minute) is a
    timer in the subtask's workflow, and the attempt after it is the same call: its
    first schedule time is kept, so the report counts the 90 s asked for. On the
    time-skipping server: the 90 s cost no wall time."""
    client = await time_skipping.client()
    async with FakeProvider(latency_ms=0) as provider:
        settings = provider_settings(client, provider, tmp_path, llm_local=True)
        plan = make_plan([("slow", "Look around [flaky:429x1:retry-after=90]", [])])
        async with running_worker(client, settings):
            report, failure = await run_plan(client, plan, settings.task_queue)
        assert failure is None and report.status is PlanStatus.COMPLETED
        assert by_id(report)["slow"].usage.rate_limited_s == 90.0
        assert report.usage.rate_limited_s == 90.0
        assert [r.status for r in provider.requests][:2] == [429, 200]
        history = await client.get_workflow_handle(
            subtask_workflow_id(plan.id, "slow")
        ).fetch_history()
    timers = [e for e in history.events if e.HasField("timer_started_event_attributes")]
    assert [
        t.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta() for t in timers
    ] == [timedelta(seconds=90)]
    assert not any(e.HasField("activity_task_scheduled_event_attributes") for e in history.events)


async def test_a_call_refused_past_its_patience_fails_its_subtask_in_one_sentence(
    time_skipping: TimeSkipping, tmp_path: Path
) -> None:
    client = await time_skipping.client()
    async with FakeProvider(latency_ms=0) as provider:
        settings = provider_settings(
            client, provider, tmp_path, llm_local=True, rate_limit_patience_s=200.0
        )
        plan = make_plan([("refused", "Look around [fail:429:retry-after=90]", [])])
        async with running_worker(client, settings):
            report, failure = await run_plan(client, plan, settings.task_queue)
    assert failure is not None and report.status is PlanStatus.FAILED
    error = by_id(report)["refused"].error
    assert error is not None and error.type == "RateLimit"
    # Refused before waits of 0, 90 and 180 s: retried; before 270 s, past 200: given up.
    assert error.message == (
        "rate limited for 4m 30s by the provider (4 refusals); "
        "gave up after DPLAN_RATE_LIMIT_PATIENCE=3m 20s"
    )
    assert [r.status for r in provider.requests] == [429] * 4
