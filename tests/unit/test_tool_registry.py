"""The tool registry: schemas the model sees, and an entry point that never raises on input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_plans.activities.file_jail import FileJail, ToolRefused
from durable_plans.activities.file_tools import (
    WORKSPACE_TOOLS,
    execute_workspace_tool,
    register_workspace_tools,
)
from durable_plans.activities.tool_catalog import (
    BUILTIN_TOOLS,
    READ_ONLY_TOOLS,
    refuse_call,
    tool_specs,
)
from durable_plans.activities.tool_registry import (
    ToolArgs,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    openai_tool_schemas,
)
from durable_plans.domain.agents import (
    APPROVABLE_TOOL_NAMES,
    READ_ONLY_TOOL_NAMES,
    WORKSPACE_TOOL_NAMES,
)

ALL = "list_dir, read_file, search_files, write_file"


@pytest.fixture
def ws(tmp_path: Path) -> FileJail:
    return FileJail(tmp_path / "ws")


def walk_keys(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from walk_keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk_keys(item)


# --------------------------------------------------------------------------- schemas


def test_workspace_tools_match_the_agents_tool_names() -> None:
    assert set(WORKSPACE_TOOLS) == set(WORKSPACE_TOOL_NAMES)
    assert all(spec.name == name for name, spec in WORKSPACE_TOOLS.items())


def test_the_catalogue_holds_every_tool_an_agent_or_a_conversation_may_name() -> None:
    # Workflow code validates agents files and plans against the domain's names; the
    # catalogue must declare exactly those, and agree on which only read.
    assert set(BUILTIN_TOOLS) == set(APPROVABLE_TOOL_NAMES)
    assert all(spec.name == name for name, spec in BUILTIN_TOOLS.items())
    assert set(READ_ONLY_TOOL_NAMES) == READ_ONLY_TOOLS
    assert [s.name for s in tool_specs(["write_file", "nope", "spawn_subagent"])] == [
        "write_file",
        "spawn_subagent",
    ]


def test_schemas_are_compact_closed_objects() -> None:
    for spec in WORKSPACE_TOOLS.values():
        params = spec.parameters
        assert params["type"] == "object"
        assert params["additionalProperties"] is False
        assert "title" not in set(walk_keys(params))
        assert "anyOf" not in set(walk_keys(params))
        assert spec.description
    read = WORKSPACE_TOOLS["read_file"].parameters
    assert read["required"] == ["path"]
    assert read["properties"]["max_lines"] == {
        "type": "integer",
        "minimum": 1,
        "description": "How many lines to return; omit for the rest.",
    }
    assert read["properties"]["offset_line"]["default"] == 1
    assert WORKSPACE_TOOLS["write_file"].parameters["required"] == ["path", "content"]
    assert "required" not in WORKSPACE_TOOLS["list_dir"].parameters
    search = WORKSPACE_TOOLS["search_files"].parameters
    assert search["required"] == ["pattern"]
    assert search["properties"]["regex"] == {
        "type": "boolean",
        "default": False,
        "description": "Treat pattern as a Python regex.",
    }


def test_openai_tool_schemas_shape_and_independence() -> None:
    specs = [WORKSPACE_TOOLS["read_file"], WORKSPACE_TOOLS["list_dir"]]
    tools = openai_tool_schemas(specs)
    assert [t["type"] for t in tools] == ["function", "function"]
    assert [t["function"]["name"] for t in tools] == ["read_file", "list_dir"]
    assert tools[0]["function"]["parameters"] == specs[0].parameters
    assert json.loads(json.dumps(tools)) == tools  # plain JSON, ready for the request
    tools[0]["function"]["parameters"]["properties"].clear()
    assert "path" in WORKSPACE_TOOLS["read_file"].parameters["properties"]


# --------------------------------------------------------------------------- happy paths


def test_write_read_list_search_through_json_arguments(ws: FileJail) -> None:
    wrote = execute_workspace_tool(
        "write_file", json.dumps({"path": "src/app.py", "content": "x = 1\n"}), ws
    )
    assert wrote == ToolResult(True, "wrote 6 bytes to src/app.py")
    assert execute_workspace_tool("read_file", '{"path": "src/app.py"}', ws) == ToolResult(
        True, "x = 1\n"
    )
    assert execute_workspace_tool("list_dir", "", ws) == ToolResult(True, "src/")
    assert execute_workspace_tool("list_dir", "  ", ws) == ToolResult(True, "src/")
    found = execute_workspace_tool("search_files", '{"pattern": "x =", "glob": "*.py"}', ws)
    assert found == ToolResult(True, "src/app.py:1: x = 1")
    window = execute_workspace_tool(
        "read_file", '{"path": "src/app.py", "offset_line": "1", "max_lines": null}', ws
    )
    assert window == ToolResult(True, "x = 1\n")


# --------------------------------------------------------------------------- malformed calls


def test_bad_json_names_tool_and_position(ws: FileJail) -> None:
    result = execute_workspace_tool("read_file", '{"path":', ws)
    assert not result.ok
    assert result.content.startswith(
        "error: arguments for read_file are not valid JSON (line 1, column 9): Expecting value"
    )
    assert result.content.endswith('e.g. {"path": "..."}')


@pytest.mark.parametrize(
    ("arguments", "kind"),
    [("[1, 2]", "an array"), ('"src/a.py"', "a string"), ("42", "a number"), ("null", "null")],
)
def test_arguments_must_be_an_object(ws: FileJail, arguments: str, kind: str) -> None:
    result = execute_workspace_tool("search_files", arguments, ws)
    assert result == ToolResult(
        False,
        f"error: arguments for search_files must be a JSON object, got {kind}; "
        'e.g. {"pattern": "..."}',
    )


def test_missing_required_field(ws: FileJail) -> None:
    result = execute_workspace_tool("write_file", '{"path": "a.txt"}', ws)
    assert not result.ok
    assert result.content.startswith(
        "error: invalid arguments for write_file: missing required field 'content' (a string). "
        "Expected fields: path (a non-empty string, required), content (a string, required)"
    )
    assert not (ws.root / "a.txt").exists()


def test_wrong_type_names_field_expected_and_got(ws: FileJail) -> None:
    result = execute_workspace_tool("read_file", '{"path": "a", "offset_line": "abc"}', ws)
    assert result.content.startswith(
        "error: invalid arguments for read_file: field 'offset_line' must be an integer ≥ 1, "
        'got the string "abc"'
    )
    result = execute_workspace_tool("read_file", '{"path": ["a"]}', ws)
    assert "field 'path' must be a string, got an array" in result.content
    result = execute_workspace_tool("search_files", '{"pattern": "x", "max_results": 0}', ws)
    assert "field 'max_results' must be an integer from 1 to 1000, got 0" in result.content


def test_unknown_field_is_named(ws: FileJail) -> None:
    result = execute_workspace_tool("list_dir", '{"path": ".", "recursive": true}', ws)
    assert result == ToolResult(
        False,
        "error: invalid arguments for list_dir: unknown field 'recursive'. "
        "Expected fields: path (a string)",
    )


def test_unknown_tool_lists_available_tools(ws: FileJail) -> None:
    assert execute_workspace_tool("foo", "{}", ws) == ToolResult(
        False, f"error: unknown tool 'foo'; available tools: {ALL}"
    )


def test_refusals_and_os_errors_become_error_results(ws: FileJail) -> None:
    assert execute_workspace_tool("read_file", '{"path": "../../etc/passwd"}', ws) == ToolResult(
        False,
        "error: ../../etc/passwd is outside the workspace; only paths inside the workspace "
        "root are allowed",
    )
    assert execute_workspace_tool("read_file", '{"path": "src/x.py"}', ws) == ToolResult(
        False, "error: no such file: src/x.py"
    )

    registry: ToolRegistry[None] = ToolRegistry()

    def broken_disk(args: ToolArgs, ctx: None) -> ToolResult:
        raise PermissionError(13, "Permission denied")

    registry.register("touch", "d", ToolArgs, broken_disk)
    assert registry.execute_sync("touch", "", None) == ToolResult(
        False, "error: PermissionError: [Errno 13] Permission denied"
    )


@pytest.mark.parametrize(
    "arguments",
    ["[" * 100_000, "1" * 5000, '{"path": "\\ud800"}', "\x00", '{"path": "a"} trailing'],
)
def test_pathological_arguments_do_not_raise(ws: FileJail, arguments: str) -> None:
    result = execute_workspace_tool("read_file", arguments, ws)
    assert not result.ok
    assert result.content.startswith("error: ")


_TOOL_NAMES = st.one_of(st.sampled_from([*WORKSPACE_TOOLS, "foo"]), st.text(max_size=10))
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
_FIELDS = st.sampled_from(
    ["path", "content", "offset_line", "max_lines", "pattern", "glob", "regex", "max_results"]
)
_ARGUMENTS = st.one_of(
    st.text(max_size=80),
    _JSON.map(json.dumps),
    st.dictionaries(_FIELDS, _JSON | st.text(max_size=20), max_size=5).map(json.dumps),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_TOOL_NAMES, arguments=_ARGUMENTS)
def test_execute_never_raises_for_model_input(ws: FileJail, name: str, arguments: str) -> None:
    result = execute_workspace_tool(name, arguments, ws)
    assert isinstance(result, ToolResult)
    assert result.ok != result.content.startswith("error: ")
    assert result.content


# --------------------------------------------------------------------------- the registry itself


class EchoArgs(ToolArgs):
    text: str


@dataclass
class Ctx:
    workspace: FileJail
    calls: list[str]


async def async_echo(args: EchoArgs, ctx: Ctx) -> ToolResult:
    if args.text == "refuse":
        raise ToolRefused("not today")
    ctx.calls.append(args.text)
    return ToolResult(True, args.text.upper())


def richer_registry() -> ToolRegistry[Ctx]:
    registry: ToolRegistry[Ctx] = ToolRegistry()
    register_workspace_tools(registry, lambda ctx: ctx.workspace)
    registry.register("echo", "Echo text in capitals.", EchoArgs, async_echo)
    return registry


async def test_async_handlers_and_composed_workspace_tools(ws: FileJail) -> None:
    registry = richer_registry()
    ctx = Ctx(workspace=ws, calls=[])
    assert await registry.execute("echo", '{"text": "hi"}', ctx) == ToolResult(True, "HI")
    assert ctx.calls == ["hi"]
    assert await registry.execute("echo", '{"text": "refuse"}', ctx) == ToolResult(
        False, "error: not today"
    )
    assert await registry.execute("write_file", '{"path": "n.txt", "content": "1"}', ctx) == (
        ToolResult(True, "wrote 1 bytes to n.txt")
    )
    assert await registry.execute("echo", "{}", ctx) == ToolResult(
        False,
        "error: invalid arguments for echo: missing required field 'text' (a string). "
        "Expected fields: text (a string, required)",
    )


def test_execute_sync_rejects_async_handlers(ws: FileJail) -> None:
    with pytest.raises(TypeError, match="has an async handler"):
        richer_registry().execute_sync("echo", '{"text": "x"}', Ctx(ws, []))


def test_the_allow_list_refuses_what_an_agent_may_not_call() -> None:
    assert refuse_call("write_file", READ_ONLY_TOOL_NAMES) == ToolResult(
        False,
        "error: tool 'write_file' is not available to this agent; "
        "available tools: list_dir, read_file, search_files",
    )
    # What the agent is offered instead is its own list, in its order, whatever runs it.
    assert refuse_call("run_command", ("read_file", "spawn_subagent")) == ToolResult(
        False,
        "error: tool 'run_command' is not available to this agent; "
        "available tools: read_file, spawn_subagent",
    )
    assert refuse_call("deploy", ("read_file",)) == ToolResult(
        False, "error: unknown tool 'deploy'; available tools: read_file"
    )
    assert refuse_call("deploy", ()) == ToolResult(
        False, "error: unknown tool 'deploy'; available tools: none"
    )
    assert refuse_call("read_file", READ_ONLY_TOOL_NAMES) is None
    assert refuse_call("spawn_subagent", ("spawn_subagent",)) is None


async def test_handler_bugs_propagate(ws: FileJail) -> None:
    registry: ToolRegistry[None] = ToolRegistry()

    def buggy(args: ToolArgs, ctx: None) -> ToolResult:
        raise KeyError("bug")

    registry.register("buggy", "d", ToolArgs, buggy)
    with pytest.raises(KeyError):
        await registry.execute("buggy", "{}", None)


def test_register_validates_names_and_specs_orders() -> None:
    registry = richer_registry()
    with pytest.raises(ValueError, match="already registered"):
        registry.register("echo", "again", EchoArgs, async_echo)
    with pytest.raises(ValueError, match="must match"):
        registry.register("bad name!", "d", EchoArgs, async_echo)
    assert [s.name for s in registry.specs(["echo", "read_file"])] == ["echo", "read_file"]
    assert [s.name for s in registry.specs()] == [
        "read_file",
        "write_file",
        "list_dir",
        "search_files",
        "echo",
    ]
    with pytest.raises(KeyError, match="unknown tools nope"):
        registry.specs(["nope"])
    echo = registry.specs(["echo"])[0]
    assert echo == ToolSpec(
        name="echo",
        description="Echo text in capitals.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
    )
