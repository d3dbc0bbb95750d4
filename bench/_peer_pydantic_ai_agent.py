"""The Pydantic AI peer's agent, built once per worker process (``bench._peer_pydantic_ai``).

Pydantic AI wants its durable agent built outside any workflow, at import, so the worker can
register its activities. The workflow module imports this one through the sandbox's
passthrough, so every workflow run drives this same instance. Built in the workflow module
instead, the sandbox (which re-imports a workflow's module for each run) would rebuild the
agent and, with it, the OpenAI client's ``httpx`` client and its TLS context for every
child: worker CPU per subtask that belongs to the setup, not to the integration. The
OpenAI Agents peer likewise builds its client once, in its plugin.

Reads ``PEER_API_BASE``, ``PEER_API_KEY`` (at import; the defaults serve the benchmark
process, which imports the peer only to start plans) and ``PEER_WORKSPACE`` (in the tool).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import TemporalDurability
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

MODEL = "fake-model"
INSTRUCTIONS = "You are a careful coder. Use the tools to look before you answer."


def list_dir(path: str) -> str:
    """List a directory of the workspace (the tool the fake provider's agent calls).

    Sync, as blocking file I/O should be: inside the tool activity Pydantic AI runs it in
    a thread. The same body as the OpenAI Agents peer's tool.
    """
    root = Path(os.environ["PEER_WORKSPACE"]).resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        return f"error: {path} is outside the workspace"
    return "\n".join(sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir()))


agent = Agent(
    OpenAIChatModel(
        MODEL,
        provider=OpenAIProvider(
            base_url=os.environ.get("PEER_API_BASE", "http://127.0.0.1:9/v1"),
            api_key=os.environ.get("PEER_API_KEY", "unset"),
        ),
    ),
    name="coder",
    instructions=INSTRUCTIONS,
    tools=[list_dir],
    capabilities=[TemporalDurability()],  # default: 60 s start-to-close per activity
)
