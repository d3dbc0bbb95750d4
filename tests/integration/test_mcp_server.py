"""``dplan mcp`` spoken to by the official MCP client (the ``mcp`` package) over stdio, as an
IDE agent would: a real ``dplan mcp`` process, a real dev server, an in-process worker and
the fake provider. It lists the tools, starts a plan and waits for it (progress, then the
report), decides a waiting call, reads a conversation resource, and says a bad plan and
an unknown plan id in one line each."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from durable_plans.embedded import free_port
from tests.integration.conftest import Harness

pytestmark = pytest.mark.integration

DPLAN = Path(sys.executable).parent / "dplan"
TOOLS = {
    "start_plan",
    "plan_status",
    "plan_report",
    "list_plans",
    "approve_call",
    "reject_call",
    "cancel_plan",
    "retry_plan",
}
WAIT_S = 60.0  # a bound on waiting for the plan, never asserted


@asynccontextmanager
async def dplan_mcp(harness: Harness, tmp_path: Path) -> AsyncIterator[Any]:
    """A ``dplan mcp`` process for the harness's server, queue and store."""
    env = harness.cli_env(DPLAN_SESSION_STORE=str(harness.settings.session_store))
    params = StdioServerParameters(command=str(DPLAN), args=["mcp", "--by", "ide"], env=env)
    with open(tmp_path / "dplan-mcp.log", "w") as errlog:  # noqa: ASYNC230 - once, before
        async with McpClient(stdio_client(params, errlog=errlog)) as client:
            yield client


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def error_line(result: Any) -> str:
    assert result.is_error
    (content,) = result.content
    text: str = content.text
    assert "\n" not in text.strip(), text
    return text


async def test_an_agent_starts_follows_and_reads_a_plan_over_mcp(
    harness: Harness, tmp_path: Path
) -> None:
    plan = {
        "id": f"mcp-{os.getpid()}-{time.monotonic_ns()}",
        "goal": "from an IDE",
        "subtasks": [
            {"id": "a", "description": "Inspect the repository"},
            {"id": "b", "description": "Write the notes", "depends_on": ["a"]},
        ],
    }
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async with dplan_mcp(harness, tmp_path) as mcp:
        tools = {t.name for t in (await mcp.list_tools()).tools}
        report = structured(
            await mcp.call_tool(
                "start_plan", {"plan": plan, "wait": True}, progress_callback=on_progress
            )
        )
        read = await mcp.read_resource(f"dplan://plans/{plan['id']}/subtasks/a/conversation")
        cycle = {"subtasks": [{"id": "x", "description": "x", "depends_on": ["x"]}]}
        bad_plan = await mcp.call_tool("start_plan", {"plan": cycle})
        unknown = await mcp.call_tool("plan_status", {"plan_id": "no-such-plan"})
        # Visibility is eventually consistent: the plan is listed within a moment.
        deadline = time.monotonic() + WAIT_S
        while True:
            listed = await mcp.call_tool("list_plans", {"limit": 50})
            rows = [] if listed.is_error else listed.structured_content["result"]
            if plan["id"] in {row["plan_id"] for row in rows}:
                break
            assert time.monotonic() < deadline, listed.content
            await asyncio.sleep(0.2)

    assert tools >= TOOLS
    assert report["status"] == "completed" and report["counts"]["completed"] == 2
    assert [m for _, m in progress] == ["a: completed", "b: completed"]
    conversation = json.loads(read.contents[0].text)
    assert any(
        m["role"] == "user" and "Inspect the repository" in m["content"] for m in conversation
    )
    assert "cycle" in error_line(bad_plan)
    assert "no plan with id 'no-such-plan'" in error_line(unknown)
    assert all({"plan_id", "status"} <= set(row) for row in rows)


async def test_an_agent_decides_a_waiting_call_over_mcp(harness: Harness, tmp_path: Path) -> None:
    plan = {
        "id": f"mcp-approve-{os.getpid()}-{time.monotonic_ns()}",
        "approval": {"tools": ["list_dir"]},
        "subtasks": [{"id": "look", "description": "Look around"}],
    }
    async with dplan_mcp(harness, tmp_path) as mcp:
        started = structured(await mcp.call_tool("start_plan", {"plan": plan}))
        deadline = time.monotonic() + WAIT_S
        while True:
            status = structured(await mcp.call_tool("plan_status", {"plan_id": plan["id"]}))
            if status["waiting"]:
                break
            assert time.monotonic() < deadline, "no call ever waited"
            await asyncio.sleep(0.2)
        (waiting,) = status["waiting"]
        approved = await mcp.call_tool(
            "approve_call", {"plan_id": plan["id"], "call": waiting["call"]}
        )
        again = await mcp.call_tool(
            "approve_call", {"plan_id": plan["id"], "call": waiting["call"]}
        )
        report = structured(await mcp.call_tool("plan_report", {"plan_id": plan["id"]}))

    assert started == {"plan_ids": [plan["id"]]}
    assert waiting["tool"] == "list_dir"
    assert not approved.is_error and "approved by ide" in approved.content[0].text
    assert "already" in error_line(again)
    assert report["status"] == "completed"


async def test_over_http_a_token_guards_the_server_and_a_public_address_needs_one(
    harness: Harness, tmp_path: Path
) -> None:
    """``--http``: the official client over streamable HTTP with the bearer token lists
    the tools and gets one-line errors; without it, 401; a public address without a token
    is refused before anything listens."""
    port = free_port()
    env = harness.cli_env()
    public = await asyncio.to_thread(
        lambda: subprocess.run(
            [str(DPLAN), "mcp", "--http", f"0.0.0.0:{port}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    )
    assert public.returncode == 2 and "needs --token" in public.stderr
    log = tmp_path / "dplan-mcp-http.log"
    errors = log.open("wb")
    server = await asyncio.create_subprocess_exec(
        str(DPLAN), "mcp", "--http", f"127.0.0.1:{port}", "--token", "s3cret",
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=errors,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx2.AsyncClient(timeout=10) as bare:
            deadline = time.monotonic() + WAIT_S
            while True:
                try:
                    refused = await bare.post(url, json={})
                    break
                except httpx2.TransportError:
                    assert time.monotonic() < deadline, log.read_text()
                    await asyncio.sleep(0.2)
        authorized = httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"}, timeout=30)
        async with McpClient(streamable_http_client(url, http_client=authorized)) as mcp:
            tools = {t.name for t in (await mcp.list_tools()).tools}
            unknown = await mcp.call_tool("plan_report", {"plan_id": "no-such-plan"})
    finally:
        server.terminate()
        await server.wait()
        errors.close()
    assert refused.status_code == 401
    assert tools >= TOOLS
    assert "no plan with id 'no-such-plan'" in error_line(unknown)
