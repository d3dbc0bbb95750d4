"""The embedded dev server and the client helpers, against a real ``temporal`` binary.

A stand-in ``PlanWorkflow`` (same type name, same query and failure contract as the real
one) lets the client-side translation of every ending into a report be tested without
depending on the real workflow's behaviour, which has its own tests.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

# The sandbox re-imports this module to validate the stand-in workflow; everything
# but the workflow itself is passed through (rich, pulled in below, is not sandbox-safe).
with workflow.unsafe.imports_passed_through():
    from rich.console import Console

    from durable_plans import InvalidPlan, PlanAlreadyRunning, PlanNotFound, TemporalUnreachable
    from durable_plans._errors import EmbeddedServerError, WorkerDied
    from durable_plans.cli.progress import follow_progress, render_report
    from durable_plans.client._plans import (
        plan_status,
        query_status,
        start_plan,
        wait_for_report,
        worker_count,
    )
    from durable_plans.dev_server import DYNAMIC_CONFIG
    from durable_plans.domain.contracts import PlanInput
    from durable_plans.domain.models import (
        ErrorInfo,
        Plan,
        PlanReport,
        PlanStatus,
        Subtask,
        SubtaskResult,
        SubtaskStatus,
        Usage,
    )
    from durable_plans.embedded import (
        EmbeddedTemporal,
        free_port,
        is_reachable,
        run_in_process_worker,
        temporal_binary,
    )
    from durable_plans.session_store import SessionStore
    from durable_plans.session_store.factory import open_session_store
    from durable_plans.settings import Settings
    from durable_plans.temporal_client import connect, web_url
    from durable_plans.worker import run_worker

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

# How long a poll for something that surely happens may take: a bound for failing, not a
# speed expectation (a loaded machine may take seconds to import litellm or start a task).
POLL_LIMIT_S = 60.0


# --------------------------------------------------------------------------- stand-ins


@activity.defn(name="finish_subtask")
async def finish_subtask(subtask_id: str) -> SubtaskResult:
    return SubtaskResult(
        id=subtask_id,
        status=SubtaskStatus.COMPLETED,
        agent="coder",
        result=f"{subtask_id} done",
        llm_calls=1,
        usage=Usage(prompt_tokens=3, completion_tokens=2),
    )


@workflow.defn(name="PlanWorkflow")
class StandInPlanWorkflow:
    """Behaviour chosen by the goal: "ok", "fail", "invalid" or "hang"."""

    def __init__(self) -> None:
        self._results: list[SubtaskResult] = []
        self._plan_id = ""

    @workflow.run
    async def run(self, inp: PlanInput) -> PlanReport:
        plan = inp.plan
        self._plan_id = plan.id
        self._results = [
            SubtaskResult(id=s.id, status=SubtaskStatus.PENDING, agent=s.agent)
            for s in plan.subtasks
        ]
        if plan.goal == "invalid":
            raise ApplicationError("cycle: a → a", type="InvalidPlan", non_retryable=True)
        first = await workflow.execute_activity(
            finish_subtask, plan.subtasks[0].id, start_to_close_timeout=timedelta(seconds=10)
        )
        self._results[0] = first
        if plan.goal == "hang":
            self._results[1] = self._results[1].model_copy(update={"status": SubtaskStatus.RUNNING})
            await workflow.wait_condition(lambda: False)
        if plan.goal == "fail":
            self._results[1] = SubtaskResult(
                id=plan.subtasks[1].id,
                status=SubtaskStatus.FAILED,
                agent="coder",
                error=ErrorInfo(type="BadRequest", message="tool_call_id reused"),
            )
            raise ApplicationError(
                "1 subtask failed",
                self.status(),
                type="PlanFailed",
                non_retryable=True,
            )
        self._results[1] = await workflow.execute_activity(
            finish_subtask, plan.subtasks[1].id, start_to_close_timeout=timedelta(seconds=10)
        )
        return self.status()

    @workflow.query
    def status(self) -> PlanReport:
        return PlanReport.build(self._plan_id, self._results)


def _plan(goal: str) -> Plan:
    return Plan(
        id=f"{goal}-{uuid.uuid4().hex[:8]}",
        goal=goal,
        subtasks=(Subtask(id="a", description="first"), Subtask(id="b", description="second")),
    )


# --------------------------------------------------------------------------- fixtures


def _settings(tmp: Path, port: int) -> Settings:
    return Settings(
        temporal_address=f"127.0.0.1:{port}",
        task_queue=f"tq-{uuid.uuid4().hex[:8]}",
        state_dir=tmp / "state",
        session_store=str(tmp / "state" / "sessions.db"),
    )


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("embedded")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(module_tmp: Path) -> AsyncIterator[EmbeddedTemporal]:
    settings = _settings(module_tmp, free_port())
    async with EmbeddedTemporal(settings, preferred_ui_port=free_port()) as embedded:
        yield embedded


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def store(module_tmp: Path) -> AsyncIterator[SessionStore]:
    opened = await open_session_store(str(module_tmp / "state" / "sessions.db"))
    yield opened
    await opened.close()


@pytest.fixture
def settings(server: EmbeddedTemporal, module_tmp: Path) -> Settings:
    return _settings(module_tmp, 0).with_overrides(temporal_address=server.address)


@pytest_asyncio.fixture(loop_scope="module")
async def client(settings: Settings) -> Client:
    return await connect(settings)


@pytest_asyncio.fixture(loop_scope="module")
async def worker(client: Client, settings: Settings, store: SessionStore) -> AsyncIterator[None]:
    async with run_in_process_worker(
        client,
        settings,
        store,
        workflows=[StandInPlanWorkflow],
        activities=[finish_subtask],
    ):
        yield


# --------------------------------------------------------------------------- server


async def test_started_server_uses_free_target_port_state_dir_and_ui(
    server: EmbeddedTemporal, module_tmp: Path
) -> None:
    assert server.started
    assert server.db_path == module_tmp / "state" / "temporal.db"
    assert server.db_path.exists()
    assert server.ui_url is not None and server.ui_url.startswith("http://localhost:")
    assert await is_reachable(server.ui_url.removeprefix("http://"))


def test_the_started_server_runs_with_the_dev_server_dynamic_config(
    server: EmbeddedTemporal,
) -> None:
    """Its one history shard must not pace every step (durable_plans/dev_server.py)."""
    assert server.pid is not None
    argv = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode().split("\0")
    pairs = list(itertools.pairwise(argv))
    for key, value in DYNAMIC_CONFIG.items():
        assert ("--dynamic-config-value", f"{key}={value}") in pairs, (key, argv)


async def test_completed_plan_round_trip_through_built_worker(
    client: Client, settings: Settings, worker: None
) -> None:
    plan = _plan("ok")
    report = await wait_for_report(await start_plan(client, plan, settings))

    assert isinstance(report, PlanReport)  # pydantic converter, not a dict
    assert report.status is PlanStatus.COMPLETED
    assert [s.result for s in report.subtasks] == ["a done", "b done"]
    assert report.usage.total_tokens == 10
    desc = await client.get_workflow_handle(plan.id).describe()
    assert desc.memo is not None
    assert await desc.memo_value("goal") == "ok"
    assert await desc.memo_value("subtask_count") == 2


async def test_progress_follows_live_status_in_plain_lines_then_renders_report(
    client: Client, settings: Settings, worker: None
) -> None:
    plan = _plan("ok")
    handle = await start_plan(client, plan, settings)
    buffer = io.StringIO()
    console = Console(file=buffer, width=100)  # not a terminal: plain lines, no ANSI
    url = web_url("http://localhost:8233", "default", plan.id)

    last = await follow_progress(
        lambda: query_status(handle), plan=plan, web_url=url, console=console, interval_s=0.05
    )

    assert last is not None and last.status is PlanStatus.COMPLETED
    text = buffer.getvalue()
    assert "\x1b" not in text
    assert f"following plan {plan.id}" in text
    assert "✓ a (coder) completed" in text
    assert "✓ b (coder) completed · 2/2 done · 2 completed — b done" in text
    summary = render_report(await wait_for_report(handle), web_url=url)
    assert "COMPLETED" in summary and "completed 2 · failed 0" in summary
    assert f"http://localhost:8233/namespaces/default/workflows/{plan.id}" in summary


async def test_progress_shows_the_final_report_even_when_polls_lag_behind(
    client: Client, settings: Settings, worker: None
) -> None:
    plan = _plan("ok")
    handle = await start_plan(client, plan, settings)
    stale = PlanReport.build(
        plan.id,
        [
            SubtaskResult(id=s.id, status=SubtaskStatus.RUNNING, agent="coder")
            for s in plan.subtasks
        ],
    )

    async def lagging_status() -> PlanReport:
        return stale  # a status that never catches up with the end

    buffer = io.StringIO()
    done = asyncio.ensure_future(wait_for_report(handle))
    last = await follow_progress(
        lagging_status, plan=plan, console=Console(file=buffer), interval_s=0.05, until=done
    )

    assert last == await done
    assert "✓ b (coder) completed · 2/2 done" in buffer.getvalue()


async def test_failed_plan_returns_report_from_failure_details(
    client: Client, settings: Settings, worker: None
) -> None:
    plan = _plan("fail")
    report = await wait_for_report(await start_plan(client, plan, settings))

    assert report.status is PlanStatus.FAILED
    assert report.counts.failed == 1
    assert report.subtasks[1].error == ErrorInfo(type="BadRequest", message="tool_call_id reused")
    # a finished plan's status is read from its outcome
    assert await plan_status(client, plan.id) == report


async def test_invalid_plan_raises_clear_error(
    client: Client, settings: Settings, worker: None
) -> None:
    with pytest.raises(InvalidPlan, match="cycle: a → a"):
        await wait_for_report(await start_plan(client, _plan("invalid"), settings))


async def test_running_plan_conflict_status_and_cancel(
    client: Client, settings: Settings, worker: None
) -> None:
    plan = _plan("hang")
    handle = await start_plan(client, plan, settings)
    deadline = time.monotonic() + POLL_LIMIT_S
    while True:
        live = await plan_status(client, plan.id)
        if live.subtasks[1].status is SubtaskStatus.RUNNING or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert live.status is PlanStatus.RUNNING
    assert [s.status for s in live.subtasks] == [SubtaskStatus.COMPLETED, SubtaskStatus.RUNNING]

    with pytest.raises(PlanAlreadyRunning, match=f"plan '{plan.id}' is already running"):
        await start_plan(client, plan, settings)

    await handle.cancel()
    report = await wait_for_report(handle)
    assert report.status is PlanStatus.CANCELLED
    assert [s.status for s in report.subtasks] == [
        SubtaskStatus.COMPLETED,
        SubtaskStatus.CANCELLED,
    ]


async def test_worker_count_sees_polling_workers_only(
    client: Client, settings: Settings, worker: None
) -> None:
    assert await worker_count(client, f"idle-{uuid.uuid4().hex}") == 0
    deadline = time.monotonic() + POLL_LIMIT_S
    while time.monotonic() < deadline:  # the server learns of a poller at its first poll
        if await worker_count(client, settings.task_queue) >= 1:
            break
        await asyncio.sleep(0.05)
    assert await worker_count(client, settings.task_queue) == 1


async def test_unknown_plan_id_is_a_clear_error(client: Client) -> None:
    with pytest.raises(PlanNotFound, match="no plan with id 'nope-"):
        await plan_status(client, f"nope-{uuid.uuid4().hex}")


async def test_second_embedded_reuses_running_server(
    server: EmbeddedTemporal, settings: Settings
) -> None:
    async with EmbeddedTemporal(settings) as again:
        assert not again.started
        assert again.pid is None
        assert again.address == server.address
    assert await is_reachable(server.address)  # the inner exit stopped nothing


async def test_worker_death_is_reported_not_awaited_forever(
    client: Client, settings: Settings, store: SessionStore
) -> None:
    async with run_in_process_worker(
        client, settings, store, workflows=[StandInPlanWorkflow], activities=[finish_subtask]
    ) as running:
        running.task.cancel()  # a worker that dies while the caller waits
        with pytest.raises(WorkerDied):
            await running.watch(asyncio.sleep(30))


async def test_run_worker_serves_the_real_wiring_until_stopped(settings: Settings) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, stop=stop, grace_period=timedelta(seconds=1)))
    client = await connect(settings)
    deadline = time.monotonic() + POLL_LIMIT_S  # run_worker imports litellm first
    while time.monotonic() < deadline:
        if task.done() or await worker_count(client, settings.task_queue) >= 1:
            break
        await asyncio.sleep(0.05)
    assert not task.done(), task.exception()
    assert await worker_count(client, settings.task_queue) == 1

    stop.set()
    await asyncio.wait_for(task, timeout=15)  # graceful: returns, raises nothing


async def test_connect_to_nothing_names_the_address() -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(TemporalUnreachable, match=f"at {address}"):
        await connect(Settings(temporal_address=address))


# --------------------------------------------------------------------------- lifecycle


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port that is bound (so not free) but not listening (so nothing answers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def _panicking_server(where: Path, error: str, *, then_run_real_at: Path | None = None) -> Path:
    """A stand-in ``temporal`` that fails as the dev server does when it panics: one
    ``level=ERROR`` line, then a stack trace far longer than the log tail a start error
    quotes, and exit 2. With ``then_run_real_at``, only the first start fails (that file
    marks it done) and later ones run the real server."""
    trace = "\\n".join(f"goroutine 1 [running]: frame {i}" for i in range(60))
    fail = (
        f"echo 'time=now level=ERROR {error}'\n"
        "echo 'panic: runtime error: invalid memory address or nil pointer dereference'\n"
        f"printf '{trace}\\n'\n"
        "exit 2\n"
    )
    if then_run_real_at is not None:
        marker = then_run_real_at
        fail = f'if [ ! -e "{marker}" ]; then\ntouch "{marker}"\n{fail}fi\n'
        fail += f'exec "{temporal_binary()}" "$@"\n'
    fake = where / "temporal"
    fake.write_text("#!/bin/sh\n" + fail)
    fake.chmod(0o755)
    return fake


async def test_a_port_taken_between_choosing_and_binding_it_is_chosen_again(
    tmp_path: Path, busy_port: int
) -> None:
    # The race of parallel starts: another process binds the chosen port after the CLI
    # checked it and before the frontend listens. The server then logs the failed bind and
    # panics, and the stack trace pushes that line far above the log's last lines. The
    # stand-in does exactly that on its first start, then runs the real server.
    first = tmp_path / "first-start-done"
    fake = _panicking_server(
        tmp_path,
        'msg="Failed to start gRPC listener" '
        'error="listen tcp 127.0.0.1:1: bind: address already in use"',
        then_run_real_at=first,
    )
    settings = _settings(tmp_path, busy_port)
    async with EmbeddedTemporal(settings, binary=fake, ui=False) as embedded:
        assert first.exists()  # the first start did fail
        assert embedded.started
        client = await connect(settings.with_overrides(temporal_address=embedded.address))
        assert await client.service_client.check_health()


async def test_a_server_that_panics_is_reported_with_its_first_error_line(
    tmp_path: Path, busy_port: int
) -> None:
    fake = _panicking_server(tmp_path, 'msg="cannot open the database file"')
    with pytest.raises(EmbeddedServerError) as raised:
        async with EmbeddedTemporal(_settings(tmp_path, busy_port), binary=fake, ui=False):
            pass
    message = str(raised.value)
    assert "exited with code 2" in message
    assert "cannot open the database file" in message  # the cause, above the trace
    assert "frame 59" in message  # and the trace's end


async def test_busy_preferred_port_gets_a_free_one_and_exit_stops_the_server(
    tmp_path: Path, busy_port: int
) -> None:
    settings = _settings(tmp_path, busy_port)
    async with EmbeddedTemporal(settings, ui=False) as embedded:
        assert embedded.started
        assert embedded.address != settings.temporal_address
        assert embedded.ui_url is None
        pid = embedded.pid
        assert pid is not None
        client = await connect(settings.with_overrides(temporal_address=embedded.address))
        assert await client.service_client.check_health()

    assert not embedded.started
    assert not await is_reachable(embedded.address)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
