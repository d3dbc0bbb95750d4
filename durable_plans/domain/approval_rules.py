"""Tool calls that wait for a person: which ones, how they are named, what is decided.

An agents file (per agent, or for every agent) and a plan (for all of its subtasks) may
say that some tools, or all, need approval. Before such a call runs, the workflow that
made it waits for ``approve_tool_call`` or ``reject_tool_call`` (Updates, see
``workflows/approval_desk.py``); a rejection, or no decision within ``timeout_s``, becomes the
call's tool result, so the model reads why and carries on.

Pure and standard-library-plus-pydantic only: it runs inside the workflow sandbox, and
``domain.agents`` and ``domain.models`` import it (so it imports neither; its problem
lines are worded by ``domain.problems``, which imports no model).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from durable_plans.domain.problems import describe, unknown_field, unknown_name
from durable_plans.domain.secrets import PLACEHOLDER, contains_secret

__all__ = [
    "ALL_TOOLS",
    "DEFAULT_APPROVAL_TOOLS",
    "MAX_ARGUMENTS_CHARS",
    "MAX_REASON_CHARS",
    "QUERY_APPROVALS",
    "TIMEOUT_WHO",
    "UPDATE_APPROVE",
    "UPDATE_REJECT",
    "ApprovalDecision",
    "ApprovalPolicy",
    "ApproveInput",
    "PendingApproval",
    "RejectInput",
    "WorkflowApprovals",
    "edited_arguments_problem",
    "effective_policy",
    "local_call_id",
    "needs_approval",
    "policy_problems",
    "split_call_id",
    "timeout_reason",
]

ALL_TOOLS: Final = "all"

# Names of the Updates and the query every workflow running an agent loop has.
UPDATE_APPROVE: Final = "approve_tool_call"
UPDATE_REJECT: Final = "reject_tool_call"
QUERY_APPROVALS: Final = "approvals"

DEFAULT_APPROVAL_TOOLS: Final[frozenset[str]] = frozenset()
"""Tools that need approval when neither the agents file nor the plan says otherwise.

Empty today: every built-in tool is confined to the workspace. A tool with effects beyond
it (a shell command, say) belongs here, so it asks by default."""

MAX_ARGUMENTS_CHARS: Final = 2000  # what a listing shows of a call's arguments
MAX_REASON_CHARS: Final = 2000
MAX_EDITED_ARGUMENTS_CHARS: Final = 64_000
TIMEOUT_WHO: Final = "approval_timeout"
"""The ``who`` of a decision made by the timeout rather than a person."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


_POLICY_FIELDS: Final = ("tools", "timeout_s")


class ApprovalPolicy(_Frozen):
    """Which tools wait for a person, and how long (``approval`` in agents and plan files).

    ``tools`` is ``"all"`` or a list of tool names; an explicit list is the whole list (it
    replaces the defaults, so ``[]`` means no tool asks). ``timeout_s`` rejects a call
    nobody decided on in time; None waits as long as it takes.
    """

    tools: Literal["all"] | tuple[str, ...] = ()
    timeout_s: float | None = Field(default=None, gt=0, le=365 * 24 * 3600)


def effective_policy(*candidates: ApprovalPolicy | None) -> ApprovalPolicy | None:
    """The first policy given (plan before agent): the most specific one wins whole."""
    return next((p for p in candidates if p is not None), None)


def needs_approval(tool: str, policy: ApprovalPolicy | None) -> bool:
    """Whether a call of ``tool`` waits for a person under ``policy`` (None: the defaults)."""
    if policy is None:
        return tool in DEFAULT_APPROVAL_TOOLS
    return policy.tools == ALL_TOOLS or tool in policy.tools


def policy_problems(value: object, known_tools: Iterable[str]) -> list[str]:
    """Problems of a decoded ``approval`` value (each ``": ..."`` or ``".field: ..."``),
    for the loaders' one-line-per-problem errors; empty when it is valid."""
    if not isinstance(value, dict):
        return [f': must be a table with "tools" and optionally "timeout_s", got {describe(value)}']
    problems = [
        f": {unknown_field(key, _POLICY_FIELDS)}" for key in value if key not in _POLICY_FIELDS
    ]
    known = tuple(known_tools)
    tools = value.get("tools", ())
    if isinstance(tools, str):
        if tools != ALL_TOOLS:
            problems.append(f'.tools: must be "all" or a list of tool names, got {describe(tools)}')
    elif isinstance(tools, list | tuple):
        for i, tool in enumerate(tools):
            if not isinstance(tool, str):
                problems.append(f".tools[{i}]: must be a tool name, got {describe(tool)}")
            elif tool not in known:
                problems.append(f".tools[{i}]: {unknown_name('tool', tool, known)}")
    else:
        problems.append(f'.tools: must be "all" or a list of tool names, got {describe(tools)}')
    timeout = value.get("timeout_s")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout <= 365 * 24 * 3600
    ):
        problems.append(
            ".timeout_s: must be a number of seconds above 0 (at most a year), "
            f"got {describe(timeout)}"
        )
    return problems


# --------------------------------------------------------------------------- call ids


def local_call_id(prefix: str, turn: int, call_index: int) -> str:
    """A waiting call's id within its workflow: ``TURN.INDEX`` (``N.TURN.INDEX`` in a
    conversation, whose turns restart with each message). Fixed by the recorded history."""
    return f"{prefix}{turn}.{call_index}"


def split_call_id(call: str) -> tuple[str, str]:
    """``SUBTASK:TURN.INDEX`` (as ``dplan approvals`` prints it) → (subtask path, local id).

    The subtask path is the workflow id below the plan's (``build``, or
    ``build/coder-2-0`` for a sub-agent it spawned). Raises ValueError naming the form.
    """
    path, sep, local = call.rpartition(":")
    if not sep or not path or not local or "." not in local:
        raise ValueError(
            f"call id {call!r} is not of the form SUBTASK:TURN.INDEX "
            "(copy it from `dplan approvals PLAN`)"
        )
    return path, local


def timeout_reason(timeout_s: float) -> str:
    return f"no decision within {timeout_s:g} s (approval_timeout)"


def edited_arguments_problem(text: str) -> str | None:
    """Why edited arguments (``--args``, the page's edit, ``Client.approve``) cannot replace
    a call's arguments, or None (a JSON object). Worded for all three: no CLI flag."""
    if len(text) > MAX_EDITED_ARGUMENTS_CHARS:
        return (
            f"the edited arguments are too long ({len(text)} characters, "
            f"limit {MAX_EDITED_ARGUMENTS_CHARS})"
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return f"the edited arguments are not valid JSON: {err.msg} at character {err.pos}"
    if not isinstance(value, dict):
        return (
            "the edited arguments must be a JSON object of the tool's arguments, "
            f"got {type(value).__name__}"
        )
    if contains_secret(text):
        # The Update's argument is stored in the workflow history, readable in Temporal Web.
        return (
            "the edited arguments hold what looks like a secret; it would be stored in the "
            "workflow history"
        )
    kept = PLACEHOLDER.search(text)
    if kept is not None:
        # A model's call is scrubbed before it is stored or run: no secret stays behind a
        # placeholder, so a kept one would be written as it reads (``domain/secrets.py``).
        return (
            f"the edited arguments still hold {kept.group(0)}, which stands for a secret "
            "dplan does not keep: the call would write the placeholder, not the secret. "
            "Take it out, or reject the call and tell the agent where the secret is to "
            "come from (an environment variable, a file the operator provides)"
        )
    return None


# --------------------------------------------------------------------------- state, updates


class PendingApproval(_Frozen):
    """A call waiting for a person, as ``dplan approvals`` lists it (arguments scrubbed)."""

    call_id: str  # local to its workflow (see ``local_call_id``)
    tool: str
    arguments: str  # secrets scrubbed, at most MAX_ARGUMENTS_CHARS
    agent: str
    since: str  # ISO time, from workflow.now()
    timeout_s: float | None = None
    editable: bool = True  # whether --args may replace the arguments


class ApprovalDecision(_Frozen):
    """Who decided what about which call, and when (kept by the workflow and shown)."""

    event_type: str = "tool_call.decided"
    call_id: str
    tool: str
    approved: bool
    who: str
    at: str  # ISO time, from workflow.now()
    reason: str = ""
    arguments: str | None = None  # the operator's replacement arguments, if any


class WorkflowApprovals(_Frozen):
    """What the ``approvals`` query of a workflow answers: its waiting calls, its
    decisions, and the running sub-agents (workflow ids) that may have their own."""

    workflow_id: str
    subtask: str = ""
    pending: tuple[PendingApproval, ...] = ()
    decided: tuple[ApprovalDecision, ...] = ()
    children: tuple[str, ...] = ()


class ApproveInput(_Frozen):
    call_id: str = Field(min_length=1, max_length=200)
    who: str = Field(min_length=1, max_length=200)
    arguments: str | None = None  # JSON object replacing the model's arguments


class RejectInput(_Frozen):
    call_id: str = Field(min_length=1, max_length=200)
    who: str = Field(min_length=1, max_length=200)
    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS)
