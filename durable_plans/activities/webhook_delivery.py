"""The plan-end webhook: POST the report, signed as the Standard Webhooks specification says.

One attempt per activity execution; Temporal owns the retries (``policies.notify_retry``),
so each attempt is visible in the workflow's history, waits between attempts cost no
worker slot, and a worker that dies mid-delivery hands the delivery to another. This
activity only classifies what the receiver said:

* 2xx: delivered;
* connection error, timeout, 408, 429, 5xx: ``WebhookUnavailable``, retried with backoff
  (a ``Retry-After`` becomes the next delay) until the delivery window closes;
* any other answer (4xx, an unfollowed 3xx): ``WebhookRejected``, never retried;
* signing secret missing or malformed: ``WebhookMisconfigured``, never retried.

Every failure carries a ``WebhookAttempt`` (attempt number, HTTP status, reason) so the
workflow reports how the delivery went. The secret is read from the worker's environment
at each attempt and appears in no payload, error or log line: reasons name the variable.

One ``httpx.AsyncClient`` serves every delivery of a worker (connection pooling; the
plugin closes it when the worker stops).
"""

from __future__ import annotations

import email.utils
import math
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_plans._errors import WebhookSecretError
from durable_plans.activities.log import activity_logger
from durable_plans.domain.contracts import ACT_DELIVER_WEBHOOK, WebhookAttempt, WebhookInput
from durable_plans.domain.failures import FailureType
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.domain.text_formats import one_line
from durable_plans.domain.webhook import signature_headers, signing_key

__all__ = [
    "MAX_RETRY_AFTER",
    "REQUEST_TIMEOUT_S",
    "NotifyActivities",
    "retry_after",
]

# Below the activity's start-to-close timeout (policies.notify_attempt_timeout), so a slow
# receiver is reported as a timeout of ours, with a reason, not as a lost attempt.
REQUEST_TIMEOUT_S = 20.0
# A Retry-After further out than this is taken as this: the delivery window bounds the
# whole delivery anyway, and one answer must not park it for days.
MAX_RETRY_AFTER = timedelta(hours=1)
_RETRYABLE_STATUS = frozenset({408, 429})
_BODY_EXCERPT_CHARS = 200
USER_AGENT = "durable-plans-webhook/1"


def retry_after(value: str | None, *, now: datetime | None = None) -> timedelta | None:
    """A ``Retry-After`` header (seconds or an HTTP date) as a delay; None if absent or
    unreadable. Capped at ``MAX_RETRY_AFTER``; a date in the past means no wait."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(timedelta(seconds=max(seconds, 0.0)), MAX_RETRY_AFTER)


def _where(url: str) -> str:
    """The receiver as a log line may show it: scheme, host and port only (a webhook's path
    or query often carries a token of its own)."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "[unparseable url]"
    return f"{parts.scheme}://{parts.hostname or ''}{port}"


def _excerpt(response: httpx.Response) -> str:
    try:
        text = response.text
    except (UnicodeDecodeError, LookupError):
        return ""
    return scrub_secrets(one_line(text))[:_BODY_EXCERPT_CHARS]


class NotifyActivities:
    """The webhook activity, bound to one worker's shared HTTP client and environment.

    ``environ`` is where signing secrets are looked up (the process environment by default,
    read at each attempt, so a secret set or fixed later is picked up by the next attempt);
    ``client`` replaces the worker's own HTTP client (tests).
    """

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._environ = environ
        self._client = client
        self._owns_client = client is None

    def _http(self) -> httpx.AsyncClient:
        # Made on first use, inside the worker's event loop, and kept for every later call.
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(REQUEST_TIMEOUT_S),
                follow_redirects=False,
                headers={"user-agent": USER_AGENT},
            )
        return self._client

    async def aclose(self) -> None:
        """Close the shared client (when this object made it); a later call makes a new one."""
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            await client.aclose()

    @activity.defn(name=ACT_DELIVER_WEBHOOK)
    async def deliver_webhook(self, inp: WebhookInput) -> WebhookAttempt:
        """One signed POST of the report; raises (see the module doc) unless delivered."""
        attempt = activity.info().attempt
        log = activity_logger(webhook_id=inp.webhook_id, receiver=_where(inp.url), attempt=attempt)
        environ = os.environ if self._environ is None else self._environ
        try:
            key = signing_key(environ.get(inp.secret_env), inp.secret_env)
        except WebhookSecretError as err:
            log.error("webhook.misconfigured", reason=str(err))
            raise _failure(FailureType.WEBHOOK_MISCONFIGURED, attempt, None, str(err)) from None

        body = inp.report.model_dump_json().encode()
        headers = signature_headers(key, inp.webhook_id, int(time.time()), body)
        headers["content-type"] = "application/json"
        try:
            response = await self._http().post(inp.url, content=body, headers=headers)
        except httpx.TimeoutException:
            reason = f"no answer within {REQUEST_TIMEOUT_S:g}s"
            log.warning("webhook.unavailable", reason=reason)
            raise _failure(FailureType.WEBHOOK_UNAVAILABLE, attempt, None, reason) from None
        except httpx.HTTPError as err:
            reason = f"{type(err).__name__}: {scrub_secrets(one_line(str(err)))}"[:300]
            log.warning("webhook.unavailable", reason=reason)
            raise _failure(FailureType.WEBHOOK_UNAVAILABLE, attempt, None, reason) from None

        status = response.status_code
        if 200 <= status < 300:
            log.info("webhook.delivered", status=status)
            return WebhookAttempt(attempt=attempt, status_code=status)
        detail = _excerpt(response)
        reason = f"HTTP {status}" + (f": {detail}" if detail else "")
        if status in _RETRYABLE_STATUS or status >= 500:
            delay = retry_after(response.headers.get("retry-after"))
            log.warning("webhook.unavailable", status=status, retry_after_s=_seconds(delay))
            raise _failure(
                FailureType.WEBHOOK_UNAVAILABLE, attempt, status, reason, next_retry_delay=delay
            )
        if 300 <= status < 400:
            reason = f"HTTP {status}: redirects are not followed (a signed body is sent once)"
        log.error("webhook.rejected", status=status)
        raise _failure(FailureType.WEBHOOK_REJECTED, attempt, status, reason)


def _seconds(delay: timedelta | None) -> float | None:
    return delay.total_seconds() if delay is not None else None


def _failure(
    type_: FailureType,
    attempt: int,
    status: int | None,
    reason: str,
    *,
    next_retry_delay: timedelta | None = None,
) -> ApplicationError:
    """The attempt's failure; only ``WebhookUnavailable`` is retryable."""
    return ApplicationError(
        reason,
        WebhookAttempt(attempt=attempt, status_code=status, reason=reason),
        type=type_.value,
        non_retryable=type_ is not FailureType.WEBHOOK_UNAVAILABLE,
        next_retry_delay=next_retry_delay if next_retry_delay else None,
    )
