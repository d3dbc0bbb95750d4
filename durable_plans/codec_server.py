"""``dplan codec-server``: Temporal Web's (and the ``temporal`` CLI's) remote codec endpoint.

With payload encryption on, the Temporal server holds only ciphertext, so Temporal Web
shows ``binary/encrypted`` blobs. Temporal Web can send those payloads to a *codec
server* of ours, from the operator's browser, and show what comes back: this process,
which holds the keys, decrypts them for a person who can reach it, and the server never
sees a key or a plaintext.

The protocol is Temporal's remote codec protocol: ``POST /decode`` and ``POST /encode``
take and return a ``Payloads`` message in protobuf JSON (``{"payloads": [{"metadata":
{...}, "data": "<base64>"}]}``); the UI adds an ``X-Namespace`` header. The same routes
under a namespace prefix (``/{namespace}/decode``), the form older tools used, are served
too. The browser calls it cross-origin, so CORS allows the UI's origin (``--cors-origin``,
default the UI of the configured server) and answers the ``OPTIONS`` preflight.

Anyone who can reach this server can decrypt with it: it listens on localhost by default;
behind a shared deployment, put it behind authentication (the UI can forward the user's
access token, see the README).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import TextIO

from aiohttp import hdrs, web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from durable_plans._errors import PayloadKeyError
from durable_plans.payload_codec import EncryptionCodec

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MAX_BODY_BYTES",
    "CodecServer",
    "build_app",
    "normalize_origin",
    "run_codec_server",
    "running_codec_server",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081
# One payload may reach 2 MiB on the server side, and the UI sends a whole event's worth.
MAX_BODY_BYTES = 16 * 1024 * 1024
_DEFAULT_ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"
_HEADER_LIST = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*$")
_PREFLIGHT_MAX_AGE_S = "600"

_CODEC_KEY = web.AppKey("codec", EncryptionCodec)
_ORIGINS_KEY = web.AppKey("origins", frozenset[str])


def normalize_origin(url: str) -> str:
    """``http://localhost:8233/`` → ``http://localhost:8233``: an Origin header never
    carries a path or a trailing slash, so a configured URL is compared without them."""
    text = url.strip().rstrip("/")
    if text == "*":
        return text
    match = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]+)", text)
    return (match.group(1) if match else text).lower()


def _allowed_origin(request: web.Request) -> str | None:
    """The request's Origin when CORS allows it (``*`` allows any)."""
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None:
        return None
    allowed = request.app[_ORIGINS_KEY]
    if "*" in allowed or normalize_origin(origin) in allowed:
        return origin
    return None


def _with_cors(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    origin = _allowed_origin(request)
    response.headers[hdrs.VARY] = "Origin"
    if origin is not None:
        response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
        # The UI may send cookies or its access token (Authorization) with the request.
        response.headers[hdrs.ACCESS_CONTROL_ALLOW_CREDENTIALS] = "true"
    return response


async def _preflight(request: web.Request) -> web.StreamResponse:
    """The browser asks before a cross-origin POST with JSON and ``X-Namespace``."""
    if _allowed_origin(request) is None:
        return web.Response(status=403, text="origin not allowed by --cors-origin\n")
    response = web.Response(status=204)
    response.headers[hdrs.ACCESS_CONTROL_ALLOW_METHODS] = "POST, OPTIONS"
    requested = request.headers.get(hdrs.ACCESS_CONTROL_REQUEST_HEADERS, "").strip()
    response.headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = (
        requested if requested and _HEADER_LIST.match(requested) else _DEFAULT_ALLOWED_HEADERS
    )
    response.headers[hdrs.ACCESS_CONTROL_MAX_AGE] = _PREFLIGHT_MAX_AGE_S
    return _with_cors(request, response)


def _error(request: web.Request, status: int, message: str) -> web.StreamResponse:
    return _with_cors(request, web.json_response({"message": message}, status=status))


async def _apply(request: web.Request, *, decode: bool) -> web.StreamResponse:
    codec = request.app[_CODEC_KEY]
    try:
        body = await request.read()
        payloads = json_format.Parse(body, Payloads())
    except (json_format.ParseError, UnicodeDecodeError, ValueError) as err:
        return _error(request, 400, f"the body is not a Payloads message in JSON: {err}")
    try:
        converted = await (codec.decode if decode else codec.encode)(payloads.payloads)
    except PayloadKeyError as err:
        return _error(request, 400, str(err))
    response = web.Response(
        text=json_format.MessageToJson(Payloads(payloads=converted)),
        content_type="application/json",
    )
    return _with_cors(request, response)


async def _decode(request: web.Request) -> web.StreamResponse:
    return await _apply(request, decode=True)


async def _encode(request: web.Request) -> web.StreamResponse:
    return await _apply(request, decode=False)


async def _health(request: web.Request) -> web.StreamResponse:
    return _with_cors(request, web.json_response({"status": "ok"}))


def build_app(codec: EncryptionCodec, cors_origins: Iterable[str]) -> web.Application:
    """The codec endpoint's routes on ``codec``; ``cors_origins`` may hold ``*``."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[_CODEC_KEY] = codec
    app[_ORIGINS_KEY] = frozenset(normalize_origin(o) for o in cors_origins if o.strip())
    for prefix in ("", "/{namespace}"):
        app.router.add_post(f"{prefix}/decode", _decode)
        app.router.add_post(f"{prefix}/encode", _encode)
        app.router.add_route("OPTIONS", f"{prefix}/decode", _preflight)
        app.router.add_route("OPTIONS", f"{prefix}/encode", _preflight)
    app.router.add_get("/health", _health)
    return app


@dataclass(frozen=True)
class CodecServer:
    """A running codec server: ``url`` is what ``--ui-codec-endpoint`` takes."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@contextlib.asynccontextmanager
async def running_codec_server(
    codec: EncryptionCodec,
    cors_origins: Iterable[str],
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
) -> AsyncIterator[CodecServer]:
    """Serve until the block exits (``port=0``: any free port, read it from the result)."""
    runner = web.AppRunner(build_app(codec, cors_origins), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0]
        yield CodecServer(host, int(bound[1]))
    finally:
        await runner.cleanup()


async def run_codec_server(
    codec: EncryptionCodec,
    cors_origins: Iterable[str],
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    namespace: str = "default",
    out: TextIO | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (or forever), after printing how to point the UI and the
    CLI at it. Key ids are printed, never keys."""
    out = out or sys.stdout
    origins = sorted({normalize_origin(o) for o in cors_origins})
    async with running_codec_server(codec, origins, host=host, port=port) as server:
        keyring = codec.keyring
        print(
            f"codec server on {server.url} (decrypts key ids: {', '.join(keyring.ids)}; "
            f"encrypts with '{keyring.current_id}')\n"
            f"  CORS allows: {', '.join(origins) or 'no browser origin'}\n"
            f"  dev server:  temporal server start-dev --ui-codec-endpoint {server.url}\n"
            f"  CLI:         temporal workflow show --namespace {namespace} "
            f"--codec-endpoint {server.url} --workflow-id PLAN_ID",
            file=out,
            flush=True,
        )
        await (stop or asyncio.Event()).wait()
