"""The fake provider's own rate limit: requests per second and tokens per minute.

A real provider refuses what exceeds its limits with 429 and says when to come back
(``retry-after-ms``, ``retry-after``); so does this one when given limits
(``FakeProvider(requests_per_s=2, tokens_per_minute=6000)``), so the orchestrator's
pacing (``activities/shared_limits.py``) can be measured against a limit it does not know.

Two token buckets on the provider's clock, refilled continuously: requests (capacity
``requests_per_s x window_s``, at least one) and tokens (capacity ``tokens_per_minute / 60
x window_s``). A request is admitted when a request is left and the token bucket holds its
prompt's estimated tokens (or is full, for a prompt larger than the bucket); it then takes
one request and its prompt tokens, and its answer's completion tokens once answered, so
the token bucket may go below zero and the average stays at the rate. Refused requests
take nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class ProviderRateLimit:
    requests_per_s: float | None = None
    tokens_per_minute: float | None = None
    window_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    _requests: float = field(init=False)
    _tokens: float = field(init=False)
    _at: float = field(init=False)

    def __post_init__(self) -> None:
        for name in ("requests_per_s", "tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"window_s must be a positive number, got {self.window_s!r}")
        self._requests = self.request_capacity
        self._tokens = self.token_capacity
        self._at = self.clock()

    @property
    def request_capacity(self) -> float:
        return max(1.0, (self.requests_per_s or 0.0) * self.window_s)

    @property
    def token_capacity(self) -> float:
        return (self.tokens_per_minute or 0.0) / 60.0 * self.window_s

    def admit(self, prompt_tokens: int) -> float | None:
        """None (admitted, and charged) or the seconds until this request would be."""
        self._refill()
        waits = [0.0]
        if self.requests_per_s is not None and self._requests < 1.0:
            waits.append((1.0 - self._requests) / self.requests_per_s)
        if self.tokens_per_minute is not None:
            needed = min(float(prompt_tokens), self.token_capacity)
            if self._tokens < needed:
                waits.append((needed - self._tokens) / (self.tokens_per_minute / 60.0))
        wait = max(waits)
        if wait > 0:
            return wait
        if self.requests_per_s is not None:
            self._requests -= 1.0
        if self.tokens_per_minute is not None:
            self._tokens -= prompt_tokens
        return None

    def charge(self, tokens: int) -> None:
        """An answer's completion tokens, taken once it was given."""
        if self.tokens_per_minute is not None:
            self._refill()
            self._tokens -= tokens

    def _refill(self) -> None:
        now = self.clock()
        elapsed, self._at = max(0.0, now - self._at), now
        if self.requests_per_s is not None:
            self._requests = min(
                self.request_capacity, self._requests + elapsed * self.requests_per_s
            )
        if self.tokens_per_minute is not None:
            refill = elapsed * self.tokens_per_minute / 60.0
            self._tokens = min(self.token_capacity, self._tokens + refill)


def retry_after_headers(wait_s: float) -> dict[str, str]:
    """What OpenAI sends with a 429: milliseconds, and whole seconds rounded up."""
    return {
        "retry-after-ms": str(max(1, math.ceil(wait_s * 1000))),
        "retry-after": str(max(1, math.ceil(wait_s))),
    }
