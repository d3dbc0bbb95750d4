"""Compaction on a real server: conversations and subtasks that outgrow the model's window.

The fake provider refuses, as a real one does, every prompt longer than its window
(``FakeProvider(context_window=...)``: 400 ``context_length_exceeded``). Without
compaction a conversation of ~600-character messages dies at about its tenth message.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from durable_plans.domain.agents import BUILTIN_CATALOG, AgentSpec
from durable_plans.domain.compaction import (
    REASON_EXCEEDED,
    REASON_THRESHOLD,
    SUMMARY_SYSTEM_PROMPT,
    visible_history,
)
from durable_plans.domain.models import Message, PlanStatus, Usage
from durable_plans.domain.session_contracts import (
    SendMessageInput,
    SendMessageResult,
    SessionInput,
    SessionState,
    session_workflow_id,
)
from durable_plans.domain.tool_ids import strict_violations
from durable_plans.testing import FakeProvider, FakeProviderProcess
from tests.integration.compaction_support import FILES, Reader
from tests.integration.conftest import Harness, provider_settings, running_worker
from tests.integration.plans import make_plan, run_plan
from tests.integration.replay import assert_replays
from tests.integration.stored import opened_store, subtask_messages
from tests.integration.workers import WorkerProcess, new_workspace, worker_env

pytestmark = pytest.mark.integration

WINDOW = 3_000


@pytest.fixture
async def small(client: Client, tmp_path: Path) -> AsyncIterator[Harness]:
    """A worker whose models all have a 3,000-token window (``DPLAN_CONTEXT_WINDOW``)."""
    async with FakeProvider(latency_ms=0, context_window=WINDOW, scenario=Reader()) as provider:
        settings = provider_settings(
            client, provider, tmp_path, context_window=WINDOW, stream="off"
        )
        for i in range(FILES):
            text = f"file {i}\n" + "".join(
                f"line {k} of file {i}: lorem ipsum\n" for k in range(60)
            )
            (settings.workspace / f"big_{i:02}.txt").write_text(text)
        async with running_worker(client, settings) as (worker, store):
            yield Harness(
                client=client, settings=settings, store=store, provider=provider, worker=worker
            )


@pytest.fixture
async def unknown_window(client: Client, tmp_path: Path) -> AsyncIterator[Harness]:
    """A provider with a 3,000-token window that the worker does not know of."""
    async with FakeProvider(latency_ms=0, context_window=WINDOW) as provider:
        settings = provider_settings(client, provider, tmp_path)
        async with running_worker(client, settings) as (worker, store):
            yield Harness(
                client=client, settings=settings, store=store, provider=provider, worker=worker
            )


async def start_session(h: Harness, agent: str) -> WorkflowHandle[object, SessionState]:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    return await h.client.start_workflow(
        "SessionWorkflow",
        SessionInput(session_id=sid, agent=agent),
        id=session_workflow_id(sid),
        task_queue=h.task_queue,
        result_type=SessionState,
    )


async def send(handle: WorkflowHandle[object, SessionState], text: str) -> SendMessageResult:
    result: SendMessageResult = await handle.execute_update(
        "send_message", SendMessageInput(text=text), result_type=SendMessageResult
    )
    return result


def message(i: int) -> str:
    words = f"Message {i}: please keep this in mind, it is part of a long conversation. "
    return (words * 10)[:600]


def records(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.compaction is not None]


def paid(provider: FakeProvider) -> Usage:
    """What the provider served: every completion's tokens, summaries included."""
    return Usage(
        prompt_tokens=sum((r.usage or {}).get("prompt_tokens", 0) for r in provider.completions()),
        completion_tokens=sum(
            (r.usage or {}).get("completion_tokens", 0) for r in provider.completions()
        ),
    )


async def test_a_conversation_of_200_messages_answers_every_one(small: Harness) -> None:
    handle = await start_session(small, "ask")
    results = [await send(handle, message(i)) for i in range(200)]

    assert all(r.answer.startswith(f"Done: Message {i}:") for i, r in enumerate(results))
    assert small.provider.over_window == []  # compacted before the window, every time
    assert small.provider.rejections == []
    state = await handle.query("state", result_type=SessionState)
    stored = await small.store.read(state.session_id)
    # Every original message is still in the store, in order, beside the records.
    originals = [m for m in stored if m.compaction is None]
    assert [m.content for m in originals if m.role == "user"] == [message(i) for i in range(200)]
    assert [m.content for m in originals if m.is_plain_assistant] == [r.answer for r in results]
    folded = records(stored)
    reported = [c for r in results for c in r.compactions]
    assert len(folded) == len(reported) >= 10
    assert {c.record_id for c in reported} == {m.id for m in folded}
    assert all(c.tokens_after < c.tokens_before <= WINDOW for c in reported)
    # The summaries were paid for, charged to the conversation and counted in its usage.
    assert state.usage == paid(small.provider)
    assert await small.store.total_usage(state.session_id) == paid(small.provider)
    sent = visible_history(stored)
    assert len(sent) < 20 and strict_violations([m.to_openai() for m in sent]) == []
    before = sum(c.tokens_before for c in reported) / len(reported)
    after = sum(c.tokens_after for c in reported) / len(reported)
    print(
        f"\n[compaction] 200 messages: {len(reported)} compactions, "
        f"~{before:.0f} -> ~{after:.0f} tokens on average; "
        f"{len(stored)} messages stored, {len(sent)} sent at the end"
    )
    assert await assert_replays(small.client, [handle.id]) >= 1


async def test_a_subtask_of_40_large_file_reads_completes(small: Harness) -> None:
    reader = AgentSpec(
        name="reader",
        system_prompt="You read files and report what they hold.",
        tools=("read_file",),
        max_turns=60,
        context_window=WINDOW,
    )
    plan = make_plan([("read", "Read the big files one by one", [])], agent="reader")
    report, failure = await run_plan(
        small.client, plan, small.task_queue, agents=BUILTIN_CATALOG.merged([reader]).agents
    )

    assert failure is None and report.status is PlanStatus.COMPLETED
    (result,) = report.subtasks
    assert result.result == f"Read all {FILES} files."
    assert result.llm_calls == FILES + 1
    assert small.provider.over_window == [] and small.provider.rejections == []
    branch = await subtask_messages(small.store, report, "read")
    answers = [m for m in branch if m.role == "tool"]
    assert [m.content.splitlines()[0] for m in answers if m.content] == [
        f"file {i}" for i in range(FILES)
    ]
    assert len(records(branch)) >= 5
    last = records(branch)[-1].compaction
    assert last is not None
    print(
        f"\n[compaction] 40 file reads: {len(records(branch))} compactions, the last "
        f"~{last.tokens_before} -> ~{last.tokens_after} tokens; {len(branch)} messages stored"
    )
    assert all(r.compaction and r.compaction.reason == REASON_THRESHOLD for r in records(branch))
    # The report's usage holds every completion the provider served, summaries included.
    assert report.usage == paid(small.provider)
    assert await assert_replays(small.client, [plan.id]) >= 1


async def test_a_refusal_over_the_window_compacts_and_tries_again(
    unknown_window: Harness,
) -> None:
    h = unknown_window
    handle = await start_session(h, "ask")
    results = [await send(handle, message(i)) for i in range(30)]

    assert all(r.answer.startswith(f"Done: Message {i}:") for i, r in enumerate(results))
    refused = h.provider.over_window
    reactive = [c for r in results for c in r.compactions]
    # The worker does not know the window: every compaction followed a refusal.
    assert refused and len(reactive) == len(refused)
    stored = await h.store.read((await handle.query("state", result_type=SessionState)).session_id)
    assert all(r.compaction and r.compaction.reason == REASON_EXCEEDED for r in records(stored))
    assert await assert_replays(h.client, [handle.id]) >= 1


async def test_a_model_that_refuses_every_time_fails_after_one_compaction(
    harness: Harness,
) -> None:
    handle = await start_session(harness, "ask")
    for i in range(6):
        await send(handle, message(i))
    before = len(harness.provider.requests)
    with pytest.raises(WorkflowUpdateFailedError) as raised:
        await send(handle, "Still there? [fail:400:context]")

    assert "ContextWindowExceeded" in str(raised.value.cause)
    requests = harness.provider.requests[before:]
    summaries = [r for r in requests if r.messages[0].get("content") == SUMMARY_SYSTEM_PROMPT]
    # The refused call, one summary, the one retry (refused again), and nothing more.
    assert [r.status for r in requests] == [400, 200, 400]
    assert len(summaries) == 1
    state = await handle.query("state", result_type=SessionState)
    stored = await harness.store.read(state.session_id)
    assert len(records(stored)) == 1


async def compacting(handle: WorkflowHandle[object, SessionState], timeout_s: float) -> None:
    """Until the workflow has a ``compact_history`` activity running."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        described = await handle.describe()
        pending = described.raw_description.pending_activities
        if any(a.activity_type.name == "compact_history" for a in pending):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no compaction started within {timeout_s}s")


async def forget_sticky_worker(client: Client, workflow_id: str) -> None:
    """Send the workflow's next task to the task queue, not to the killed worker's sticky
    queue, where it would wait out the SDK's 10 s schedule-to-start timeout first: what a
    worker asks of the server for a workflow it drops from its cache, asked here for the
    dead worker. Either way the next worker replays the whole history."""
    await client.workflow_service.reset_sticky_task_queue(
        ResetStickyTaskQueueRequest(
            namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id)
        )
    )


async def test_a_worker_killed_mid_compaction_leaves_one_record_and_the_chat_goes_on(
    client: Client, tmp_path: Path
) -> None:
    tq = f"compact-{uuid.uuid4().hex[:8]}"
    with FakeProviderProcess(
        tmp_path / "requests.jsonl",
        scenario="tests.integration.compaction_support:SlowSummaries",
        context_window=WINDOW,
    ) as provider:
        env = {
            **worker_env(client, tmp_path, provider, tq),
            "DPLAN_SUBAGENT_MODEL": "openai/cheap-model",
            "DPLAN_CONTEXT_WINDOW": str(WINDOW),
            "DPLAN_STREAM": "off",
            "DPLAN_LLM_HEARTBEAT_S": "2",
        }
        new_workspace(tmp_path, "# compaction\n")
        first = WorkerProcess(env, tmp_path / "worker-1.log").start()
        second: WorkerProcess | None = None
        try:
            first.wait_ready()
            sid = f"s-{uuid.uuid4().hex[:8]}"
            handle = await client.start_workflow(
                "SessionWorkflow",
                SessionInput(session_id=sid, agent="ask"),
                id=session_workflow_id(sid),
                task_queue=tq,
                result_type=SessionState,
            )
            results: list[SendMessageResult] = []

            async def conversation() -> None:
                for i in range(12):
                    results.append(await send(handle, message(i)))

            talking = asyncio.create_task(conversation())
            await compacting(handle, timeout_s=120)
            first.kill()  # the summary is being written: the provider answers in 4 s
            await forget_sticky_worker(client, handle.id)
            second = WorkerProcess(env, tmp_path / "worker-2.log").start()
            second.wait_ready()
            await asyncio.wait_for(talking, timeout=240)
        finally:
            first.stop()
            if second is not None:
                second.stop()
        entries = provider.log_entries()

    assert all(r.answer.startswith(f"Done: Message {i}:") for i, r in enumerate(results))
    async with opened_store(tmp_path / "sessions.db") as store:
        stored = await store.read(sid)
    folded = records(stored)
    reported = [c for r in results for c in r.compactions]
    # One record per compaction, the killed one's included (its attempt ran again).
    assert len({m.id for m in stored}) == len(stored)
    assert {c.record_id for c in reported} == {m.id for m in folded} and folded
    # Each compaction asked for its summary once, the killed one perhaps twice (if its
    # request left before the kill, it was asked for again by the second worker).
    asked = [e for e in entries if e.get("model") == "cheap-model"]
    assert len(folded) <= len(asked) <= len(folded) + 1
    assert [m.content for m in stored if m.role == "user"] == [message(i) for i in range(12)]
    assert await assert_replays(client, [handle.id]) >= 1
