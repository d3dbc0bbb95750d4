"""SessionWorkflow on a real server: turns, agent switches, plans from a goal."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from durable_plans.domain.models import FunctionCall, Message, PlanStatus, SessionMeta, ToolCall
from durable_plans.domain.session_contracts import (
    AgentSwitchEvent,
    AgentSwitchResult,
    PlanGoalInput,
    SendMessageInput,
    SendMessageResult,
    SessionInput,
    SessionState,
    SwitchAgentInput,
    session_workflow_id,
)
from durable_plans.domain.tool_ids import strict_violations
from tests.integration.conftest import Harness
from tests.integration.replay import assert_replays

pytestmark = pytest.mark.integration

SEED_BEFORE = [
    Message(id="u1", role="user", content="Create a file"),
    Message(
        id="a1",
        role="assistant",
        content="I'll create it",
        tool_calls=(ToolCall(id="call-1", function=FunctionCall(name="write_file")),),
    ),
    Message(id="t1", role="tool", content="File created", tool_call_id="call-1"),
    Message(id="a2", role="assistant", content="File created successfully"),
]


async def start_session(
    h: Harness, session_id: str | None = None, **fields: object
) -> WorkflowHandle[object, SessionState]:
    sid = session_id or f"s-{uuid.uuid4().hex[:8]}"
    return await h.client.start_workflow(
        "SessionWorkflow",
        SessionInput(session_id=sid, **fields),
        id=session_workflow_id(sid),
        task_queue=h.task_queue,
        result_type=SessionState,
    )


async def send(handle: WorkflowHandle[object, SessionState], text: str) -> SendMessageResult:
    result: SendMessageResult = await handle.execute_update(
        "send_message", SendMessageInput(text=text), result_type=SendMessageResult
    )
    return result


async def test_agent_switch_reproduces_the_seed_example(harness: Harness) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await harness.store.create_session(SessionMeta(session_id=sid))
    await harness.store.append(sid, SEED_BEFORE)
    handle = await start_session(harness, sid)

    result = await handle.execute_update(
        "switch_agent",
        SwitchAgentInput(target="coder", reason="User requested code changes", confidence="high"),
        result_type=AgentSwitchResult,
    )

    assert (result.from_agent, result.to_agent) == ("orchestrator", "coder")
    assert result.removed_count == 2
    assert result.preserved_result == "File created successfully"
    assert result.final_message_count == 3
    after = await harness.store.read(sid)
    assert [(m.role, m.content) for m in after[:2]] == [
        ("user", "Create a file"),
        ("assistant", "File created successfully"),
    ]
    assert after[2].role == "system"
    assert (after[2].content or "").startswith("Agent switched: orchestrator → coder\n")
    assert "User requested code changes" in (after[2].content or "")
    assert after[2].content == result.context_message

    events = await handle.query("events", result_type=list[AgentSwitchEvent])
    assert len(events) == 1
    event = events[0]
    assert (event.event_type, event.from_agent, event.to_agent) == (
        "agent.switched",
        "orchestrator",
        "coder",
    )
    assert (event.reason, event.confidence, event.session_id) == (
        "User requested code changes",
        "high",
        sid,
    )
    state = await handle.query("state", result_type=SessionState)
    assert state.agent == "coder"


@pytest.mark.parametrize("target", ["orchestrator", "nobody"])
async def test_invalid_switch_is_refused_and_changes_nothing(harness: Harness, target: str) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await harness.store.create_session(SessionMeta(session_id=sid))
    await harness.store.append(sid, SEED_BEFORE)
    handle = await start_session(harness, sid)

    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update(
            "switch_agent", SwitchAgentInput(target=target), result_type=AgentSwitchResult
        )
    expected = "already the current agent" if target == "orchestrator" else "unknown agent"
    assert expected in str(info.value.cause)
    assert await harness.store.read(sid) == SEED_BEFORE
    assert await handle.query("events", result_type=list[AgentSwitchEvent]) == []


async def test_messages_run_durable_turns_with_valid_history(harness: Harness) -> None:
    handle = await start_session(harness, agent="coder")
    first = await send(handle, "Look at the project")
    second = await send(handle, "Now look again [turns:2]")

    assert first.answer.startswith("Done: Look at the project")
    assert second.answer.startswith("Done: Now look again")
    assert (first.llm_calls, second.llm_calls) == (2, 3)
    state = await handle.query("state", result_type=SessionState)
    messages = await harness.store.read(state.session_id)
    assert strict_violations([m.to_openai() for m in messages]) == []
    assert [m.content for m in messages if m.role == "user"] == [
        "Look at the project",
        "Now look again [turns:2]",
    ]
    assert harness.provider.rejections == []
    assert state.usage == first.usage + second.usage


async def test_the_agent_can_ask_to_switch_with_a_tool(harness: Harness) -> None:
    handle = await start_session(harness)
    result = await send(handle, "This needs code [call:switch_agent] [agent:coder]")

    assert (result.agent, result.current_agent) == ("orchestrator", "coder")
    state = await handle.query("state", result_type=SessionState)
    assert state.agent == "coder" and len(state.events) == 1
    messages = await harness.store.read(state.session_id)
    assert not any(m.is_tool_traffic for m in messages)  # the switch cleared tool traffic
    assert (messages[-1].content or "").startswith("Agent switched: orchestrator → coder")


async def test_continue_as_new_keeps_the_conversation_intact(harness: Harness) -> None:
    handle = await start_session(harness, agent="ask", max_messages_per_run=2)
    answers = []
    for i in range(5):
        answers.append((await send(handle, f"Question {i}")).answer)
        if i == 2:
            await handle.execute_update(
                "switch_agent", SwitchAgentInput(target="coder"), result_type=AgentSwitchResult
            )

    state = await handle.query("state", result_type=SessionState)
    assert state.messages_handled == 5
    assert state.agent == "coder" and len(state.events) == 1
    messages = await harness.store.read(state.session_id)
    assert [m.content for m in messages if m.role == "user"] == [f"Question {i}" for i in range(5)]
    for answer in answers:
        assert answer in [m.content for m in messages]
    runs = await assert_replays(harness.client, [handle.id])
    assert runs >= 3, runs


async def test_an_invalid_plan_is_corrected_through_the_tool_loop(harness: Harness) -> None:
    handle = await start_session(harness)
    result = await handle.execute_update(
        "plan_goal", PlanGoalInput(goal="Build a CLI [bad-plan]"), result_type=SendMessageResult
    )

    assert len(result.plan_ids) == 1
    plan_id = result.plan_ids[0]
    state = await handle.query("state", result_type=SessionState)
    messages = await harness.store.read(state.session_id)
    answers = [m.content or "" for m in messages if m.role == "tool"]
    assert answers[0].startswith("error: the plan is invalid:")
    assert "cycle: a -> b -> a" in answers[0]
    assert answers[1].startswith(f"ok: plan {plan_id} started with 3 subtasks")

    tag = f"[plan {plan_id} "
    summary: list[Message] = []
    deadline = time.monotonic() + 120  # a bound for failing, not a speed expectation
    while time.monotonic() < deadline:  # the plan runs in the background; then its summary
        messages = await harness.store.read(state.session_id)
        summary = [m for m in messages if m.role == "system" and tag in (m.content or "")]
        if summary:
            break
        await asyncio.sleep(0.1)
    assert len(summary) == 1
    assert (summary[0].content or "").startswith(f"{tag}completed] 3 completed")
    state = await handle.query("state", result_type=SessionState)
    assert state.plans[0].status is PlanStatus.COMPLETED
    assert strict_violations([m.to_openai() for m in messages]) == []
    await handle.signal("end")
    await handle.result()
    await assert_replays(harness.client, [handle.id, plan_id])
