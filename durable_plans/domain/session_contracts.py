"""What crosses the boundaries of SessionWorkflow: a conversation outside plans.

One long-lived workflow per conversation (id ``session/{session_id}``) holds the current
agent and the agent-switch events; the messages stay in the session store. Clients talk
to it with updates (``send_message``, ``switch_agent``, ``plan_goal``, ``history``, and
``approve_tool_call`` / ``reject_tool_call`` for calls waiting for approval) and read it
with queries (``state``, ``events``, ``approvals``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from durable_plans.domain.agents import AgentSpec
from durable_plans.domain.approvals import ApprovalDecision

# Derived in domain.ids with every other id; re-exported for the callers that found it here.
from durable_plans.domain.ids import session_workflow_id as session_workflow_id
from durable_plans.domain.models import Budget, Message, PlanStatus, Usage

SESSION_WORKFLOW = "SessionWorkflow"
UPDATE_SEND_MESSAGE = "send_message"
UPDATE_SWITCH_AGENT = "switch_agent"
UPDATE_PLAN_GOAL = "plan_goal"
UPDATE_HISTORY = "history"
QUERY_STATE = "state"
QUERY_EVENTS = "events"
SIGNAL_END = "end"

ACT_SESSION_APPEND = "session_append"
ACT_SWITCH_CONTEXT = "switch_agent_context"
ACT_CHECK_PLAN = "check_plan_call"
ACT_READ_HISTORY = "read_history"
ACT_CHECK_SWITCH = "check_switch_call"
ACT_ANSWER_TOOL = "answer_tool_call"

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


class SendMessageInput(_Payload):
    text: str = Field(min_length=1, max_length=100_000)


class SendMessageResult(_Payload):
    answer: str
    agent: str  # the agent that answered
    current_agent: str  # after any switch the agent asked for
    llm_calls: int
    usage: Usage
    plan_ids: tuple[str, ...] = ()  # plans started during this turn


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


class CheckPlanCallOutput(_Payload):
    """A valid plan to start, or the problems (already written back as the tool result)."""

    plan_json: str | None = None
    problems: tuple[str, ...] = ()
