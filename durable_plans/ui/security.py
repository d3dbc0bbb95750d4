"""What keeps ``dplan ui`` safe by default: who may read it, who may change things.

* **Where it listens.** 127.0.0.1 by default. Any other address serves whoever can reach
  it, so it requires a token (``--token`` / ``DPLAN_UI_TOKEN``), compared in constant
  time; the browser presents it once (``/?token=...``) and then carries it in an
  HttpOnly, SameSite=Strict cookie. The token travels in clear over plain HTTP: TLS goes
  in front (a reverse proxy), and ``dplan ui`` says so.
* **DNS rebinding.** On a local address the ``Host`` header must name a loopback host:
  a page on ``evil.example`` that rebinds its name to 127.0.0.1 gets 403.
* **Forged requests.** Every state-changing request is a POST with a JSON body, and it
  must carry the per-server CSRF token (in the page, readable only by same-origin
  script) in ``X-Dplan-CSRF``; its ``Origin`` (sent by browsers on every POST), when
  present, must be this server's own. A form on another site can set neither the
  header nor the content type without a CORS preflight, which this server never grants.
* **Nothing from elsewhere.** A Content-Security-Policy allows scripts, styles, images
  and connections from this origin only, and no framing.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "CSRF_HEADER",
    "TOKEN_COOKIE",
    "UiSecurity",
    "harden",
    "is_local_host",
    "token_problem",
]

CSRF_HEADER = "X-Dplan-CSRF"
TOKEN_COOKIE = "dplan_ui_token"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
_MIN_TOKEN_CHARS = 16

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_local_host(host: str) -> bool:
    """Whether ``host`` (a name or an address to bind or to see in ``Host``) is loopback."""
    name = host.strip().strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def token_problem(host: str, token: str | None) -> str | None:
    """Why ``dplan ui`` may not listen on ``host`` with ``token``, or None when it may."""
    if is_local_host(host):
        return None
    if not token:
        return (
            f"--host {host} is not a local address: anyone who reaches it could approve "
            "tool calls and cancel plans; set --token (or DPLAN_UI_TOKEN) and put TLS in "
            "front (a reverse proxy), or listen on 127.0.0.1"
        )
    if len(token) < _MIN_TOKEN_CHARS:
        return (
            f"the UI token is too short ({len(token)} characters; use {_MIN_TOKEN_CHARS} or more)"
        )
    return None


def _host_name(host_header: str) -> str:
    """``[::1]:8300`` → ``::1``; ``localhost:8300`` → ``localhost``."""
    parts = urlsplit(f"//{host_header}")
    return parts.hostname or ""


@dataclass
class UiSecurity:
    """The checks of one server: its bind address, its token, its CSRF token."""

    bind_host: str = "127.0.0.1"
    token: str | None = None
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def __post_init__(self) -> None:
        problem = token_problem(self.bind_host, self.token)
        if problem is not None:
            raise ValueError(problem)

    @property
    def local(self) -> bool:
        return is_local_host(self.bind_host)

    # ------------------------------------------------------------------ the checks

    def host_refusal(self, request: web.Request) -> str | None:
        """On a loopback bind, a ``Host`` that is not loopback is a rebinding attempt."""
        if not self.local:
            return None
        host = request.headers.get(hdrs.HOST, "")
        if not is_local_host(_host_name(host)):
            return f"Host {host!r} is not this local server"
        return None

    def token_refusal(self, request: web.Request) -> str | None:
        if self.token is None:
            return None
        offered = (
            request.cookies.get(TOKEN_COOKIE)
            or request.query.get("token")
            or request.headers.get(hdrs.AUTHORIZATION, "").removeprefix("Bearer ").strip()
        )
        if offered and hmac.compare_digest(offered.encode(), self.token.encode()):
            return None
        return "this dplan ui needs its token: open it as /?token=... (DPLAN_UI_TOKEN)"

    def forgery_refusal(self, request: web.Request) -> str | None:
        """Why a state-changing request is not this page's own, or None."""
        if request.method != "POST":
            return "state is changed by POST only"
        if request.content_type != "application/json":
            return "a change is a JSON body (Content-Type: application/json)"
        offered = request.headers.get(CSRF_HEADER, "")
        if not offered or not hmac.compare_digest(offered.encode(), self.csrf.encode()):
            return f"missing or wrong {CSRF_HEADER} header (reload the page)"
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is not None and not self._same_origin(request, origin):
            return f"cross-origin request from {origin} refused"
        fetch_site = request.headers.get("Sec-Fetch-Site")
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            return f"cross-site request refused (Sec-Fetch-Site: {fetch_site})"
        return None

    @staticmethod
    def _same_origin(request: web.Request, origin: str) -> bool:
        parts = urlsplit(origin)
        host = request.headers.get(hdrs.HOST, "")
        forwarded = request.headers.get("X-Forwarded-Host")  # a TLS proxy in front
        return parts.scheme in ("http", "https") and parts.netloc.lower() in {
            host.lower(),
            (forwarded or host).lower(),
        }

    # ------------------------------------------------------------------ middleware

    def middleware(self) -> Middleware:
        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            refusal = self.host_refusal(request)
            status = 403
            if refusal is None:
                refusal = self.token_refusal(request)
                status = 401
            if refusal is None and request.method not in ("GET", "HEAD"):
                refusal = self.forgery_refusal(request)
                status = 403
            if refusal is not None:
                response: web.StreamResponse = web.json_response(
                    {"error": f"error: {refusal}"}, status=status
                )
            else:
                response = await handler(request)
                if self.token is not None and request.query.get("token"):
                    # Keep it in a cookie the page's script cannot read, then drop it
                    # from the address bar.
                    response.set_cookie(
                        TOKEN_COOKIE,
                        self.token,
                        httponly=True,
                        samesite="Strict",
                        secure=request.secure,
                        path="/",
                    )
            if not response.prepared:  # a stream set its own headers before it started
                harden(response)
            return response

        return guard


def harden(response: web.StreamResponse) -> None:
    """The headers every answer carries (a stream sets them before it starts)."""
    headers = response.headers
    headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", "no-referrer")
    headers.setdefault("X-Frame-Options", "DENY")
    headers.setdefault("Cross-Origin-Resource-Policy", "same-origin")
    headers.setdefault("Cache-Control", "no-store")
