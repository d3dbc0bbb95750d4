"""A compaction's summary and a delegation ask the worker's sub-agent model on the path an
agent's call takes (``LlmActivities.side_request``): its fallback models once errors
persist, and the limits every worker shares. Real HTTP to the fake provider, in
Temporal's ActivityEnvironment."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from durable_plans.activities.compaction import CompactionActivities
from durable_plans.activities.delegation import DelegationActivities
from durable_plans.activities.llm import LlmActivities
from durable_plans.domain.agents import DELEGATE_TOOL
from durable_plans.domain.compaction import CompactInput
from durable_plans.domain.contracts import DelegateInput
from durable_plans.domain.models import FunctionCall, Message, SessionMeta, ToolCall
from durable_plans.domain.rate_pacing import parse_rate_limits
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider

KEY = "sk-unit-fake-000000000000000000000000000"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    s = await open_session_store(str(tmp_path / "sessions.db"))
    yield s
    await s.close()


def settings(provider: FakeProvider, **extra: Any) -> Settings:
    return Settings(
        model="openai/primary",
        subagent_model="openai/cheap",
        fallback_models=("openai/backup",),
        fallback_after_attempts=3,
        api_base=provider.base_url,
        api_key=KEY,
        **extra,
    )


def env_at(attempt: int) -> ActivityEnvironment:
    env = ActivityEnvironment()
    now = datetime.now(UTC)
    env.info = dataclasses.replace(
        env.info,
        attempt=attempt,
        scheduled_time=now,
        started_time=now,
        start_to_close_timeout=timedelta(seconds=10),
    )
    return env


async def long_session(store: SessionStore, session: str) -> None:
    await store.create_session(SessionMeta(session_id=session, agent="ask"))
    turns = []
    for i in range(30):
        turns.append(Message(id=f"{session}-u{i}", role="user", content=f"Q{i} " + "x" * 600))
        turns.append(Message(id=f"{session}-a{i}", role="assistant", content=f"A{i} " + "y" * 600))
    turns.append(Message(id=f"{session}-last", role="user", content="And now?"))
    await store.append(session, turns)


@pytest.mark.parametrize(("attempt", "asked"), [(1, "cheap"), (4, "backup")])
async def test_the_summary_asks_the_sub_agent_model_then_its_fallback(
    store: SessionStore, attempt: int, asked: str
) -> None:
    await long_session(store, "s")
    async with FakeProvider() as p:
        llm = LlmActivities(store, settings(p))
        acts = CompactionActivities(store, settings(p), llm)
        try:
            out = await env_at(attempt).run(
                acts.compact_history,
                CompactInput(session_id="s", scope="s", turn=0, context_window=3_000),
            )
        finally:
            await llm.aclose()
    assert out.compacted and out.tokens_after < out.tokens_before
    assert [r.model for r in p.requests] == [asked]
    (record,) = [m for m in await store.read("s") if m.compaction is not None]
    assert record.compaction is not None and record.compaction.model == f"openai/{asked}"


async def test_the_summary_waits_for_the_shared_limits(store: SessionStore, tmp_path: Path) -> None:
    """One request a minute for the sub-agent model: the second summary would wait past
    its attempt's deadline, so it is refused as a rate limit (retried later), unsent."""
    await long_session(store, "s")
    await long_session(store, "t")
    async with FakeProvider() as p:
        limited = settings(
            p,
            rate_limits=tuple(parse_rate_limits("openai/cheap=rpm:1").items()),
            rate_limit_store=str(tmp_path / "limits.db"),
            llm_timeout_s=1.0,
        )
        llm = LlmActivities(store, limited)
        acts = CompactionActivities(store, limited, llm)
        try:
            first = await env_at(1).run(
                acts.compact_history,
                CompactInput(session_id="s", scope="s", turn=0, context_window=3_000),
            )
            with pytest.raises(ApplicationError) as caught:
                await env_at(1).run(
                    acts.compact_history,
                    CompactInput(session_id="t", scope="t", turn=0, context_window=3_000),
                )
        finally:
            await llm.aclose()
    assert first.compacted
    assert caught.value.type == "RateLimit" and not caught.value.non_retryable
    assert [r.model for r in p.requests] == ["cheap"]  # the second was never sent


async def delegation(store: SessionStore, task: str) -> DelegateInput:
    await store.create_session(SessionMeta(session_id="d", agent="coder"))
    call = ToolCall(
        id="call-1", function=FunctionCall(name=DELEGATE_TOOL, arguments=json.dumps({"task": task}))
    )
    await store.append(
        "d",
        [
            Message(id="d-u", role="user", content="Work."),
            Message(id="d-a0", role="assistant", tool_calls=[call]),
        ],
    )
    return DelegateInput(
        session_id="d", message_id="d-a0", call_index=0, scope="d", turn=0, root_session_id="d"
    )


@pytest.mark.parametrize("attempt", [1, 4])
async def test_a_delegation_is_answered_by_the_fallback_once_the_helper_keeps_failing(
    store: SessionStore, attempt: int
) -> None:
    inp = await delegation(store, "Name three colours [fail:500:model=cheap]")
    async with FakeProvider() as p:
        llm = LlmActivities(store, settings(p))
        acts = DelegationActivities(store, settings(p), llm)
        try:
            if attempt == 1:
                with pytest.raises(ApplicationError) as caught:
                    await env_at(attempt).run(acts.delegate, inp)
                assert caught.value.type == "ServerError" and not caught.value.non_retryable
            else:
                out = await env_at(attempt).run(acts.delegate, inp)
                assert out.tool.ok and out.tool.summary.startswith("Done:")
        finally:
            await llm.aclose()
    assert [r.model for r in p.requests] == ["cheap" if attempt == 1 else "backup"]


async def test_a_delegation_waits_out_a_rate_limit_and_reports_the_wait(
    store: SessionStore,
) -> None:
    inp = await delegation(store, "Name three colours [flaky:429x1:retry-after=2]")
    async with FakeProvider() as p:
        llm = LlmActivities(store, settings(p))
        acts = DelegationActivities(store, settings(p), llm)
        try:
            with pytest.raises(ApplicationError) as caught:
                await env_at(1).run(acts.delegate, inp)
            out = await env_at(2).run(acts.delegate, inp)
        finally:
            await llm.aclose()
    assert caught.value.type == "RateLimit" and not caught.value.non_retryable
    assert caught.value.next_retry_delay == timedelta(seconds=2)
    assert out.tool.ok and out.usage.rate_limited_s == 2.0
    assert [r.status for r in p.requests] == [429, 200]
