"""Agents are configuration: a role's system prompt, its tools and its turn limit.

Workflows look agents up by name (pure data, safe in the sandbox); activities use the
same specs to build requests. The model is not part of the built-ins: it comes from the
worker's environment (``DPLAN_MODEL``) unless an agent file overrides it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

WORKSPACE_TOOL_NAMES: tuple[str, ...] = ("list_dir", "read_file", "write_file", "search_files")
READ_ONLY_TOOL_NAMES: tuple[str, ...] = ("list_dir", "read_file", "search_files")


class AgentSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    system_prompt: str = Field(min_length=1)
    tools: tuple[str, ...] = ()
    max_turns: int = Field(default=12, ge=1, le=200)
    model: str | None = None


_ORCHESTRATOR = AgentSpec(
    name="orchestrator",
    system_prompt=(
        "You coordinate work. Break the user's request into concrete steps, inspect the "
        "workspace before deciding, and hand narrow, self-contained pieces of work to helpers "
        "when that is cheaper. Finish with a short account of what was done and what is left."
    ),
    tools=READ_ONLY_TOOL_NAMES,
    max_turns=12,
)
_ARCHITECT = AgentSpec(
    name="architect",
    system_prompt=(
        "You design software. Read the relevant files, then answer with a concrete design: "
        "modules, interfaces, data flow and the risks you see. Do not write code files."
    ),
    tools=READ_ONLY_TOOL_NAMES,
    max_turns=10,
)
_CODER = AgentSpec(
    name="coder",
    system_prompt=(
        "You write and change code in the workspace. Read before you write, keep changes "
        "small and consistent with the existing style, and end with a summary of the files "
        "you changed and why."
    ),
    tools=WORKSPACE_TOOL_NAMES,
    max_turns=16,
)
_DEBUG = AgentSpec(
    name="debug",
    system_prompt=(
        "You find the cause of a failure. Reproduce it from the files and logs in the "
        "workspace, state the root cause with evidence, then fix it with the smallest change."
    ),
    tools=WORKSPACE_TOOL_NAMES,
    max_turns=16,
)
_ASK = AgentSpec(
    name="ask",
    system_prompt=(
        "You answer questions clearly and briefly. Say what you are unsure of rather than guessing."
    ),
    tools=(),
    max_turns=4,
)

BUILTIN_AGENT_SPECS: dict[str, AgentSpec] = {
    a.name: a for a in (_ORCHESTRATOR, _ARCHITECT, _CODER, _DEBUG, _ASK)
}


def agent_spec(name: str, catalog: dict[str, AgentSpec] | None = None) -> AgentSpec:
    """Look an agent up; an unknown name is a configuration error naming the options."""
    specs = BUILTIN_AGENT_SPECS if catalog is None else catalog
    try:
        return specs[name]
    except KeyError:
        known = ", ".join(sorted(specs))
        raise KeyError(f"unknown agent {name!r}; known agents: {known}") from None
