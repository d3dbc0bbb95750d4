"""Fallback models: which model an attempt asks (from its number and when the call was
first scheduled, nothing else), the agents file and settings that name them, the report's
per-model usage, the fake provider's model-scoped faults, and the LLM activity asking the
fallback through real HTTP in Temporal's ActivityEnvironment."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from durable_plans._errors import AgentsFileError, SettingsError
from durable_plans.activities.llm import LlmActivities, import_litellm
from durable_plans.activities.llm_errors import LlmErrorClass, classify_llm_error
from durable_plans.activities.model_choice import (
    FallbackPolicy,
    ModelChoice,
    may_try_next,
    model_chain,
)
from durable_plans.domain.agents_loader import parse_agents_data
from durable_plans.domain.contracts import LlmCallInput
from durable_plans.domain.ids import assistant_message_id
from durable_plans.domain.models import (
    Message,
    ModelUsage,
    SessionMeta,
    SubtaskResult,
    SubtaskStatus,
    Usage,
)
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider

KEY = "sk-unit-fake-000000000000000000000000000"


# --------------------------------------------------------------------------- the choice


@pytest.mark.parametrize(
    ("attempt", "elapsed_s", "index"),
    [
        (1, 0.0, 0),
        (3, 5.0, 0),  # three attempts of the agent's own model
        (4, 7.0, 1),  # then the first fallback
        (6, 30.0, 1),
        (7, 40.0, 2),
        (2, 61.0, 1),  # a minute of failing hands over whatever the attempt count
        (2, 125.0, 2),
        (40, 9999.0, 2),  # the last model keeps the call
    ],
)
def test_a_persisting_error_hands_the_call_down_the_chain(
    attempt: int, elapsed_s: float, index: int
) -> None:
    chain = ("openai/a", "openai/b", "openai/c")
    policy = FallbackPolicy(after_attempts=3, after_s=60.0)
    choice = ModelChoice.for_attempt(chain, policy, attempt, elapsed_s)
    assert choice.index == index and choice.model == chain[index]
    assert choice.is_fallback is (index > 0)


def test_without_fallbacks_every_attempt_asks_the_agents_model() -> None:
    chain = model_chain("openai/a", ())
    for attempt in range(1, 10):
        assert ModelChoice.for_attempt(chain, FallbackPolicy(), attempt, 1e6).model == "openai/a"


def test_the_chain_names_each_model_once_the_agents_first() -> None:
    assert model_chain("a", ("b", "a", "c", "b")) == ("a", "b", "c")


def _verdict(kind: str, retryable: bool) -> LlmErrorClass:
    return LlmErrorClass(type=kind, message="x", retryable=retryable, retry_after_s=None)


def test_only_an_error_another_model_may_avoid_moves_on_at_once() -> None:
    choice = ModelChoice(("a", "b"))
    following = may_try_next(_verdict("ContextWindowExceeded", False), choice)
    assert following is not None and following.model == "b"
    assert may_try_next(_verdict("ServerError", True), choice) is None
    assert may_try_next(_verdict("Authentication", False), choice) is None
    last = ModelChoice(("a", "b"), 1)
    assert may_try_next(_verdict("ContextWindowExceeded", False), last) is None


# --------------------------------------------------------------------------- configuration


def test_an_agent_lists_its_fallback_models() -> None:
    catalog = parse_agents_data(
        {
            "agents": {
                "coder": {"model": "openai/a", "fallback_models": ["openai/b", "openai/c"]},
                "ask": {"fallback_models": []},
            }
        },
        source="agents.toml",
    )
    assert catalog.get("coder").fallback_models == ("openai/b", "openai/c")
    assert catalog.get("ask").fallback_models == ()  # none, whatever the worker's
    assert catalog.get("debug").fallback_models is None  # the worker's


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("openai/b", "agents.coder: fallback_models: must be a list of litellm model names"),
        (["openai/b", 3], "agents.coder: fallback_models[1]: must be a string"),
        (["openai/b", " "], "agents.coder: fallback_models[1]: must not be empty"),
        (["x", "x"], "agents.coder: fallback_models: lists 'x' more than once"),
    ],
)
def test_bad_fallback_models_are_named(value: Any, problem: str) -> None:
    with pytest.raises(AgentsFileError) as caught:
        parse_agents_data({"agents": {"coder": {"fallback_models": value}}}, source="agents.toml")
    assert any(line.startswith(f"agents.toml: {problem}") for line in caught.value.problems), (
        caught.value.problems
    )


def test_the_workers_fallback_models_and_thresholds() -> None:
    s = Settings.from_env(
        {
            "DPLAN_FALLBACK_MODELS": " openai/b , anthropic/claude-haiku-4-5,openai/b",
            "DPLAN_FALLBACK_AFTER_ATTEMPTS": "2",
            "DPLAN_FALLBACK_AFTER_S": "30",
        }
    )
    assert s.fallback_models == ("openai/b", "anthropic/claude-haiku-4-5")
    assert (s.fallback_after_attempts, s.fallback_after_s) == (2, 30.0)
    defaults = Settings.from_env({})
    assert defaults.fallback_models == () and defaults.fallback_after_attempts == 3
    with pytest.raises(SettingsError, match="DPLAN_FALLBACK_MODELS must be model names"):
        Settings.from_env({"DPLAN_FALLBACK_MODELS": "openai/b,,openai/c"})
    with pytest.raises(SettingsError, match="DPLAN_FALLBACK_AFTER_ATTEMPTS must be positive"):
        Settings.from_env({"DPLAN_FALLBACK_AFTER_ATTEMPTS": "0"})


# --------------------------------------------------------------------------- the report


def test_model_shares_add_up_by_model_in_the_order_they_answered() -> None:
    a1 = ModelUsage(model="a", llm_calls=1, usage=Usage(prompt_tokens=10, cost_usd=0.1))
    b1 = ModelUsage(model="b", llm_calls=2, usage=Usage(prompt_tokens=5))
    a2 = ModelUsage(model="a", llm_calls=1, usage=Usage(prompt_tokens=1, cost_usd=0.2))
    merged = ModelUsage.merged((a1, b1), (a2,))
    assert [m.model for m in merged] == ["a", "b"]
    assert merged[0].llm_calls == 2 and merged[0].usage.prompt_tokens == 11
    assert merged[0].usage.cost_usd == pytest.approx(0.3)


def test_a_result_recorded_before_models_were_kept_still_decodes() -> None:
    old = '{"id": "a", "status": "completed", "agent": "coder", "result": "ok"}'
    result = SubtaskResult.model_validate_json(old)
    assert result.status is SubtaskStatus.COMPLETED and result.models == ()
    assert Message.model_validate_json('{"role": "assistant", "content": "x"}').model is None


# --------------------------------------------------------------------------- the fake provider


async def test_a_model_scoped_fault_hits_that_model_only() -> None:
    lit = import_litellm()
    async with FakeProvider() as p:

        async def ask(model: str) -> Any:
            return await lit.acompletion(
                model=model,
                api_base=p.base_url,
                api_key=KEY,
                messages=[{"role": "user", "content": "Hi [fail:500:model=primary]"}],
                num_retries=0,
            )

        with pytest.raises(Exception) as caught:
            await ask("openai/primary")
        assert classify_llm_error(caught.value).type == "ServerError"
        answer = await ask("openai/backup")
    assert answer.choices[0].message.content.startswith("Done: Hi.")
    assert [(r.model, r.status) for r in p.requests] == [("primary", 500), ("backup", 200)]


# --------------------------------------------------------------------------- the activity


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    s = await open_session_store(str(tmp_path / "sessions.db"))
    yield s
    await s.close()


async def _call(
    store: SessionStore,
    provider: FakeProvider,
    text: str,
    *,
    attempt: int = 1,
    since_s: float = 0.0,
    agent_fallbacks: tuple[str, ...] | None = ("openai/backup",),
    **settings: Any,
) -> Any:
    session = f"s-{attempt}-{abs(hash(text)) % 10_000}"
    await store.create_session(SessionMeta(session_id=session, agent="ask"))
    await store.append(session, [Message(id=f"{session}-u", role="user", content=text)])
    acts = LlmActivities(
        store,
        Settings(model="openai/primary", api_base=provider.base_url, api_key=KEY, **settings),
    )
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        attempt=attempt,
        scheduled_time=datetime.now(UTC) - timedelta(seconds=since_s),
    )
    inp = LlmCallInput(
        session_id=session, agent="ask", scope=session, turn=0, fallback_models=agent_fallbacks
    )
    try:
        return await env.run(acts.call_llm, inp), session
    finally:
        await acts.aclose()


@pytest.mark.parametrize(("attempt", "since_s"), [(3, 2.0), (1, 61.0)])
async def test_a_persisting_failure_is_answered_by_the_fallback(
    store: SessionStore, attempt: int, since_s: float
) -> None:
    async with FakeProvider() as p:
        out, session = await _call(
            store,
            p,
            "Hi [fail:500:model=primary]",
            attempt=attempt,
            since_s=since_s,
            fallback_after_attempts=2,
        )
    assert out.model == "openai/backup" and out.content.startswith("Done: Hi.")
    assert [r.model for r in p.requests] == ["backup"]  # the primary was not asked again
    (answer,) = [m for m in await store.read(session) if m.role == "assistant"]
    assert answer.model == "openai/backup" and answer.id == assistant_message_id(session, 0)


async def test_an_early_attempt_still_asks_the_agents_model(store: SessionStore) -> None:
    async with FakeProvider() as p:
        with pytest.raises(ApplicationError) as caught:
            await _call(store, p, "Hi [fail:500:model=primary]", attempt=2, since_s=3.0)
    assert caught.value.type == "ServerError" and not caught.value.non_retryable
    assert [r.model for r in p.requests] == ["primary"]


async def test_a_prompt_over_the_window_goes_to_the_fallback_in_the_same_attempt(
    store: SessionStore,
) -> None:
    async with FakeProvider() as p:
        out, _ = await _call(store, p, "Summarise [fail:400:context:model=primary]")
    assert out.model == "openai/backup"
    assert [(r.model, r.status) for r in p.requests] == [("primary", 400), ("backup", 200)]


async def test_without_a_fallback_the_context_window_error_stands(store: SessionStore) -> None:
    async with FakeProvider() as p:
        with pytest.raises(ApplicationError) as caught:
            await _call(store, p, "Summarise [fail:400:context]", agent_fallbacks=())
    assert caught.value.type == "ContextWindowExceeded" and caught.value.non_retryable


async def test_the_workers_fallback_models_serve_an_agent_without_its_own(
    store: SessionStore,
) -> None:
    async with FakeProvider() as p:
        out, _ = await _call(
            store,
            p,
            "Hi [fail:503:model=primary]",
            attempt=4,
            agent_fallbacks=None,
            fallback_models=("openai/spare",),
        )
    assert out.model == "openai/spare"


async def test_an_answer_stored_by_a_fallback_is_reported_as_the_fallbacks_on_retry(
    store: SessionStore,
) -> None:
    async with FakeProvider() as p:
        out, session = await _call(store, p, "Hi [fail:500:model=primary]", attempt=4)
        # The next attempt (its worker lost the answer's return) finds it stored.
        acts = LlmActivities(
            store, Settings(model="openai/primary", api_base=p.base_url, api_key=KEY)
        )
        again = await ActivityEnvironment().run(
            acts.call_llm,
            LlmCallInput(session_id=session, agent="ask", scope=session, turn=0),
        )
        await acts.aclose()
    assert again.replayed and again.model == "openai/backup" == out.model
    assert len(p.requests) == 1
