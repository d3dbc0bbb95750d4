"""Activity contracts of the tools beyond the workspace: MCP servers and run_command.

Like every activity payload here, they carry ids, not conversation: the call's arguments
are read from the session store and its result is written there (scrubbed and capped),
so a tool's output never lands in workflow history.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict

from durable_plans.domain.tools_config import CommandPolicy, McpServerTools
from durable_plans.domain.workspace_refs import WorkspaceRef

ACT_LIST_MCP_TOOLS: Final = "list_mcp_tools"
ACT_CALL_MCP_TOOL: Final = "call_mcp_tool"
ACT_RUN_COMMAND: Final = "run_command"
ACT_ANSWER_TOOL_ERROR: Final = "answer_tool_error"


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ListMcpToolsInput(_Payload):
    servers: tuple[str, ...]


class ListMcpToolsOutput(_Payload):
    servers: tuple[McpServerTools, ...]


class ToolCallAt(_Payload):
    """Where a tool call is: the assistant message holding it, and the call's place."""

    session_id: str
    message_id: str
    call_index: int
    scope: str
    turn: int


class McpCallInput(_Payload):
    call: ToolCallAt
    server: str
    tool: str  # the server's own name for the tool
    # Arguments that replace the model's (a person edited them when approving the call).
    arguments: str | None = None


class CommandCallInput(_Payload):
    call: ToolCallAt
    policy: CommandPolicy
    # Arguments that replace the model's (a person edited them when approving the call).
    arguments: str | None = None
    # The tree the command runs in, and the time of the commit of what it changed (see
    # ``ToolCallInput``); None: the worker's workspace directory.
    workspace: WorkspaceRef | None = None
    at_s: float = 0.0


class ToolErrorInput(_Payload):
    """A call the workflow answers with an error itself: refused before it ran, or given
    up on (its attempts lost or exhausted), so the model reads why and carries on."""

    call: ToolCallAt
    text: str
