"""Configuration of the tools that reach beyond the workspace: MCP servers and run_command.

Pure data, safe in the workflow sandbox. An agents file declares MCP servers (a stdio
command or a streamable-HTTP URL) and says which agents may use which servers or tools;
it also gives an agent a ``run_command`` policy (the programs it may run, its timeout and
output cap, whether a person must approve each call). Secrets never appear here: a server
is told the *names* of environment variables, and only the worker reads their values.

A workflow carries what was fixed when its plan started (each server's tool list, with
its timeout and retry numbers), so a replay sees the same tools whatever the servers say
today; the commands and URLs stay with the worker, so no workflow input can make a worker
start a program.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

RUN_COMMAND_TOOL: Final = "run_command"
"""The guarded shell: argv, not a shell string, inside the workspace, per-agent allowlist."""

APPROVAL_BY_DEFAULT: Final[frozenset[str]] = frozenset({RUN_COMMAND_TOOL})
"""Tools whose calls wait for a person unless the agent's policy switches that off
(``[agents.NAME.run_command] approval_required = false``)."""

MCP_SERVER_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,31}")
MCP_SERVER_NAME_RULE: Final = "use 1-32 of A-Z a-z 0-9 - and start with a letter or digit"
MCP_SEPARATOR: Final = "__"
"""Between server and tool in the name the model sees: ``git__git_status``."""
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_MCP_TOOLS_PER_SERVER: Final = 128


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class McpServerConfig(_Frozen):
    """One MCP server as the worker starts or reaches it (worker-side configuration)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    """Names of the worker's environment variables the server process receives."""
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    """(HTTP header, name of the worker's environment variable holding its value)."""
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    max_attempts: int = Field(default=3, ge=1, le=20)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (stdio) or url (streamable HTTP)")
        return self


class McpToolSpec(_Frozen):
    """One tool of a server, as listed when the plan started."""

    name: str  # the server's own name for it
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)


class McpServerTools(_Frozen):
    """A server's tools and its call parameters, fixed in the workflow at plan start."""

    server: str
    timeout_s: float
    max_attempts: int
    tools: tuple[McpToolSpec, ...] = ()


class CommandPolicy(_Frozen):
    """What an agent's ``run_command`` may do (``[agents.NAME.run_command]``)."""

    allow: tuple[str, ...] = ()
    """Program names (looked up on the worker's PATH); nothing else runs."""
    timeout_s: float = Field(default=120.0, gt=0, le=3600)
    max_output_chars: int = Field(default=32_000, ge=100, le=1_000_000)
    approval_required: bool = True
    idempotent: bool = False
    """Retried after a lost attempt only when declared so; otherwise run at most once."""


class ToolSchema(_Frozen):
    """A tool as the model is told about it (OpenAI function format, pieces)."""

    name: str
    description: str
    parameters: dict[str, Any]


def mcp_tool_name(server: str, tool: str) -> str:
    """The name the model calls: ``server__tool``, cut to what providers accept."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}{MCP_SEPARATOR}{tool}")
    return name[:64]


def requires_approval(tool: str, command_policy: CommandPolicy | None) -> bool:
    """Whether a call of ``tool`` needs a person by default: run_command does, unless
    the agent's policy says ``approval_required = false``."""
    if tool not in APPROVAL_BY_DEFAULT:
        return False
    return command_policy is None or command_policy.approval_required


def mcp_grants(entries: Iterable[str]) -> dict[str, frozenset[str] | None]:
    """An agent's ``mcp`` entries (``"git"`` or ``"git/git_status"``) by server; None:
    every tool of that server."""
    out: dict[str, frozenset[str] | None] = {}
    for entry in entries:
        server, _, tool = entry.partition("/")
        if not tool:
            out[server] = None
        elif server not in out or out[server] is not None:
            out[server] = (out.get(server) or frozenset()) | {tool}
    return out


def agent_mcp_tools(
    entries: Iterable[str], servers: Iterable[McpServerTools]
) -> dict[str, tuple[McpServerTools, McpToolSpec]]:
    """The MCP tools an agent may call, by the name the model sees."""
    grants = mcp_grants(entries)
    out: dict[str, tuple[McpServerTools, McpToolSpec]] = {}
    for server in servers:
        if server.server not in grants:
            continue
        allowed = grants[server.server]
        for tool in server.tools:
            if allowed is None or tool.name in allowed:
                out[mcp_tool_name(server.server, tool.name)] = (server, tool)
    return out


def mcp_tool_schemas(
    tools: Mapping[str, tuple[McpServerTools, McpToolSpec]],
) -> tuple[ToolSchema, ...]:
    schemas: list[ToolSchema] = []
    for name, (server, tool) in tools.items():
        params = tool.input_schema if tool.input_schema.get("type") == "object" else {}
        schemas.append(
            ToolSchema(
                name=name,
                description=f"[MCP server {server.server}] {tool.description}"[:1024],
                parameters=params or {"type": "object", "properties": {}},
            )
        )
    return tuple(schemas)
