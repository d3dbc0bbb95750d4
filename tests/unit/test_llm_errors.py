"""The retry verdict for each kind of LLM failure, on exceptions built like litellm's own.

The end-to-end counterpart (real HTTP faults → litellm → classification) lives in
test_fake_provider.py; here each rule is pinned on its own, including the header forms
of Retry-After and the scrubbing of messages.
"""

from __future__ import annotations

import email.utils
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest

from durable_plans.activities.llm import import_litellm as lit
from durable_plans.activities.llm_errors import (
    MAX_MESSAGE_CHARS,
    LlmErrorClass,
    classify_llm_error,
    to_application_error,
)

KW = {"llm_provider": "openai", "model": "gpt-x"}


def response(status: int, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status, headers=headers, request=httpx.Request("POST", "http://127.0.0.1/v1")
    )


def rate_limit(headers: dict[str, str]) -> BaseException:
    exc: BaseException = lit().RateLimitError(
        message="slow down", response=response(429, headers), **KW
    )
    return exc


# --------------------------------------------------------------------------- retryable


@pytest.mark.parametrize(
    ("make", "expected_type"),
    [
        (lambda: rate_limit({}), "RateLimit"),
        (lambda: lit().Timeout(message="took too long", **KW), "Timeout"),
        (lambda: httpx.ReadTimeout("read timed out"), "Timeout"),
        (lambda: TimeoutError("deadline"), "Timeout"),
        (lambda: lit().APIConnectionError(message="refused", **KW), "Connection"),
        (lambda: httpx.ConnectError("refused"), "Connection"),
        (lambda: ConnectionResetError("reset by peer"), "Connection"),
        (lambda: lit().InternalServerError(message="boom", **KW), "ServerError"),
        (lambda: lit().ServiceUnavailableError(message="overloaded", **KW), "ServerError"),
        (lambda: lit().BadGatewayError(message="bad gateway", **KW), "ServerError"),
        (lambda: lit().APIError(status_code=409, message="conflict", **KW), "Conflict"),
        (lambda: lit().APIError(status_code=408, message="timeout", **KW), "Timeout"),
        (lambda: lit().APIError(status_code=529, message="overloaded", **KW), "ServerError"),
    ],
)
def test_transient_failures_are_retryable(make: Any, expected_type: str) -> None:
    c = classify_llm_error(make())
    assert (c.type, c.retryable) == (expected_type, True)


def test_unknown_exception_is_a_retryable_llm_error() -> None:
    c = classify_llm_error(ValueError("something odd"))
    assert (c.type, c.retryable, c.message) == ("LlmError", True, "something odd")


def test_a_wrapped_connection_error_is_reported_as_connection() -> None:
    # litellm reports a dropped connection as InternalServerError; the cause says more.
    litellm = lit()
    try:
        try:
            raise litellm.APIConnectionError(message="Connection error.", **KW)
        except Exception as inner:
            raise litellm.InternalServerError(message="Connection error.", **KW) from inner
    except Exception as exc:
        c = classify_llm_error(exc)
    assert (c.type, c.retryable) == ("Connection", True)


def test_an_unreadable_response_is_invalid_response_and_retryable() -> None:
    import json

    try:
        try:
            json.loads('{"choices": [')
        except json.JSONDecodeError as inner:
            raise lit().InternalServerError(message="Expecting value", **KW) from inner
    except Exception as exc:
        c = classify_llm_error(exc)
    assert (c.type, c.retryable) == ("InvalidResponse", True)


def test_a_cause_chain_cycle_does_not_hang() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert classify_llm_error(a).type == "LlmError"


# --------------------------------------------------------------------------- non-retryable


@pytest.mark.parametrize(
    ("make", "expected_type"),
    [
        (lambda: lit().BadRequestError(message="bad", **KW), "BadRequest"),
        (
            lambda: lit().ContextWindowExceededError(message="too long", **KW),
            "ContextWindowExceeded",
        ),
        (lambda: lit().ContentPolicyViolationError(message="no", **KW), "ContentPolicy"),
        (lambda: lit().AuthenticationError(message="bad key", **KW), "Authentication"),
        (
            lambda: lit().PermissionDeniedError(message="no", response=response(403), **KW),
            "PermissionDenied",
        ),
        (lambda: lit().NotFoundError(message="no model", **KW), "NotFound"),
        (
            lambda: lit().UnprocessableEntityError(message="bad", response=response(422), **KW),
            "UnprocessableEntity",
        ),
        (lambda: lit().BudgetExceededError(current_cost=2.0, max_budget=1.0), "BudgetExceeded"),
        # litellm raises a bare APIError for a 403 from an OpenAI-compatible server.
        (lambda: lit().APIError(status_code=403, message="forbidden", **KW), "PermissionDenied"),
        (lambda: lit().APIError(status_code=418, message="teapot", **KW), "ClientError"),
    ],
)
def test_permanent_failures_are_not_retryable(make: Any, expected_type: str) -> None:
    c = classify_llm_error(make())
    assert (c.type, c.retryable, c.retry_after_s) == (expected_type, False, None)


def test_a_422_reported_as_bad_request_is_unprocessable_entity() -> None:
    # What litellm's OpenAI mapping actually raises for an HTTP 422.
    exc = lit().BadRequestError(message="unprocessable", **KW)
    exc.status_code = 422
    assert classify_llm_error(exc).type == "UnprocessableEntity"


def test_retry_after_is_ignored_when_the_error_is_not_retryable() -> None:
    exc = lit().BadRequestError(message="bad", response=response(400, {"retry-after": "5"}), **KW)
    assert classify_llm_error(exc).retry_after_s is None


# --------------------------------------------------------------------------- Retry-After


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"Retry-After": "0.5"}, 0.5),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # ms is the precise one
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({}, None),
    ],
)
def test_retry_after_headers_on_the_response(
    headers: dict[str, str], expected: float | None
) -> None:
    assert classify_llm_error(rate_limit(headers)).retry_after_s == expected


def test_retry_after_as_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    seconds = classify_llm_error(rate_limit({"retry-after": when})).retry_after_s
    assert seconds is not None and 25.0 <= seconds <= 31.0


def test_retry_after_http_date_in_the_past_means_now() -> None:
    when = email.utils.formatdate(time.time() - 300, usegmt=True)
    assert classify_llm_error(rate_limit({"retry-after": when})).retry_after_s == 0.0


def test_retry_after_from_litellm_response_headers_attribute() -> None:
    # litellm's exception mapping copies provider headers here, as a plain dict at times.
    exc = lit().ServiceUnavailableError(message="overloaded", **KW)
    exc.litellm_response_headers = {"Retry-After-Ms": "3000"}
    c = classify_llm_error(exc)
    assert (c.type, c.retry_after_s) == ("ServerError", 3.0)


# --------------------------------------------------------------------------- messages


def test_message_is_scrubbed_of_secrets() -> None:
    key = "sk-proj-" + "A1b2C3d4" * 5
    exc = lit().AuthenticationError(message=f"Incorrect API key provided: {key}", **KW)
    c = classify_llm_error(exc)
    assert key not in c.message
    assert "[REDACTED" in c.message and "Incorrect API key provided" in c.message


def test_message_is_bounded() -> None:
    c = classify_llm_error(RuntimeError("x" * 10_000))
    assert len(c.message) == MAX_MESSAGE_CHARS
    assert c.message.startswith("xxx") and c.message.endswith("…")


def test_an_empty_message_falls_back_to_the_exception_name() -> None:
    assert classify_llm_error(TimeoutError()).message == "TimeoutError"


# --------------------------------------------------------------------------- Temporal


def test_application_error_carries_type_retryability_and_delay() -> None:
    err = to_application_error(LlmErrorClass("RateLimit", "slow down", True, 2.0))
    assert err.type == "RateLimit"
    assert err.non_retryable is False
    assert err.next_retry_delay == timedelta(seconds=2)
    assert err.message == "slow down"


def test_application_error_for_a_permanent_failure() -> None:
    err = to_application_error(classify_llm_error(lit().BadRequestError(message="bad", **KW)))
    assert err.type == "BadRequest"
    assert err.non_retryable is True
    assert err.next_retry_delay is None
