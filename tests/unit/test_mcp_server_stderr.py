"""A stdio MCP server starts even when the stream mcp bound as its stderr is closed.

mcp's ``stdio_client`` defaults ``errlog`` to ``sys.stderr`` as it was when mcp was first
imported; in a worker whose stderr was swapped since (pytest's capture did it in the suite
and failed every later server start with "I/O operation on closed file"), the pool must
name the stream itself.
"""

from __future__ import annotations

import io

import pytest
from mcp.client import stdio

from durable_plans.activities.mcp import _client
from durable_plans.domain.tools_config import McpServerConfig


async def test_a_server_starts_although_mcps_default_stderr_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed = io.TextIOWrapper(io.BytesIO())
    closed.close()
    wrapped = stdio.stdio_client.__wrapped__  # type: ignore[attr-defined]
    assert wrapped.__defaults__ is not None and len(wrapped.__defaults__) == 1  # (errlog,)
    monkeypatch.setattr(wrapped, "__defaults__", (closed,))
    server = McpServerConfig(name="time", command="mcp-server-time")
    async with _client(server) as client:
        listed = await client.list_tools()
    assert any(tool.name == "get_current_time" for tool in listed.tools)
