"""What crosses Temporal's boundaries: workflow and activity inputs and outputs.

Kept apart from the workflows and activities so both sides import the same pure types
(the workflow sandbox never needs to load activity modules or litellm). Payloads carry
ids, counters and short texts only; conversations stay in the session store, so no
payload grows with the conversation until it meets Temporal's payload size limit.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field

from durable_plans.domain.agents import AgentSpec
from durable_plans.domain.approval_rules import ApprovalPolicy
from durable_plans.domain.checks import CheckRun
from durable_plans.domain.compaction import WindowCheck
from durable_plans.domain.models import (
    Budget,
    ForkedFrom,
    ModelUsage,
    Plan,
    PlanReport,
    Subtask,
    SubtaskResult,
    Usage,
)
from durable_plans.domain.plan_data import PackedPlan, PlanDataRef
from durable_plans.domain.plan_log import LogEntries
from durable_plans.domain.revision_record import Revisions
from durable_plans.domain.tools_config import McpServerTools, ToolSchema
from durable_plans.domain.workspace_refs import WorkspaceRef, WorkspaceStart

# Workflow type names, like activity names, are part of recorded histories (and of
# `temporal workflow start --type ...`): renaming one breaks replay. A workflow starts
# another by its name, so no workflow module has to import another's (no import cycle).
PLAN_WORKFLOW = "PlanWorkflow"
SUBTASK_WORKFLOW = "SubtaskWorkflow"
# A plan's workflow task may wait behind hundreds of its children's tasks on a busy worker,
# and after a worker restart it replays a history of up to ``HISTORY_GOAL_EVENTS`` (seconds
# on a loaded host). Past Temporal's default of 10 s the server times the task out and the
# next attempt replays from the start, which on a loaded host can time out again, for ever.
# Its continue-as-new runs keep it (the server carries the previous run's value).
PLAN_TASK_TIMEOUT = timedelta(seconds=30)

# Activity names are part of recorded histories: renaming one breaks replay.
ACT_END_SUBTASK = "end_subtask"
ACT_MERGE_RESULTS = "merge_results"
ACT_CALL_LLM = "call_llm"
ACT_RUN_TOOL = "run_tool"
ACT_DELEGATE = "delegate_to_sub_agent"
ACT_PREPARE_SPAWN = "prepare_spawn"
ACT_FINISH_SPAWN = "finish_spawn"
ACT_APPEND_NOTES = "append_notes"
ACT_BRANCH_SPEND = "branch_spend"
ACT_DELIVER_WEBHOOK = "deliver_webhook"
ACT_DESCRIBE_CALL = "describe_tool_call"
ACT_ANSWER_CALL = "answer_tool_call_with"
# The workspace as git (domain/workspace_refs.py): a plan's base, a subtask's starting tree,
# the plan's result branch.
ACT_WORKSPACE_OPEN = "workspace_open"
ACT_WORKSPACE_MERGE = "workspace_merge"
ACT_WORKSPACE_PUBLISH = "workspace_publish"
# A plan's data by reference (domain/plan_data.py): kept in the session store, checked.
ACT_PLAN_DATA_UNPACK = "plan_data_unpack"
ACT_PLAN_DATA_CHECK = "plan_data_check"
ACT_PLAN_DATA_SAVE_REPORT = "plan_data_save_report"
# What a plan run's worker decided for it (``WorkerFacts``): a local activity the plugin
# registers, asked once in the run's first activation.
ACT_WORKER_FACTS = "worker_facts"
ACT_TENANT_ROOM = "tenant_room"

# Sub-agents nest at most this deep (the root session is depth 0).
MAX_SUBAGENT_DEPTH = 3


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BeginSubtaskInput(_Payload):
    plan_run_id: str
    subtask: Subtask
    base_session_id: str
    branch_session_id: str
    snapshot_id: str
    # Dependencies' results are read from their branch sessions by the activity, so
    # full texts never pass through workflow history.
    dependency_branches: tuple[tuple[str, str], ...] = ()  # (subtask_id, branch_session_id)
    dependency_descriptions: tuple[str, ...] = ()
    system_prompt: str
    root_session_id: str
    depth: int = 0
    retries: int = Field(default=0, ge=0)  # names the attempt's message ids
    # The plan's full data when its descriptions travel as excerpts (domain/plan_data.py):
    # the branch is built with the whole description read from there.
    plan_data: PlanDataRef | None = None


class BeginSubtaskOutput(_Payload):
    branch_session_id: str
    message_count: int
    snapshot_message_count: int


class EndSubtaskInput(_Payload):
    base_session_id: str
    branch_session_id: str
    snapshot_id: str
    succeeded: bool


class MergeResultsInput(_Payload):
    plan_run_id: str
    base_session_id: str
    # (subtask_id, branch_session_id) in the deterministic order they are merged.
    entries: tuple[tuple[str, str], ...]


class BranchSpendInput(_Payload):
    """Cancelled subtasks' branches, to report what they had spent: (subtask id, branch
    session id, the subtask's run scope, its turn limit)."""

    entries: tuple[tuple[str, str, str, int], ...]


class BranchSpend(_Payload):
    subtask_id: str
    branch_exists: bool
    llm_calls: int  # answers stored by the subtask's own LLM calls (one in flight is lost)
    usage: Usage


class BranchSpendOutput(_Payload):
    spends: tuple[BranchSpend, ...]


class LlmCallInput(_Payload):
    session_id: str
    agent: str
    scope: str  # the subtask's run scope: with ``turn`` it makes the written message's id
    turn: int
    tools: tuple[str, ...] = ()
    model: str | None = None  # the agent's own model; None: the worker's DPLAN_MODEL
    # Models that take over when ``model`` keeps failing (``activities/model_choice.py``);
    # None: the worker's DPLAN_FALLBACK_MODELS.
    fallback_models: tuple[str, ...] | None = None
    # Sent first in the request without being stored: a conversation keeps no agent's
    # prompt in its history, so switching agents needs no rewriting of old prompts.
    system_prompt: str | None = None
    budget: Budget | None = None
    root_session_id: str = ""  # whose budget pays: the root of the session tree
    # The plan's tenant, whose daily cap the call must fit (``domain/tenants.py``).
    tenant: str | None = None
    # A subtask's first call builds its branch first, and a call that ends the subtask
    # with its answer closes the branch after: each saves the subtask a local activity,
    # which on a busy worker costs as much as the rest of its workflow task.
    begin: BeginSubtaskInput | None = None
    close_on_answer: EndSubtaskInput | None = None
    # Tools not built in (MCP servers' tools the agent may call), as fixed at plan start.
    extra_tools: tuple[ToolSchema, ...] = ()
    # A prompt past ``DPLAN_COMPACT_AT`` of the model's window is not sent; the output says
    # so (``over_window``) and the workflow compacts first. ``context_window``: the
    # agent's own, if it sets one.
    check_window: bool = False
    context_window: int | None = None


class TenantRoomInput(_Payload):
    tenant: str


class TenantRoom(_Payload):
    """Whether the tenant's cap has room for a call now, and when to ask again if not."""

    room: bool
    recheck_s: float
    why: str = ""


class ToolCallRef(_Payload):
    id: str
    name: str


class LlmCallOutput(_Payload):
    message_id: str
    content: str | None
    tool_calls: tuple[ToolCallRef, ...] = ()
    usage: Usage = Usage()
    model: str = ""
    finish_reason: str | None = None
    replayed: bool = False  # True when the answer was already in the store (retry after crash)
    branch_closed: bool = False  # ``close_on_answer`` was carried out
    # Not sent: the prompt would pass the compaction threshold (``check_window``).
    over_window: WindowCheck | None = None


class ToolCallInput(_Payload):
    session_id: str
    message_id: str  # the assistant message holding the call
    call_index: int
    scope: str
    turn: int
    allowed_tools: tuple[str, ...]
    # An operator's replacement for the model's arguments (``dplan approve --args``).
    arguments: str | None = None
    # The tree the call works on; None: the worker's workspace directory itself (a loop
    # given no tree).
    workspace: WorkspaceRef | None = None
    # Workflow time of the call: the date of the commit it makes, if it changes files.
    at_s: float = 0.0


class DescribeCallInput(_Payload):
    """A call about to wait for approval: its name and (scrubbed) arguments are read."""

    session_id: str
    message_id: str
    call_index: int


class DescribeCallOutput(_Payload):
    tool: str
    arguments: str  # secrets scrubbed, capped


class AnswerCallInput(_Payload):
    """A tool result the workflow composed (a rejected call's), written as the answer."""

    session_id: str
    message_id: str
    call_index: int
    scope: str
    turn: int
    text: str


class ToolCallOutput(_Payload):
    tool_call_id: str
    name: str
    ok: bool
    summary: str = ""
    # The commit the call's changes made (the tree's new head); None: nothing changed.
    commit: str | None = None


class DelegateInput(_Payload):
    session_id: str
    message_id: str
    call_index: int
    scope: str
    turn: int
    budget: Budget | None = None
    root_session_id: str
    tenant: str | None = None  # whose daily cap the delegation must fit


class DelegateOutput(_Payload):
    tool: ToolCallOutput
    usage: Usage


class PrepareSpawnInput(_Payload):
    session_id: str  # the parent's branch, which holds the call
    message_id: str
    call_index: int
    scope: str
    turn: int
    depth: int  # the parent's depth
    root_session_id: str
    known_agents: tuple[str, ...]


class PrepareSpawnOutput(_Payload):
    """Either a child to start, or a refusal already written back as the tool result."""

    child_session_id: str | None = None
    agent: str | None = None
    task: str | None = None
    refusal: str | None = None


class FinishSpawnInput(_Payload):
    session_id: str  # the parent's branch
    scope: str
    turn: int
    call_index: int
    tool_call_id: str
    child_session_id: str
    ok: bool
    text: str  # the child's final summary, or its error


class AppendNotesInput(_Payload):
    session_id: str
    scope: str
    turn: int
    notes: tuple[str, ...]


class WebhookInput(_Payload):
    """One plan-end notification. ``secret_env`` names the worker's variable holding the
    signing secret: the secret itself never enters a payload."""

    webhook_id: str  # the Standard Webhooks ``webhook-id``, the same on every attempt
    url: str
    secret_env: str
    report: PlanReport  # the body, sent as the report JSON


class WebhookAttempt(_Payload):
    """What one delivery attempt saw: returned when delivered, and carried in the details
    of a failed attempt, so the workflow can tell attempts and the last answer."""

    attempt: int
    status_code: int | None = None  # None: no HTTP answer (connection error, timeout)
    reason: str | None = None


class SubtaskInput(_Payload):
    # ``{plan_id}.{run key}``: one execution of a plan. Branch, snapshot and message ids
    # derive from it, so running the same plan file again never finds (and silently
    # reuses) the previous run's conversation.
    plan_run_id: str
    subtask: Subtask
    base_session_id: str
    dependency_branches: tuple[tuple[str, str], ...] = ()
    dependency_descriptions: tuple[str, ...] = ()
    budget: Budget | None = None
    max_turns: int | None = Field(default=None, ge=1)
    # The agents fixed when the plan started (built-ins plus the agents file): the subtask's
    # own, and those it may spawn. Carried, not looked up, so a replay sees the same ones.
    agents: tuple[AgentSpec, ...] = ()
    root_session_id: str = ""
    # The plan's tenant: every LLM call of the subtask and its sub-agents fits its cap.
    tenant: str | None = None
    depth: int = 0
    # Its LLM calls (and a join's merge) run as local activities (``workflows/llm_call.py``):
    # decided once per plan run (``WorkerFacts.llm_local``) and carried, so a replay sees
    # the same whatever the replaying worker's settings.
    llm_local: bool = False
    # Times this subtask was started before (``dplan retry``/``resume``): its attempt
    # works on a branch of its own (``domain.ids.attempt_key``).
    retries: int = Field(default=0, ge=0)
    # The plan's tool approval policy; None: each agent's own (see domain.approval_rules).
    approval: ApprovalPolicy | None = None
    # The MCP servers' tools listed when the plan started (the agent uses those it may).
    mcp_tools: tuple[McpServerTools, ...] = ()
    # Where the subtask's tree starts; None: tools work in the worker's workspace
    # directory (a sub-agent of a loop without a tree).
    workspace: WorkspaceStart | None = None
    # The plan's workflow id, told of each approval decision here or in a sub-agent
    # spawned from here (``domain/plan_log.py``); empty for a conversation's sub-agents.
    report_to: str = ""
    # Where the plan's full data is when ``subtask`` holds an excerpt of its description.
    plan_data: PlanDataRef | None = None
    # The plan's default number of failed check rounds (``domain/checks.py``).
    check_rounds: int | None = None


class SubtaskOutcome(_Payload):
    """A completed subtask. Failures are never returned: the workflow fails instead."""

    result: str
    llm_calls: int
    usage: Usage
    branch_session_id: str
    # The subtask's last commit: what it contributes to its dependents and the plan.
    commit: str | None = None
    models: tuple[ModelUsage, ...] = ()  # which models answered, with their usage
    checks: tuple[CheckRun, ...] = ()  # its check runs (``domain/checks.py``)


class SubtaskFailureDetails(_Payload):
    """Carried in the failure's details so the plan report keeps counts and usage."""

    llm_calls: int
    usage: Usage
    branch_session_id: str
    # The attempt's last commit (kept under its ref for inspection, never merged).
    commit: str | None = None
    models: tuple[ModelUsage, ...] = ()  # which models answered, with their usage
    checks: tuple[CheckRun, ...] = ()  # its check runs (``domain/checks.py``)


class PlanInput(_Payload):
    plan: Plan
    # The agent catalog the plan runs with (empty: the built-ins).
    agents: tuple[AgentSpec, ...] = ()
    # False when a live conversation started the plan: it appends the plan's summary at
    # a safe moment itself, instead of results landing in the middle of a turn.
    merge_results: bool = True
    # Progress carried across continue-as-new; empty on the first run.
    results: tuple[SubtaskResult, ...] = ()
    merged: tuple[str, ...] = ()
    branches: tuple[tuple[str, str], ...] = ()
    started_at_s: float | None = None
    # Continue-as-new after this many subtask completions in one run (None: only when the
    # server suggests it). Small values let tests exercise the carry-over path.
    max_completions_per_run: int | None = Field(default=None, ge=1)
    # Subtasks being run again (``dplan retry``, ``dplan resume``): what their earlier
    # attempts spent and how often they were retried, added to their next result.
    prior: tuple[SubtaskResult, ...] = ()
    # The budget as an operator last raised it (``dplan budget``); None: the plan's.
    budget: Budget | None = None
    # When each paused subtask paused (workflow time, epoch seconds): its pause timeout
    # runs from there across continue-as-new.
    paused_since: tuple[tuple[str, float], ...] = ()
    # The commit the plan's workspace started from, once resolved (carried so a
    # continued or retried run starts its subtasks from the same tree).
    workspace_base: str | None = None
    # The MCP servers' tools, listed once when the plan first started (None: not yet).
    mcp_tools: tuple[McpServerTools, ...] | None = None
    # The plan's full data in the session store (domain/plan_data.py); ``plan`` is then
    # its lean form, descriptions cut to excerpts. None: ``plan`` is the whole plan.
    plan_data: PlanDataRef | None = None
    # A plan by reference continued as new: its progress (results, merged, branches,
    # prior) packed here instead of in those fields, which are then empty.
    carried: PackedPlan | None = None
    # The plan's log of decisions so far (``domain/plan_log.py``), and how many older
    # entries it dropped: carried by continue-as-new, and by ``dplan retry`` with the
    # retry's own entries added.
    log: LogEntries = ()
    log_omitted: int = Field(default=0, ge=0)
    # The plan's revisions so far (``domain/revisions.py``; ``plan`` holds what they
    # changed), carried by continue-as-new and ``dplan retry``.
    revisions: Revisions = ()
    # A fork's origin (``dplan fork``), carried to its report.
    forked_from: ForkedFrom | None = None


class WorkerFacts(_Payload):
    """What the worker running a plan run decided for it, from its own settings and
    namespace: returned by the ``worker_facts`` local activity in the run's first
    activation, so the history holds it (the activity's marker) and a replay, by a worker
    with other settings or by ``dplan replay``, reads the recorded answer. Defaults: what
    a worker that could not say (no such activity registered) takes."""

    # The run's subtasks make their LLM calls (and a join its merge) as local activities:
    # DPLAN_LLM_LOCAL on, subtasks not streaming, and the worker running ``call_llm``.
    llm_local: bool = False
    # The namespace has the ``Dplan*`` search attributes (``workflows/visibility.py``):
    # setting an unregistered one would fail the workflow task.
    search_attributes: bool = False


class PlanDataUnpackInput(_Payload):
    """A plan sent packed (``domain.plan_data``): unpacked, validated and stored by a
    local activity (outside the sandbox, not bound by a workflow task's time)."""

    packed: PackedPlan
    workflow_id: str


class PlanDataSaveReportInput(_Payload):
    report: PlanReport


class PlanDataCheckInput(_Payload):
    ref: PlanDataRef
    lean: Plan
    known_agents: tuple[str, ...] = ()  # the run's catalogue: the lean plan is validated
