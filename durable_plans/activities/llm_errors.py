"""Which LLM failures are worth retrying, and how long to wait: litellm errors → our policy.

Temporal owns retries (litellm's are off), so it needs an honest verdict per failure:
a rate limit or a dropped connection heals with time, while a bad request, a revoked key
or an oversized context fails identically on every attempt and must fail the subtask
at once (a failure is reported, never papered over). The verdict is a pure mapping, unit-testable
without Temporal; ``to_application_error`` turns it into what the activity raises.

Exceptions are recognised by the class names in their MRO rather than by ``isinstance``
against imported classes: litellm, openai, httpx and the standard library all qualify,
and this module never imports litellm (slow, and not needed to read a class name).
Where litellm hides the real cause (a dropped connection surfaces as
``InternalServerError``, a 403 as a bare ``APIError``), the ``__cause__`` chain and
the HTTP status fill in.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from durable_plans.domain.failures import FailureType
from durable_plans.domain.secrets import scrub_secrets

if TYPE_CHECKING:
    from temporalio.exceptions import ApplicationError

__all__ = ["MAX_MESSAGE_CHARS", "LlmErrorClass", "classify_llm_error", "to_application_error"]

MAX_MESSAGE_CHARS = 2000


@dataclass(frozen=True)
class LlmErrorClass:
    """The verdict on one failed call; ``type`` is the stable name reports show (one of
    ``FailureType``'s values)."""

    type: str
    message: str
    retryable: bool
    retry_after_s: float | None


# Class name → (type, retryable). The most derived class wins, so litellm's
# ContextWindowExceededError beats the BadRequestError it extends.
_BY_CLASS: Mapping[str, tuple[FailureType, bool]] = {
    "ContextWindowExceededError": (FailureType.CONTEXT_WINDOW_EXCEEDED, False),
    "ContentPolicyViolationError": (FailureType.CONTENT_POLICY, False),
    "BudgetExceededError": (FailureType.BUDGET_EXCEEDED, False),
    "PaymentRequiredError": (FailureType.PAYMENT_REQUIRED, False),
    "AuthenticationError": (FailureType.AUTHENTICATION, False),
    "PermissionDeniedError": (FailureType.PERMISSION_DENIED, False),
    "NotFoundError": (FailureType.NOT_FOUND, False),
    "UnprocessableEntityError": (FailureType.UNPROCESSABLE_ENTITY, False),
    "RateLimitError": (FailureType.RATE_LIMIT, True),
    # litellm.Timeout, openai.APITimeoutError, httpx.TimeoutException, builtin TimeoutError
    "Timeout": (FailureType.TIMEOUT, True),
    "APITimeoutError": (FailureType.TIMEOUT, True),
    "TimeoutException": (FailureType.TIMEOUT, True),
    "TimeoutError": (FailureType.TIMEOUT, True),
    # openai/litellm APIConnectionError, httpx transport errors, builtin ConnectionError
    "APIConnectionError": (FailureType.CONNECTION, True),
    "TransportError": (FailureType.CONNECTION, True),
    "ConnectionError": (FailureType.CONNECTION, True),
    "ServerDisconnectedError": (FailureType.CONNECTION, True),
    # A response that could not be read is a provider hiccup, not a verdict on the request.
    "APIResponseValidationError": (FailureType.INVALID_RESPONSE, True),
    "JSONDecodeError": (FailureType.INVALID_RESPONSE, True),
    "InternalServerError": (FailureType.SERVER_ERROR, True),
    "ServiceUnavailableError": (FailureType.SERVER_ERROR, True),
    "BadGatewayError": (FailureType.SERVER_ERROR, True),
    "ConflictError": (FailureType.CONFLICT, True),
    "BadRequestError": (FailureType.BAD_REQUEST, False),
}

# Types a generic wrapper may hide; found in the cause chain they are more precise.
_CAUSE_REFINES = frozenset(
    {FailureType.TIMEOUT, FailureType.CONNECTION, FailureType.INVALID_RESPONSE}
)
_GENERIC = frozenset({FailureType.SERVER_ERROR, FailureType.LLM_ERROR})

_BY_STATUS: Mapping[int, tuple[FailureType, bool]] = {
    400: (FailureType.BAD_REQUEST, False),
    401: (FailureType.AUTHENTICATION, False),
    402: (FailureType.PAYMENT_REQUIRED, False),
    403: (FailureType.PERMISSION_DENIED, False),
    404: (FailureType.NOT_FOUND, False),
    408: (FailureType.TIMEOUT, True),
    409: (FailureType.CONFLICT, True),
    422: (FailureType.UNPROCESSABLE_ENTITY, False),
    429: (FailureType.RATE_LIMIT, True),
}


def classify_llm_error(exc: BaseException) -> LlmErrorClass:
    """The retry verdict, short type, scrubbed message and Retry-After for ``exc``."""
    kind, retryable = _classify(exc)
    retry_after = _retry_after_s(exc) if retryable else None
    return LlmErrorClass(
        type=kind.value, message=_message(exc), retryable=retryable, retry_after_s=retry_after
    )


def to_application_error(c: LlmErrorClass) -> ApplicationError:
    """What the LLM activity raises: Temporal reads type, retryability and the delay."""
    from temporalio.exceptions import ApplicationError

    delay = timedelta(seconds=c.retry_after_s) if c.retry_after_s is not None else None
    return ApplicationError(
        c.message, type=str(c.type), non_retryable=not c.retryable, next_retry_delay=delay
    )


# --------------------------------------------------------------------------- classification


def _classify(exc: BaseException) -> tuple[FailureType, bool]:
    found = _by_class(exc)
    # A 422 arrives as BadRequestError, a 504 as Timeout: the class is right except for
    # the bad-request family, where the status says which 4xx it really was.
    status = _status_code(exc)
    if found is not None and found[0] == FailureType.BAD_REQUEST and status is not None:
        found = _BY_STATUS.get(status, found)
    if found is None and status is not None:
        found = _by_status(status)
    if found is None:
        found = (FailureType.LLM_ERROR, True)
    if found[0] in _GENERIC:
        for cause in _causes(exc):
            refined = _by_class(cause)
            if refined is not None and refined[0] in _CAUSE_REFINES:
                return refined
    return found


def _by_class(exc: BaseException) -> tuple[FailureType, bool] | None:
    for cls in type(exc).__mro__:
        hit = _BY_CLASS.get(cls.__name__)
        if hit is not None:
            return hit
    return None


def _by_status(status: int) -> tuple[FailureType, bool] | None:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if 500 <= status <= 599:
        return (FailureType.SERVER_ERROR, True)
    if 400 <= status <= 499:
        return (FailureType.CLIENT_ERROR, False)
    return None


def _status_code(exc: BaseException) -> int | None:
    for candidate in (getattr(exc, "status_code", None), _response_attr(exc, "status_code")):
        if isinstance(candidate, int) and 100 <= candidate <= 599:
            return candidate
    return None


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The explicit/implicit cause chain below ``exc``, guarded against cycles."""
    seen = {id(exc)}
    current = exc.__cause__ or exc.__context__
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _response_attr(exc: BaseException, name: str) -> Any:
    # openai's APIStatusError.response is a property that may raise on odd subclasses.
    try:
        response = getattr(exc, "response", None)
    except Exception:
        return None
    return getattr(response, name, None) if response is not None else None


# --------------------------------------------------------------------------- Retry-After


def _retry_after_s(exc: BaseException) -> float | None:
    """Seconds the provider asked us to wait, from any header source litellm keeps.

    ``retry-after-ms`` is preferred (more precise, and what OpenAI sends); ``retry-after``
    may be seconds or an HTTP-date. litellm copies provider headers onto
    ``litellm_response_headers``; the raw response and ``headers`` are fallbacks.
    """
    for headers in _header_sources(exc):
        ms = _parse_seconds(_header(headers, "retry-after-ms"))
        if ms is not None:
            return ms / 1000.0
        value = _header(headers, "retry-after")
        seconds = _parse_seconds(value)
        if seconds is None and value:
            seconds = _parse_http_date(value)
        if seconds is not None:
            return seconds
    return None


def _header_sources(exc: BaseException) -> Iterator[Any]:
    for source in (
        getattr(exc, "litellm_response_headers", None),
        _response_attr(exc, "headers"),
        getattr(exc, "headers", None),
    ):
        if source is not None and hasattr(source, "get"):
            yield source


def _header(headers: Any, name: str) -> str | None:
    value = headers.get(name)
    if value is None and isinstance(headers, Mapping):
        # Plain dicts are case-sensitive; httpx.Headers is not.
        value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    return None if value is None else str(value).strip()


def _parse_seconds(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    if seconds != seconds or seconds < 0 or seconds == float("inf"):  # NaN, negative, inf
        return None
    return seconds


def _parse_http_date(value: str) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


# --------------------------------------------------------------------------- message


def _message(exc: BaseException) -> str:
    """A one-glance message for reports and Temporal Web, scrubbed and bounded.

    Provider errors may quote request headers or keys, and reports are persisted, so the
    text is scrubbed before it leaves here; the bound keeps payloads and UIs sane.
    """
    try:
        text = str(exc).strip()
    except Exception:
        text = ""
    text = scrub_secrets(text or type(exc).__name__)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text
