"""``dplan mcp``: the MCP server (``durable_plans/mcp_server.py``) over stdio, or streamable
HTTP on ``--http HOST:PORT`` (loopback unless a bearer ``--token`` guards it).

Over stdio, standard output is the protocol's: everything this process says goes to
standard error.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, Usage, read_settings, reported
from durable_plans.client import Client
from durable_plans.mcp_server import build_mcp_server
from durable_plans.settings import Settings
from durable_plans.ui.security import is_local_host

Scope = MutableMapping[str, Any]
Asgi = Callable[
    [Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]
]


def http_address(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); ``Usage`` naming what is wrong."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise Usage(f"error: --http {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8400")
    return host.strip("[]"), int(port)


def with_token(app: Asgi, token: str) -> Asgi:
    """``app`` answering 401 to a request without ``Authorization: Bearer TOKEN``."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"a bearer token is needed\n"})
                return
        await app(scope, receive, send)

    return guarded


async def mcp_command(
    http: str | None, token: str | None, *, operator: str | None, settings: Settings | None = None
) -> int:
    ensure_logging(json=False, level="WARNING")  # to standard error

    async def body() -> int:
        address = http_address(http) if http else None
        if address and not is_local_host(address[0]) and not token:
            raise Usage(
                f"error: --http {http}: a non-local address needs --token (clients send "
                "Authorization: Bearer TOKEN), and TLS in front"
            )
        client = await Client.connect(read_settings(settings), operator=operator)
        try:
            server = build_mcp_server(client)
            if address is None:
                await server.run_stdio_async()
                return Exit.OK
            import uvicorn

            host, port = address
            app: Asgi = server.streamable_http_app(host=host)
            if token:
                app = with_token(app, token)
            config = uvicorn.Config(app, host=host, port=port, log_level="warning")
            await uvicorn.Server(config).serve()
            return Exit.OK
        finally:
            await client.close()

    return await reported(body())
