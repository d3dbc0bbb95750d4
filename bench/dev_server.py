"""What the dev server's queue-reader rates cost a plan, on the path users run.

    python -m bench.dev_server [--short] [--rounds 2]

Every dev server this package starts lifts the rate at which its one history shard loads
tasks (``durable_plans.dev_server``). This runs the same plans on a server with that
config and on one with Temporal's defaults, each with a ``dplan-worker`` process (the
scripted model at zero latency) and the dev server on its state file, as ``dplan run
--embedded`` starts it. Shapes: one chain of 10 ``ask`` subtasks (every step waits for
the one before) and a fan-out of 100 (steps overlap, so loads batch). The servers
alternate (with, without, without, with...) so a change in the host's speed falls on
both. Printed: each plan's wall time and the worker's and server's CPU; then, per shape,
the medians' ratios (with ÷ without). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
from dataclasses import dataclass

from bench._rig import bench_dirs, bench_settings, scripted_latency_zero
from bench._user_path import WorkerProcess, dev_server, load, worker_env
from bench.big_plans import _connect, _warm, one_plan, shape_plan

SHAPES = (("chains", 10), ("fanout", 100))


@dataclass(frozen=True)
class Run:
    tuned: bool
    shape: str
    subtasks: int
    wall_s: float
    worker_cpu_s: float
    server_cpu_s: float


async def one_server(tuned: bool, shapes: tuple[tuple[str, int], ...]) -> list[Run]:
    runs: list[Run] = []
    with (
        scripted_latency_zero(),
        bench_dirs("devserver") as dirs,
        dev_server(dirs.root, "file", tuned=tuned) as server,
    ):
        client = await _connect(server.address)
        settings = bench_settings(dirs, "dev", temporal_address=server.address)
        root = dirs.root / "worker"
        (root / "workspace").mkdir(parents=True)
        (root / "workspace" / "README.md").write_text("# bench workspace\n")
        env = worker_env(server.address, settings.task_queue, root)
        with WorkerProcess(env, dirs.root / "worker.log") as proc:
            pids = (proc.pid, server.pid)
            await _warm(client, settings, pids)
            for shape, size in shapes:
                plan = shape_plan(shape, size, "ask", prefix="dev")
                wall, worker_cpu, server_cpu, _ = await one_plan(client, settings, plan, pids)
                runs.append(Run(tuned, shape, size, wall, worker_cpu, server_cpu))
                print(
                    f"  {'with' if tuned else 'without':7} {shape:7} {size:4}: "
                    f"{wall:6.2f} s, worker {worker_cpu:5.2f} CPU-s, "
                    f"server {server_cpu:5.2f} CPU-s",
                    flush=True,
                )
    return runs


def _median(runs: list[Run], tuned: bool, shape: str, field: str) -> float:
    values = [getattr(r, field) for r in runs if r.tuned is tuned and r.shape == shape]
    return statistics.median(values) if values else float("nan")


def report(runs: list[Run]) -> None:
    print("\nshape        wall with/without   worker CPU   server CPU   (medians' ratios)")
    for shape, size in SHAPES:
        with_, without = (
            [_median(runs, tuned, shape, f) for f in ("wall_s", "worker_cpu_s", "server_cpu_s")]
            for tuned in (True, False)
        )
        ratios = [a / b for a, b in zip(with_, without, strict=True)]
        print(
            f"{shape} {size:<5}  {with_[0]:6.2f} / {without[0]:6.2f} s"
            f" = {ratios[0]:.2f}    {ratios[1]:.2f}         {ratios[2]:.2f}"
        )


async def run(rounds: int) -> None:
    print(f"load before: {load()}")
    runs: list[Run] = []
    # with, without, without, with, ...: each round turns the order of the last round.
    order = [t for r in range(rounds) for t in ((True, False) if r % 2 == 0 else (False, True))]
    for tuned in order:
        runs += await one_server(tuned, SHAPES)
    report(runs)
    print(f"load after: {load()}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dev_server", description=__doc__)
    parser.add_argument("--short", action="store_true", help="one round (CI)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of with and without")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(1 if args.short else args.rounds))


if __name__ == "__main__":
    main()
