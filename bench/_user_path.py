"""The path users run, for the benches: a ``temporal server start-dev`` process (in
memory, or writing its state file as ``dplan run --embedded`` starts it) and a
``dplan-worker`` process configured only through its environment, as the README says.

``bench._rig`` starts the in-process variant (worker and client in the bench's own
process); this module starts the processes a user has, so both can be measured in one
run and printed side by side. CPU is read from ``/proc`` (user + system) for the worker
and the server alike.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from durable_plans.dev_server import dynamic_config_args
from durable_plans.domain.search_attributes import dev_server_args
from durable_plans.embedded import temporal_binary

__all__ = [
    "SERVER_KINDS",
    "DevServer",
    "WorkerProcess",
    "cpu_seconds",
    "dev_server",
    "load",
    "worker_env",
]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# "memory": the dev server's default (SQLite in memory); "file": with ``--db-filename``,
# as ``dplan run --embedded`` runs it (durable_plans/embedded.py).
SERVER_KINDS = ("memory", "file")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def load() -> str:
    """``uptime``'s load averages: the machine is shared, so every figure says its load."""
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return "(uptime unavailable)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class DevServer:
    kind: str
    address: str
    pid: int


@contextlib.contextmanager
def dev_server(
    tmp: Path, kind: str, dynamic_config: Sequence[str] = (), *, tuned: bool = True
) -> Iterator[DevServer]:
    """A dev server process with the project's search attributes registered (as
    ``dplan run --embedded`` and ``dplan setup`` leave it); ``kind`` "file" gives it a
    state file in ``tmp``, as ``--embedded`` does; ``dynamic_config`` adds
    ``--dynamic-config-value KEY=VALUE`` settings (``bench/priority.py``). ``tuned``
    False leaves out the dynamic config every server we start has
    (``durable_plans.dev_server``): Temporal's defaults, for ``bench.dev_server``."""
    if kind not in SERVER_KINDS:
        raise ValueError(f"server kind {kind!r}: one of {SERVER_KINDS}")
    port = _free_port()
    argv = [str(temporal_binary()), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    argv += ["--port", str(port), "--http-port", str(_free_port())]
    argv += ["--metrics-port", str(_free_port()), "--log-level", "error", *dev_server_args()]
    if tuned:
        argv += dynamic_config_args()  # as --embedded starts it
    if kind == "file":
        argv += ["--db-filename", str(tmp / f"temporal-{port}.db")]
    for value in dynamic_config:
        argv += ["--dynamic-config-value", value]
    with open(tmp / f"server-{kind}-{port}.log", "wb") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield DevServer(kind, f"127.0.0.1:{port}", proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _base_env() -> dict[str, str]:
    """Our environment without any Temporal or durable-plans configuration."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DPLAN_", "TEMPORAL_", "OPENAI_", "PYTHONPATH"))
    }


def worker_env(address: str, task_queue: str, root: Path, **extra: str) -> dict[str, str]:
    """A worker's whole configuration, as an operator sets it: the server, its task queue,
    the offline scripted model at zero latency, its store, workspace and state in
    ``root``; ``extra`` adds ``DPLAN_*`` settings (``DPLAN_EVENT_LOOP="asyncio"``...)."""
    from durable_plans.activities.scripted_model import LATENCY_ENV, SCRIPTED_MODEL

    return (
        _base_env()
        | {
            "TEMPORAL_ADDRESS": address,
            "DPLAN_TASK_QUEUE": task_queue,
            "DPLAN_MODEL": SCRIPTED_MODEL,
            LATENCY_ENV: "0",
            "DPLAN_SESSION_STORE": str(root / "sessions.db"),
            "DPLAN_WORKSPACE": str(root / "workspace"),
            "DPLAN_STATE_DIR": str(root / "state"),
        }
        | extra
    )


class WorkerProcess:
    """``dplan-worker`` (the console script beside this interpreter) in a process of its
    own, its log (standard error, JSON lines at INFO, as by default) in a file."""

    def __init__(self, env: dict[str, str], log_path: Path, *args: str) -> None:
        script = Path(sys.executable).parent / "dplan-worker"
        self.argv = (
            [str(script), *args]
            if script.exists()
            else [sys.executable, "-c", "from durable_plans.worker import main; main()", *args]
        )
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> WorkerProcess:
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        deadline = time.monotonic() + 120
        while b"worker.started" not in self.log_path.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"dplan-worker did not start:\n{self.tail()}")
            time.sleep(0.1)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def log_lines(self) -> int:
        with open(self.log_path, "rb") as f:
            return sum(1 for _ in f)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
