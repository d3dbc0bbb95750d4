"""Webhook notification rules: what a plan's ``notify`` may say, and how a delivery is signed.

Pure and deterministic (standard library only): the plan loader and PlanWorkflow check a
plan's ``notify`` with :func:`notify_problems`, and the delivery activity signs with
:func:`signature_headers`. Signing follows the Standard Webhooks specification
(https://www.standardwebhooks.com/): a ``whsec_``-prefixed base64 secret, and the headers
``webhook-id``, ``webhook-timestamp`` and ``webhook-signature: v1,<base64 HMAC-SHA256 of
"id.timestamp.body">``, so any receiver can verify with the specification's libraries.

The secret itself never appears in a plan, a payload or a log: the plan names the worker's
environment variable that holds it, and every error here names the variable, never the
value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from typing import Final
from urllib.parse import urlsplit

from durable_plans._errors import WebhookSecretError
from durable_plans.domain.models import Notify
from durable_plans.domain.secrets import contains_secret

__all__ = [
    "ENV_NAME_PATTERN",
    "MAX_DELIVER_FOR_S",
    "MIN_SECRET_BYTES",
    "NOTIFY_MEMO_KEY",
    "SECRET_PREFIX",
    "WebhookSecretError",
    "notify_problems",
    "signature",
    "signature_headers",
    "signing_key",
]

SECRET_PREFIX: Final = "whsec_"
# The memo field where PlanWorkflow records its webhook's DeliveryOutcome (as JSON), read
# by ``dplan status`` and shown by Temporal Web.
NOTIFY_MEMO_KEY: Final = "notify"
# The specification asks for 24 to 64 random bytes; a shorter key is guessable.
MIN_SECRET_BYTES: Final = 24
ENV_NAME_PATTERN: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_URL_CHARS: Final = 2048
MIN_DELIVER_FOR_S: Final = 1.0
MAX_DELIVER_FOR_S: Final = 7 * 24 * 3600.0


def notify_problems(notify: Notify) -> list[str]:
    """One line per problem of a plan's ``notify`` (empty when it is usable)."""
    out = [f"notify.webhook: {p}" for p in _url_problems(notify.webhook)]
    name = notify.secret_env
    if name.startswith(SECRET_PREFIX) or contains_secret(name):
        out.append(
            "notify.secret_env: must name the worker's environment variable that holds the "
            "secret, not the secret itself (remove it from the plan and rotate it)"
        )
    elif not ENV_NAME_PATTERN.fullmatch(name):
        out.append(
            f"notify.secret_env: {name[:60]!r} is not an environment variable name "
            "(use 1-128 of A-Z a-z 0-9 _, not starting with a digit)"
        )
    seconds = notify.deliver_for_s
    if seconds is not None and not MIN_DELIVER_FOR_S <= seconds <= MAX_DELIVER_FOR_S:
        out.append(
            f"notify.deliver_for_s: must be between {MIN_DELIVER_FOR_S:g} and "
            f"{MAX_DELIVER_FOR_S:g} seconds, got {seconds:g}"
        )
    return out


def _url_problems(url: str) -> list[str]:
    if not url.strip():
        return ["must not be empty (an http or https URL)"]
    if len(url) > MAX_URL_CHARS:
        return [f"too long ({len(url)} characters, limit {MAX_URL_CHARS})"]
    if any(c.isspace() or ord(c) < 32 for c in url):
        return ["must not contain whitespace or control characters"]
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as err:
        return [f"not a valid URL ({err})"]
    if parts.scheme.lower() not in ("http", "https"):
        shown = parts.scheme or "none"
        return [f"must be an http or https URL, got scheme {shown!r}"]
    if not parts.hostname:
        return ["has no host"]
    if parts.username is not None or parts.password is not None:
        return [
            "must not carry credentials (user:password@); plans are stored in Temporal's "
            "history, and the signature authenticates the sender"
        ]
    if contains_secret(url):
        return ["seems to contain a secret (an API key or token); keep secrets out of plans"]
    return []


def signing_key(secret: str | None, env_name: str) -> bytes:
    """The HMAC key of a ``whsec_…`` secret read from ``env_name``.

    Raises WebhookSecretError (naming the variable, never the value) when it is unset,
    lacks the prefix, is not base64, or is shorter than the specification allows.
    """
    if secret is None or not secret.strip():
        raise WebhookSecretError(f"{env_name} is not set in the worker's environment")
    secret = secret.strip()
    if not secret.startswith(SECRET_PREFIX):
        raise WebhookSecretError(f"{env_name} does not hold a {SECRET_PREFIX}… secret")
    encoded = secret[len(SECRET_PREFIX) :]
    try:
        # Unpadded base64 is common in the wild; the reference libraries accept it too.
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise WebhookSecretError(
            f"{env_name} is malformed: the part after {SECRET_PREFIX} is not base64"
        ) from None
    if len(key) < MIN_SECRET_BYTES:
        raise WebhookSecretError(
            f"{env_name} is too short: {len(key)} bytes after decoding, the specification "
            f"asks for at least {MIN_SECRET_BYTES}"
        )
    return key


def signature(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` as the specification defines it."""
    signed = webhook_id.encode() + b"." + str(timestamp).encode() + b"." + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_headers(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers for one delivery attempt."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(key, webhook_id, timestamp, body),
    }
