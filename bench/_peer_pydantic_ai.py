"""The second peer for ``bench.cpu``: the same DAG on Pydantic AI's Temporal integration.

``pydantic_ai.durable_exec.temporal`` makes an agent durable: inside a workflow, every
model request and every tool call of the agent runs as an activity, the agent loop itself
in the workflow. The shape mirrors ours and the OpenAI Agents peer's
(``bench._peer_agents``): a parent workflow starts one child workflow per subtask in
dependency order (at most ``max_parallel`` at once), handing each the results of its
dependencies; each child is one ``agent.run`` whose one tool, ``list_dir``, runs as an
activity, against the same fake provider through the OpenAI client's chat completions
API (no streaming). As with that peer, nothing is stored outside Temporal.

The agent is a plain ``Agent`` with the ``TemporalDurability`` capability, the form that
Pydantic AI 2.21 documents; ``TemporalAgent`` is its deprecated wrapper around the same
activities. It is built once per process in ``bench._peer_pydantic_ai_agent`` (which says
why), imported here through the sandbox's passthrough.

Run as its own worker process by ``bench.cpu``: ``python -m bench._peer_pydantic_ai``
with ``TEMPORAL_ADDRESS``, ``PEER_TASK_QUEUE``, ``PEER_API_BASE``, ``PEER_API_KEY`` and
``PEER_WORKSPACE`` in the environment. Needs the ``bench`` extra (``pydantic-ai-slim``).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable
from typing import Any

from temporalio import workflow
from temporalio.client import Client

with workflow.unsafe.imports_passed_through():
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin

    from bench._peer_dag import run_children

    # Passed through: one agent (and one HTTP client) per process, not one per workflow run.
    from bench._peer_pydantic_ai_agent import agent


@workflow.defn
class PydaiSubtaskWorkflow:
    """One subtask: one agent run, its model calls and its tool call as activities."""

    # PydanticAIPlugin registers the activities of the agents listed here on the worker
    # (what subclassing ``PydanticAIWorkflow`` would declare; no base class keeps mypy
    # strict in a venv without the package).
    __pydantic_ai_agents__ = (agent,)

    @workflow.run
    async def run(self, task: str) -> str:
        result = await agent.run(task)
        return str(result.output)


@workflow.defn
class PydaiPlanWorkflow:
    """Children in dependency order, each given its dependencies' results."""

    @workflow.run
    async def run(self, inp: dict[str, Any]) -> dict[str, str]:
        def child(subtask_id: str, task: str) -> Awaitable[str]:
            return workflow.execute_child_workflow(
                PydaiSubtaskWorkflow.run, task, id=f"{workflow.info().workflow_id}/{subtask_id}"
            )

        return await run_children(inp, child)


async def _serve() -> None:
    from temporalio.worker import Worker

    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"], plugins=[PydanticAIPlugin()])
    worker = Worker(
        client,
        task_queue=os.environ["PEER_TASK_QUEUE"],
        workflows=[PydaiPlanWorkflow, PydaiSubtaskWorkflow],
        max_concurrent_activities=50,  # as ours
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(_serve())
