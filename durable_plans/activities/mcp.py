"""MCP servers as tools: a per-worker pool of connections and the two activities.

``list_mcp_tools`` runs once when a plan starts; its result (each server's tools, timeout
and attempts) is kept in the workflow, so a replay sees the same tools. ``call_mcp_tool``
runs each call as a regular activity with the server's own timeout and retry policy; it
reads the call from the session and stores the answer there, scrubbed and capped, like
every tool (nothing a server returns enters workflow history).

Why not ``temporalio-mcp`` (Temporal's MCP integration): its activities return the whole
MCP result as the activity result, i.e. into workflow history, unscrubbed and uncapped;
here results must go to the session store, and tool names, access per agent and error
wording must match the other tools. Its connection pool's lesson is kept: one task owns
each connection for its whole life (the MCP client's context must be entered and left in
the same task), and a connection that failed below the protocol (a dead server, a closed
stream) is retired so the next call starts a fresh one; an error *answer* keeps it.

Commands, URLs and the environment variables' values stay on the worker: a workflow names
a server, it never says what to run or which secret to send.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any, TextIO

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_plans._errors import McpConfigError, SandboxUnavailable
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.sandbox import wrap_for_sandbox
from durable_plans.activities.tool_calls import pending_call, store_answer
from durable_plans.activities.tool_registry import ToolResult
from durable_plans.domain.contracts import ToolCallOutput
from durable_plans.domain.failures import FailureType
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.domain.tool_contracts import (
    ACT_CALL_MCP_TOOL,
    ACT_LIST_MCP_TOOLS,
    ListMcpToolsInput,
    ListMcpToolsOutput,
    McpCallInput,
)
from durable_plans.domain.tools_config import (
    MAX_MCP_TOOLS_PER_SERVER,
    McpServerConfig,
    McpServerTools,
    McpToolSpec,
)
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings

MAX_DESCRIPTION_CHARS = 1024
MAX_SCHEMA_CHARS = 16_000
# JSON-RPC codes that mean the connection itself is unusable (closed, stuck).
_CONNECTION_CODES = frozenset({-32000, -32001})


def find_command(command: str) -> str:
    """A console script next to the worker's Python first (servers installed in the same
    venv, e.g. ``mcp-server-git``), then the worker's PATH."""
    if "/" in command:
        return command
    here = str(Path(sys.executable).parent)
    found = shutil.which(command, path=os.pathsep.join([here, os.environ.get("PATH", "")]))
    if found is None:
        raise McpConfigError(f"command {command!r} not found next to Python or on PATH")
    return found


def _env_values(server: McpServerConfig, names: Iterable[str]) -> dict[str, str]:
    missing = [n for n in names if n not in os.environ]
    if missing:
        raise McpConfigError(
            f"MCP server {server.name!r} needs {', '.join(missing)} in the worker's environment"
        )
    return {n: os.environ[n] for n in names}


def _server_errlog() -> TextIO:
    """Where a stdio server's stderr goes: the worker process's own stderr (nowhere when
    the process has none)."""
    stream = sys.__stderr__
    return _devnull() if stream is None or stream.closed else stream


@functools.cache
def _devnull() -> TextIO:
    return open(os.devnull, "w")


def _stdio_command(
    server: McpServerConfig, settings: Settings | None
) -> tuple[str, list[str], dict[str, str]]:
    """The program, arguments and environment a stdio server starts with: in the command
    sandbox when it is marked ``sandbox = true`` (``activities/sandbox.py``)."""
    assert server.command is not None
    command = [find_command(server.command), *server.args]
    env = _env_values(server, server.env)
    if not server.sandbox or settings is None:
        return command[0], command[1:], env
    try:
        wrapped, inside = wrap_for_sandbox(command, policy=server.sandbox_policy, settings=settings)
    except SandboxUnavailable as err:
        raise McpConfigError(
            f"MCP server {server.name!r} is marked sandbox = true: {err}"
        ) from None
    return wrapped[0], wrapped[1:], {**env, **inside}


def _client(server: McpServerConfig, settings: Settings | None = None) -> Any:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    if server.command is not None:
        program, args, env = _stdio_command(server, settings)
        params = StdioServerParameters(command=program, args=args, env=env)
        # The server's stderr named here, not left to mcp's default: that is whatever
        # ``sys.stderr`` was when mcp was imported, which may since have been replaced and
        # closed (a test's capture, a redirected stream), and then no server can start.
        return Client(stdio_client(params, errlog=_server_errlog()))
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    assert server.url is not None
    values = _env_values(server, [var for _, var in server.headers])
    headers = {header: values[var] for header, var in server.headers}
    http = httpx2.AsyncClient(headers=headers, timeout=server.timeout_s)
    return Client(streamable_http_client(server.url, http_client=http))


class _Connection:
    """One live client, owned by one task from connect to close."""

    def __init__(self, server: McpServerConfig, settings: Settings | None = None) -> None:
        loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[Any] = loop.create_future()
        self._stop = asyncio.Event()
        self._owner = asyncio.create_task(self._run(server, settings), name=f"mcp-{server.name}")
        self.dead = False

    async def _run(self, server: McpServerConfig, settings: Settings | None) -> None:
        try:
            async with _client(server, settings) as client:
                self._ready.set_result(client)
                await self._stop.wait()
        except BaseException as err:
            if not self._ready.done():
                self._ready.set_exception(err)
        finally:
            self.dead = True

    async def client(self) -> Any:
        return await asyncio.shield(self._ready)

    async def close(self) -> None:
        self.dead = True
        self._stop.set()
        if not self._ready.done():
            self._owner.cancel()
        with suppress(BaseException):
            await asyncio.wait_for(self._owner, 10)


class McpPool:
    """The worker's MCP connections by server name; a dead one is replaced on next use."""

    def __init__(
        self, servers: Iterable[McpServerConfig], settings: Settings | None = None
    ) -> None:
        self.servers: dict[str, McpServerConfig] = {s.name: s for s in servers}
        self.settings = settings
        self._conns: dict[str, _Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.started = 0  # connections opened (a restart counts again): for tests and logs

    def config(self, name: str) -> McpServerConfig:
        try:
            return self.servers[name]
        except KeyError:
            known = ", ".join(sorted(self.servers)) or "none"
            raise McpConfigError(
                f"MCP server {name!r} is not configured on this worker (configured: {known}); "
                "the worker's DPLAN_AGENTS file must declare it"
            ) from None

    async def _connection(self, name: str) -> tuple[_Connection, Any]:
        server = self.config(name)
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            conn = self._conns.get(name)
            if conn is None or conn.dead:
                conn = _Connection(server, self.settings)
                self._conns[name] = conn
                self.started += 1
            try:
                return conn, await conn.client()
            except BaseException:
                self._conns.pop(name, None)
                await conn.close()
                raise

    async def use(self, name: str, operation: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``client.<operation>(...)``; a failure below the protocol retires the
        connection (the server is restarted on the next call)."""
        from mcp import MCPError

        conn, client = await self._connection(name)
        try:
            return await getattr(client, operation)(*args, **kwargs)
        except MCPError as err:
            if err.code in _CONNECTION_CODES:
                await self._retire(name, conn)
            raise
        except asyncio.CancelledError:
            raise
        except BaseException:
            await self._retire(name, conn)
            raise

    async def _retire(self, name: str, conn: _Connection) -> None:
        if self._conns.get(name) is conn:
            del self._conns[name]
        await conn.close()

    async def aclose(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


def _tool_spec(tool: Any) -> McpToolSpec:
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        schema = {"type": "object", "description": "(schema too large to include)"}
    return McpToolSpec(
        name=tool.name,
        description=scrub_secrets(tool.description or "")[:MAX_DESCRIPTION_CHARS],
        input_schema=schema,
    )


def result_text(result: Any) -> ToolResult:
    """An MCP ``CallToolResult`` as the text of a tool message."""
    parts: list[str] = []
    for block in result.content or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            parts.append(getattr(resource, "text", None) or f"[resource {resource.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content omitted]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts) or "(no output)"
    return ToolResult.error(text) if result.is_error else ToolResult(True, text)


class McpActivities:
    def __init__(
        self,
        store: SessionStore,
        servers: Iterable[McpServerConfig],
        settings: Settings | None = None,
    ) -> None:
        self._store = store
        self.pool = McpPool(servers, settings)

    @activity.defn(name=ACT_LIST_MCP_TOOLS)
    async def list_mcp_tools(self, inp: ListMcpToolsInput) -> ListMcpToolsOutput:
        async with heartbeating():
            out: list[McpServerTools] = []
            for name in inp.servers:
                try:
                    server = self.pool.config(name)
                    listed = await self.pool.use(name, "list_tools")
                except McpConfigError as err:
                    raise ApplicationError(
                        str(err), type=FailureType.MCP_CONFIG.value, non_retryable=True
                    ) from None
                tools = tuple(_tool_spec(t) for t in listed.tools[:MAX_MCP_TOOLS_PER_SERVER])
                out.append(
                    McpServerTools(
                        server=name,
                        timeout_s=server.timeout_s,
                        max_attempts=server.max_attempts,
                        tools=tools,
                    )
                )
            return ListMcpToolsOutput(servers=tuple(out))

    @activity.defn(name=ACT_CALL_MCP_TOOL)
    async def call_mcp_tool(self, inp: McpCallInput) -> ToolCallOutput:
        from mcp import MCPError

        async with heartbeating():
            call = await pending_call(self._store, inp.call)
            if isinstance(call, ToolCallOutput):
                return call
            arguments = _arguments(
                inp.arguments if inp.arguments is not None else call.function.arguments
            )
            if isinstance(arguments, ToolResult):
                return await store_answer(self._store, inp.call, call, arguments)
            try:
                server = self.pool.config(inp.server)
                result = await self.pool.use(
                    inp.server, "call_tool", inp.tool, arguments, server.timeout_s
                )
            except McpConfigError as err:
                answer = ToolResult.error(str(err))
            except MCPError as err:
                if err.code in _CONNECTION_CODES:
                    raise  # the server died or hung: retried on a fresh connection
                answer = ToolResult.error(f"MCP server {inp.server!r}: {err.error.message}")
            else:
                answer = result_text(result)
            return await store_answer(self._store, inp.call, call, answer)

    async def aclose(self) -> None:
        await self.pool.aclose()


def _arguments(text: str) -> Mapping[str, Any] | ToolResult:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return ToolResult.error(f"arguments are not valid JSON: {exc}; send one JSON object")
    if not isinstance(value, dict):
        return ToolResult.error("arguments must be a JSON object")
    return value
