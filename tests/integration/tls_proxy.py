"""A TLS-terminating proxy in front of the plain dev server, for real TLS/mTLS handshakes.

The dev server has no TLS option, so tests put this in front of it: it terminates TLS with
a test certificate (optionally requiring a client certificate, as Temporal Cloud's mTLS
does), forwards the decrypted bytes to the dev server unchanged (gRPC over HTTP/2 passes
through a byte pipe as is), and records what a server would see: the client certificate's
subject and the HTTP/2 request headers, HPACK-decoded, so a test can check that
``authorization: Bearer <key>`` really went over the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

import hpack

from tests.certs import Pki

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HEADERS, _CONTINUATION = 0x1, 0x9
_END_HEADERS, _PADDED, _PRIORITY = 0x4, 0x8, 0x20


@dataclass
class TappedConnection:
    """One client connection as the server side saw it."""

    client_cert_cn: str | None
    alpn: str | None
    requests: list[dict[str, str]] = field(default_factory=list)


class _HeaderTap:
    """Reads the client→server HTTP/2 stream and decodes every header block, in order
    (HPACK state is per connection, so no block may be skipped)."""

    def __init__(self, record: TappedConnection) -> None:
        self._record = record
        self._buffer = b""
        self._preface_seen = False
        self._decoder = hpack.Decoder()
        self._block = b""

    def feed(self, data: bytes) -> None:
        self._buffer += data
        if not self._preface_seen:
            if len(self._buffer) < len(_PREFACE):
                return
            self._buffer = self._buffer[len(_PREFACE) :]
            self._preface_seen = True
        while len(self._buffer) >= 9:
            length = int.from_bytes(self._buffer[:3], "big")
            if len(self._buffer) < 9 + length:
                return
            kind, flags = self._buffer[3], self._buffer[4]
            payload = self._buffer[9 : 9 + length]
            self._buffer = self._buffer[9 + length :]
            if kind == _HEADERS:
                if flags & _PADDED:
                    pad = payload[0]
                    payload = payload[1 : len(payload) - pad]
                if flags & _PRIORITY:
                    payload = payload[5:]
                self._block = payload
            elif kind == _CONTINUATION:
                self._block += payload
            else:
                continue
            if flags & _END_HEADERS:
                headers = self._decoder.decode(self._block)
                self._record.requests.append({str(k): str(v) for k, v in headers})
                self._block = b""


class TlsProxy:
    """``async with TlsProxy(upstream, pki) as proxy``: TLS on ``proxy.address``."""

    def __init__(self, upstream: str, pki: Pki, *, require_client_cert: bool) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(pki.server_cert, pki.server_key)
        self._context.set_alpn_protocols(["h2"])
        if require_client_cert:
            self._context.load_verify_locations(pki.ca_cert)
            self._context.verify_mode = ssl.CERT_REQUIRED
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections: list[TappedConnection] = []
        self.address = ""

    async def __aenter__(self) -> TlsProxy:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", 0, ssl=self._context, ssl_handshake_timeout=5
        )
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def headers_seen(self) -> list[dict[str, str]]:
        return [request for conn in self.connections for request in conn.requests]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = writer.get_extra_info("peercert")
        cn = None
        if peer:
            for rdn in peer.get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        cn = value
        ssl_object = writer.get_extra_info("ssl_object")
        record = TappedConnection(
            client_cert_cn=cn,
            alpn=ssl_object.selected_alpn_protocol() if ssl_object else None,
        )
        self.connections.append(record)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        tap = _HeaderTap(record)
        try:
            await asyncio.gather(
                _pipe(reader, up_writer, tap.feed),
                _pipe(up_reader, writer, None),
            )
        except asyncio.CancelledError:
            pass  # the proxy is closing; a cancelled handler would only add noise to the log
        finally:
            for w in (writer, up_writer):
                w.close()
            self._tasks.discard(task)


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    tap: Callable[[bytes], None] | None,
) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            if tap is not None:
                tap(data)
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError, RuntimeError):
        if writer.can_write_eof():
            writer.write_eof()
