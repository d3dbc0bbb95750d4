"""The tools that reach beyond the workspace: delegation to a cheap model, and sub-agents.

They are declared like any tool (a JSON schema the model sees, arguments validated with
model-readable errors) but carried out by the workflow and dedicated activities, because
one is an LLM call with its own budget charge and the other a child workflow.
"""

from __future__ import annotations

from pydantic import Field

from durable_plans.activities.tool_registry import ToolArgs, ToolRegistry, ToolResult, ToolSpec
from durable_plans.domain.agents import DELEGATE_TOOL, REVISE_PLAN_TOOL, SPAWN_TOOL
from durable_plans.domain.session_contracts import CREATE_PLAN_TOOL, SWITCH_TOOL

MAX_TASK_CHARS = 20_000
MAX_CONTEXT_CHARS = 50_000


class DelegateArgs(ToolArgs):
    task: str = Field(
        min_length=1,
        max_length=MAX_TASK_CHARS,
        description="A self-contained task for a fast helper model with no tools and no "
        "memory of this conversation: say exactly what to produce.",
    )
    context: str | None = Field(
        default=None,
        max_length=MAX_CONTEXT_CHARS,
        description="Optional facts the helper needs (it sees nothing else).",
    )


class SpawnArgs(ToolArgs):
    agent: str = Field(min_length=1, max_length=64, description="Which agent runs the task.")
    task: str = Field(
        min_length=1,
        max_length=MAX_TASK_CHARS,
        description="The task for the sub-agent; it works in its own session and the same "
        "workspace, and its final summary comes back as this tool's result.",
    )


class SwitchAgentArgs(ToolArgs):
    agent: str = Field(min_length=1, max_length=64, description="The agent to hand over to.")
    reason: str = Field(default="", max_length=2000, description="Why, in one sentence.")
    confidence: str = Field(default="medium", description="low, medium or high.")


class PlanSubtaskArgs(ToolArgs):
    id: str = Field(description="Short unique id: letters, digits, '-', '_' or '.'.")
    description: str = Field(description="What this subtask must achieve, self-contained.")
    agent: str = Field(default="coder", description="Which agent runs it.")
    depends_on: list[str] = Field(
        default_factory=list, description="Ids of subtasks whose results it needs."
    )


class CreatePlanArgs(ToolArgs):
    goal: str = Field(description="The goal the plan achieves.")
    subtasks: list[PlanSubtaskArgs] = Field(description="The steps; no dependency cycles.")
    max_parallel: int = Field(default=4, description="How many subtasks may run at once.")


class RevisePlanArgs(ToolArgs):
    add: list[PlanSubtaskArgs] = Field(
        default_factory=list,
        description="Subtasks to add to the running plan; they may depend on any of its "
        "subtasks, yours included (then they start once you completed).",
    )
    remove: list[str] = Field(
        default_factory=list, description="Ids of subtasks not yet started to drop."
    )
    reason: str = Field(default="", max_length=500, description="Why, in one sentence.")


def _carried_out_elsewhere(_args: ToolArgs, _ctx: None) -> ToolResult:
    return ToolResult.error("this tool is carried out by the workflow, not the registry")


ORCHESTRATION_REGISTRY: ToolRegistry[None] = ToolRegistry()
ORCHESTRATION_REGISTRY.register(
    DELEGATE_TOOL,
    "Hand a narrow, self-contained piece of work (summarising, extracting, rewriting, "
    "drafting) to a cheaper, faster model. It has no tools and no history: put everything "
    "it needs in task and context. Returns its answer.",
    DelegateArgs,
    _carried_out_elsewhere,
)
ORCHESTRATION_REGISTRY.register(
    SPAWN_TOOL,
    "Start a sub-agent (a full agent loop with its own tools) on a task and wait for its "
    "final summary. Sub-agents nest at most 3 deep.",
    SpawnArgs,
    _carried_out_elsewhere,
)

ORCHESTRATION_REGISTRY.register(
    SWITCH_TOOL,
    "Hand the conversation to another agent (e.g. to the coder once the design is agreed). "
    "Tool traffic is cleared, the conversation and your last answer are kept, and the new "
    "agent answers the next message.",
    SwitchAgentArgs,
    _carried_out_elsewhere,
)
ORCHESTRATION_REGISTRY.register(
    CREATE_PLAN_TOOL,
    "Turn a goal into a plan of subtasks with dependencies and start it; it runs durably "
    "in the background and its report is added to this conversation when it finishes. "
    "If the plan is invalid you get the problems back: fix them and call again.",
    CreatePlanArgs,
    _carried_out_elsewhere,
)

ORCHESTRATION_REGISTRY.register(
    REVISE_PLAN_TOOL,
    "Change the plan you are part of while it runs: add subtasks (ids new to the plan; "
    "each may depend on any subtask, yours included) and remove subtasks not yet "
    "started. Checked like a plan: if refused you get every problem back, fix them and "
    "call again.",
    RevisePlanArgs,
    _carried_out_elsewhere,
)

ORCHESTRATION_TOOLS: dict[str, ToolSpec] = {s.name: s for s in ORCHESTRATION_REGISTRY.specs()}
