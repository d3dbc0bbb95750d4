"""Headless Chromium driven over the Chrome DevTools Protocol, for the browser tests
(Temporal Web with our codec server, the ``dplan ui`` page) and the UI benchmark.

Debian's ``chromium`` is started with ``--remote-debugging-port=0`` and a profile in a
temporary directory; the port it chose is read from the profile's ``DevToolsActivePort``
and the first page is driven with aiohttp's websocket client. Callers skip (or a
benchmark says so) when ``CHROMIUM`` is None.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

__all__ = ["CHROMIUM", "CHROMIUM_FLAGS", "Cdp", "headless_chromium"]

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


class Cdp:
    """The few Chrome DevTools Protocol calls the tests need, over one page websocket."""

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
        """The value of ``expression`` in the page (promises awaited)."""
        result = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {json.dumps(result['exceptionDetails'])}")
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, *, timeout_s: float = 60.0) -> Any:
        """Poll until ``expression`` is truthy in the page; its value, or TimeoutError."""
        deadline = time.monotonic() + timeout_s
        value: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError):
                value = await self.evaluate(expression)
                if value:
                    return value
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{expression!r} was still {value!r} after {timeout_s:g}s")

    async def screenshot(self, path: Path, *, scale: float = 1.0) -> Path:
        """A PNG of the viewport; ``scale`` < 1 makes a smaller picture (for docs)."""
        params: dict[str, Any] = {"format": "png"}
        if scale != 1.0:
            size = await self.evaluate("[window.innerWidth, window.innerHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": scale}
        shot = await self.call("Page.captureScreenshot", **params)
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))
        return path


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
async def headless_chromium(
    tmp_path: Path, *, window: tuple[int, int] | None = None
) -> AsyncIterator[Cdp]:
    """A headless Chromium for the block, its profile and log under ``tmp_path``."""
    assert CHROMIUM is not None
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    flags = list(CHROMIUM_FLAGS)
    if window is not None:
        flags = [f for f in flags if not f.startswith("--window-size")]
        flags.append(f"--window-size={window[0]},{window[1]}")
    process = await asyncio.create_subprocess_exec(
        CHROMIUM,
        *flags,
        f"--user-data-dir={profile}",
        "--remote-debugging-port=0",
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=(tmp_path / "chromium.log").open("wb"),
        start_new_session=True,  # its renderers and helpers too: stopped as one group
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
        await _stop(process)


async def _stop(process: asyncio.subprocess.Process) -> None:
    """Kill the browser and every process it started, and wait until none is left: a
    renderer or helper outliving the browser by a moment still writes in the profile,
    and removing the directory then fails ("Directory not empty")."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
    for _ in range(200):  # 10 s at most
        if not _group_alive(process.pid):
            return
        await asyncio.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie does not: it writes
    nothing, and whoever adopted it may never reap it)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False
