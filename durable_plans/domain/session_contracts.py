"""What crosses the boundaries of SessionWorkflow: a conversation outside plans.

One long-lived workflow per conversation (id ``session/{session_id}``) holds the current
agent and the agent-switch events; the messages stay in the session store. Clients talk
to it with updates (``send_message``, ``switch_agent``, ``plan_goal``, ``history``,
``undo``, and ``approve_tool_call`` / ``reject_tool_call`` for calls waiting for approval)
and read it with queries (``state``, ``events``, ``approvals``).

A conversation's files are a tree of its own in the workspace repository, like a
subtask's: the workflow carries its commit (``ChatWorkspace``), each turn's changes are
commits on it, the branch ``<prefix>chat/<session-id>`` names its head after every turn,
and ``undo`` takes the last turn back (``ChatTurn`` records where each turn started).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from durable_plans.domain.agents import AgentSpec
from durable_plans.domain.approval_rules import ApprovalDecision
from durable_plans.domain.compaction import CompactOutput

# Derived in domain.ids with every other id; re-exported for the callers that found it here.
from durable_plans.domain.ids import session_workflow_id as session_workflow_id
from durable_plans.domain.models import Budget, Message, PlanStatus, Usage
from durable_plans.domain.workspace_refs import COMMIT_RE, GitIdentity, WorkspaceRef

SESSION_WORKFLOW = "SessionWorkflow"
UPDATE_SEND_MESSAGE = "send_message"
UPDATE_SWITCH_AGENT = "switch_agent"
UPDATE_PLAN_GOAL = "plan_goal"
UPDATE_HISTORY = "history"
UPDATE_UNDO = "undo"
QUERY_STATE = "state"
QUERY_EVENTS = "events"
SIGNAL_END = "end"

ACT_SESSION_APPEND = "session_append"
ACT_SWITCH_CONTEXT = "switch_agent_context"
ACT_CHECK_PLAN = "check_plan_call"
ACT_READ_HISTORY = "read_history"
ACT_CHECK_SWITCH = "check_switch_call"
ACT_ANSWER_TOOL = "answer_tool_call"
ACT_UNDO_MESSAGES = "undo_turn_messages"
ACT_CHAT_PUBLISH = "chat_publish"

# The failure type of an ``undo`` the conversation refuses (a turn running, none to undo).
UNDO_REFUSED = "UndoRefused"
# Turns a conversation remembers for ``undo`` (carried across continue-as-new).
MAX_UNDOABLE_TURNS = 100

SWITCH_TOOL = "switch_agent"
CREATE_PLAN_TOOL = "create_plan"
MAX_PLAN_ATTEMPTS = 3


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AgentSwitchEvent(_Payload):
    event_type: str = "agent.switched"
    session_id: str
    from_agent: str
    to_agent: str
    reason: str = ""
    confidence: str = "medium"
    at: str = ""  # ISO time from workflow.now()
    removed_count: int = 0
    final_message_count: int = 0


class PlanRef(_Payload):
    plan_id: str
    goal: str = ""
    status: PlanStatus = PlanStatus.RUNNING
    summary: str = ""


class ChatTurn(_Payload):
    """A turn ``undo`` can take back: its number (which names its messages) and the
    commit the conversation's files were at before it (None without a workspace)."""

    number: int = Field(ge=0)
    start: str | None = Field(default=None, pattern=COMMIT_RE.pattern)


class ChatWorkspace(_Payload):
    """A conversation's files: the tree it works on and the commit it is at, where it
    started, and the branch its head was last published to.

    A tree's ref only moves forward, so after an undo the conversation goes on on a new
    tree (``tree_key@undos``) from the commit before the undone turn; the earlier tree's
    ref keeps what was undone.
    """

    ref: WorkspaceRef
    base: str = Field(pattern=COMMIT_RE.pattern)
    tree_key: str = Field(min_length=1)
    undos: int = Field(default=0, ge=0)
    published: str | None = None  # the commit the branch was last set to
    branch: str | None = None


class SessionInput(_Payload):
    session_id: str
    agent: str = "orchestrator"
    agents: tuple[AgentSpec, ...] = ()
    budget: Budget | None = None
    # Carried across continue-as-new.
    events: tuple[AgentSwitchEvent, ...] = ()
    plans: tuple[PlanRef, ...] = ()
    messages_handled: int = 0
    usage: Usage = Usage()
    # Continue-as-new after this many handled messages in one run (None: only when the
    # server suggests it); small values let tests exercise the carry-over.
    max_messages_per_run: int | None = Field(default=None, ge=1)
    # Decisions on tool calls (who approved or rejected what, when), carried like events.
    approvals: tuple[ApprovalDecision, ...] = ()
    # Where the live stream's numbering goes on (workflows/live.py): watchers following
    # continue-as-new keep their place.
    stream_offset: int = Field(default=0, ge=0)
    # The conversation's files and the turns undo can take back, carried like events.
    workspace: ChatWorkspace | None = None
    turns: tuple[ChatTurn, ...] = ()


class SendMessageInput(_Payload):
    text: str = Field(min_length=1, max_length=100_000)


class SendMessageResult(_Payload):
    answer: str
    agent: str  # the agent that answered
    current_agent: str  # after any switch the agent asked for
    llm_calls: int
    usage: Usage
    plan_ids: tuple[str, ...] = ()  # plans started during this turn
    # The files the turn changed, and the commit and branch the conversation is at after
    # it (None without a workspace).
    files: tuple[str, ...] = ()
    commit: str | None = None
    branch: str | None = None
    # Why the branch could not be set to the commit (it then names an earlier one).
    workspace_problem: str | None = None
    # The history was folded during the turn (``domain/compaction.py``): what and by how much.
    compactions: tuple[CompactOutput, ...] = ()


class SwitchAgentInput(_Payload):
    target: str
    reason: str = ""
    confidence: str = "medium"


class AgentSwitchResult(_Payload):
    from_agent: str
    to_agent: str
    removed_count: int
    preserved_result: str | None
    context_message: str
    final_message_count: int


class PlanGoalInput(_Payload):
    goal: str = Field(min_length=1, max_length=20_000)


class UndoInput(_Payload):
    """``undo`` takes no choice: it always takes back the last turn."""


class UndoResult(_Payload):
    """What ``undo`` took back: the turn's user message (cut to an excerpt), how many
    messages it removed, the files it restored, and where the conversation is now."""

    text: str
    removed: int
    files: tuple[str, ...] = ()
    commit: str | None = None
    branch: str | None = None
    # Why the branch could not be set to the commit (it then names an earlier one).
    workspace_problem: str | None = None
    turns_left: int = 0


class HistoryInput(_Payload):
    limit: int = Field(default=50, ge=1, le=500)


class SessionState(_Payload):
    session_id: str
    agent: str
    messages_handled: int
    busy: bool
    events: tuple[AgentSwitchEvent, ...] = ()
    plans: tuple[PlanRef, ...] = ()
    usage: Usage = Usage()
    approvals: tuple[ApprovalDecision, ...] = ()  # tool-call decisions, oldest first
    # The conversation's files: the commit it is at and its branch (None until its first
    # turn, or without a workspace), and how many turns undo could take back.
    commit: str | None = None
    branch: str | None = None
    undoable: int = 0


# ---- activity payloads


class SessionAppendInput(_Payload):
    session_id: str
    messages: tuple[Message, ...]


class ReadHistoryInput(_Payload):
    session_id: str
    limit: int = Field(default=50, ge=1, le=500)


class SwitchContextInput(_Payload):
    session_id: str
    from_agent: str
    to_agent: str
    reason: str = ""
    note_id: str


class CheckPlanCallInput(_Payload):
    session_id: str
    message_id: str
    call_index: int
    scope: str
    turn: int
    known_agents: tuple[str, ...]
    plan_id: str  # used when the model gives none (deterministic: from scope and turn)
    attempts_left: int


class CheckSwitchCallInput(_Payload):
    session_id: str
    message_id: str
    call_index: int
    scope: str
    turn: int
    known_agents: tuple[str, ...]
    current_agent: str


class CheckSwitchCallOutput(_Payload):
    """The switch the agent asked for, or None when refused (refusal already answered)."""

    target: str | None = None
    reason: str = ""
    confidence: str = "medium"


class PlanStartedInput(_Payload):
    session_id: str
    scope: str
    turn: int
    call_index: int
    tool_call_id: str
    text: str


class UndoMessagesInput(_Payload):
    """Remove a turn's messages: its user message and everything after it. The session
    is first copied under ``snapshot_id``, and the cut computed from that copy, so a
    retried activity removes the same messages and gives the same answer."""

    session_id: str
    user_message_id: str
    snapshot_id: str


class UndoMessagesOutput(_Payload):
    found: bool  # False: the turn's user message was no longer in the session
    text: str = ""  # the user message, cut to an excerpt
    removed: int = 0


class ChatPublishInput(_Payload):
    """Set a conversation's branch to its head; ``since``: a commit to list the files
    changed from (the head before a turn, or the one an undo took back)."""

    plan_id: str
    base: str = Field(pattern=COMMIT_RE.pattern)
    head: str = Field(pattern=COMMIT_RE.pattern)
    since: str | None = Field(default=None, pattern=COMMIT_RE.pattern)
    at_s: float
    identity: GitIdentity


class ChatPublishOutput(_Payload):
    branch: str
    files: tuple[str, ...] = ()


class CheckPlanCallOutput(_Payload):
    """A valid plan to start, or the problems (already written back as the tool result)."""

    plan_json: str | None = None
    problems: tuple[str, ...] = ()
