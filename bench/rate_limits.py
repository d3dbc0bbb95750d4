"""Shared rate limits against a provider's: refused requests and wall time, before and after.

    python -m bench.rate_limits [--short] [--subtasks 24] [--rps 2] [--tpm 60000]

Issue 23's measurement: independent subtasks (two LLM calls each: a tool call, then the
answer) on **two worker processes** against a fake provider limited to ``--rps`` requests
a second and ``--tpm`` tokens a minute (``FakeProvider(requests_per_s=..,
tokens_per_minute=..)``: 429 with Retry-After above them). One dev server, one session
store, one pair of workers, three plans one after the other:

* **before**: the subtasks use the workers' default model, which has no limits: each worker
  learns the provider's limit by being refused (Temporal retries after the Retry-After);
* **after**: the subtasks name another model of the same provider, which
  ``DPLAN_RATE_LIMITS`` limits at ``--share`` (90 %) of the provider's rates, shared by
  both workers through the SQLite store beside the session store
  (``activities/shared_limits.py``); then **after 2**, the same again, the workers' token
  estimates having learnt how the provider counts.

Printed per run: requests the provider received, how many it refused (and their share),
the wall time of the plan (client start → result) and the ideal, which is the answered
requests at the provider's request rate or their tokens at its token rate, whichever is
longer. ``--short`` (CI): 8 subtasks. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from bench._rig import bench_dirs, embedded_server
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, Subtask
from durable_plans.testing import FakeProvider, RecordedRequest

MODEL = "openai/fake-model"  # the workers' default model: not limited
LIMITED_MODEL = "openai/fake-limited"  # the same fake provider, under DPLAN_RATE_LIMITS
FAKE_KEY = "sk-bench-fake-000000000000000000000000000"  # the fake provider checks no key
WORKERS = 2


@dataclass
class Run:
    label: str
    requests: int
    refused: int
    answered: int
    tokens: int
    wall_s: float
    ideal_s: float
    plan_status: str

    @property
    def refused_share(self) -> float:
        return self.refused / self.requests if self.requests else 0.0


def independent_plan(subtasks: int, model: str | None = None) -> Plan:
    return Plan(
        id=f"bench-limits-{uuid.uuid4().hex[:10]}",
        goal="rate limits benchmark",
        max_parallel=subtasks,
        subtasks=tuple(
            Subtask(
                id=f"s{k}",
                description=f"Step {k}: look at the workspace and report what it contains.",
                agent="coder",
                model=model,
            )
            for k in range(subtasks)
        ),
    )


class Worker:
    """``dplan-worker`` in a process of its own, configured through its environment."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from durable_plans.worker import main; main()"],
            env={**os.environ, **env},
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    async def ready(self, timeout_s: float = 600.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log.read_text()[-2000:]}")
            if b"worker.started" in self.log.read_bytes():
                return
            await asyncio.sleep(0.2)
        raise TimeoutError(f"worker not ready:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


def worker_env(
    address: str, provider: FakeProvider, tmp: Path, limits: str | None
) -> dict[str, str]:
    env = {
        "TEMPORAL_ADDRESS": address,
        "DPLAN_TASK_QUEUE": f"bench-limits-{uuid.uuid4().hex[:8]}",
        "DPLAN_MODEL": MODEL,
        "DPLAN_API_BASE": provider.base_url,
        "DPLAN_API_KEY": FAKE_KEY,
        "DPLAN_SESSION_STORE": str(tmp / "sessions.db"),
        "DPLAN_WORKSPACE": str(tmp / "workspace"),
        "DPLAN_STATE_DIR": str(tmp / "state"),
        "DPLAN_LLM_TIMEOUT_S": "30",
        "DPLAN_LLM_MAX_ATTEMPTS": "1000",  # refusals are retried, never fail the plan
    }
    if limits:
        env["DPLAN_RATE_LIMITS"] = limits
    return env


async def run_once(
    client: Client,
    provider: FakeProvider,
    queue: str,
    *,
    label: str,
    subtasks: int,
    model: str | None,
) -> Run:
    """One plan on the workers polling ``queue``; what the provider saw meanwhile."""
    await asyncio.sleep(2.0)  # the provider's buckets fill again after the previous run
    first = len(provider.requests)
    plan = independent_plan(subtasks, model)
    started = time.perf_counter()
    report = await client.execute_workflow(
        "PlanWorkflow", PlanInput(plan=plan), id=plan.id, task_queue=queue,
        result_type=PlanReport,
    )  # fmt: skip
    wall = time.perf_counter() - started
    seen = provider.requests[first:]
    answered = [r for r in seen if r.kind == "completion"]
    tokens = sum(_tokens(r) for r in answered)
    ideal = max(
        len(answered) / _rps(provider),
        tokens * 60.0 / _tpm(provider),
    )
    refused = {id(r) for r in provider.refused}
    return Run(
        label=label,
        requests=len(seen),
        refused=sum(1 for r in seen if id(r) in refused),
        answered=len(answered),
        tokens=tokens,
        wall_s=wall,
        ideal_s=ideal,
        plan_status=report.status.value if report.status is not PlanStatus.COMPLETED else "ok",
    )


def _tokens(r: RecordedRequest) -> int:
    return sum((r.usage or {}).values())


def _rps(provider: FakeProvider) -> float:
    limit = provider.rate_limit
    return limit.requests_per_s if limit and limit.requests_per_s else float("inf")


def _tpm(provider: FakeProvider) -> float:
    limit = provider.rate_limit
    return limit.tokens_per_minute if limit and limit.tokens_per_minute else float("inf")


async def measure(args: argparse.Namespace) -> list[Run]:
    share = args.share
    limits = f"{LIMITED_MODEL}=rpm:{args.rps * 60 * share:g},tpm:{args.tpm * share:g}"
    runs: list[Run] = []
    with bench_dirs("limits") as dirs:
        tmp = dirs.root
        provider = FakeProvider(
            latency_ms=args.latency_ms, requests_per_s=args.rps, tokens_per_minute=args.tpm
        )
        async with provider, embedded_server() as env:
            workers: list[Worker] = []
            try:
                address = env.client.service_client.config.target_host
                # One pair of workers for every run: the plan before names no model (the
                # workers' default, not limited), the plans after name the limited one.
                wenv = worker_env(address, provider, tmp, limits)
                workers += [Worker(wenv, tmp / f"worker-{i}.log") for i in range(WORKERS)]
                await asyncio.gather(*(w.ready() for w in workers))
                # The second plan with limits shows them warm: each worker has learnt how
                # the provider counts tokens (its estimate starts at four characters each,
                # tool schemas included, which this provider does not count).
                for label, model in (
                    ("before", None),
                    ("after", LIMITED_MODEL),
                    ("after 2", LIMITED_MODEL),
                ):
                    runs.append(
                        await run_once(
                            env.client,
                            provider,
                            wenv["DPLAN_TASK_QUEUE"],
                            label=label,
                            subtasks=args.subtasks,
                            model=model,
                        )
                    )
            finally:
                for w in workers:
                    w.stop()
    print(f"limits after: DPLAN_RATE_LIMITS={limits!r}")
    return runs


def report(runs: Sequence[Run], args: argparse.Namespace) -> None:
    print(
        f"{args.subtasks} independent subtasks, {WORKERS} worker processes, provider limited "
        f"to {args.rps:g} requests/s and {args.tpm:g} tokens/min, latency {args.latency_ms:g} ms"
    )
    print(
        f"  {'run':<8}{'requests':>9}{'refused':>9}{'share':>8}{'answered':>9}"
        f"{'tokens':>8}{'wall s':>8}{'ideal s':>8}{'wall/ideal':>11}  plan"
    )
    for r in runs:
        ratio = r.wall_s / r.ideal_s if r.ideal_s else float("nan")
        print(
            f"  {r.label:<8}{r.requests:>9}{r.refused:>9}{r.refused_share:>8.0%}{r.answered:>9}"
            f"{r.tokens:>8}{r.wall_s:>8.1f}{r.ideal_s:>8.1f}{ratio:>11.2f}  {r.plan_status}"
        )


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.rate_limits",
        description="Refused requests and wall time against a rate-limited provider.",
    )
    parser.add_argument("--short", action="store_true", help="8 subtasks (CI)")
    parser.add_argument("--subtasks", type=int, help="independent subtasks (default 24)")
    parser.add_argument("--rps", type=float, default=2.0, help="provider's requests/s")
    parser.add_argument("--tpm", type=float, default=60000.0, help="provider's tokens/min")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="provider latency")
    parser.add_argument(
        "--share", type=float, default=0.9, help="our limits as a share of the provider's"
    )
    args = parser.parse_args(argv)
    if args.subtasks is None:
        args.subtasks = 8 if args.short else 24
    if args.subtasks < 1 or args.rps <= 0 or args.tpm <= 0 or not 0 < args.share <= 1:
        parser.error("subtasks, rps and tpm must be positive, share in (0, 1]")
    return args


async def run(argv: Sequence[str] | None = None) -> None:
    args = _parse(argv)
    report(await measure(args), args)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(run(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
