"""Headless Chromium driven over the Chrome DevTools Protocol, for the browser tests
(Temporal Web with our codec server, the ``dplan ui`` page) and the UI benchmark.

One Debian ``chromium`` per test process (per xdist worker), started on first use with
``--remote-debugging-port=0`` and a profile in a temporary directory, and killed (its
whole process group) when the interpreter exits; one that has died is replaced by the
next user. Each ``headless_chromium`` block gets its own browser context (as isolated as
another profile: cookies, storage, cache, service workers) holding one new page, driven
with aiohttp's websocket client, and both are closed at the block's end. (A browser of
its own per block cost about a second of wall time and 0.75 CPU-second a block on the
2-core test host; a context and page in the shared one, about a quarter of each.)
Callers skip (or a benchmark says so) when ``CHROMIUM`` is None.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
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
    # Each window's address bar preloads its suggestion popups as WebUI pages, one more
    # renderer starting per window: about half a CPU-second a window, for a popup that is
    # never opened here.
    "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup",
)

# The page's viewport is its window less this many pixels of (headless, unseen) browser
# UI, as when each block had a browser of its own and drove its first window: 87 of
# toolbar and 56 of the "unsupported command-line flag" (--no-sandbox) bar, which only
# a browser's first window shows. So a block sees what it did then: 1400x1657 CSS pixels
# for the default 1400x1800 window, 1400x757 for window=(1400, 900), at a
# devicePixelRatio of 1, in a window that does not have the focus.
_BROWSER_UI_PX = 143
_MAX_MSG = 64 * 1024 * 1024


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

    async def wait_for(self, expression: str, *, timeout_s: float = 30.0) -> Any:
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


class _Browser:
    """The shared chromium: its process (a plain ``Popen``, not an asyncio subprocess,
    which would belong to the event loop that started it) and its temporary directory
    (``profile/`` and ``chromium.log``)."""

    def __init__(self) -> None:
        assert CHROMIUM is not None
        self.dir = Path(tempfile.mkdtemp(prefix="chromium-shared-"))
        self.profile = self.dir / "profile"
        self.profile.mkdir()
        self.log = self.dir / "chromium.log"
        self._port: int | None = None
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    CHROMIUM,
                    *CHROMIUM_FLAGS,
                    f"--user-data-dir={self.profile}",
                    "--remote-debugging-port=0",
                    "about:blank",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # its renderers and helpers too: stopped as one group
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    async def port(self) -> int:
        """Chromium writes the port it chose (``--remote-debugging-port=0``) to a file."""
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 20
        while self._port is None:
            if not self.alive():
                raise RuntimeError(f"chromium exited with {self.process.returncode}")
            if marker.exists() and (text := marker.read_text().strip()):
                self._port = int(text.splitlines()[0])
            elif time.monotonic() > deadline:
                raise TimeoutError("chromium did not open its DevTools port within 20s")
            else:
                await asyncio.sleep(0.05)
        return self._port

    def log_size(self) -> int:
        try:
            return self.log.stat().st_size
        except OSError:
            return 0

    def copy_log(self, since: int, to: Path) -> None:
        """What chromium logged from byte ``since`` on, appended to ``to``."""
        with contextlib.suppress(OSError), self.log.open("rb") as log, to.open("ab") as out:
            log.seek(since)
            shutil.copyfileobj(log, out)

    def stop(self) -> None:
        """Kill the browser and every process it started, wait until none is left (a
        renderer or helper outliving the browser by a moment still writes in the
        profile, and removing the directory then fails), and remove the directory."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for _ in range(200):  # 10 s at most
            if not _group_alive(self.process.pid):
                break
            time.sleep(0.05)
        shutil.rmtree(self.dir, ignore_errors=True)


_shared: _Browser | None = None
_shared_lock = threading.Lock()


def _browser() -> _Browser:
    """The shared browser, started now if there is none or it has exited."""
    global _shared
    with _shared_lock:
        if _shared is not None and not _shared.alive():
            _shared.stop()
            _shared = None
        if _shared is None:
            _shared = _Browser()
        return _shared


def _discard(browser: _Browser) -> None:
    """Stop ``browser``, which failed us: the next block starts another."""
    global _shared
    with _shared_lock:
        if _shared is browser:
            _shared = None
    browser.stop()


@atexit.register
def _stop_shared() -> None:
    if _shared is not None:
        _discard(_shared)


@contextlib.asynccontextmanager
async def headless_chromium(
    tmp_path: Path, *, window: tuple[int, int] | None = None
) -> AsyncIterator[Cdp]:
    """A page of its own for the block, in a new browser context of the test process's
    shared headless Chromium (``window``: its window's size, 1400x1800 by default); what
    chromium logged meanwhile goes to ``tmp_path/chromium.log``."""
    assert CHROMIUM is not None
    width, height = window or _default_window()
    log = tmp_path / "chromium.log"
    async with aiohttp.ClientSession() as http:
        for attempt in (1, 2):  # once more in a new browser if the shared one fails us
            browser = await asyncio.to_thread(_browser)
            log_from = browser.log_size()
            try:
                tab = await _Tab.open(http, browser, width, height)
                break
            except Exception:
                await asyncio.to_thread(browser.copy_log, log_from, log)
                await asyncio.to_thread(_discard, browser)
                if attempt == 2:
                    raise
        assert tab.page is not None
        try:
            yield tab.page
        finally:
            # The page and its context are gone before the next block opens its own; a
            # browser that cannot close them is not used again.
            try:
                await tab.close()
            except Exception as err:
                await tab.detach()
                await asyncio.to_thread(browser.copy_log, log_from, log)
                await asyncio.to_thread(_note, log, f"closing the page failed: {err!r}")
                await asyncio.to_thread(_discard, browser)
            else:
                await tab.detach()
                await asyncio.to_thread(browser.copy_log, log_from, log)


class _Tab:
    """A new window in a new browser context: a session on the browser (which made the
    context, and disposes of it when closed) and one on the window's page."""

    def __init__(self, browser_ws: aiohttp.ClientWebSocketResponse) -> None:
        self.browser = Cdp(browser_ws)
        self.context_id: str | None = None
        self.target_id: str | None = None
        self.page: Cdp | None = None

    @classmethod
    async def open(
        cls, http: aiohttp.ClientSession, browser: _Browser, width: int, height: int
    ) -> _Tab:
        port = await browser.port()
        async with http.get(f"http://127.0.0.1:{port}/json/version") as resp:
            version = await resp.json()
        tab = cls(await http.ws_connect(version["webSocketDebuggerUrl"], max_msg_size=_MAX_MSG))
        try:
            # disposeOnDetach: gone with the browser websocket, however the block ends.
            context = await tab.browser.call("Target.createBrowserContext", disposeOnDetach=True)
            tab.context_id = context["browserContextId"]
            target = await tab.browser.call(
                "Target.createTarget",
                url="about:blank",
                browserContextId=tab.context_id,
                newWindow=True,
                width=width,
                height=height,
                focus=False,
            )
            tab.target_id = target["targetId"]
            tab.page = Cdp(
                await http.ws_connect(
                    f"ws://127.0.0.1:{port}/devtools/page/{tab.target_id}", max_msg_size=_MAX_MSG
                )
            )
            await tab.page.call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height - _BROWSER_UI_PX,
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            await tab.detach()
            raise
        return tab

    async def close(self) -> None:
        if self.target_id is not None:
            await self.browser.call("Target.closeTarget", targetId=self.target_id)
        if self.context_id is not None:
            await self.browser.call(
                "Target.disposeBrowserContext", browserContextId=self.context_id
            )

    async def detach(self) -> None:
        if self.page is not None:
            await self.page.ws.close()
        await self.browser.ws.close()


def _note(log: Path, line: str) -> None:
    with log.open("a") as out:
        out.write(f"[tests/browser.py] {line}\n")


def _default_window() -> tuple[int, int]:
    size = next(f for f in CHROMIUM_FLAGS if f.startswith("--window-size="))
    width, height = size.removeprefix("--window-size=").split(",")
    return int(width), int(height)


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
