"""Worker processes forked from one that has already imported the worker and litellm.

A worker process spends about 6 s of CPU importing litellm before it polls, and far more
wall time on a loaded machine; the crash, chat and chaos tests start dozens of workers.
multiprocessing's fork server imports them once per test process, then forks each worker
from there: still a real process of its own, with its own environment, its own log file
and its own Temporal connection, SIGKILLed for real. Nothing is imported or started in
the fork server but modules (no event loop, no Temporal runtime, no thread), so a fork
inherits no half-held lock.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import subprocess
from collections.abc import Sequence
from multiprocessing.context import ForkServerProcess
from pathlib import Path

__all__ = ["PrewarmedProcess"]

_CONTEXT = multiprocessing.get_context("forkserver")
# Imported by the fork server when it starts; prewarm_imports imports litellm the way a
# worker does (LITELLM_LOCAL_MODEL_COST_MAP set first: no network at import).
_CONTEXT.set_forkserver_preload(["tests.integration.prewarm_imports"])


def _child(entry: str, args: Sequence[object], env: dict[str, str], log_path: str) -> None:
    """In the forked process: stdout and stderr to the log, the given environment, then
    the entry point (``module:function``) with ``args``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    module, _, function = entry.partition(":")
    getattr(importlib.import_module(module), function)(*args)


class PrewarmedProcess:
    """The part of ``subprocess.Popen``'s interface the worker helpers use."""

    def __init__(
        self, entry: str, args: Sequence[object], env: dict[str, str], log_path: Path
    ) -> None:
        self._process: ForkServerProcess = _CONTEXT.Process(
            target=_child, args=(entry, list(args), dict(env), str(log_path)), daemon=False
        )
        self._process.start()

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return None if self._process.is_alive() else self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.is_alive():
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.is_alive():
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        code = self._process.exitcode
        assert code is not None
        return code
