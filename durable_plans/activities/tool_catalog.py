"""Every built-in tool in one table, and the one check of whether an agent may call one.

The tools are declared where they run (the file tools in :mod:`activities.file_tools`,
delegation, sub-agents and the conversation's tools in :mod:`activities.orchestration_tools`,
``run_command`` in :mod:`activities.commands`); this is where they meet: what a model is
told about each (its JSON schema), which only read the workspace, and whether a call is
refused. Their *names* live in :mod:`domain.agents`, because agents files and plans are
validated in workflow code, which must not import activities; a unit test keeps the two
in step.

A refused call is an answer for the model (``error: ...`` naming what it may call), not a
failure: the model reads it and carries on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Final

from durable_plans.activities.commands import COMMAND_TOOLS
from durable_plans.activities.file_tools import WORKSPACE_TOOLS
from durable_plans.activities.orchestration_tools import ORCHESTRATION_TOOLS
from durable_plans.activities.tool_registry import ToolResult, ToolSpec, unknown_tool

__all__ = ["BUILTIN_TOOLS", "READ_ONLY_TOOLS", "refuse_call", "tool_specs"]

BUILTIN_TOOLS: Final[Mapping[str, ToolSpec]] = MappingProxyType(
    {**WORKSPACE_TOOLS, **ORCHESTRATION_TOOLS, **COMMAND_TOOLS}
)
"""Every tool a worker has built in, by name (MCP servers' tools come on top)."""

READ_ONLY_TOOLS: Final[frozenset[str]] = frozenset(
    name for name, spec in BUILTIN_TOOLS.items() if spec.read_only
)
"""The tools that only read the workspace; every other one may change something."""


def tool_specs(names: Iterable[str]) -> list[ToolSpec]:
    """Specs for an agent's tool names, in its order; unknown names are skipped (an agents
    file is validated when it is loaded)."""
    return [BUILTIN_TOOLS[n] for n in names if n in BUILTIN_TOOLS]


def refuse_call(name: str, allowed: Sequence[str]) -> ToolResult | None:
    """The answer to a call the agent may not make, or None when it may make it.

    ``allowed`` is the agent's tool list, in its order: what the answer offers instead.
    """
    if name in BUILTIN_TOOLS and name in allowed:
        return None
    if name not in BUILTIN_TOOLS:
        return unknown_tool(name, allowed)
    listed = ", ".join(allowed) or "none"
    return ToolResult.error(
        f"tool '{name}' is not available to this agent; available tools: {listed}"
    )
