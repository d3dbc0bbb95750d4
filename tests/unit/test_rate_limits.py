"""Limits every worker shares (activities/shared_limits.py): the configuration, the pacing
arithmetic, the shared stores (SQLite, PostgreSQL) under concurrent reservations, the
Retry-After every worker sees, and the per-worker fallback when the store is down."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from durable_plans._errors import RateLimitConfigError, SettingsError
from durable_plans.activities.llm_errors import classify_llm_error
from durable_plans.activities.shared_limits import (
    LimitWaitTooLong,
    SharedRateLimits,
    estimate_tokens,
)
from durable_plans.domain.failures import FailureType
from durable_plans.domain.rate_pacing import (
    BucketState,
    RateLimit,
    block,
    bucket_key,
    correct,
    describe_rate_limits,
    limit_for,
    parse_rate_limits,
    reserve,
)
from durable_plans.session_store.limit_rows import (
    MemoryRateLimitStore,
    RateLimitStore,
    open_rate_limit_store,
    rate_limit_target,
)
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider, FakeProviderProcess, refused_count
from durable_plans.testing._fake_rate_limit import ProviderRateLimit
from tests.conftest import _pg_connection

# --------------------------------------------------------------------------- configuration


def test_parse_rate_limits_reads_models_and_the_wildcard() -> None:
    limits = parse_rate_limits("openai/a=rpm:120,tpm:40000; openai/b = tpm:1000\n*=rpm:60")
    assert limits == {
        "openai/a": RateLimit(rpm=120, tpm=40000),
        "openai/b": RateLimit(tpm=1000),
        "*": RateLimit(rpm=60),
    }
    assert limit_for(limits, "openai/b") == RateLimit(tpm=1000)
    assert limit_for(limits, "openai/other") == RateLimit(rpm=60)
    assert limit_for({"openai/a": RateLimit(rpm=1)}, "openai/other") is None
    assert parse_rate_limits(describe_rate_limits(limits)) == limits
    assert parse_rate_limits("  ") == {}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("openai/a", "is not model=rpm:N,tpm:N"),
        ("openai/a=rps:3", "is not rpm:N or tpm:N"),
        ("openai/a=rpm:0", "must be a positive number"),
        ("openai/a=rpm:abc", "must be a positive number"),
        ("openai/a=rpm:nan", "must be a positive number"),
        ("openai/a=rpm:1,rpm:2", "rpm is given twice"),
        ("openai/a=rpm:1;openai/a=tpm:2", "given twice"),
    ],
)
def test_bad_rate_limits_are_one_clear_line(text: str, says: str) -> None:
    with pytest.raises(RateLimitConfigError, match=says) as caught:
        parse_rate_limits(text)
    assert "\n" not in str(caught.value)
    with pytest.raises(SettingsError, match="DPLAN_RATE_LIMITS"):
        Settings.from_env({"DPLAN_RATE_LIMITS": text})


def test_settings_read_the_limits_and_their_store() -> None:
    s = Settings.from_env(
        {"DPLAN_RATE_LIMITS": "openai/a=rpm:60", "DPLAN_RATE_LIMIT_STORE": "/tmp/x.db"}
    )
    assert s.rate_limits == (("openai/a", RateLimit(rpm=60)),)
    assert s.rate_limit_store == "/tmp/x.db"
    assert Settings.from_env({}).rate_limits == ()


def test_the_shared_store_follows_the_session_store() -> None:
    pg = "postgresql://u@h/db?schema=t"
    assert rate_limit_target(pg) == pg
    assert rate_limit_target("/var/dplan/sessions.db") == "/var/dplan/rate-limits.db"
    assert rate_limit_target("sqlite:///var/x/s.db") == "/var/x/rate-limits.db"
    assert rate_limit_target(pg, "/elsewhere.db") == "/elsewhere.db"


def test_the_bucket_key_never_holds_the_api_key() -> None:
    key = bucket_key("openai/a", "http://h/v1", "sk-secret-123456")
    assert "sk-secret" not in key
    assert key != bucket_key("openai/a", "http://h/v1", "sk-other-key")
    assert key == bucket_key("openai/a", "http://h/v1", "sk-secret-123456")


# --------------------------------------------------------------------------- arithmetic


def test_requests_are_paced_evenly_at_the_rate() -> None:
    limit = RateLimit(rpm=60)  # one a second
    row = BucketState()
    waits = []
    for _ in range(4):
        row, answer = reserve(row, limit, now=100.0, tokens=10, max_wait_s=60)
        assert answer.granted
        waits.append(answer.wait_s)
    assert waits == [0.0, 1.0, 2.0, 3.0]
    # Idle for long: the next starts at once and no credit was saved up (no burst).
    row, answer = reserve(row, limit, now=200.0, tokens=10, max_wait_s=60)
    row, second = reserve(row, limit, now=200.0, tokens=10, max_wait_s=60)
    assert (answer.wait_s, second.wait_s) == (0.0, 1.0)


def test_tokens_are_paced_by_their_worth() -> None:
    limit = RateLimit(tpm=600)  # ten tokens a second
    row, first = reserve(BucketState(), limit, now=0.0, tokens=50, max_wait_s=60)
    row, second = reserve(row, limit, now=0.0, tokens=50, max_wait_s=60)
    assert (first.wait_s, second.wait_s) == (0.0, 5.0)
    # The first used 30 tokens more than estimated: three seconds more for the next.
    row = correct(row, limit, tokens_delta=30)
    row, third = reserve(row, limit, now=0.0, tokens=1, max_wait_s=60)
    assert third.wait_s == pytest.approx(13.0)
    assert correct(row, RateLimit(rpm=1), tokens_delta=30) == row  # no tpm: nothing to do


def test_a_wait_too_long_reserves_nothing() -> None:
    row = BucketState(request_at=50.0)
    after, answer = reserve(row, RateLimit(rpm=60), now=0.0, tokens=1, max_wait_s=10)
    assert (after, answer.granted, answer.wait_s) == (row, False, 50.0)


def test_retry_after_holds_everyone_back_and_never_shortens() -> None:
    row = block(BucketState(), now=10.0, seconds=5.0)
    assert block(row, now=11.0, seconds=1.0) == row
    _, answer = reserve(row, RateLimit(rpm=6000), now=11.0, tokens=1, max_wait_s=60)
    assert answer.wait_s == 4.0


def test_estimate_counts_messages_and_tools() -> None:
    bare = estimate_tokens({"messages": [{"role": "user", "content": "x" * 400}]})
    with_tools = estimate_tokens(
        {"messages": [{"role": "user", "content": "x" * 400}], "tools": [{"name": "y" * 400}]}
    )
    assert 100 <= bare < with_tools


# --------------------------------------------------------------------------- shared stores


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def limits_target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """An empty shared store of one backend (PostgreSQL: a fresh schema, dropped after)."""
    if request.param == "sqlite":
        yield str(tmp_path / "limits" / "rate-limits.db")
        return
    dsn, admin = await _pg_connection()  # skipped, saying why, without a server
    schema = f"rl_{uuid.uuid4().hex}"
    try:
        yield f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()


@pytest.fixture
async def two_workers(limits_target: str) -> AsyncIterator[tuple[RateLimitStore, RateLimitStore]]:
    """Two connections to one shared store, as two worker processes have."""
    first = await open_rate_limit_store(limits_target)
    second = await open_rate_limit_store(limits_target)
    yield first, second
    await first.close()
    await second.close()


async def test_reservations_are_atomic_across_workers(
    two_workers: tuple[RateLimitStore, RateLimitStore],
) -> None:
    """Each reservation moves the shared row by exactly one interval: after 40 of them from
    two workers at once, a wait of 40 intervals (less the seconds spent) is left."""
    first, second = two_workers
    limit = RateLimit(rpm=60)  # one a second: 40 reservations are 40 s of schedule
    key = "openai/atomic|-|-"
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.gather(
        *(s.reserve(key, limit, tokens=1, max_wait_s=600) for s in [first, second] * 20)
    )
    spent = loop.time() - began
    after = await second.reserve(key, limit, tokens=1, max_wait_s=600)
    assert 40.0 - spent - 1.0 <= after.wait_s <= 40.0 + 1.0


async def test_one_workers_retry_after_holds_the_other_back(
    two_workers: tuple[RateLimitStore, RateLimitStore],
) -> None:
    first, second = two_workers
    key = "openai/b|-|-"
    assert await second.blocked_for(key) == 0.0
    await first.block(key, 300.0)
    assert 250.0 < await second.blocked_for(key) <= 300.0
    answer = await second.reserve(key, RateLimit(rpm=6000), tokens=1, max_wait_s=600)
    assert 250.0 < answer.wait_s <= 300.0
    await first.block(key, 1.0)  # a shorter one later never shortens it
    assert await second.blocked_for(key) > 250.0


async def test_a_correction_reaches_the_other_worker(
    two_workers: tuple[RateLimitStore, RateLimitStore],
) -> None:
    first, second = two_workers
    limit = RateLimit(tpm=6)  # a token every ten seconds
    key = "openai/c|-|-"
    await first.reserve(key, limit, tokens=10, max_wait_s=600)  # 100 s of tokens
    await first.correct(key, limit, tokens_delta=-8)  # it used 2 tokens, not 10: 20 s
    answer = await second.reserve(key, limit, tokens=1, max_wait_s=600)
    assert 10.0 < answer.wait_s <= 20.0


async def test_a_refused_reservation_leaves_the_row_alone(
    two_workers: tuple[RateLimitStore, RateLimitStore],
) -> None:
    first, second = two_workers
    limit = RateLimit(rpm=1)  # one a minute
    key = "openai/d|-|-"
    assert (await first.reserve(key, limit, tokens=1, max_wait_s=0)).granted
    for _ in range(3):
        assert not (await second.reserve(key, limit, tokens=1, max_wait_s=1)).granted
    answer = await second.reserve(key, limit, tokens=1, max_wait_s=600)
    assert answer.granted and answer.wait_s <= 60.0


# --------------------------------------------------------------------------- the limiter


class _Refused(Exception):
    """What litellm raises for a provider's 429, as far as classify_llm_error reads it."""

    status_code = 429

    def __init__(self, retry_after_s: float) -> None:
        super().__init__("rate limited")
        self.headers = {"retry-after-ms": str(int(retry_after_s * 1000))}


def _kwargs(model: str = "openai/m") -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "api_base": "http://provider/v1",
        "api_key": "sk-test-0000000000000000",
        "timeout": 30.0,
    }


class _Answer:
    class usage:
        prompt_tokens = 3
        completion_tokens = 2


async def _answer() -> _Answer:
    return _Answer()


def _limiter(target: str, **kw: Any) -> SharedRateLimits:
    return SharedRateLimits(limits={"openai/m": RateLimit(rpm=600, tpm=60000)}, target=target, **kw)


async def test_a_429_slows_every_worker_for_that_model(tmp_path: Path) -> None:
    target = str(tmp_path / "rate-limits.db")
    one, other = _limiter(target), _limiter(target)
    try:

        async def refuse() -> Any:
            raise _Refused(120.0)

        with pytest.raises(_Refused):
            await one.call(_kwargs(), refuse)
        store = await open_rate_limit_store(target)
        key = bucket_key("openai/m", "http://provider/v1", "sk-test-0000000000000000")
        try:
            assert await store.blocked_for(key) > 100.0
        finally:
            await store.close()
        # The other worker's next request would wait for it, longer than it may wait:
        # it sends nothing and fails as a rate limit to retry after the wait.
        sent: list[int] = []

        async def send() -> _Answer:
            sent.append(1)
            return _Answer()

        with pytest.raises(LimitWaitTooLong):
            await other.call(_kwargs(), send)
        assert sent == []
        # Other models are not held back.
        assert isinstance(await other.call(_kwargs("openai/n"), _answer), _Answer)
    finally:
        await one.close()
        await other.close()


def test_a_wait_too_long_is_a_retryable_rate_limit_after_the_wait() -> None:
    verdict = classify_llm_error(LimitWaitTooLong(RateLimit(rpm=1), 42.0))
    assert verdict.type == FailureType.RATE_LIMIT.value and verdict.retryable
    assert verdict.retry_after_s == pytest.approx(42.0)
    assert "rpm:1" in verdict.message


async def test_unlimited_and_scripted_models_never_touch_the_store() -> None:
    opened: list[str] = []

    async def opener(target: str) -> RateLimitStore:
        opened.append(target)
        return MemoryRateLimitStore()

    limiter = SharedRateLimits(limits={"*": RateLimit(rpm=1)}, target="x", opener=opener)
    await limiter.call({**_kwargs("scripted/demo")}, _answer)
    limiter = SharedRateLimits(limits={"openai/a": RateLimit(rpm=1)}, target="x", opener=opener)
    await limiter.call(_kwargs("openai/b"), _answer)
    assert opened == []


async def _down(target: str) -> RateLimitStore:
    raise ConnectionRefusedError("connection refused")


async def _hangs(target: str) -> RateLimitStore:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


@pytest.mark.parametrize("opener", [_down, _hangs], ids=["refused", "hangs"])
async def test_a_store_that_is_down_or_slow_falls_back_and_says_so_once(
    opener: Callable[[str], Awaitable[RateLimitStore]],
) -> None:
    limiter = SharedRateLimits(
        limits={"openai/m": RateLimit(rpm=6000)},
        target="postgresql://127.0.0.1:1/nowhere",
        opener=opener,
        store_timeout_s=0.2,
    )
    sent = 0

    async def send() -> _Answer:
        nonlocal sent
        sent += 1
        return _Answer()

    with capture_logs() as logs:
        for _ in range(5):
            await limiter.call(_kwargs(), send)
    assert sent == 5
    assert not limiter.shared
    warnings = [e for e in logs if e["event"] == "rate_limits.store_unavailable"]
    assert len(warnings) == 1
    assert "each worker paces alone" in warnings[0]["fallback"]


class _Flaky(MemoryRateLimitStore):
    """A shared store that works, then fails every call, then works again."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise OSError("server closed the connection")

    async def reserve(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return await super().reserve(*args, **kwargs)

    async def blocked_for(self, key: str) -> float:
        self._check()
        return await super().blocked_for(key)


async def test_a_store_that_fails_later_falls_back_then_comes_back() -> None:
    shared = _Flaky()

    async def opener(target: str) -> RateLimitStore:
        return shared

    limiter = SharedRateLimits(
        limits={"openai/m": RateLimit(rpm=6000)}, target="t", opener=opener, store_retry_s=0.0
    )
    with capture_logs() as logs:
        await limiter.call(_kwargs(), _answer)
        assert limiter.shared
        shared.down = True
        for _ in range(3):
            await limiter.call(_kwargs(), _answer)  # each fails over to memory, once logged
        assert not limiter.shared
        shared.down = False
        await limiter.call(_kwargs(), _answer)
        assert limiter.shared
    events = [e["event"] for e in logs if e["event"].startswith("rate_limits.")]
    assert events == ["rate_limits.store_unavailable", "rate_limits.store_recovered"]


# --------------------------------------------------------------------------- fake provider


def test_the_fake_providers_limit_refuses_above_the_rate() -> None:
    now = [0.0]
    limit = ProviderRateLimit(requests_per_s=2, tokens_per_minute=600, clock=lambda: now[0])
    assert limit.admit(5) is None and limit.admit(5) is None  # two a second
    wait = limit.admit(5)
    assert wait is not None and 0 < wait <= 0.5
    now[0] += 0.5
    assert limit.admit(5) is None
    # Tokens: ten a second; a prompt larger than the bucket waits for a full bucket.
    now[0] += 10
    assert limit.admit(500) is None
    wait = limit.admit(1)
    assert wait is not None and wait > 40
    with pytest.raises(ValueError, match="requests_per_s"):
        ProviderRateLimit(requests_per_s=0)


async def test_the_fake_provider_answers_429_with_retry_after_and_counts_them() -> None:
    body = {"model": "openai/fake", "messages": [{"role": "user", "content": "hi"}]}
    async with (
        # One request, then the next in 100 s: the two after it are refused whenever
        # they come (no timing in this test).
        FakeProvider(requests_per_s=0.01) as provider,
        httpx.AsyncClient() as http,
    ):
        url = f"{provider.base_url}/chat/completions"
        answers = [await http.post(url, json=body) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 429, 429]
    assert int(answers[1].headers["retry-after-ms"]) > 0
    assert int(answers[1].headers["retry-after"]) >= 1
    assert len(provider.refused) == 2 == refused_count(provider.requests)
    # Refused requests never reached the scenario: the one answered is the first.
    assert [r.kind for r in provider.requests] == ["completion", "http_error", "http_error"]


async def test_calls_queued_behind_a_failed_opening_do_not_open_again() -> None:
    tries: list[str] = []

    async def opener(target: str) -> RateLimitStore:
        tries.append(target)
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    limiter = SharedRateLimits(
        limits={"openai/m": RateLimit(rpm=60000)}, target="t", opener=opener, store_timeout_s=0.2
    )
    with capture_logs():
        answers = await asyncio.gather(*(limiter.call(_kwargs(), _answer) for _ in range(5)))
    assert len(answers) == 5 and tries == ["t"]


def test_the_provider_process_enforces_its_rate_limit(tmp_path: Path) -> None:
    body = {"model": "openai/fake", "messages": [{"role": "user", "content": "hi"}]}
    with FakeProviderProcess(tmp_path / "requests.jsonl", requests_per_s=0.01) as provider:
        url = f"{provider.base_url}/chat/completions"
        statuses = [httpx.post(url, json=body, timeout=30).status_code for _ in range(3)]
        assert statuses == [200, 429, 429]
        assert provider.refused_count() == 2
