"""Many small plans at once: plans/s and latency percentiles, LLM calls local and not.

    python -m bench.concurrent_plans [--short] [--plans N] [--rounds R] [--variants V,...]

One Temporal dev server (its own process, so its CPU is read from ``/proc``), one
in-process worker (``build_worker``, SQLite session store) and the offline scripted model
with ``DPLAN_SCRIPTED_LATENCY_MS=0``: orchestration alone. ``--plans`` plans of five
subtasks each (``bench.scale.small_plan``: one fans out to three that fan back in, so 10
LLM calls and 5 tool calls a plan) are all started at once; each plan's latency runs from
its start request to its report in the client's hands.

Two workers take turns on the same server, each on its own task queue (rounds
alternate which goes first): ``local``, this tree's default (a subtask's LLM calls as
local activities, ``DPLAN_LLM_LOCAL=1``), and ``regular`` (``DPLAN_LLM_LOCAL=0``, the
shape before issue 25). Printed per worker: wall s, plans/s, subtasks/s, latency
p50/p95/p99, dev-server CPU and worker CPU (this process: worker and client) per plan,
and for a sample of plans their history events and Temporal Cloud actions per plan
(``bench/_actions.py``). Nothing is asserted.

``--short`` (CI): 20 plans, one round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from temporalio.client import Client

from bench._actions import HistoryCost
from bench._rig import bench_dirs, bench_settings, run_plan, running_worker, scripted_latency_zero
from bench.cpu import _connect, cpu_seconds, dev_server, history_events
from bench.scale import SMALL_PLAN_SUBTASKS, small_plan

VARIANTS = {"local": True, "regular": False}  # name -> Settings.llm_local
COST_SAMPLE = 10  # plans whose histories are read for events and actions


@dataclass
class Round:
    wall_s: float
    latencies: list[float]
    server_cpu_s: float
    worker_cpu_s: float
    cost: HistoryCost  # of the sampled plans
    sampled: int


@dataclass
class Results:
    plans: int
    rounds: dict[str, list[Round]] = field(default_factory=dict)


async def one_round(client: Client, queue: str, plans: int, server_pid: int) -> Round:
    batch = [small_plan(prefix="conc") for _ in range(plans)]
    s0, w0, t0 = cpu_seconds(server_pid), time.process_time(), time.perf_counter()
    latencies = await asyncio.gather(*(run_plan(client, p, queue) for p in batch))
    wall = time.perf_counter() - t0
    s1, w1 = cpu_seconds(server_pid), time.process_time()
    cost = HistoryCost()
    sample = batch[:COST_SAMPLE]
    for p in sample:
        cost = cost + await history_events(client, p.id)
    return Round(wall, list(latencies), s1 - s0, w1 - w0, cost, len(sample))


async def measure(plans: int, rounds: int, variants: Sequence[str] = tuple(VARIANTS)) -> Results:
    results = Results(plans)
    with (
        scripted_latency_zero(),
        bench_dirs("conc") as dirs,
        dev_server(dirs.root) as (server, address),
    ):
        client = await _connect(address)
        order = list(variants)
        for _ in range(rounds):
            for name in order:
                settings = bench_settings(dirs, f"conc-{name}", llm_local=VARIANTS[name])
                async with running_worker(client, settings):
                    # Warm-up: the sandbox's first load of each workflow, imports.
                    await run_plan(client, small_plan(prefix="warm"), settings.task_queue)
                    r = await one_round(client, settings.task_queue, plans, server.pid)
                results.rounds.setdefault(name, []).append(r)
            order.reverse()
    return results


def _pct(values: Sequence[float], p: int) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def report(res: Results) -> None:
    print(
        f"{res.plans} plans of {SMALL_PLAN_SUBTASKS} subtasks (fan-out/fan-in), all started at "
        f"once; scripted model, latency 0; one dev server, one in-process worker per variant; "
        f"median of {max(len(r) for r in res.rounds.values())} round(s)"
    )
    print(
        f"{'variant':<9}{'wall s':>8}{'plans/s':>9}{'subtasks/s':>12}{'p50 s':>8}{'p95 s':>8}"
        f"{'p99 s':>8}{'server ms/plan':>16}{'worker ms/plan':>16}{'events/plan':>13}"
        f"{'actions/plan':>14}"
    )
    rows: dict[str, dict[str, float]] = {}
    for name, rounds in res.rounds.items():
        lat = [x for r in rounds for x in r.latencies]
        wall = statistics.median(r.wall_s for r in rounds)
        row = {
            "wall": wall,
            "rate": res.plans / wall,
            "server": statistics.median(r.server_cpu_s for r in rounds) * 1000 / res.plans,
            "worker": statistics.median(r.worker_cpu_s for r in rounds) * 1000 / res.plans,
            "events": statistics.median(r.cost.events / r.sampled for r in rounds),
            "actions": statistics.median(r.cost.actions / r.sampled for r in rounds),
        }
        rows[name] = row
        print(
            f"{name:<9}{wall:>8.2f}{row['rate']:>9.2f}{row['rate'] * SMALL_PLAN_SUBTASKS:>12.1f}"
            f"{_pct(lat, 50):>8.2f}{_pct(lat, 95):>8.2f}{_pct(lat, 99):>8.2f}"
            f"{row['server']:>16.1f}{row['worker']:>16.1f}{row['events']:>13.1f}"
            f"{row['actions']:>14.1f}"
        )
    if "local" in rows and "regular" in rows:
        a, b = rows["local"], rows["regular"]
        print(
            f"local / regular: plans/s {a['rate'] / b['rate']:.2f}, server CPU "
            f"{a['server'] / b['server']:.2f}, worker CPU {a['worker'] / b['worker']:.2f}, "
            f"events {a['events'] / b['events']:.2f}, actions {a['actions'] / b['actions']:.2f}"
        )


async def main(short: bool) -> None:
    """Entry point for ``python -m bench`` (and this module's own ``__main__``)."""
    report(await measure(20 if short else 500, 1))


def _cli(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.concurrent_plans",
        description="Many small plans at once: plans/s and latency percentiles.",
    )
    parser.add_argument("--short", action="store_true", help="20 plans, one round (CI)")
    parser.add_argument("--plans", type=int, help="plans started at once (default 500)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per variant")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}"
    )
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants or any(v not in VARIANTS for v in variants):
        parser.error(f"--variants: choose from {', '.join(VARIANTS)}")
    plans = args.plans or (20 if args.short else 500)
    if plans < 1 or args.rounds < 1:
        parser.error("--plans and --rounds must be positive")
    if sys.platform != "linux":
        parser.error("bench.concurrent_plans reads /proc: Linux only")
    report(asyncio.run(measure(plans, args.rounds, variants)))


if __name__ == "__main__":
    _cli()
