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
import json
import time
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from durable_plans.codec_server import running_codec_server
from durable_plans.dev_server import dynamic_config_args
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Plan, Subtask
from durable_plans.embedded import DEV_SERVER_STARTUP, free_port
from durable_plans.payload_codec import ENCODING, PayloadKeyring
from durable_plans.plugin import DurablePlansPlugin, client_carrying
from durable_plans.settings import Settings
from tests.browser import CHROMIUM, headless_chromium
from tests.integration.conftest import temporal_binary

pytestmark = pytest.mark.integration

KEY = ("ui-test", bytes(range(7, 39)))
PAGE_TIMEOUT_S = 45.0


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
            dev_server_startup_timeout=DEV_SERVER_STARTUP,
            dev_server_existing_path=temporal_binary(),
            ui=True,
            ui_port=ui_port,
            dev_server_extra_args=[
                "--ui-codec-endpoint",
                codec_server.url,
                "--ui-disable-news-fetch",
                *dynamic_config_args(),
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
