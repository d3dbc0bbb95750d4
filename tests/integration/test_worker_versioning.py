"""Worker Versioning on a real dev server: two builds of one worker deployment, A then B.

A plan started on A (held running by a tool call waiting for approval) finishes on A after
B became current, its subtask too; a plan started after that runs on B; a conversation
started on A moves to B at its first continue-as-new after B became current. Which build
ran what is read from the server, not from the workers: every completed workflow task in
a history names the deployment version of the worker that completed it, and a workflow's
description names the version it is pinned to. Both builds run in this process, on one
task queue and one session store, as two deployments of the same code would share them.

The builds are made current with the ``temporal worker deployment`` commands
docs/operating.md walks through, against this test's server.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, TaskQueueType, VersioningBehavior
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_plans import Client as PlansClient
from durable_plans.dev_server import dynamic_config_args
from durable_plans.domain import search_attributes
from durable_plans.domain.approval_rules import ApprovalPolicy
from durable_plans.domain.models import PlanStatus
from durable_plans.domain.session_contracts import (
    SendMessageInput,
    SendMessageResult,
    SessionInput,
    SessionState,
    session_workflow_id,
)
from durable_plans.embedded import DEV_SERVER_STARTUP
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider
from durable_plans.worker import build_worker
from durable_plans.worker_versioning import default_build_id
from tests.integration.conftest import Harness, provider_settings, temporal_binary
from tests.integration.plans import make_plan, start_plan_workflow

pytestmark = pytest.mark.integration

WAIT_S = 120.0  # a bound on waiting for the server to reach a state, never asserted
POLL_S = 0.05


@pytest.fixture(scope="module")
async def versioned_env() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server of its own whose task queues have one partition: the task queue's
    own description then says where the next workflow goes (with the default four, a new
    current build reaches the partitions one by one, and on a loaded machine the
    deployment's "propagation in progress" was seen to last minutes)."""
    env = await WorkflowEnvironment.start_local(
        dev_server_startup_timeout=DEV_SERVER_STARTUP,
        dev_server_existing_path=temporal_binary(),
        plugins=[DurablePlansPlugin()],
        dev_server_log_level="error",
        search_attributes=search_attributes.ALL,
        dev_server_extra_args=[
            "--dynamic-config-value",
            "matching.numTaskqueueReadPartitions=1",
            "--dynamic-config-value",
            "matching.numTaskqueueWritePartitions=1",
            *dynamic_config_args(),
        ],
    )
    try:
        yield env
    finally:
        await env.shutdown()


@asynccontextmanager
async def running(client: Client, settings: Settings, store: SessionStore) -> AsyncIterator[Worker]:
    """``build_worker`` as ``dplan-worker`` builds it, run for the block."""
    worker = build_worker(client, settings, store)
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        await worker.shutdown()
        await asyncio.gather(task, return_exceptions=True)


async def cli(client: Client, *args: str) -> tuple[int, str]:
    """``temporal <args>`` against the test's server; exit code and output."""
    proc = await asyncio.create_subprocess_exec(
        temporal_binary(),
        *args,
        "--address",
        client.service_client.config.target_host,
        "--namespace",
        client.namespace,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


async def make_current(client: Client, deployment: str, build: str, task_queue: str) -> None:
    """``temporal worker deployment set-current-version``, once the server knows the
    build (its worker registers it with its first poll), then until the task queue says
    so itself: from then on a new workflow starts on ``build``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        code, out = await cli(
            client,
            "worker",
            "deployment",
            "set-current-version",
            "--deployment-name",
            deployment,
            "--build-id",
            build,
            "--yes",
        )
        if code == 0:
            break
        assert time.monotonic() < deadline, f"set-current-version {build} kept failing: {out}"
        await asyncio.sleep(POLL_S)
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    while True:
        described = await client.workflow_service.describe_task_queue(request)
        if described.versioning_info.current_deployment_version.build_id == build:
            return
        assert time.monotonic() < deadline, f"{task_queue} never took {build}: {described}"
        await asyncio.sleep(POLL_S)


async def builds_of_run(client: Client, workflow_id: str, run_id: str) -> tuple[set[str], str]:
    """The builds that completed the run's workflow tasks, and the run it continued as
    (empty when it did not)."""
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    builds: set[str] = set()
    continued = ""
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            attrs = event.workflow_task_completed_event_attributes
            builds.add(attrs.deployment_version.build_id or "(unversioned)")
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            continued = (
                event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            )
    return builds, continued


async def builds_of_plan(client: Client, plan_id: str) -> dict[str, set[str]]:
    """Workflow id -> the builds that completed its workflow tasks, for the plan and every
    subtask it started."""
    found: dict[str, set[str]] = {}
    history = await client.get_workflow_handle(plan_id).fetch_history()
    children = [
        e.child_workflow_execution_started_event_attributes.workflow_execution
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED
    ]
    found[plan_id], _ = await builds_of_run(client, plan_id, history.run_id)
    for child in children:
        found[child.workflow_id], _ = await builds_of_run(client, child.workflow_id, child.run_id)
    return found


async def pinned_build(client: Client, workflow_id: str) -> tuple[str, int]:
    """The build and behaviour the server records for the workflow's latest run."""
    info = (await client.get_workflow_handle(workflow_id).describe()).raw_description
    versioning = info.workflow_execution_info.versioning_info
    return versioning.deployment_version.build_id, versioning.behavior


async def session_runs(client: Client, workflow_id: str, first_run: str) -> list[set[str]]:
    """The builds of each run of a continued-as-new chain, oldest first."""
    runs: list[set[str]] = []
    run = first_run
    while run:
        builds, run = await builds_of_run(client, workflow_id, run)
        runs.append(builds)
    return runs


async def until_next_run_on(client: Client, workflow_id: str, after: str, build: str) -> str:
    """The id of the run that follows ``after``, once its first workflow task has been
    completed (by ``build``, asserted): from then on that run is pinned there."""
    deadline = time.monotonic() + WAIT_S
    while True:
        run = (await client.get_workflow_handle(workflow_id).describe()).run_id
        if run != after:
            builds, _ = await builds_of_run(client, workflow_id, run)
            if builds:
                assert builds == {build}, builds
                return run
        assert time.monotonic() < deadline, f"no new run of {workflow_id} on {build}"
        await asyncio.sleep(POLL_S)


async def send(handle: WorkflowHandle[object, SessionState], text: str) -> str:
    result: SendMessageResult = await handle.execute_update(
        "send_message", SendMessageInput(text=text), result_type=SendMessageResult
    )
    return result.answer


def expect_only(builds: dict[str, set[str]], build: str) -> None:
    assert builds and all(b == {build} for b in builds.values()), builds


async def test_plans_stay_on_their_build_and_conversations_move_at_continue_as_new(
    versioned_env: WorkflowEnvironment, provider: FakeProvider, tmp_path: Path
) -> None:
    client = versioned_env.client
    deployment = f"dplan-wv-{uuid.uuid4().hex[:8]}"
    build_a, build_b = "0.2.0-aaaaaaaaaaaa", "0.2.0-bbbbbbbbbbbb"
    on_a = provider_settings(client, provider, tmp_path, prefix="wv", deployment=deployment)
    # No streaming: the conversation's LLM calls take the plans' path (streaming has its
    # own tests), which keeps its first message from paying for litellm's streaming path.
    on_a = on_a.with_overrides(build_id=build_a, stream="off")
    on_b = on_a.with_overrides(build_id=build_b)
    assert on_a.worker_deployment() is not None
    store = await open_session_store(on_a.session_store)
    plans = PlansClient(client, on_a)
    try:
        async with running(client, on_a, store):
            await make_current(client, deployment, build_a, on_a.task_queue)

            # A plan that stays running: its subtask's first tool call waits for a person.
            held = make_plan([("look", "Look at the workspace", [])], prefix="wv-held")
            held = held.model_copy(update={"approval": ApprovalPolicy(tools=("list_dir",))})
            held_handle = await start_plan_workflow(client, held, on_a.task_queue)
            deadline = time.monotonic() + WAIT_S
            while not (waiting := await plans.approvals(held.id)):
                assert time.monotonic() < deadline, "the held plan's call never waited"
                await asyncio.sleep(POLL_S)

            # A conversation, one message per run: its second run starts on A, the
            # current build when the first one continued as new.
            sid = f"wv-{uuid.uuid4().hex[:8]}"
            session = await client.start_workflow(
                "SessionWorkflow",
                SessionInput(session_id=sid, agent="ask", max_messages_per_run=1),
                id=session_workflow_id(sid),
                task_queue=on_a.task_queue,
                result_type=SessionState,
            )
            first_run = session.first_execution_run_id or session.result_run_id or ""
            answers = [await send(session, "Question one")]
            second_run = await until_next_run_on(client, session.id, first_run, build_a)

            async with running(client, on_b, store):
                await make_current(client, deployment, build_b, on_a.task_queue)

                # New work goes to B.
                fresh = make_plan([("look", "Look at the workspace", [])], prefix="wv-new")
                fresh_handle = await start_plan_workflow(client, fresh, on_a.task_queue)
                assert (await fresh_handle.result()).status is PlanStatus.COMPLETED
                expect_only(await builds_of_plan(client, fresh.id), build_b)
                assert await pinned_build(client, fresh.id) == (
                    build_b,
                    VersioningBehavior.VERSIONING_BEHAVIOR_PINNED,
                )

                # The held plan, pinned, still runs on A: A's worker takes the approval.
                assert await pinned_build(client, held.id) == (
                    build_a,
                    VersioningBehavior.VERSIONING_BEHAVIOR_PINNED,
                )
                await plans.approve(held.id, waiting[0].call)
                assert (await held_handle.result()).status is PlanStatus.COMPLETED
                held_builds = await builds_of_plan(client, held.id)
                assert len(held_builds) == 2  # the plan and its subtask
                expect_only(held_builds, build_a)

                # The conversation's current run is pinned to A and answers there; the
                # run it continues as starts on B, the current build, and stays there.
                answers.append(await send(session, "Question two"))
                third_run = await until_next_run_on(client, session.id, second_run, build_b)
                answers.append(await send(session, "Question three"))
                await until_next_run_on(client, session.id, third_run, build_b)
                await session.signal("end")  # to the fourth run, once it has started
                state = await session.result()
        assert state.messages_handled == 3
        assert all(answers)
        assert await session_runs(client, session.id, first_run) == [
            {build_a},
            {build_a},
            {build_b},
            {build_b},
        ]
        messages = await store.read(sid)  # one conversation across both builds
        assert [m.content for m in messages if m.role == "user"] == [
            "Question one",
            "Question two",
            "Question three",
        ]
    finally:
        await store.close()


async def test_an_unversioned_worker_reports_the_package_build_to_the_server(
    harness: Harness,
) -> None:
    """Without ``DPLAN_DEPLOYMENT`` the worker is unversioned; the build id its pollers
    report is still the package's (version and workflow code), not the SDK's hash of every
    loaded module."""
    request = DescribeTaskQueueRequest(
        namespace=harness.client.namespace,
        task_queue=TaskQueue(name=harness.task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    deadline = time.monotonic() + WAIT_S
    while True:
        pollers = (await harness.client.workflow_service.describe_task_queue(request)).pollers
        if pollers or time.monotonic() > deadline:
            break
        await asyncio.sleep(POLL_S)
    assert [p.worker_version_capabilities.build_id for p in pollers] == [default_build_id()]
