"""A Temporal client wired for durable-plans, and the Temporal Web links to what it runs.

Below the client layer on purpose: the worker (``worker.py``), the embedded server
(``embedded.py``), ``dplan replay`` and ``Client.connect`` all connect the same way, and
none of them must import ``durable_plans.client`` to do it (``tests/unit/test_layers.py``).
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote, urlsplit

from temporalio.client import Client

from durable_plans._errors import TemporalUnreachable
from durable_plans.connection import connect_options
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.settings import Settings

__all__ = ["connect", "ui_base_for", "web_url"]

_CONNECT_TIMEOUT_S = 10.0
# Temporal Cloud endpoints (namespace and regional API key endpoints) and the one web UI
# that serves every Cloud namespace under the same ``/namespaces/{ns}/workflows/{id}``.
_CLOUD_SUFFIXES = (".tmprl.cloud", ".api.temporal.io")
_CLOUD_UI = "https://cloud.temporal.io"


async def connect(settings: Settings, *, identity: str | None = None) -> Client:
    """A client wired by ``DurablePlansPlugin``: our payload encoding, and a worker built
    from it gets our workflows and sandbox settings.

    Address, namespace, TLS, API key and gRPC metadata are the ones Temporal's environment
    configuration resolved into ``settings`` (``connection.py``).

    Raises ``TemporalUnreachable`` (naming the address) instead of the SDK's transport
    error, and gives up after a bounded time instead of hanging on a black-holed host.
    ``identity`` (default: the SDK's ``pid@host``) is what the server records as the
    client of each request, e.g. the operator who approved a tool call.
    """
    address = settings.temporal_address
    try:
        return await asyncio.wait_for(
            Client.connect(
                address,
                namespace=settings.temporal_namespace,
                **connect_options(settings.temporal_access),
                plugins=[DurablePlansPlugin(settings=settings)],
                identity=identity,
            ),
            timeout=_CONNECT_TIMEOUT_S,
        )
    except TimeoutError as err:
        raise TemporalUnreachable(address, f"no answer within {_CONNECT_TIMEOUT_S:g}s") from err
    except RuntimeError as err:
        raise TemporalUnreachable(address, _short_reason(err)) from err


# The SDK's transport errors are Rust debug dumps; these say what to change instead.
_TLS_CLIENT_CERT = "TEMPORAL_TLS_CLIENT_CERT_PATH / TEMPORAL_TLS_CLIENT_KEY_PATH"
_UNTRUSTED = (
    "TLS: the server's certificate is not signed by a CA this client trusts "
    "(set TEMPORAL_TLS_SERVER_CA_CERT_PATH)"
)
_REASONS = (
    ("Connection refused", "connection refused"),
    ("dns error", "host name not found"),
    ("timed out", "connection timed out"),
    ("UnknownIssuer", _UNTRUSTED),
    ("BadSignature", _UNTRUSTED),
    (
        "NotValidForName",
        "TLS: the server's certificate is not valid for the name used "
        "(set TEMPORAL_TLS_SERVER_NAME to a name it carries)",
    ),
    (
        "InvalidCertificate",
        "TLS: the server's certificate was refused "
        "(check TEMPORAL_TLS_SERVER_CA_CERT_PATH and TEMPORAL_TLS_SERVER_NAME)",
    ),
    ("InvalidContentType", "TLS: the server does not speak TLS (set TEMPORAL_TLS=false)"),
    (
        "CertificateRequired",
        f"TLS: the server requires a client certificate (set {_TLS_CLIENT_CERT})",
    ),
    (
        "close_notify",
        "TLS: the server closed the connection during set-up; it may require a client "
        f"certificate ({_TLS_CLIENT_CERT})",
    ),
    (
        "broken pipe",
        "the server closed the connection during set-up; it may expect TLS "
        "(set TEMPORAL_TLS=true or TEMPORAL_TLS_SERVER_CA_CERT_PATH)",
    ),
    (
        "code: Unauthenticated",
        "the server rejected the credentials (check TEMPORAL_API_KEY or the client certificate)",
    ),
    (
        "code: PermissionDenied",
        "permission denied: the credentials are not allowed in this namespace",
    ),
)


def _short_reason(err: BaseException) -> str:
    text = str(err)
    for marker, reason in _REASONS:
        if marker.lower() in text.lower():
            return reason
    return text.splitlines()[0][:200] if text else type(err).__name__


def ui_base_for(settings: Settings) -> str:
    """Where Temporal Web is: ``TEMPORAL_UI_URL`` when set (docker-compose serves it on
    8080), Temporal Cloud's UI for a ``*.tmprl.cloud`` address, else the dev server's
    convention, gRPC port + 1000."""
    if settings.ui_url:
        return settings.ui_url.rstrip("/")
    address = settings.temporal_address
    parts = urlsplit(address if "//" in address else f"//{address}")
    host = parts.hostname or "localhost"
    if host.endswith(_CLOUD_SUFFIXES):
        return _CLOUD_UI
    port = (parts.port or 7233) + 1000
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"http://{host}:{port}"


def web_url(settings_or_ui_base: Settings | str, namespace: str, workflow_id: str) -> str:
    """Temporal Web link to a workflow (the UI redirects to its latest run)."""
    base = (
        ui_base_for(settings_or_ui_base)
        if isinstance(settings_or_ui_base, Settings)
        else settings_or_ui_base
    ).rstrip("/")
    return f"{base}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"
