"""Tool calls go through one table of kinds: ``domain.tool_contracts.ToolKind`` names each
way a call is carried out, ``tool_kind`` picks one, and ``agent_loop.TOOL_HANDLERS`` holds
the one handler of each. A kind added without a handler (or a handler serving two kinds)
would send calls nowhere, or two kinds to one place; these tests fail first."""

from __future__ import annotations

import inspect

import pytest

from durable_plans.domain.agents import DELEGATE_TOOL, SPAWN_TOOL, WORKSPACE_TOOL_NAMES
from durable_plans.domain.tool_contracts import EDITABLE_TOOL_KINDS, ToolKind, tool_kind
from durable_plans.domain.tools_config import RUN_COMMAND_TOOL
from durable_plans.workflows.agent_loop import TOOL_HANDLERS, AgentLoop

ALL_BUILTIN = (*WORKSPACE_TOOL_NAMES, DELEGATE_TOOL, SPAWN_TOOL, RUN_COMMAND_TOOL)


def test_every_kind_has_exactly_one_handler() -> None:
    assert set(TOOL_HANDLERS) == set(ToolKind)
    handlers = list(TOOL_HANDLERS.values())
    assert len(set(handlers)) == len(handlers) == len(ToolKind)


@pytest.mark.parametrize("kind", list(ToolKind))
def test_each_handler_is_a_loop_method_that_names_its_kind(kind: ToolKind) -> None:
    handler = TOOL_HANDLERS[kind]
    assert inspect.iscoroutinefunction(handler)
    assert getattr(AgentLoop, handler.__name__) is handler
    assert f"``ToolKind.{kind.name}``" in (handler.__doc__ or "")


def kind(
    name: str,
    allowed: tuple[str, ...] = ALL_BUILTIN,
    custom: tuple[str, ...] = (),
    mcp: tuple[str, ...] = (),
) -> ToolKind:
    return tool_kind(name, allowed=allowed, custom=custom, mcp=mcp)


def test_built_in_names_go_to_their_kinds() -> None:
    assert kind(DELEGATE_TOOL) is ToolKind.DELEGATE
    assert kind(SPAWN_TOOL) is ToolKind.SUB_AGENT
    assert kind(RUN_COMMAND_TOOL) is ToolKind.COMMAND
    assert {kind(name) for name in WORKSPACE_TOOL_NAMES} == {ToolKind.BUILTIN}
    assert kind("search/lookup", mcp=("search/lookup",)) is ToolKind.MCP
    assert kind("switch_agent", custom=("switch_agent",)) is ToolKind.CUSTOM


def test_every_kind_is_reachable() -> None:
    reached = {
        kind(DELEGATE_TOOL),
        kind(SPAWN_TOOL),
        kind(RUN_COMMAND_TOOL),
        kind("read_file"),
        kind("m/t", mcp=("m/t",)),
        kind("c", custom=("c",)),
    }
    assert reached == set(ToolKind)


def test_a_tool_the_agent_may_not_call_goes_to_run_tool_which_refuses_it() -> None:
    for name in (DELEGATE_TOOL, SPAWN_TOOL, RUN_COMMAND_TOOL, "no_such_tool"):
        assert kind(name, allowed=()) is ToolKind.BUILTIN


def test_a_workflows_own_tool_wins_over_every_other_kind() -> None:
    for name in (DELEGATE_TOOL, RUN_COMMAND_TOOL, "m/t"):
        assert kind(name, custom=(name,), mcp=("m/t",)) is ToolKind.CUSTOM


def test_only_kinds_whose_activity_reads_the_arguments_it_is_handed_are_editable() -> None:
    assert {ToolKind.COMMAND, ToolKind.MCP, ToolKind.BUILTIN} == EDITABLE_TOOL_KINDS
