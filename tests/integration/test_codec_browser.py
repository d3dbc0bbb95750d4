"""Temporal Web, started with our codec server as its remote codec endpoint, shows an
encrypted plan's input decoded: checked in a real headless Chromium (Debian's package).

The dev server here is its own (the shared one runs without a UI): ``--ui-port`` and
``--ui-codec-endpoint`` pointing at ``dplan codec-server``'s app. No worker is needed: the
plan's input is in the workflow's first event. The browser is driven over the Chrome
DevTools Protocol with aiohttp's websocket client, polling the rendered DOM (bounded) for
the decoded text, then a screenshot is saved in the test's tmp dir.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from temporalio.testing import WorkflowEnvironment

from durable_plans.codec_server import running_codec_server
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Plan, Subtask
from durable_plans.embedded import free_port
from durable_plans.payload_codec import ENCODING, PayloadKeyring
from durable_plans.plugin import DurablePlansPlugin, client_carrying
from durable_plans.settings import Settings
from tests.integration.conftest import temporal_binary

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--window-size=1400,1800",
)
KEY = ("ui-test", bytes(range(7, 39)))
PAGE_TIMEOUT_S = 45.0


class Cdp:
    """The few Chrome DevTools Protocol calls this test needs, over one page websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self._ids)
        await self.ws.send_json({"id": call_id, "method": method, "params": params})
        while True:
            message = await asyncio.wait_for(self.ws.receive_json(), timeout=20)
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"CDP {method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")


async def _devtools_port(profile: Path, process: asyncio.subprocess.Process) -> int:
    """Chromium writes the port it chose (``--remote-debugging-port=0``) to a file."""
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.returncode is not None:
            raise RuntimeError(f"chromium exited with {process.returncode}")
        if marker.exists() and marker.read_text().strip():
            return int(marker.read_text().splitlines()[0])
        await asyncio.sleep(0.05)
    raise TimeoutError("chromium did not open its DevTools port within 20s")


@contextlib.asynccontextmanager
async def headless_chromium(tmp_path: Path) -> AsyncIterator[Cdp]:
    assert CHROMIUM is not None
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    process = await asyncio.create_subprocess_exec(
        CHROMIUM,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        "--remote-debugging-port=0",
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=(tmp_path / "chromium.log").open("wb"),
    )
    try:
        port = await _devtools_port(profile, process)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                targets = await resp.json()
            page = next(t for t in targets if t.get("type") == "page")
            async with http.ws_connect(
                page["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024
            ) as ws:
                yield Cdp(ws)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: `apt-get install chromium`, or `make chromium`)",
)
async def test_temporal_web_shows_the_decoded_plan_input(tmp_path: Path) -> None:
    ring = PayloadKeyring.from_entries([KEY])
    ui_port = free_port()
    ui_origin = f"http://127.0.0.1:{ui_port}"
    secret = f"UI-DECODED-goal-{uuid.uuid4().hex[:10]}"
    plan = Plan(
        id=f"ui-{uuid.uuid4().hex[:10]}",
        goal=secret,
        subtasks=(Subtask(id="only", description="a subtask of the UI test", agent="coder"),),
    )
    async with running_codec_server(ring.codec(), [ui_origin], port=0) as codec_server:
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            ui=True,
            ui_port=ui_port,
            dev_server_extra_args=[
                "--ui-codec-endpoint",
                codec_server.url,
                "--ui-disable-news-fetch",
            ],
            dev_server_log_level="error",
            plugins=[DurablePlansPlugin()],
        )
        try:
            encrypting = client_carrying(
                env.client, DurablePlansPlugin(settings=Settings(payload_keys=ring))
            )
            handle = await encrypting.start_workflow(
                "PlanWorkflow", PlanInput(plan=plan), id=plan.id, task_queue="no-worker-here"
            )
            # What the server holds is ciphertext...
            async for event in env.client.get_workflow_handle(plan.id).fetch_history_events():
                started = event.workflow_execution_started_event_attributes
                assert started.input.payloads[0].metadata["encoding"] == ENCODING
                assert secret.encode() not in started.SerializeToString()
                break
            # ...and the UI, through the codec server, shows the plan.
            url = f"{ui_origin}/namespaces/default/workflows/{plan.id}"
            async with headless_chromium(tmp_path) as cdp:
                await cdp.call("Page.enable")
                await cdp.call("Page.navigate", url=url)
                found = False
                deadline = time.monotonic() + PAGE_TIMEOUT_S
                reloaded_at = time.monotonic()
                while time.monotonic() < deadline:
                    text = await cdp.evaluate("document.body ? document.body.innerText : ''")
                    if isinstance(text, str) and secret in text:
                        found = True
                        break
                    # A UI whose backend was not answering yet shows its error page and
                    # stays there: load the page again, as a person would.
                    failed = isinstance(text, str) and "Internal Error" in text
                    if failed and time.monotonic() - reloaded_at >= 1.0:
                        await cdp.call("Page.reload")
                        reloaded_at = time.monotonic()
                    await asyncio.sleep(0.25)
                shot = await cdp.call("Page.captureScreenshot", format="png")
                screenshot = tmp_path / "temporal-web-decoded-input.png"
                screenshot.write_bytes(base64.b64decode(shot["data"]))
                html = await cdp.evaluate("document.documentElement.outerHTML")
                (tmp_path / "temporal-web.html").write_text(str(html))
            assert found, (
                f"the decoded goal never appeared on {url} within {PAGE_TIMEOUT_S:g}s; "
                f"see {screenshot} and {tmp_path / 'temporal-web.html'}"
            )
            assert json.dumps(secret)[1:-1] in str(html)
            await handle.terminate("browser test done")
        finally:
            await env.shutdown()
