"""The Temporal floor: the benchmark's DAG on a bare skeleton of the project's architecture.

``bench.overhead`` compares the durable plan with an ideal and a plain-asyncio floor, but
that gap mixes two costs: Temporal's own per-step price on this machine (SDK, dev server,
workflow tasks, child workflows) and whatever the project's code adds on top. This module
runs the same DAG shape through the same architecture with none of the project's code:
a parent workflow starts one child per subtask in dependency order, at most
``max_parallel`` at once, and merges finished children's results in a local activity after
starting what they unblocked (as ``PlanWorkflow`` does); each child issues the same
commands as ``SubtaskWorkflow`` (LLM activity, tool as a local activity, LLM activity; the
branch set-up and close ride on the LLM calls there) whose work is only a sleep of the
provider latency. Whatever the durable run takes beyond this floor is the project's share.

The workflows are defined at module level and import nothing but temporalio and the
standard library: the worker's sandbox re-imports this module for every workflow run, so
module-level code stays free of side effects, and the project's modules are imported only
inside the functions that run outside workflows.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

if TYPE_CHECKING:
    from durable_plans.domain.models import Plan

__all__ = [
    "FloorNode",
    "FloorPlanInput",
    "FloorPlanWorkflow",
    "FloorSubtaskInput",
    "FloorSubtaskWorkflow",
    "floor_worker",
    "run_temporal_floor",
]

STEP_TIMEOUT = timedelta(seconds=30)  # every activity, local or not: explicit, like the project


@dataclass(frozen=True)
class FloorNode:
    id: str
    depends_on: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FloorSubtaskInput:
    latency_ms: float
    tool_as_local_activity: bool = True
    # ``llm_calls`` 1 and no tool is the ``ask`` agent's shape; ``llm_local``: the LLM calls
    # as local activities, as the project makes them by default since issue 25.
    llm_calls: int = 2
    llm_local: bool = False


@dataclass(frozen=True)
class FloorPlanInput:
    """The DAG, in the plan's order; ``tool_as_local_activity`` mirrors how the project
    runs ``run_tool`` (a local activity by default, a regular one when False)."""

    subtasks: list[FloorNode]
    max_parallel: int
    latency_ms: float
    tool_as_local_activity: bool = True
    llm_calls: int = 2
    llm_local: bool = False


# --------------------------------------------------------------------------- activities


@activity.defn(name="floor_llm")
async def floor_llm(latency_ms: float) -> str:
    """One LLM call: the provider's latency and nothing else."""
    await asyncio.sleep(latency_ms / 1000.0)
    return "answer"


@activity.defn(name="floor_tool")
async def floor_tool() -> str:
    return "tool output"


@activity.defn(name="floor_merge")
async def floor_merge() -> None:
    """Stands in for the plan's merge of finished results into the base session."""


# --------------------------------------------------------------------------- workflows


@workflow.defn(name="BenchFloorSubtask")
class FloorSubtaskWorkflow:
    """The command shape of one ``SubtaskWorkflow`` agent loop, with no-op work."""

    @workflow.run
    async def run(self, inp: FloorSubtaskInput) -> str:
        answer = await self._llm(inp)
        if inp.llm_calls < 2:
            return answer
        if inp.tool_as_local_activity:
            await workflow.execute_local_activity(floor_tool, start_to_close_timeout=STEP_TIMEOUT)
        else:
            await workflow.execute_activity(floor_tool, start_to_close_timeout=STEP_TIMEOUT)
        for _ in range(inp.llm_calls - 1):
            answer = await self._llm(inp)
        return answer

    @staticmethod
    async def _llm(inp: FloorSubtaskInput) -> str:
        if inp.llm_local:
            return await workflow.execute_local_activity(
                floor_llm, inp.latency_ms, start_to_close_timeout=STEP_TIMEOUT
            )
        return await workflow.execute_activity(
            floor_llm, inp.latency_ms, start_to_close_timeout=STEP_TIMEOUT
        )


@workflow.defn(name="BenchFloorPlan")
class FloorPlanWorkflow:
    """Starts each subtask's child as soon as its dependencies completed, then merges what
    finished; returns how many children completed. No results are passed along: only the
    scheduling is measured."""

    @workflow.run
    async def run(self, inp: FloorPlanInput) -> int:
        parent = workflow.info().workflow_id
        child = FloorSubtaskInput(
            inp.latency_ms, inp.tool_as_local_activity, inp.llm_calls, inp.llm_local
        )
        waiting = {n.id: set(n.depends_on) for n in inp.subtasks}  # insertion order: the plan's
        done: set[str] = set()
        running: dict[str, asyncio.Task[str]] = {}
        unmerged = 0
        while waiting or running:
            for sid in [s for s, deps in waiting.items() if deps <= done]:
                if len(running) >= inp.max_parallel:
                    break
                del waiting[sid]
                running[sid] = asyncio.create_task(
                    workflow.execute_child_workflow(
                        FloorSubtaskWorkflow.run, child, id=f"{parent}/{sid}"
                    )
                )
            if unmerged:  # after the starts, as in PlanWorkflow
                await workflow.execute_local_activity(
                    floor_merge, start_to_close_timeout=STEP_TIMEOUT
                )
                unmerged = 0
            if not running:
                raise ApplicationError(
                    f"unsatisfiable dependencies: {sorted(waiting)}", non_retryable=True
                )
            await workflow.wait_condition(lambda: any(t.done() for t in running.values()))
            for sid, task in list(running.items()):  # dict order, so replay sees the same
                if task.done():
                    task.result()  # a failed child fails the plan
                    del running[sid]
                    done.add(sid)
                    unmerged += 1
        if unmerged:
            await workflow.execute_local_activity(floor_merge, start_to_close_timeout=STEP_TIMEOUT)
        return len(done)


# --------------------------------------------------------------------------- running it


def floor_worker(client: Client, task_queue: str) -> Worker:
    """A worker for the skeleton, on the project's own sandboxed runner, so both pay the
    same sandbox cost per workflow run."""
    from durable_plans.plugin import DurablePlansPlugin, client_carrying

    plugin = DurablePlansPlugin(
        workflows=[FloorPlanWorkflow, FloorSubtaskWorkflow],
        activities=[floor_llm, floor_tool, floor_merge],
    )
    return Worker(client_carrying(client, plugin), task_queue=task_queue)


def floor_input(
    plan: Plan,
    latency_ms: float,
    *,
    tool_as_local_activity: bool = True,
    llm_calls: int = 2,
    llm_local: bool = False,
) -> FloorPlanInput:
    return FloorPlanInput(
        subtasks=[FloorNode(s.id, list(s.depends_on)) for s in plan.subtasks],
        max_parallel=plan.max_parallel,
        latency_ms=latency_ms,
        tool_as_local_activity=tool_as_local_activity,
        llm_calls=llm_calls,
        llm_local=llm_local,
    )


async def run_temporal_floor(
    client: Client,
    plan: Plan,
    task_queue: str,
    latency_ms: float,
    *,
    workflow_id: str | None = None,
    tool_as_local_activity: bool = True,
    llm_calls: int = 2,
    llm_local: bool = False,
) -> float:
    """Seconds from the client's start request to the result, like ``bench._rig.run_plan``.

    ``workflow_id`` defaults to a fresh one (the durable run already used ``plan.id``);
    the children are ``{workflow_id}/{subtask id}``.
    """
    wid = workflow_id or f"floor-{plan.id}-{uuid.uuid4().hex[:8]}"
    inp = floor_input(
        plan,
        latency_ms,
        tool_as_local_activity=tool_as_local_activity,
        llm_calls=llm_calls,
        llm_local=llm_local,
    )
    t0 = time.perf_counter()
    handle = await client.start_workflow(FloorPlanWorkflow.run, inp, id=wid, task_queue=task_queue)
    completed = await handle.result()
    elapsed = time.perf_counter() - t0
    if completed != len(plan.subtasks):
        raise RuntimeError(f"floor plan {wid} completed {completed} of {len(plan.subtasks)}")
    return elapsed
