"""The peer for ``bench.cpu``: the same DAG on the OpenAI Agents SDK's Temporal integration.

``temporalio.contrib.openai_agents`` (the ``temporalio-openai-agents`` package) runs an
agent inside a workflow and every model call as an activity. The shape here mirrors ours:
a parent workflow starts one child workflow per subtask in dependency order (at most
``max_parallel`` at once), handing each the results of its dependencies; each child is
one ``Runner.run`` of an agent whose one tool, ``list_dir``, is an activity
(``activity_as_tool``), against the same fake provider through the OpenAI client's chat
completions API. Nothing is stored outside Temporal: the conversation travels in the
model activities' inputs, as that integration does it.

Run as its own worker process by ``bench.cpu``: ``python -m bench._peer_agents`` with
``TEMPORAL_ADDRESS``, ``PEER_TASK_QUEUE``, ``PEER_API_BASE``, ``PEER_API_KEY`` and
``PEER_WORKSPACE`` in the environment. Needs the ``bench`` extra. The module is private
(underscore) so ``python -m bench`` does not take it for a benchmark.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from temporalio.contrib import openai_agents as _openai_agents

    from bench._peer_dag import run_children

# Typed loosely: the module's names exist only where the `bench` extra (openai-agents) is
# installed, and mypy runs in environments with and without it.
openai_agents: Any = _openai_agents

MODEL = "fake-model"
INSTRUCTIONS = "You are a careful coder. Use the tools to look before you answer."


@activity.defn
def list_dir(path: str) -> str:
    """List a directory of the workspace (the tool the fake provider's agent calls).

    A sync activity, as blocking file I/O should be (it runs in the worker's thread pool).
    """
    root = Path(os.environ["PEER_WORKSPACE"]).resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        return f"error: {path} is outside the workspace"
    return "\n".join(sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir()))


@workflow.defn
class PeerSubtaskWorkflow:
    """One subtask: one agent run, its model calls and its tool call as activities."""

    @workflow.run
    async def run(self, task: str) -> str:
        agent = Agent(
            name="coder",
            instructions=INSTRUCTIONS,
            model=MODEL,
            tools=[
                openai_agents.workflow.activity_as_tool(
                    list_dir, start_to_close_timeout=timedelta(seconds=30)
                )
            ],
        )
        result = await Runner.run(agent, input=task)
        return str(result.final_output)


@workflow.defn
class PeerPlanWorkflow:
    """Children in dependency order, each given its dependencies' results."""

    @workflow.run
    async def run(self, inp: dict[str, Any]) -> dict[str, str]:
        def child(subtask_id: str, task: str) -> Awaitable[str]:
            return workflow.execute_child_workflow(
                PeerSubtaskWorkflow.run, task, id=f"{workflow.info().workflow_id}/{subtask_id}"
            )

        return await run_children(inp, child)


async def _serve() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from agents import set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider
    from openai import AsyncOpenAI
    from temporalio.worker import Worker

    set_tracing_disabled(True)  # no trace export: there is no network here
    provider = OpenAIProvider(
        openai_client=AsyncOpenAI(
            base_url=os.environ["PEER_API_BASE"], api_key=os.environ["PEER_API_KEY"]
        ),
        use_responses=False,
    )
    plugin = openai_agents.OpenAIAgentsPlugin(
        model_params=openai_agents.ModelActivityParameters(
            start_to_close_timeout=timedelta(seconds=60)
        ),
        model_provider=provider,
    )
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"], plugins=[plugin])
    worker = Worker(
        client,
        task_queue=os.environ["PEER_TASK_QUEUE"],
        workflows=[PeerPlanWorkflow, PeerSubtaskWorkflow],
        activities=[list_dir],
        activity_executor=ThreadPoolExecutor(max_workers=8),
        max_concurrent_activities=50,  # as ours
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        await stop.wait()


if __name__ == "__main__":
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    asyncio.run(_serve())
