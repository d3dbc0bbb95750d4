"""What both peers of ``bench.cpu`` share: the parent workflow's DAG walk and its start.

Each peer's parent workflow starts one child per subtask in dependency order (at most
``max_parallel`` at once), handing each its dependencies' results; only the child differs
(one agent run of that peer's framework). Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import workflow
from temporalio.client import Client

__all__ = ["run_children", "run_peer_plan"]


async def run_children(
    inp: dict[str, Any], child: Callable[[str, str], Awaitable[str]]
) -> dict[str, str]:
    """Run ``child(subtask_id, task)`` for every subtask of ``inp`` in dependency order."""
    subtasks: list[dict[str, Any]] = inp["subtasks"]
    limit = int(inp["max_parallel"])
    results: dict[str, str] = {}
    started: set[str] = set()
    running: dict[asyncio.Task[str], str] = {}
    while len(results) < len(subtasks):
        for s in subtasks:
            if len(running) >= limit:
                break
            if s["id"] in started or any(d not in results for d in s["depends_on"]):
                continue
            context = "".join(f"\n\nResult of {d}: {results[d]}" for d in s["depends_on"])
            task = asyncio.create_task(_awaited(child(s["id"], s["description"] + context)))
            running[task] = s["id"]
            started.add(s["id"])
        done, _ = await workflow.wait(list(running), return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            results[running.pop(t)] = t.result()
    return results


async def _awaited(result: Awaitable[str]) -> str:
    return await result


async def run_peer_plan(
    client: Client,
    task_queue: str,
    workflow_name: str,
    subtasks: list[dict[str, Any]],
    max_parallel: int,
) -> str:
    """Start a peer's plan workflow, wait for it, return its workflow id."""
    plan_id = f"{workflow_name.lower()}-{uuid.uuid4().hex[:10]}"
    await client.execute_workflow(
        workflow_name,
        {"subtasks": subtasks, "max_parallel": max_parallel},
        id=plan_id,
        task_queue=task_queue,
    )
    return plan_id
