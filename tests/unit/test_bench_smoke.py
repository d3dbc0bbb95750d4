"""Smoke tests for the benchmark's no-durability floor (``bench.fake_dag``).

The overhead benchmark is only meaningful if its floor runs the same DAG the same way:
every subtask, dependencies first, through the real litellm → HTTP → fake-provider path.
These check that on tiny plans at zero latency; no timing is asserted.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Sequence
from pathlib import Path

import bench.__main__ as runner
from bench.fake_dag import DagRunResult, LitellmAgent, StepOutcome, run_dag
from bench.overhead import LLM_CALLS_PER_SUBTASK, layered_plan
from durable_plans.domain.history import DependencyResult
from durable_plans.domain.models import Plan, Subtask
from durable_plans.domain.scheduling import critical_path_length
from durable_plans.testing import FakeProvider

KEY = "sk-test-bench-smoke-0000000000000000000"


def diamond() -> Plan:
    return Plan(
        id="smoke",
        max_parallel=4,
        subtasks=(
            Subtask(id="a", description="Start the work"),
            Subtask(id="b", description="Left branch", depends_on=("a",)),
            Subtask(id="c", description="Right branch", depends_on=("a",)),
            Subtask(id="d", description="Join both", depends_on=("b", "c")),
        ),
    )


def assert_respects_dependencies(plan: Plan, result: DagRunResult) -> None:
    assert sorted(result.order) == sorted(s.id for s in plan.subtasks)
    position = {sid: i for i, sid in enumerate(result.order)}
    for sub in plan.subtasks:
        run = result.runs[sub.id]
        for dep in sub.depends_on:
            assert position[dep] < position[sub.id], f"{sub.id} finished before {dep}"
            assert result.runs[dep].finished_s <= run.started_s, f"{sub.id} began before {dep}"


async def test_floor_runs_dependencies_first_through_litellm(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# smoke\n")
    plan = diamond()
    async with FakeProvider(latency_ms=0) as provider:
        agent = LitellmAgent("openai/fake-model", provider.base_url, KEY, tmp_path)
        result = await run_dag(plan, agent)
        assert provider.rejections == []
        assert len(provider.requests) == LLM_CALLS_PER_SUBTASK * len(plan.subtasks)
    assert_respects_dependencies(plan, result)
    assert result.llm_calls == LLM_CALLS_PER_SUBTASK * len(plan.subtasks)
    assert all(r.result.startswith("Done:") for r in result.runs.values())


async def test_floor_passes_dependency_results_and_caps_parallelism() -> None:
    plan = layered_plan(12, 4).model_copy(update={"max_parallel": 2})
    seen: dict[str, tuple[str, ...]] = {}
    active = 0
    peak = 0

    async def step(sub: Subtask, deps: Sequence[DependencyResult]) -> StepOutcome:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        seen[sub.id] = tuple(d.result for d in deps)
        await asyncio.sleep(0)
        active -= 1
        return StepOutcome(result=f"result of {sub.id}", llm_calls=1)

    result = await run_dag(plan, step)
    assert_respects_dependencies(plan, result)
    assert peak <= 2
    for sub in plan.subtasks:
        assert seen[sub.id] == tuple(f"result of {d}" for d in sub.depends_on)


def test_layered_plan_shape() -> None:
    plan = layered_plan(20, 4)
    assert len(plan.subtasks) == 20
    assert critical_path_length(plan) == 5
    assert plan.max_parallel >= 4
    assert {len(s.depends_on) for s in plan.subtasks if s.id.startswith("l1")} == {1, 2}
    assert layered_plan(20, 4).subtasks == plan.subtasks  # deterministic


def test_every_benchmark_with_a_main_is_run_by_python_m_bench() -> None:
    """``python -m bench --short`` (CI) skips a module whose ``main`` it cannot call, and
    says nothing: big_plans was skipped so once, its ``main`` given a second parameter.
    Only the helper modules, which have no ``main``, may be skipped."""
    skipped = []
    for name in runner.benchmark_names():
        module = importlib.import_module(f"bench.{name}")
        if runner.entry_point(module) is None:
            assert not hasattr(module, "main"), f"bench.{name}.main cannot be called by bench"
            skipped.append(name)
    assert "big_plans" in runner.benchmark_names()
    assert skipped == ["fake_dag", "temporal_floor"]
