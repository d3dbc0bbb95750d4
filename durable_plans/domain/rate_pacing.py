"""Requests and tokens per minute for a model: the configuration and the pacing arithmetic.

Pure (no clock, no I/O): the shared stores (``session_store/limit_rows*.py``) run
``reserve`` inside their own atomic section, with their own clock, so every worker that
shares a store computes the same schedule; the unit tests run it with made-up times.

The pacing is a token bucket without a burst (the generic cell rate algorithm with a
tolerance of zero): one row per model keeps *when the next request may start*
(``request_at``), *when the tokens reserved so far have drained at the tokens-per-minute
rate* (``tokens_at``), and *until when the provider asked everyone to wait*
(``blocked_until``, from a 429's Retry-After). A request starts at the latest of now and
those three; it moves ``request_at`` one interval (60 / rpm seconds) past its start and
``tokens_at`` its estimated tokens' worth (tokens x 60 / tpm seconds) past it. Requests
are so spread evenly at the configured rate, never in bursts: a provider that counts per
second or per minute sees no more than the rate in any window.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from durable_plans._errors import RateLimitConfigError

WILDCARD = "*"
_ENTRY = re.compile(r"^(?P<model>[^=\s]+)\s*=\s*(?P<spec>.+)$")


@dataclass(frozen=True)
class RateLimit:
    """What one model may be sent: requests and tokens per minute (None: no such limit)."""

    rpm: float | None = None
    tpm: float | None = None

    @property
    def request_interval_s(self) -> float:
        return 60.0 / self.rpm if self.rpm else 0.0

    def token_seconds(self, tokens: int) -> float:
        """How long ``tokens`` take to drain at the tokens-per-minute rate."""
        return max(tokens, 0) * 60.0 / self.tpm if self.tpm else 0.0

    def describe(self) -> str:
        parts = [f"rpm:{self.rpm:g}"] if self.rpm else []
        parts += [f"tpm:{self.tpm:g}"] if self.tpm else []
        return ",".join(parts)


@dataclass(frozen=True)
class BucketState:
    """One model's shared row (seconds on the store's clock; 0: never set)."""

    request_at: float = 0.0
    tokens_at: float = 0.0
    blocked_until: float = 0.0


@dataclass(frozen=True)
class Reservation:
    """The answer to a reservation: wait ``wait_s`` then send, or (not granted) nothing was
    reserved because the wait would be longer than the caller can afford."""

    wait_s: float
    granted: bool


def reserve(
    state: BucketState, limit: RateLimit, *, now: float, tokens: int, max_wait_s: float
) -> tuple[BucketState, Reservation]:
    """The row after reserving one request of ``tokens`` estimated tokens, and the wait.

    A wait longer than ``max_wait_s`` reserves nothing (the row is returned unchanged), so
    a caller that gives up leaves no slot behind that would slow everyone else.
    """
    start = max(now, state.request_at, state.tokens_at, state.blocked_until)
    wait = start - now
    if wait > max_wait_s:
        return state, Reservation(wait_s=wait, granted=False)
    after = BucketState(
        request_at=start + limit.request_interval_s,
        tokens_at=start + limit.token_seconds(tokens),
        blocked_until=state.blocked_until,
    )
    return after, Reservation(wait_s=wait, granted=True)


def correct(state: BucketState, limit: RateLimit, *, tokens_delta: int) -> BucketState:
    """The row once a request's real usage is known: ``tokens_delta`` (real minus
    estimated; negative gives time back) moves ``tokens_at`` by its worth."""
    if not limit.tpm or tokens_delta == 0:
        return state
    shift = tokens_delta * 60.0 / limit.tpm
    return BucketState(
        request_at=state.request_at,
        tokens_at=state.tokens_at + shift,
        blocked_until=state.blocked_until,
    )


def block(state: BucketState, *, now: float, seconds: float) -> BucketState:
    """The row after the provider refused a request and asked for ``seconds`` of quiet."""
    until = now + max(seconds, 0.0)
    if until <= state.blocked_until:
        return state
    return BucketState(request_at=state.request_at, tokens_at=state.tokens_at, blocked_until=until)


# --------------------------------------------------------------------------- configuration


def parse_rate_limits(text: str, *, name: str = "DPLAN_RATE_LIMITS") -> dict[str, RateLimit]:
    """``model=rpm:N,tpm:N; other=rpm:N`` (``*`` for every model not named) as a mapping.

    Entries are separated by ``;`` or new lines; each names a model (as given to litellm,
    e.g. ``openai/gpt-4o``) and at least one of ``rpm`` and ``tpm``, positive numbers.
    """
    limits: dict[str, RateLimit] = {}
    for raw in re.split(r"[;\n]", text):
        entry = raw.strip()
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if match is None:
            raise RateLimitConfigError(
                f"{name}: {entry!r} is not model=rpm:N,tpm:N (e.g. openai/gpt-4o=rpm:120)"
            )
        model = match.group("model")
        if model in limits:
            raise RateLimitConfigError(f"{name}: model {model!r} is given twice")
        limits[model] = _parse_spec(match.group("spec"), model=model, name=name)
    return limits


def _parse_spec(spec: str, *, model: str, name: str) -> RateLimit:
    values: dict[str, float] = {}
    for part in spec.split(","):
        key, sep, raw = part.strip().partition(":")
        key = key.strip().lower()
        if not sep or key not in ("rpm", "tpm"):
            raise RateLimitConfigError(
                f"{name}: {part.strip()!r} for {model!r} is not rpm:N or tpm:N"
            )
        if key in values:
            raise RateLimitConfigError(f"{name}: {key} is given twice for {model!r}")
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise RateLimitConfigError(
                f"{name}: {key} for {model!r} must be a positive number, got {raw.strip()!r}"
            )
        values[key] = value
    return RateLimit(rpm=values.get("rpm"), tpm=values.get("tpm"))


def limit_for(limits: Mapping[str, RateLimit], model: str) -> RateLimit | None:
    """The model's own limit, else the wildcard's, else None (not limited)."""
    return limits.get(model) or limits.get(WILDCARD)


def describe_rate_limits(limits: Mapping[str, RateLimit]) -> str:
    """The mapping written back the way ``parse_rate_limits`` reads it."""
    return "; ".join(f"{model}={limit.describe()}" for model, limit in limits.items())


def bucket_key(model: str, api_base: str | None, api_key: str | None) -> str:
    """The shared row's key: the model at its endpoint with its key; the key itself is
    never stored, only a short digest of it (two keys of one model are two buckets)."""
    digest = hashlib.sha256((api_key or "").encode()).hexdigest()[:16] if api_key else "-"
    return f"{model}|{api_base or '-'}|{digest}"


def format_duration(seconds: float) -> str:
    """``45s``, ``10m 3s``, ``1h 2m``, ``0.4s``: how long, at a glance."""
    if seconds < 10:
        return f"{round(seconds, 1):g}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h"] if hours else []
    if minutes:
        parts.append(f"{minutes}m")
    if secs and not hours:
        parts.append(f"{secs}s")
    return " ".join(parts) or "0s"
