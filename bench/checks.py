"""A check-gated subtask against an ungated one: ``python -m bench.checks [--short]``.

One dev server, one worker, the fake provider (``AgentScenario``: a tool call, then the
answer). Plans of one subtask each run alternately ungated and gated by ``check =
["true"]`` (the cheapest command: what is measured is the gate, not the command), on the
git workspace. Printed: median wall time per plan of each kind, the gated one's extra
milliseconds, and the check's own ``duration_s`` (the process, in the throwaway copy) as
the report records it; the rest of the difference is the activity's round trip and the
copy of the tree (``git read-tree`` into a temporary directory). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from temporalio.client import Client

from bench._rig import bench_dirs, bench_settings, embedded_server, running_worker
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, Subtask
from durable_plans.testing import FakeProvider

FAKE_KEY = "sk-bench-fake-0000000000000000000000000000"


async def one_plan(client: Client, queue: str, *, gated: bool) -> tuple[float, float]:
    """Wall seconds of one plan, and its check's recorded duration (0 ungated)."""
    check = (("true",),) if gated else None
    plan = Plan(
        id=f"bench-checks-{'gated' if gated else 'plain'}-{uuid.uuid4().hex[:6]}",
        subtasks=(Subtask(id="s", description="Look around", agent="coder", check=check),),
    )
    started = time.perf_counter()
    handle = await client.start_workflow(
        "PlanWorkflow", PlanInput(plan=plan), id=plan.id, task_queue=queue, result_type=PlanReport
    )
    report = await handle.result()
    wall = time.perf_counter() - started
    if report.status is not PlanStatus.COMPLETED:
        raise RuntimeError(f"plan {plan.id} ended {report.status.value}")
    return wall, sum(c.duration_s for r in report.subtasks for c in r.checks)


async def main(short: bool) -> None:
    rounds = 3 if short else 15
    plain: list[float] = []
    gated: list[float] = []
    check_s: list[float] = []
    with bench_dirs("checks") as dirs:
        async with FakeProvider(latency_ms=0) as provider, embedded_server() as env:
            settings = bench_settings(
                dirs, "bench", model="openai/fake", api_base=provider.base_url, api_key=FAKE_KEY
            )
            (settings.workspace / "README.md").write_text("# bench\n")
            async with running_worker(env.client, settings):
                await one_plan(env.client, settings.task_queue, gated=True)  # warm-up
                for _ in range(rounds):
                    wall, _ = await one_plan(env.client, settings.task_queue, gated=False)
                    plain.append(wall)
                    wall, ran = await one_plan(env.client, settings.task_queue, gated=True)
                    gated.append(wall)
                    check_s.append(ran)
    p, g, c = (statistics.median(x) * 1000 for x in (plain, gated, check_s))
    print(f"checks: {rounds} plans of each kind, alternating; medians")
    print(f"  ungated subtask plan   {p:8.0f} ms")
    print(f"  gated by `true`        {g:8.0f} ms   (+{g - p:.0f} ms)")
    print(f"  the check's own run    {c:8.1f} ms   (as recorded in the report)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true")
    asyncio.run(main(parser.parse_args().short))
