"""A real local webhook receiver for the notify tests: scripted answers, verified signatures.

It verifies every request with the ``standardwebhooks`` package (the specification's own
reference implementation, independent of our sender), so a passing test means any
conforming receiver accepts what the worker sends. Answers follow a script (e.g. 500,
500, then 200); the last answer repeats.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError


def new_secret() -> str:
    """A ``whsec_`` secret of 32 random bytes, as the specification recommends."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass
class Received:
    """One request as the receiver saw it."""

    headers: dict[str, str]
    body: bytes
    verified: bool
    error: str | None
    answered: int

    @property
    def report(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.body)
        return data


@dataclass
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""


class WebhookReceiver:
    """An aiohttp server on 127.0.0.1 (``port`` 0: any free port) answering per ``script``;
    with ``hold``, each request waits for that event before it is answered."""

    def __init__(
        self,
        secret: str,
        script: Sequence[Answer],
        *,
        port: int = 0,
        hold: asyncio.Event | None = None,
    ) -> None:
        self._verifier = Webhook(secret)
        self._script = list(script)
        self._port = port
        self._hold = hold  # set: a request is answered only once it is set
        self.received: list[Received] = []
        self.arrived = asyncio.Event()
        self.delivered = asyncio.Event()
        self._runner: web.AppRunner | None = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/hooks/plan-ended"

    async def __aenter__(self) -> WebhookReceiver:
        app = web.Application()
        app.router.add_post("/hooks/plan-ended", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self._port)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None)
        assert sockets
        self._port = sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.arrived.set()
        if self._hold is not None:
            await self._hold.wait()
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            self._verifier.verify(body, headers)
            verified, error = True, None
        except WebhookVerificationError as err:
            verified, error = False, str(err)
        answer = self._script[min(len(self.received), len(self._script) - 1)]
        if not verified:  # a receiver refuses what it cannot verify
            answer = Answer(401, body="bad signature")
        self.received.append(Received(headers, body, verified, error, answer.status))
        if 200 <= answer.status < 300:
            self.delivered.set()
        return web.Response(status=answer.status, text=answer.body, headers=answer.headers)
