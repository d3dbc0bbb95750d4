"""The sandbox's cost per command: the same ``true`` run through ``run_sandboxed`` with
bubblewrap and with ``DPLAN_SANDBOX=none`` (the guard's limits alone), in the same run,
alternating, printed as milliseconds each and their ratio. Asserts nothing about time."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

from durable_plans.activities.sandbox import run_sandboxed, sandbox_status
from durable_plans.domain.tools_config import SandboxPolicy
from durable_plans.settings import Settings


async def main(short: bool) -> None:
    runs = 20 if short else 200
    boxed, bare = Settings(sandbox="auto"), Settings(sandbox="none")
    status = sandbox_status(boxed)
    if status.engine != "bwrap" or shutil.which("true") is None:
        print(f"bench.sandbox: skipped ({status.describe()})")
        return
    times: dict[str, list[float]] = {"bwrap": [], "none": []}
    with tempfile.TemporaryDirectory(prefix="dplan-bench-sandbox-") as tmp:
        tree = Path(tmp)
        for i in range(runs + 2):
            for name, settings in (("bwrap", boxed), ("none", bare)):
                started = time.perf_counter()
                done = await run_sandboxed(
                    ["true"], tree, policy=SandboxPolicy(), timeout_s=30, settings=settings
                )
                if done.exit_code != 0:
                    raise RuntimeError(f"`true` failed under {name}: {done.output[:200]}")
                if i >= 2:  # the first two warm up (the probe, imports)
                    times[name].append((time.perf_counter() - started) * 1000)
    b, n = statistics.median(times["bwrap"]), statistics.median(times["none"])
    print(f"bench.sandbox: `true` per command, median of {runs}, same run, alternating")
    print(f"  bwrap (run_sandboxed, every namespace)   {b:8.2f} ms")
    print(f"  none  (the guard's limits only)          {n:8.2f} ms")
    print(f"  ratio bwrap / none                       {b / n:8.2f}x  (+{b - n:.2f} ms)")
