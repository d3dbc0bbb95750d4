"""``dplan ui``'s rules that need no server: where it may listen, what its guard refuses,
what its page may load, and that the vendored library is what the Makefile pins."""

from __future__ import annotations

import re
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from durable_plans.cli.main import main
from durable_plans.domain.ids import merged_result_id, plan_run_id
from durable_plans.domain.models import Message, Plan, Subtask
from durable_plans.ui import UiSecurity, is_local_host
from durable_plans.ui.conversation import merged_results, message_json
from durable_plans.ui.security import CSRF_HEADER, TOKEN_COOKIE, token_problem
from durable_plans.ui.server import static_dir

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "a-token-long-enough-1234"


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("evil.example", False),
        ("localhost.evil.example", False),
    ],
)
def test_local_hosts(host: str, local: bool) -> None:
    assert is_local_host(host) is local


def test_a_non_local_address_needs_a_long_enough_token() -> None:
    assert token_problem("127.0.0.1", None) is None
    problem = token_problem("0.0.0.0", None)
    assert problem is not None and "--token" in problem and "TLS" in problem
    short = token_problem("0.0.0.0", "short")
    assert short is not None and "too short" in short
    assert token_problem("0.0.0.0", TOKEN) is None
    with pytest.raises(ValueError, match="not a local address"):
        UiSecurity(bind_host="10.0.0.1")


def test_dplan_ui_refuses_a_public_address_without_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DPLAN_UI_TOKEN", raising=False)
    assert main(["ui", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --host 0.0.0.0 is not a local address")
    assert "put TLS in front" in err


# --------------------------------------------------------------------------- the guard


def _app(security: UiSecurity) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="page")

    async def change(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application(middlewares=[security.middleware()])
    app.router.add_get("/", page)
    app.router.add_post("/api/do/p/cancel", change)
    return app


@pytest.fixture
async def local() -> AsyncIterator[tuple[TestClient[web.Request, web.Application], UiSecurity]]:
    security = UiSecurity()
    async with TestClient(TestServer(_app(security), host="127.0.0.1")) as client:
        yield client, security


async def test_a_change_needs_the_csrf_header_json_and_this_origin(
    local: tuple[TestClient[web.Request, web.Application], UiSecurity],
) -> None:
    client, security = local
    own = f"http://127.0.0.1:{client.port}"
    good = {CSRF_HEADER: security.csrf, "Origin": own}
    async with client.post("/api/do/p/cancel", json={}, headers=good) as resp:
        assert resp.status == 200
    refused = [
        ({"Origin": own}, "missing or wrong X-Dplan-CSRF"),
        ({CSRF_HEADER: "guess", "Origin": own}, "missing or wrong X-Dplan-CSRF"),
        ({CSRF_HEADER: security.csrf, "Origin": "http://evil.example"}, "cross-origin"),
        ({CSRF_HEADER: security.csrf, "Origin": "null"}, "cross-origin"),
        ({CSRF_HEADER: security.csrf, "Sec-Fetch-Site": "same-site"}, "cross-site"),
    ]
    for headers, why in refused:
        async with client.post("/api/do/p/cancel", json={}, headers=headers) as resp:
            assert resp.status == 403, headers
            assert why in (await resp.json())["error"]
    async with client.post(
        "/api/do/p/cancel",
        data="{}",
        headers={CSRF_HEADER: security.csrf, "Content-Type": "application/x-www-form-urlencoded"},
    ) as resp:
        assert resp.status == 403
        assert "JSON body" in (await resp.json())["error"]


async def test_a_rebound_host_name_is_refused_and_every_answer_carries_the_csp(
    local: tuple[TestClient[web.Request, web.Application], UiSecurity],
) -> None:
    client, _ = local
    async with client.get("/", headers={"Host": "attacker.example:8300"}) as resp:
        assert resp.status == 403
    async with client.get("/", headers={"Host": f"localhost:{client.port}"}) as resp:
        assert resp.status == 200
        csp = resp.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp
        assert resp.headers["X-Content-Type-Options"] == "nosniff"


async def test_with_a_token_nothing_is_served_without_it() -> None:
    security = UiSecurity(bind_host="0.0.0.0", token=TOKEN)
    async with TestClient(TestServer(_app(security), host="127.0.0.1")) as client:
        async with client.get("/") as resp:
            assert resp.status == 401
        async with client.get("/", headers={"Authorization": "Bearer nope"}) as resp:
            assert resp.status == 401
        async with client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
            assert resp.status == 200
        async with client.get(f"/?token={TOKEN}") as resp:
            assert resp.status == 200
            cookie = resp.cookies[TOKEN_COOKIE]
            assert cookie["httponly"] and cookie["samesite"] == "Strict"
        # Even with the token, a change still needs the CSRF header.
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with client.post("/api/do/p/cancel", json={}, headers=auth) as resp:
            assert resp.status == 403


# --------------------------------------------------------------------------- the files


def test_the_page_loads_only_its_own_files() -> None:
    static = static_dir()
    html = (static / "index.html").read_text(encoding="utf-8")
    assert "{{CSRF_TOKEN}}" in html
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources and all(s.startswith(("/static/", "#", "data:")) for s in sources), sources
    for script in static.glob("*.js"):
        text = script.read_text(encoding="utf-8")
        assert not re.search(r"fetch\(\s*['\"`]https?:", text), script.name
        assert "innerHTML" not in text, f"{script.name}: set text with textContent"


def test_the_vendored_dagre_is_the_pinned_one_with_its_licence() -> None:
    vendor = static_dir() / "vendor"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    version = re.search(r"^DAGRE_VERSION\s*:=\s*(\S+)", makefile, re.M)
    integrity = re.search(r"^DAGRE_INTEGRITY\s*:=\s*(\S+)", makefile, re.M)
    assert version and integrity
    stamp = (vendor / "VERSION.txt").read_text(encoding="utf-8")
    assert f"@dagrejs/dagre {version.group(1)}" in stamp
    assert integrity.group(1) in stamp
    assert "Permission is hereby granted" in (vendor / "dagre.LICENSE.txt").read_text("utf-8")
    built = (vendor / "dagre.min.js").read_text(encoding="utf-8")
    assert built.startswith('"use strict";var dagre')


def test_the_package_data_ships_every_static_file() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["durable_plans"]
    package = ROOT / "durable_plans"
    shipped = {p for pattern in patterns for p in package.glob(pattern)}
    files = {p for p in static_dir().rglob("*") if p.is_file()}
    assert files and files <= shipped, sorted(str(p) for p in files - shipped)


def test_merged_results_are_named_after_their_subtask_in_every_run() -> None:
    """An earlier subtask's result in a later one's conversation is a plain assistant
    message; its id, as each run names its merges, says whose it is."""
    plan = Plan(
        id="merged",
        subtasks=(Subtask(id="a", description="A"), Subtask(id="b", description="B")),
    )
    sources = merged_results(plan, ["run-1", "run-2", "run-1"])
    assert len(sources) == 4 and sorted(set(sources.values())) == ["a", "b"]
    first = merged_result_id(plan_run_id(plan.id, "run-1"), "a")
    second = merged_result_id(plan_run_id(plan.id, "run-2"), "a")
    assert first != second and sources[first] == sources[second] == "a"
    message = Message(id=first, role="assistant", content="done")
    assert message_json(message, sources.get(message.id))["from_subtask"] == "a"
    assert message_json(message)["from_subtask"] is None
