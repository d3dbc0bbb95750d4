"""Agents-file fields of the real tools (MCP servers, run_command) and their pure rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_plans._errors import AgentsFileError, McpConfigError
from durable_plans.activities.mcp import McpPool, _env_values, result_text
from durable_plans.domain.agents_loader import parse_agents_data, parse_agents_text
from durable_plans.domain.tools_config import (
    CommandPolicy,
    McpServerConfig,
    McpServerTools,
    McpToolSpec,
    agent_mcp_tools,
    mcp_tool_name,
    requires_approval,
)

GOOD = """
[mcp_servers.git]
command = "mcp-server-git"
args = ["--repository", "/srv/repo"]
env = ["GIT_TOKEN"]
timeout_s = 20
max_attempts = 2

[mcp_servers.search]
url = "https://mcp.example.com/mcp"
headers = {Authorization = "SEARCH_AUTH"}

[agents.debug]
tools = ["read_file", "run_command"]
mcp = ["git", "search/find"]

[agents.debug.run_command]
allow = ["python", "git"]
approval_required = false
"""


def _parse(text: str):  # type: ignore[no-untyped-def]
    return parse_agents_data(parse_agents_text(text, fmt="TOML", source="a.toml"), source="a.toml")


def test_servers_and_tool_grants_are_read_as_written() -> None:
    catalog = _parse(GOOD)
    git, search = catalog.mcp_servers
    assert git == McpServerConfig(
        name="git",
        command="mcp-server-git",
        args=("--repository", "/srv/repo"),
        env=("GIT_TOKEN",),
        timeout_s=20,
        max_attempts=2,
    )
    assert search.url == "https://mcp.example.com/mcp"
    assert search.headers == (("Authorization", "SEARCH_AUTH"),)
    debug = catalog.get("debug")
    assert debug.mcp == ("git", "search/find")
    assert debug.run_command == CommandPolicy(allow=("python", "git"), approval_required=False)
    # The servers stay with the worker: the agents a workflow carries do not name them.
    assert "mcp-server-git" not in debug.model_dump_json()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '[agents.debug]\nmcp = ["nope"]',
            "a.toml: agents.debug: mcp: unknown MCP server 'nope' (declared: none;",
        ),
        (
            '[mcp_servers.x]\ncommand = "a"\nurl = "http://b"',
            "a.toml: mcp_servers.x: give exactly one of command (stdio) or url (streamable HTTP)",
        ),
        (
            '[mcp_servers.x]\nurl = "http://b"\nheaders = {Authorization = "Bearer abc"}',
            "a.toml: mcp_servers.x: headers: must map header names to environment variable names",
        ),
        (
            '[mcp_servers."my server"]\ncommand = "a"',
            "a.toml: mcp_servers.'my server': invalid server name",
        ),
        (
            '[agents.debug]\ntools = ["run_command"]',
            "a.toml: agents.debug: tools lists run_command but no program may run",
        ),
        (
            '[agents.debug.run_command]\nallow = ["/bin/sh"]',
            "a.toml: agents.debug: run_command.allow: program names only, not paths: '/bin/sh'",
        ),
        (
            '[agents.debug.run_command]\nallow = ["python"]\ntimeout_s = -1',
            "a.toml: agents.debug: run_command.timeout_s: must be greater than 0, got -1",
        ),
        (
            '[mcp_servers.x]\ncomand = "a"',
            "a.toml: mcp_servers.x: unknown field 'comand' (did you mean 'command'?)",
        ),
        (
            '[agents.debug.run_command]\nallow = ["python"]\ntimout_s = 5',
            "a.toml: agents.debug: run_command: unknown field 'timout_s' "
            "(did you mean 'timeout_s'?)",
        ),
    ],
)
def test_each_mistake_is_named(text: str, problem: str) -> None:
    with pytest.raises(AgentsFileError) as err:
        _parse(text)
    assert any(line.startswith(problem) for line in err.value.problems), err.value.problems


def test_run_command_needs_approval_unless_the_agent_switches_it_off() -> None:
    assert requires_approval("run_command", None)
    assert requires_approval("run_command", CommandPolicy(allow=("python",)))
    assert not requires_approval("run_command", CommandPolicy(approval_required=False))
    assert not requires_approval("read_file", None)


def test_an_agent_gets_the_servers_and_tools_it_was_granted_only() -> None:
    def server(name: str, *tools: str) -> McpServerTools:
        return McpServerTools(
            server=name,
            timeout_s=5,
            max_attempts=1,
            tools=tuple(McpToolSpec(name=t) for t in tools),
        )

    servers = (server("git", "git_status", "git_add"), server("time", "now"), server("x", "y"))
    granted = agent_mcp_tools(["git/git_status", "time"], servers)
    assert list(granted) == ["git__git_status", "time__now"]
    assert mcp_tool_name("my-srv", "do.thing/now") == "my-srv__do_thing_now"


async def test_server_secrets_come_only_from_the_worker_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = McpServerConfig(name="git", command="x", env=("GIT_TOKEN",))
    monkeypatch.delenv("GIT_TOKEN", raising=False)
    with pytest.raises(McpConfigError, match="needs GIT_TOKEN in the worker's environment"):
        _env_values(server, server.env)
    monkeypatch.setenv("GIT_TOKEN", "t0k")
    assert _env_values(server, server.env) == {"GIT_TOKEN": "t0k"}
    with pytest.raises(McpConfigError, match="'time' is not configured on this worker"):
        await McpPool([server]).use("time", "list_tools")


def test_an_mcp_error_result_is_an_error_tool_result() -> None:
    from mcp.types import CallToolResult, TextContent

    bad = CallToolResult(content=[TextContent(type="text", text="no such repo")], is_error=True)
    good = CallToolResult(content=[], structured_content={"a": 1})
    assert result_text(bad).content == "error: no such repo"
    assert result_text(good).content == '{"a": 1}'


async def test_a_tool_answer_is_stored_once_scrubbed_and_capped(tmp_path: Path) -> None:
    from durable_plans.activities.tool_calls import MAX_RESULT_CHARS, pending_call, store_answer
    from durable_plans.activities.tool_registry import ToolResult
    from durable_plans.domain.contracts import ToolCallOutput
    from durable_plans.domain.models import FunctionCall, Message, SessionMeta, ToolCall
    from durable_plans.domain.tool_contracts import ToolCallAt
    from durable_plans.session_store.factory import open_session_store

    store = await open_session_store(str(tmp_path / "s.db"))
    try:
        await store.create_session(SessionMeta(session_id="s"))
        call = ToolCall(id="c1", function=FunctionCall(name="git__git_log", arguments="{}"))
        await store.append("s", [Message(id="a1", role="assistant", tool_calls=(call,))])
        at = ToolCallAt(session_id="s", message_id="a1", call_index=0, scope="sc", turn=0)
        pending = await pending_call(store, at)
        assert pending == call
        secret = "OPENAI_API_KEY=sk-proj-" + "Z" * 30
        await store_answer(store, at, call, ToolResult(True, secret + "\n" + "x" * 100_000))
        (answer,) = [m for m in await store.read("s") if m.role == "tool"]
        content = answer.content or ""
        assert "sk-proj-" not in content and "[REDACTED" in content
        assert len(content) < MAX_RESULT_CHARS + 100 and "truncated" in content
        # A retried activity finds the answer and does not run the tool again.
        again = await pending_call(store, at)
        assert isinstance(again, ToolCallOutput) and again.tool_call_id == "c1"
    finally:
        await store.close()
