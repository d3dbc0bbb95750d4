"""The kinds of tool call the agent loop carries out, and the activity contracts of the
tools beyond the workspace: MCP servers and run_command.

``ToolKind`` names each way a call is carried out once; ``tool_kind`` says which way a
call goes, and the agent loop looks its handler up in one table
(``workflows.agent_loop.TOOL_HANDLERS``, a unit test keeps the two in step).

Like every activity payload here, they carry ids, not conversation: the call's arguments
are read from the session store and its result is written there (scrubbed and capped),
so a tool's output never lands in workflow history.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum
from typing import Final, Protocol

from pydantic import BaseModel, ConfigDict

from durable_plans.domain.agents import DELEGATE_TOOL, SPAWN_TOOL
from durable_plans.domain.tools_config import RUN_COMMAND_TOOL, CommandPolicy, McpServerTools
from durable_plans.domain.workspace_refs import WorkspaceRef

ACT_LIST_MCP_TOOLS: Final = "list_mcp_tools"
ACT_CALL_MCP_TOOL: Final = "call_mcp_tool"
ACT_RUN_COMMAND: Final = "run_command"
ACT_ANSWER_TOOL_ERROR: Final = "answer_tool_error"


class ToolKind(StrEnum):
    """How the agent loop carries out one tool call; each kind has exactly one handler."""

    CUSTOM = "custom"
    """The workflow's own tool (SessionWorkflow's ``switch_agent`` and ``create_plan``):
    the workflow writes its result itself."""

    DELEGATE = "delegate"
    """``delegate_to_sub_agent``: one LLM activity answers in the caller's conversation."""

    SUB_AGENT = "sub_agent"
    """``spawn_subagent``: a nested SubtaskWorkflow in a session of its own."""

    COMMAND = "command"
    """``run_command``: the guarded shell, a regular activity (at most once unless the
    agent declared its commands idempotent)."""

    MCP = "mcp"
    """A tool of an MCP server the agent may use: a regular activity."""

    BUILTIN = "builtin"
    """Everything else: ``run_tool``, a local activity running the file tools (and
    refusing, as the tool's answer, a name the agent may not call)."""


EDITABLE_TOOL_KINDS: Final[frozenset[ToolKind]] = frozenset(
    {ToolKind.COMMAND, ToolKind.MCP, ToolKind.BUILTIN}
)
"""The kinds whose activity reads the arguments it is handed, so a person approving a
call may replace them (``dplan approvals --args``); the others read the model's own."""


def tool_kind(
    name: str, *, allowed: Collection[str], custom: Collection[str], mcp: Collection[str]
) -> ToolKind:
    """The kind of a call to ``name`` by an agent that may call ``allowed`` (with the
    workflow's ``custom`` tools and the ``mcp`` tools of its servers).

    The order is the loop's: a workflow's own tool first; an orchestration tool or
    ``run_command`` only when the agent may call it (else ``run_tool`` refuses it, as for
    any unknown name); then MCP tools; the rest are built in.
    """
    if name in custom:
        return ToolKind.CUSTOM
    if name == DELEGATE_TOOL and name in allowed:
        return ToolKind.DELEGATE
    if name == SPAWN_TOOL and name in allowed:
        return ToolKind.SUB_AGENT
    if name == RUN_COMMAND_TOOL and name in allowed:
        return ToolKind.COMMAND
    if name in mcp:
        return ToolKind.MCP
    return ToolKind.BUILTIN


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

    @classmethod
    def of(cls, call: _LocatesCall) -> ToolCallAt:
        """The place an activity's input names (``ToolCallInput``, ``RevisePlanCallInput``)."""
        return cls(
            session_id=call.session_id,
            message_id=call.message_id,
            call_index=call.call_index,
            scope=call.scope,
            turn=call.turn,
        )


class _LocatesCall(Protocol):
    @property
    def session_id(self) -> str: ...
    @property
    def message_id(self) -> str: ...
    @property
    def call_index(self) -> int: ...
    @property
    def scope(self) -> str: ...
    @property
    def turn(self) -> int: ...


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
