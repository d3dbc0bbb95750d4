"""Limits every worker shares: pace LLM requests by requests and tokens per minute.

``DPLAN_RATE_LIMITS`` gives a model its limits (``domain/rate_pacing.py``). Around every
provider request of a limited model, ``SharedRateLimits.call``:

1. estimates the request's tokens (about four characters per token of its messages and
   tool schemas, scaled by what this worker has seen the provider count for that model:
   cheap, and corrected in step 4) and reserves a slot in the shared row of
   the model at its endpoint and key (``session_store/limit_rows.py``): the reservation
   says how long to wait so that every worker together stays within the limits;
2. waits that long (the LLM activity heartbeats meanwhile), then, if a provider's
   Retry-After was recorded while it waited, reserves again after it;
3. sends the request; a 429 records its Retry-After (1 s without one) in the shared row,
   so every worker holds back for that model, not only the refused one;
4. moves the row by the difference between the real tokens (the answer's usage) and the
   estimate.

A wait longer than what is left of the activity's time (its start-to-close deadline less
the request's own timeout) reserves nothing and fails the attempt as a retryable rate
limit whose retry comes after the wait: Temporal keeps the attempt visible and bounded.

When the shared store cannot be opened, fails, or takes longer than ``STORE_TIMEOUT_S``,
the worker paces alone with the same arithmetic in memory (each worker then allows the
full rate, so several workers together may exceed it and meet 429s, as without limits)
and logs it once; it tries the shared store again every ``STORE_RETRY_S`` and logs when
it is back. A plan never stops because of the limits' store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from temporalio import activity

from durable_plans.activities.llm_errors import classify_llm_error
from durable_plans.activities.log import get_logger
from durable_plans.domain.failures import FailureType
from durable_plans.domain.rate_pacing import RateLimit, Reservation, bucket_key, limit_for
from durable_plans.session_store.limit_rows import (
    MemoryRateLimitStore,
    RateLimitStore,
    open_rate_limit_store,
    rate_limit_target,
)
from durable_plans.settings import Settings

T = TypeVar("T")

STORE_TIMEOUT_S = 2.0  # a shared-store operation slower than this counts as the store down
STORE_RETRY_S = 30.0  # how long the worker paces alone before trying the shared store again
DEFAULT_BLOCK_S = 1.0  # a 429 without Retry-After holds every worker back this long
REQUEST_MARGIN_S = 5.0  # kept free before the activity's deadline, beyond the request timeout
MAX_WAIT_OUTSIDE_ACTIVITY_S = 60.0
CALIBRATION_BOUND = 4.0  # the estimate is scaled by at most this much, up or down
CALIBRATION_WEIGHT = 0.3  # of the latest answer in the moving average of real / estimate
MAX_REPEATS = 20  # reservations of one request (each after a Retry-After met while waiting)

Opener = Callable[[str], Awaitable[RateLimitStore]]


class LimitWaitTooLong(Exception):
    """The limits would have this attempt wait past its deadline: nothing was reserved.

    Read by ``llm_errors`` as a provider's 429 with Retry-After (a retryable rate limit
    whose next attempt comes after the wait), which is what it stands for.
    """

    status_code = 429

    def __init__(self, limit: RateLimit, wait_s: float) -> None:
        super().__init__(
            f"rate limits ({limit.describe()}) need a wait of {wait_s:.1f} s, "
            "more than this attempt has left"
        )
        self.headers = {"retry-after": f"{wait_s:.3f}"}


def estimate_tokens(kwargs: Mapping[str, Any]) -> int:
    """About four characters per token of what is sent (messages and tool schemas)."""
    chars = len(json.dumps(kwargs.get("messages") or [], default=str))
    tools = kwargs.get("tools")
    if tools:
        chars += len(json.dumps(tools, default=str))
    return max(1, (chars + 3) // 4)


def used_tokens(response: Any) -> int | None:
    """Prompt plus completion tokens of an answer, None when the provider gave none."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    total = int(getattr(usage, "prompt_tokens", 0) or 0) + int(
        getattr(usage, "completion_tokens", 0) or 0
    )
    return total or None


@dataclass
class SharedRateLimits:
    """One per worker (``LlmActivities``); a no-op for models without a limit."""

    limits: Mapping[str, RateLimit]
    target: str
    opener: Opener = open_rate_limit_store
    store_timeout_s: float = STORE_TIMEOUT_S
    store_retry_s: float = STORE_RETRY_S
    _shared: RateLimitStore | None = field(default=None, init=False)
    _local: MemoryRateLimitStore = field(default_factory=MemoryRateLimitStore, init=False)
    _down_since: float | None = field(default=None, init=False)
    _opening: asyncio.Lock | None = field(default=None, init=False)
    _closing: asyncio.Future[None] | None = field(default=None, init=False)
    _calibration: dict[str, float] = field(default_factory=dict, init=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> SharedRateLimits:
        return cls(
            limits=dict(settings.rate_limits),
            target=rate_limit_target(settings.session_store, settings.rate_limit_store),
        )

    @property
    def shared(self) -> bool:
        """Whether the last operations used the shared store (False: pacing alone)."""
        return self._down_since is None

    async def call(
        self,
        kwargs: Mapping[str, Any],
        send: Callable[[], Awaitable[T]],
        *,
        paced: Callable[[float], None] | None = None,
    ) -> T:
        """``send()`` once the limits of ``kwargs["model"]`` allow it; see the module doc.
        ``paced`` hears of every wait before the request (the report counts them)."""
        model = str(kwargs.get("model") or "")
        limit = None if model.startswith("scripted/") else limit_for(self.limits, model)
        if limit is None:
            return await send()
        key = bucket_key(model, kwargs.get("api_base"), kwargs.get("api_key"))
        raw = estimate_tokens(kwargs)
        tokens = max(1, round(raw * self._calibration.get(key, 1.0)))
        await self._acquire(key, limit, tokens, float(kwargs.get("timeout") or 0.0), paced)
        try:
            response = await send()
        except Exception as exc:
            refusal = classify_llm_error(exc)
            if refusal.type == FailureType.RATE_LIMIT.value:
                seconds = refusal.retry_after_s
                await self._use(
                    lambda s: s.block(key, DEFAULT_BLOCK_S if seconds is None else seconds)
                )
            raise
        used = used_tokens(response)
        if used is not None:
            self._calibrate(key, raw, used)
            if used != tokens and limit.tpm:
                await self._use(lambda s: s.correct(key, limit, tokens_delta=used - tokens))
        return response

    def _calibrate(self, key: str, estimated: int, used: int) -> None:
        """Learn how this provider counts: the four-characters estimate is scaled by a
        moving average of real over estimated tokens (a provider that does not count the
        tool schemas, or whose answers are long, moves it down or up), within 1/4 and 4."""
        seen = min(CALIBRATION_BOUND, max(1 / CALIBRATION_BOUND, used / max(estimated, 1)))
        before = self._calibration.get(key)
        weight = CALIBRATION_WEIGHT
        self._calibration[key] = seen if before is None else before + weight * (seen - before)

    async def close(self) -> None:
        if self._shared is not None:
            shared, self._shared = self._shared, None
            # Closing a store that is down: nothing is left to release.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(shared.close(), self.store_timeout_s)

    # ----------------------------------------------------------------- internals

    async def _acquire(
        self,
        key: str,
        limit: RateLimit,
        tokens: int,
        timeout_s: float,
        paced: Callable[[float], None] | None = None,
    ) -> None:
        for _ in range(MAX_REPEATS):
            answer: Reservation = await self._use(
                partial(
                    _reserve, key=key, limit=limit, tokens=tokens, max_wait_s=_max_wait_s(timeout_s)
                )
            )
            if not answer.granted:
                raise LimitWaitTooLong(limit, answer.wait_s)
            if answer.wait_s <= 0:
                return
            await asyncio.sleep(answer.wait_s)
            if paced is not None:
                paced(answer.wait_s)
            # A 429 met by anyone while this one waited: take a new slot after its
            # Retry-After rather than all waiters going at once when it ends.
            if await self._use(lambda s: s.blocked_for(key)) <= 0:
                return

    async def _use(self, op: Callable[[RateLimitStore], Awaitable[T]]) -> T:
        """``op`` on the shared store, or on this worker's memory while it is down."""
        shared = await self._shared_store()
        if shared is not None:
            try:
                result = await asyncio.wait_for(op(shared), self.store_timeout_s)
            except Exception as exc:
                self._went_down(shared, exc)
            else:
                self._came_back(shared)
                return result
        return await op(self._local)

    def _resting(self) -> bool:
        """Down, and not yet time to try the shared store again."""
        down = self._down_since
        return down is not None and time.monotonic() - down < self.store_retry_s

    async def _shared_store(self) -> RateLimitStore | None:
        if self._resting():
            return None
        if self._shared is not None:
            return self._shared
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            # Those that queued behind a failed opening do not try again at once.
            if self._resting():
                return None
            if self._shared is None:
                try:
                    self._shared = await asyncio.wait_for(
                        self.opener(self.target), self.store_timeout_s
                    )
                except Exception as exc:
                    self._went_down(None, exc)
                    return None
        return self._shared

    def _went_down(self, store: RateLimitStore | None, exc: BaseException) -> None:
        first = self._down_since is None
        self._down_since = time.monotonic()
        if store is not None and store is self._shared:
            self._shared = None  # reopened after STORE_RETRY_S
            self._closing = asyncio.ensure_future(_close_quietly(store))
        if first:
            reason = "timed out" if isinstance(exc, TimeoutError) else _one_line(exc)
            get_logger(component="rate_limits").warning(
                "rate_limits.store_unavailable",
                store=store.description if store is not None else self.target_description,
                reason=reason,
                fallback="each worker paces alone until the store answers again",
            )

    def _came_back(self, store: RateLimitStore) -> None:
        if self._down_since is not None:
            self._down_since = None
            get_logger(component="rate_limits").info(
                "rate_limits.store_recovered", store=store.description
            )

    @property
    def target_description(self) -> str:
        from durable_plans.session_store.factory import describe_store_target

        return describe_store_target(self.target)


async def _reserve(
    store: RateLimitStore, *, key: str, limit: RateLimit, tokens: int, max_wait_s: float
) -> Reservation:
    return await store.reserve(key, limit, tokens=tokens, max_wait_s=max_wait_s)


async def _close_quietly(store: RateLimitStore) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(store.close(), STORE_TIMEOUT_S)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _max_wait_s(request_timeout_s: float) -> float:
    """How long this attempt may wait before its request and still finish in time."""
    if not activity.in_activity():
        return MAX_WAIT_OUTSIDE_ACTIVITY_S
    info = activity.info()
    deadlines: list[float] = []
    if info.start_to_close_timeout:
        started = info.started_time.timestamp()
        deadlines.append(started + info.start_to_close_timeout.total_seconds())
    if info.schedule_to_close_timeout:
        scheduled = info.scheduled_time.timestamp()
        deadlines.append(scheduled + info.schedule_to_close_timeout.total_seconds())
    if not deadlines:
        return MAX_WAIT_OUTSIDE_ACTIVITY_S
    left = min(deadlines) - time.time() - request_timeout_s - REQUEST_MARGIN_S
    return max(0.0, left)
