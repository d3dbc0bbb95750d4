"""Rate limits waited out for a time, other failures counted in attempts: the LLM activity
against the fake provider through real HTTP, attempt after attempt of one call as
Temporal's ActivityEnvironment stands in for them (same first schedule time, growing
attempt numbers), with the refusals kept in a real session store."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.testing import ActivityEnvironment

from durable_plans._errors import SettingsError
from durable_plans.activities.llm import LlmActivities
from durable_plans.activities.llm_patience import gave_up_sentence
from durable_plans.domain.contracts import LlmCallInput, LlmCallOutput
from durable_plans.domain.ids import assistant_message_id
from durable_plans.domain.models import Message, SessionMeta, Usage
from durable_plans.domain.rate_pacing import format_duration
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider
from durable_plans.workflows.policies import RATE_LIMIT_MIN_DELAY, ActivityParameters

KEY = "sk-unit-fake-000000000000000000000000000"
FIRST_SCHEDULED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    s = await open_session_store(str(tmp_path / "sessions.db"))
    yield s
    await s.close()


class Call:
    """One LLM call of one conversation; ``attempt(n)`` runs its attempt n."""

    def __init__(self, store: SessionStore, provider: FakeProvider, **settings: Any) -> None:
        self.store = store
        self.settings = Settings(
            model="openai/fake-model", api_base=provider.base_url, api_key=KEY, **settings
        )
        self.session = "s-patience"

    async def start(self, text: str) -> Call:
        await self.store.create_session(SessionMeta(session_id=self.session, agent="ask"))
        await self.store.append(
            self.session, [Message(id=f"{self.session}-u", role="user", content=text)]
        )
        return self

    async def attempt(self, n: int, *, run: int = 0) -> LlmCallOutput:
        acts = LlmActivities(self.store, self.settings)
        env = ActivityEnvironment()
        # Attempt n's start; a later ``run`` of the call starts its attempts anew.
        started = FIRST_SCHEDULED + timedelta(seconds=10 * n, hours=run)
        env.info = dataclasses.replace(
            env.info, attempt=n, scheduled_time=FIRST_SCHEDULED, started_time=started
        )
        inp = LlmCallInput(session_id=self.session, agent="ask", scope=self.session, turn=0)
        try:
            out: LlmCallOutput = await env.run(acts.call_llm, inp)
            return out
        finally:
            await acts.aclose()

    async def refused(self, n: int, *, run: int = 0) -> ApplicationError:
        with pytest.raises(ApplicationError) as caught:
            await self.attempt(n, run=run)
        return caught.value


async def test_a_retry_after_is_the_next_attempts_delay(store: SessionStore) -> None:
    async with FakeProvider() as p:
        call = await Call(store, p).start("Look around [fail:429:retry-after=3]")
        err = await call.refused(1)
    assert err.type == "RateLimit" and not err.non_retryable
    assert err.next_retry_delay == timedelta(seconds=3)
    assert err.category is ApplicationErrorCategory.BENIGN  # logged at DEBUG by the SDK
    assert [r.status for r in p.requests] == [429]


async def test_a_retry_after_in_milliseconds_is_honoured_above_the_floor(
    store: SessionStore,
) -> None:
    async with FakeProvider() as p:
        call = await Call(store, p).start("Look around [fail:429:retry-after-ms=2500]")
        assert (await call.refused(1)).next_retry_delay == timedelta(seconds=2.5)
    async with FakeProvider() as p:
        call = Call(store, p)
        call.session = "s-zero"
        await call.start("Look around [fail:429:retry-after=0]")
        assert (await call.refused(1)).next_retry_delay == RATE_LIMIT_MIN_DELAY


async def test_a_call_refused_past_its_patience_fails_saying_how_long_it_waited(
    store: SessionStore,
) -> None:
    async with FakeProvider() as p:
        call = await Call(store, p, rate_limit_patience_s=5.0).start(
            "Look around [fail:429:retry-after=2]"
        )
        # Waited 0, 2, 4 s before attempts 1-3: each is retried after its 2 s.
        for n in (1, 2, 3):
            err = await call.refused(n)
            assert not err.non_retryable and err.next_retry_delay == timedelta(seconds=2)
        # Six seconds waited before the fourth: past the patience of five.
        err = await call.refused(4)
    assert err.type == "RateLimit" and err.non_retryable
    assert err.message == (
        "rate limited for 6s by the provider (4 refusals); "
        "gave up after DPLAN_RATE_LIMIT_PATIENCE=5s"
    )
    assert err.next_retry_delay is None
    assert len(p.requests) == 4


async def test_the_answer_reports_the_waits_its_refusals_asked_for(store: SessionStore) -> None:
    async with FakeProvider() as p:
        call = await Call(store, p).start("Look around [flaky:429x3:retry-after=2]")
        await call.refused(1)
        await call.refused(2)
        await call.refused(2)  # the same attempt recorded twice counts once
        out = await call.attempt(3)
    assert out.content and out.usage.rate_limited_s == 4.0
    assert out.usage.prompt_tokens > 0  # the answer's own usage is kept


async def test_a_call_run_again_from_its_first_attempt_keeps_its_waits(
    store: SessionStore,
) -> None:
    """A local activity whose worker died runs again from attempt 1 elsewhere: the
    refusals of its first run still count, for the patience and in the report."""
    async with FakeProvider() as p:
        call = await Call(store, p).start("Look around [flaky:429x3:retry-after=2]")
        await call.refused(1)
        await call.refused(2)
        await call.refused(1, run=1)
        out = await call.attempt(2, run=1)
    assert out.usage.rate_limited_s == 6.0


async def test_an_answer_at_the_first_attempt_waited_nothing(store: SessionStore) -> None:
    async with FakeProvider() as p:
        out = await (await Call(store, p).start("Look around")).attempt(1)
    assert out.usage.rate_limited_s == 0.0


async def test_other_failures_count_only_the_attempts_that_were_not_refused(
    store: SessionStore,
) -> None:
    async with FakeProvider() as p:
        call = await Call(store, p, llm_max_attempts=3).start("Look around [fail:500]")
        for n in (1, 2):  # two refusals first (recorded as their attempts would have)
            await store.record_wait(_call_id(call), f"attempt-{n}", 1.0)
        third = await call.refused(3)  # the first 500
        fourth = await call.refused(4)  # the second
        fifth = await call.refused(5)  # the third: DPLAN_LLM_MAX_ATTEMPTS=3 reached
    assert third.type == fourth.type == fifth.type == "ServerError"
    assert not third.non_retryable and not fourth.non_retryable
    assert fifth.non_retryable and fifth.message == fourth.message


async def test_attempts_lost_without_an_error_count_against_the_bound(
    store: SessionStore,
) -> None:
    async with FakeProvider() as p:
        call = await Call(store, p, llm_max_attempts=3).start("Look around")
        await store.record_wait(_call_id(call), "attempt-1", 1.0)
        # Attempts 2-4 were lost (timed out, or their worker died): the fifth gives up.
        err = await call.refused(5)
    assert err.non_retryable and err.type == "Timeout"
    assert "gave up after 3 attempts" in err.message
    assert p.requests == []


def _call_id(call: Call) -> str:
    return assistant_message_id(call.session, 0)


def test_temporals_attempt_limit_is_a_backstop_past_both_bounds() -> None:
    params = ActivityParameters(llm_max_attempts=6, llm_rate_limit_patience=timedelta(minutes=10))
    policy = params.llm_retry
    assert policy.maximum_attempts > 6 + 600
    assert params.rate_limit_delay(None, 1) == timedelta(seconds=1)
    assert params.rate_limit_delay(None, 4) == timedelta(seconds=8)
    assert params.rate_limit_delay(None, 20) == timedelta(seconds=30)
    assert params.rate_limit_delay(90.0, 1) == timedelta(seconds=90)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4, "0.4s"), (6.0, "6s"), (45.2, "45s"), (603.0, "10m 3s"), (600.0, "10m"), (3720, "1h 2m")],
)
def test_durations_read_at_a_glance(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_the_sentence() -> None:
    assert gave_up_sentence(603.0, 1, 600.0, by="the provider") == (
        "rate limited for 10m 3s by the provider (1 refusal); "
        "gave up after DPLAN_RATE_LIMIT_PATIENCE=10m"
    )


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("", 600.0), ("600", 600.0), ("90s", 90.0), ("10m", 600.0), ("1h30m", 5400.0), ("2.5", 2.5)],
)
def test_the_patience_setting(value: str, seconds: float) -> None:
    settings = Settings.from_env({"DPLAN_RATE_LIMIT_PATIENCE": value})
    assert settings.rate_limit_patience_s == seconds
    assert settings.activity_parameters().llm_rate_limit_patience == timedelta(seconds=seconds)


@pytest.mark.parametrize("value", ["0", "-1", "ten minutes", "m", "inf"])
def test_a_bad_patience_is_refused(value: str) -> None:
    with pytest.raises(SettingsError, match="DPLAN_RATE_LIMIT_PATIENCE"):
        Settings.from_env({"DPLAN_RATE_LIMIT_PATIENCE": value})


def test_usage_adds_its_waits() -> None:
    total = Usage(rate_limited_s=1.25) + Usage(rate_limited_s=2.5)
    assert total.rate_limited_s == 3.75


def test_the_printed_report_says_how_long_its_calls_waited() -> None:
    from durable_plans.cli.progress import render_report
    from durable_plans.domain.models import PlanReport, SubtaskResult, SubtaskStatus

    row = SubtaskResult(
        id="a",
        status=SubtaskStatus.COMPLETED,
        agent="ask",
        result="done",
        usage=Usage(prompt_tokens=10, completion_tokens=2, rate_limited_s=603.0),
    )
    waited = PlanReport.build("p", [row])
    assert "waited 10m 3s on rate limits" in render_report(waited)
    calm = PlanReport.build("p", [row.model_copy(update={"usage": Usage(prompt_tokens=10)})])
    assert "rate limits" not in render_report(calm)
