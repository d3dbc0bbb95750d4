"""Fallback models while the primary is down: ``python -m bench.fallback [--short]``.

A plan of independent subtasks (each a real agent loop: a tool call, then the answer)
against the fake provider, whose model ``primary`` answers 500 to everything for the
first ``outage`` seconds of each run while ``backup`` answers at once. Two runs on one
dev server and worker, side by side:

* **no fallback**: the coder's model is ``primary`` alone; each LLM call is retried by
  Temporal (backoff 1 s doubling, ``DPLAN_LLM_MAX_ATTEMPTS`` = 6 attempts), so a subtask
  waits the outage out, or fails when it outlasts its attempts (six attempts span ~31 s);
* **fallback**: the coder lists ``fallback_models = ["openai/backup"]``; after
  ``DPLAN_FALLBACK_AFTER_ATTEMPTS`` attempts of a call (or ``DPLAN_FALLBACK_AFTER_S``) the
  next attempt asks ``backup`` (``activities/model_choice.py``).

Printed per run: the plan's status, wall time, how many requests each model was sent and
how many the primary refused, and which model the report says answered. Full mode is the
issue's case — the primary down for a minute, the default thresholds (3 attempts, 60 s);
``--short`` (CI): 2 subtasks, a 6 s outage, 2 attempts. Nothing is asserted: numbers to read.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from temporalio.client import Client, WorkflowFailureError

from bench._rig import bench_dirs, bench_settings, embedded_server, running_worker
from durable_plans.domain.agents import agent_spec
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Plan, PlanReport, Subtask
from durable_plans.testing import AgentScenario, ChatRequest, FakeProvider, HttpError, Reply

FAKE_KEY = "sk-bench-fake-0000000000000000000000000000"


@dataclass
class Outage:
    """``model`` answers 500 until ``until`` (time.time()); everything else as usual."""

    model: str
    until: float = 0.0

    def __post_init__(self) -> None:
        self.inner = AgentScenario()

    def __call__(self, request: ChatRequest) -> Reply:
        if request.model == self.model and time.time() < self.until:
            return HttpError(status=500)
        return self.inner(request)


@dataclass
class Run:
    name: str
    status: str
    wall_s: float
    sent: Counter[str]
    refused: int
    answered_by: str


async def run_once(
    client: Client,
    queue: str,
    provider: FakeProvider,
    outage: Outage,
    *,
    name: str,
    fallbacks: tuple[str, ...],
    subtasks: int,
    outage_s: float,
) -> Run:
    coder = agent_spec("coder").model_copy(
        update={"model": "openai/primary", "fallback_models": fallbacks}
    )
    plan = Plan(
        id=f"bench-fallback-{name.replace(' ', '-')}-{uuid.uuid4().hex[:6]}",
        subtasks=tuple(
            Subtask(id=f"s{i}", description=f"Look around {i}", agent="coder")
            for i in range(subtasks)
        ),
        max_parallel=subtasks,
    )
    first = len(provider.requests)
    outage.until = time.time() + outage_s
    started = time.monotonic()
    handle = await client.start_workflow(
        "PlanWorkflow",
        PlanInput(plan=plan, agents=(coder,)),
        id=plan.id,
        task_queue=queue,
        result_type=PlanReport,
    )
    try:
        report: PlanReport | None = await handle.result()
        status = report.status.value if report else "?"
    except WorkflowFailureError:
        report, status = None, "failed"
    wall = time.monotonic() - started
    requests = provider.requests[first:]
    sent = Counter(r.model or "?" for r in requests)
    refused = sum(1 for r in requests if r.model == "primary" and r.status == 500)
    models = sorted({m.model for r in report.subtasks for m in r.models}) if report else []
    return Run(name, status, wall, sent, refused, ", ".join(models) or "-")


async def measure(*, subtasks: int, outage_s: float, after_attempts: int) -> list[Run]:
    outage = Outage("primary")
    with bench_dirs("fallback") as dirs:
        async with FakeProvider(outage) as provider, embedded_server() as env:
            settings = bench_settings(
                dirs,
                "bench",
                model="openai/primary",
                api_base=provider.base_url,
                api_key=FAKE_KEY,
                fallback_after_attempts=after_attempts,
            )
            async with running_worker(env.client, settings):
                runs = []
                for name, fallbacks in (("no fallback", ()), ("fallback", ("openai/backup",))):
                    runs.append(
                        await run_once(
                            env.client,
                            settings.task_queue,
                            provider,
                            outage,
                            name=name,
                            fallbacks=fallbacks,
                            subtasks=subtasks,
                            outage_s=outage_s,
                        )
                    )
    return runs


def report(runs: Sequence[Run], *, subtasks: int, outage_s: float, after_attempts: int) -> None:
    print(
        f"fallback: {subtasks} subtasks x 2 LLM calls, primary down {outage_s:.0f} s, "
        f"hand-over after {after_attempts} attempts or 60 s"
    )
    print(
        f"  {'run':<12} {'status':<10} {'wall':>7} {'primary':>8} {'refused':>8} "
        f"{'backup':>7}  answered by"
    )
    for r in runs:
        print(
            f"  {r.name:<12} {r.status:<10} {r.wall_s:>6.1f}s {r.sent['primary']:>8} "
            f"{r.refused:>8} {r.sent['backup']:>7}  {r.answered_by}"
        )
    if len(runs) == 2 and runs[1].wall_s > 0:
        print(f"  wall time without / with fallback: {runs[0].wall_s / runs[1].wall_s:.1f}x")


async def main(short: bool) -> None:
    subtasks, outage_s, after = (2, 6.0, 2) if short else (8, 60.0, 3)
    runs = await measure(subtasks=subtasks, outage_s=outage_s, after_attempts=after)
    report(runs, subtasks=subtasks, outage_s=outage_s, after_attempts=after)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true")
    asyncio.run(main(parser.parse_args().short))
