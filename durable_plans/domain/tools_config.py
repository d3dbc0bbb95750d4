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
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

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


def _absolute_path(value: str) -> str:
    if not value.startswith("/") or "\x00" in value:
        raise ValueError("must be an absolute path (starting with /)")
    if ".." in value.split("/"):
        raise ValueError("must not contain '..'")
    if value.rstrip("/") == "":
        raise ValueError("must not be / (the whole file system)")
    return value


ReadOnlyPath = Annotated[str, AfterValidator(_absolute_path)]
"""An operator-named path a sandbox shows read-only: absolute, no ``..``, not ``/``."""


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
    sandbox: bool = False
    """A stdio server started in the command sandbox (``activities/sandbox.py``): the
    toolchain read-only, a private ``/tmp``, nothing of the worker's files."""
    network: bool = False
    read_only: tuple[ReadOnlyPath, ...] = ()
    """With ``sandbox``: share the worker's network; extra absolute paths it may read."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (stdio) or url (streamable HTTP)")
        if self.url is not None and self.sandbox:
            raise ValueError("sandbox applies to a stdio server (command), not to a url")
        if not self.sandbox and (self.network or self.read_only):
            raise ValueError("network and read_only apply only with sandbox = true")
        return self

    @property
    def sandbox_policy(self) -> SandboxPolicy:
        return SandboxPolicy(network=self.network, read_only=self.read_only)


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


DEFAULT_MEMORY_MB: Final = 4096
"""The address space one command may use (RLIMIT_AS), unless its policy says otherwise."""


class SandboxPolicy(_Frozen):
    """What a sandboxed program may reach beyond its tree (``activities/sandbox.py``)."""

    network: bool = False
    """Share the worker's network (DNS, the internet, its loopback); default: none at all."""
    read_only: tuple[ReadOnlyPath, ...] = ()
    """Absolute paths an operator names, visible read-only (e.g. a data set, a cache)."""
    max_output_chars: int = Field(default=32_000, ge=100, le=1_000_000)
    memory_mb: int = Field(default=DEFAULT_MEMORY_MB, ge=64, le=1_048_576)


class CommandPolicy(_Frozen):
    """What an agent's ``run_command`` may do (``[agents.NAME.run_command]``)."""

    allow: tuple[str, ...] = ()
    """Program names (looked up on the worker's PATH); nothing else runs."""
    timeout_s: float = Field(default=120.0, gt=0, le=3600)
    max_output_chars: int = Field(default=32_000, ge=100, le=1_000_000)
    approval_required: bool = True
    """The loader's default is false when commands run in a sandbox (``DPLAN_SANDBOX``
    auto or bwrap) and true with ``none``; a value the agents file gives is kept."""
    idempotent: bool = False
    """Retried after a lost attempt only when declared so; otherwise run at most once."""
    network: bool = False
    """The sandbox shares the worker's network with its commands (and checks)."""
    read_only: tuple[ReadOnlyPath, ...] = ()
    """Extra absolute paths its commands see read-only."""
    memory_mb: int = Field(default=DEFAULT_MEMORY_MB, ge=64, le=1_048_576)
    """Address space per command (RLIMIT_AS), in MiB."""
    require_sandbox: bool = False
    """Never run its commands unconfined: a worker with ``DPLAN_SANDBOX=none`` refuses
    them. Set by the loader where it lifted the approval default because of the sandbox."""

    @property
    def sandbox(self) -> SandboxPolicy:
        """The sandbox its commands (and its checks) run in."""
        return SandboxPolicy(
            network=self.network,
            read_only=self.read_only,
            max_output_chars=self.max_output_chars,
            memory_mb=self.memory_mb,
        )


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
