"""The fake provider in a process of its own, and the command line that process runs.

Crash tests SIGKILL workers while the provider must live on: in a separate process its
request log (JSONL, one line per answered request, written by ``FakeProvider``) outlives
every worker and counts the calls of all of them. ``python -m durable_plans.testing``
runs ``main`` here; it prints ``READY <base_url>`` on stdout once listening, which is what
``FakeProviderProcess`` waits for::

    python -m durable_plans.testing --port 0 --latency-ms 500 --log requests.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import select
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from durable_plans.testing._fake_provider import (
    FakeProvider,
    identical_counts,
    read_request_log,
    refused_count,
)
from durable_plans.testing._fake_scenario import Scenario

__all__ = ["STARTUP_TIMEOUT_S", "FakeProviderProcess", "main"]

# How long the process may take to say READY: a bound for a process that hangs, not a
# speed goal. A process that dies is seen at once (its stdout closes). 20 s was missed by
# a crash test's provider on a loaded 2-core host (a suite at load 9, the host itself
# slow that day), so the bound leaves room for a start ten times slower than usual.
STARTUP_TIMEOUT_S = 120.0


class FakeProviderProcess:
    """Runs the provider as a child process (``with FakeProviderProcess(log) as p:``).

    Crash tests kill worker processes; the provider lives here so its request log
    survives them and counts every call across all workers.
    """

    def __init__(
        self,
        log_path: Path | str,
        *,
        latency_ms: float = 0.0,
        port: int = 0,
        scenario: str | None = None,
        log_bodies: bool = False,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        chunk_delay_ms: float = 0.0,
        context_window: int | None = None,
        requests_per_s: float | None = None,
        tokens_per_minute: float | None = None,
    ) -> None:
        self.log_path = Path(log_path)
        self.requests_per_s = requests_per_s
        self.tokens_per_minute = tokens_per_minute
        self.chunk_delay_ms = chunk_delay_ms
        self.context_window = context_window
        self.log_bodies = log_bodies
        self.latency_ms = latency_ms
        self.port = port
        self.scenario = scenario
        self.startup_timeout_s = startup_timeout_s
        self.base_url = ""
        self._proc: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    def start(self) -> None:
        cmd = [sys.executable, "-m", "durable_plans.testing", "--port", str(self.port)]
        cmd += ["--latency-ms", str(self.latency_ms), "--log", str(self.log_path)]
        if self.chunk_delay_ms:
            cmd += ["--chunk-delay-ms", str(self.chunk_delay_ms)]
        if self.scenario:
            cmd += ["--scenario", self.scenario]
        if self.context_window is not None:
            cmd += ["--context-window", str(self.context_window)]
        if self.requests_per_s is not None:
            cmd += ["--requests-per-s", str(self.requests_per_s)]
        if self.tokens_per_minute is not None:
            cmd += ["--tokens-per-minute", str(self.tokens_per_minute)]
        if self.log_bodies:
            cmd.append("--log-bodies")
        self._proc = subprocess.Popen(cmd, env=_child_env(), stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], self.startup_timeout_s)
        line = self._proc.stdout.readline() if ready else ""
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"fake provider process did not start (got {line!r})")
        self.base_url = line.split(maxsplit=1)[1].strip()

    def stop(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None

    def log_entries(self) -> list[dict[str, Any]]:
        return read_request_log(self.log_path)

    def release_streams(self) -> None:
        """Let every ``[stream-hold]`` answer, held now or later, go on."""
        self._control("release-streams")

    def hold_streams(self) -> None:
        """Undo ``release_streams``: later ``[stream-hold]`` answers stop again until the
        next release, as they do on a fresh provider."""
        self._control("hold-streams")

    def _control(self, action: str) -> None:
        root = self.base_url.rsplit("/v1", 1)[0]
        request = urllib.request.Request(f"{root}/control/{action}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def identical_request_counts(self, *, completed_only: bool = False) -> dict[str, int]:
        return identical_counts(self.log_entries(), completed_only=completed_only)

    def refused_count(self) -> int:
        """Requests its rate limit refused with 429 (``--requests-per-s``, ...)."""
        return refused_count(self.log_entries())

    def __enter__(self) -> FakeProviderProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _child_env() -> dict[str, str]:
    """The environment of the provider process: ours, plus our own import roots.

    ``scenario`` names a ``module:callable`` the child imports, typically a module of the
    caller's test-suite (``tests.integration.chaos_support:WriterScenario``). The child
    must find it wherever the caller was started from, so the caller's import roots that
    are not the interpreter's own (the project directory pytest put on ``sys.path``) go
    on the child's ``PYTHONPATH``. Interpreter and site directories stay out: ahead of the
    standard library they could shadow it.
    """
    interpreter = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    roots: list[str] = []
    for entry in sys.path:
        path = Path(entry or os.getcwd()).resolve()
        if not path.is_dir() or any(path.is_relative_to(i) for i in interpreter):
            continue
        if str(path) not in roots:
            roots.append(str(path))
    env = dict(os.environ)
    inherited = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join([*roots, *([inherited] if inherited else [])])
    return env


def _load_scenario(spec: str | None) -> Scenario | None:
    """``module:name`` naming a scenario callable, or a scenario class to instantiate."""
    if not spec:
        return None
    module_name, _, attr = spec.partition(":")
    obj = getattr(importlib.import_module(module_name), attr)
    if isinstance(obj, type):
        made: Scenario = obj()
        return made
    result: Scenario = obj
    return result


async def _serve(args: argparse.Namespace) -> None:
    provider = FakeProvider(
        _load_scenario(args.scenario),
        latency_ms=args.latency_ms,
        host=args.host,
        port=args.port,
        log_path=args.log,
        log_bodies=args.log_bodies,
        chunk_delay_ms=args.chunk_delay_ms,
        context_window=args.context_window,
        requests_per_s=args.requests_per_s,
        tokens_per_minute=args.tokens_per_minute,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with provider:
        print(f"READY {provider.base_url}", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible provider for tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument(
        "--chunk-delay-ms", type=float, default=0.0, help="between the events of a stream"
    )
    parser.add_argument("--log", type=Path, default=None, help="JSONL request log")
    parser.add_argument("--log-bodies", action="store_true", help="log request bodies too")
    parser.add_argument("--scenario", default=None, help="module:callable (default: agent)")
    parser.add_argument(
        "--context-window", type=int, default=None, help="refuse longer prompts (tokens)"
    )
    parser.add_argument(
        "--requests-per-s", type=float, default=None, help="rate limit: 429 above it"
    )
    parser.add_argument(
        "--tokens-per-minute", type=float, default=None, help="rate limit: 429 above it"
    )
    asyncio.run(_serve(parser.parse_args(argv)))
