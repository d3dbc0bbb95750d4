"""Agents are configuration: a role's system prompt, its tools, its turn limit and its model.

Workflows look agents up by name (pure data, safe in the sandbox); activities use the
same specs to build requests. The built-ins here are the defaults; an agents file (see
:mod:`domain.agents_loader`) may override their fields or add agents, and the result is an
:class:`AgentCatalog`. The model is not part of the built-ins: it comes from the worker's
environment (``DPLAN_MODEL``) unless an agent file sets one.

Tool *names* live here, not in ``activities.tool_catalog``, because validation of agent
files and plans runs in workflow code, which must not import the activities; a unit test
keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from durable_plans._errors import UnknownAgentError
from durable_plans.domain.approval_rules import ApprovalPolicy
from durable_plans.domain.checks import MAX_CHECK_ROUNDS, CheckCommands
from durable_plans.domain.tools_config import RUN_COMMAND_TOOL, CommandPolicy, McpServerConfig

WORKSPACE_TOOL_NAMES: Final[tuple[str, ...]] = (
    "list_dir",
    "read_file",
    "write_file",
    "search_files",
)
READ_ONLY_TOOL_NAMES: Final[tuple[str, ...]] = ("list_dir", "read_file", "search_files")

DELEGATE_TOOL: Final = "delegate_to_sub_agent"
"""An isolated request to the cheap sub-agent model: no tools, no history."""
SPAWN_TOOL: Final = "spawn_subagent"
"""A nested SubtaskWorkflow with its own agent, session and tools (depth ≤ 3)."""
ORCHESTRATION_TOOL_NAMES: Final[tuple[str, ...]] = (DELEGATE_TOOL, SPAWN_TOOL)
REVISE_PLAN_TOOL: Final = "revise_plan"
"""Add subtasks to the running plan, or remove unstarted ones (``domain/revisions.py``):
offered to a plan's subtask whose agent lists it (the orchestrator does), nowhere else."""
WORKFLOW_ONLY_TOOLS: Final[frozenset[str]] = frozenset({REVISE_PLAN_TOOL})
"""Tools an agent may list that only a workflow carries out, and offers where it can."""

KNOWN_TOOL_NAMES: Final[tuple[str, ...]] = (
    WORKSPACE_TOOL_NAMES + ORCHESTRATION_TOOL_NAMES + (RUN_COMMAND_TOOL, REVISE_PLAN_TOOL)
)
"""Every tool an agent may be given; an agents file naming anything else is rejected."""

CONVERSATION_TOOL_NAMES: Final[tuple[str, ...]] = ("switch_agent", "create_plan")
"""Tools a conversation (``dplan chat``) adds itself (``domain.session_contracts``)."""

APPROVABLE_TOOL_NAMES: Final[tuple[str, ...]] = KNOWN_TOOL_NAMES + CONVERSATION_TOOL_NAMES
"""What an ``approval`` policy may name: every tool a call can be made to."""

MIN_TURNS: Final = 1
MAX_TURNS: Final = 200


class AgentSpec(BaseModel):
    """One agent: what it is told, what it may call, how long it may run, which model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    system_prompt: str = Field(min_length=1)
    tools: tuple[str, ...] = ()
    max_turns: int = Field(default=12, ge=MIN_TURNS, le=MAX_TURNS)
    model: str | None = None
    """A litellm model name; None means the worker's ``DPLAN_MODEL``."""
    fallback_models: tuple[str, ...] | None = None
    """Models that take over, in order, while ``model`` keeps failing; None means the
    worker's ``DPLAN_FALLBACK_MODELS``, ``()`` none (``activities/model_choice.py``)."""
    approval: ApprovalPolicy | None = None
    """Which of its tool calls wait for a person (``domain.approval_rules``); None: defaults."""
    mcp: tuple[str, ...] = ()
    """MCP servers (``"git"``) or single tools (``"git/git_status"``) it may call."""
    run_command: CommandPolicy | None = None
    """What ``run_command`` may run for it (``domain.tools_config``); needs the tool listed."""
    context_window: int | None = Field(default=None, gt=0)
    """Its model's context window in tokens, for compaction (``domain/compaction.py``);
    None: ``DPLAN_CONTEXT_WINDOW``, else litellm's model info."""
    check: CheckCommands = None
    """Commands that must pass after its subtasks' final answers (``domain/checks.py``);
    a subtask's own ``check`` replaces them."""
    check_rounds: int | None = Field(default=None, ge=1, le=MAX_CHECK_ROUNDS)
    """Failed check rounds before a subtask fails; None: the plan's, else 3."""


class AgentCatalog(BaseModel):
    """The agents a worker (or a plan) may use, in a stable order, names unique.

    A frozen model rather than a dict so it can travel as one typed, hashable value (for
    example in a workflow input) and so "which agents exist" is one object that is passed
    around, not a module global that a file override would have to mutate.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    agents: tuple[AgentSpec, ...]
    mcp_servers: tuple[McpServerConfig, ...] = ()
    """The MCP servers of the agents file: worker-side, never carried by workflows."""
    _by_name: dict[str, AgentSpec] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _names_are_unique(self) -> AgentCatalog:
        seen: set[str] = set()
        repeated: list[str] = []
        for agent in self.agents:
            if agent.name in seen:
                repeated.append(agent.name)
            seen.add(agent.name)
        if repeated:
            raise ValueError(f"agent names must be unique; repeated: {', '.join(repeated)}")
        return self

    def model_post_init(self, context: object, /) -> None:
        # Private attributes are exempt from ``frozen``; the index is derived, never dumped.
        self._by_name = {a.name: a for a in self.agents}

    def get(self, name: str) -> AgentSpec:
        """The agent called ``name``; an unknown name raises a KeyError listing the known."""
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownAgentError(name, self._by_name) from None

    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.agents)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self.agents)

    def subset(self, names: Iterable[str]) -> AgentCatalog:
        """Only the named agents, in the order asked (repeats ignored); unknown names raise.

        Used to hand a workflow just the agents its plan uses, keeping its input small.
        """
        wanted = dict.fromkeys(names)
        return AgentCatalog(agents=tuple(self.get(name) for name in wanted))

    def merged(self, specs: Iterable[AgentSpec]) -> AgentCatalog:
        """This catalog with ``specs`` replacing same-named agents in place, others appended.

        Replacing in place keeps the built-ins' order stable whatever a file overrides.
        """
        updates = {s.name: s for s in specs}
        kept = tuple(updates.pop(a.name, a) for a in self.agents)
        return AgentCatalog(agents=kept + tuple(updates.values()), mcp_servers=self.mcp_servers)


_ORCHESTRATOR = AgentSpec(
    name="orchestrator",
    system_prompt=(
        "You are the orchestrator: you get a request done by planning it and handing the "
        "pieces to helpers, not by doing every step yourself. Start by looking at the "
        "workspace with the read-only file tools (list_dir, search_files, read_file) so the "
        "plan rests on what is actually there. For a small, self-contained job (summarise a "
        "file, draft a message, check one idea) call delegate_to_sub_agent with a precise "
        "task and all the context it needs: it goes to a cheap model that sees nothing but "
        "what you pass. For work that needs tools and several steps of its own, call "
        "spawn_subagent with the agent that fits (coder changes files, debug chases a "
        "failure, architect designs, ask explains) and a task that can be done without "
        "seeing this conversation. When you run as a step of a plan and find the plan "
        "guessed wrong (more modules, another approach), call revise_plan to add the "
        "subtasks the work really needs (they may depend on you: then they start once you "
        "finished) or remove ones not yet started. Read each result before deciding the "
        "next step. A tool "
        "that fails returns its error as the tool result: read it, fix the arguments or "
        "change approach, and do not repeat the same failing call. You must finish with a "
        "final answer, a reply with no tool calls; only that ends your turn, and it is what "
        "the plan keeps. It must say what was done (with each helper's outcome), what was "
        "not done and why, and anything the user still has to decide or check."
    ),
    tools=READ_ONLY_TOOL_NAMES + ORCHESTRATION_TOOL_NAMES + (REVISE_PLAN_TOOL,),
    max_turns=12,
)
_ARCHITECT = AgentSpec(
    name="architect",
    system_prompt=(
        "You are the architect: you design changes, you do not make them. Use list_dir, "
        "search_files and read_file to learn how the code is actually organised, its "
        "conventions and its existing abstractions, before proposing anything; read the "
        "files that matter rather than guessing from names, and stop reading once you can "
        "decide. A tool that fails returns its error as the tool result: read it, correct "
        "the path or pattern, and go on. You must finish with a final answer, a reply with "
        "no tool calls; only that ends your turn, and it is what the next subtasks will "
        "build on. It must give a concrete design: the modules and files to add or change, "
        "the interfaces between them (names, signatures, data shapes), how data and errors "
        "flow, the order to implement it in, and the risks and open questions, each with "
        "your recommendation."
    ),
    tools=READ_ONLY_TOOL_NAMES,
    max_turns=10,
)
_CODER = AgentSpec(
    name="coder",
    system_prompt=(
        "You are the coder: you make the requested change in the workspace and leave it working. "
        "Read before you write: find the relevant files with list_dir and search_files, read them "
        "with read_file, and follow their style, naming and structure. Make the smallest complete "
        "change; write_file replaces a whole file, so read the current content first and write "
        "back all of it, not a fragment. A tool that fails returns its error as the tool result: "
        "read it, correct the call, and go on; do not claim a write that did not succeed. You must "
        "finish with a final answer, a reply with no tool calls; only that ends your turn, and it "
        "is what the plan keeps. It must list each file you created or changed with a one-line "
        "reason, anything you could not do and why, and what should be run or checked to verify "
        "the change."
    ),
    tools=WORKSPACE_TOOL_NAMES,
    max_turns=16,
)
_DEBUG = AgentSpec(
    name="debug",
    system_prompt=(
        "You are the debugger: you find why something fails and fix the cause, not the symptom. "
        "Read the error, the logs and the code involved (list_dir and search_files to locate them, "
        "read_file to read them), form a hypothesis, and check it against what the files actually "
        "say before changing anything. Then fix it with the smallest change that removes the "
        "cause, writing whole files with write_file. A tool that fails returns its error as the "
        "tool result: read it and adjust; it is evidence, not the end of the task. You must finish "
        "with a final answer, a reply with no tool calls; only that ends your turn, and it is what "
        "the plan keeps. It must state the root cause with the evidence (file and line or log "
        "text), the fix and the files changed, and how to confirm it, or, if you could not find "
        "the cause, what you ruled out and what to look at next."
    ),
    tools=WORKSPACE_TOOL_NAMES,
    max_turns=16,
)
_ASK = AgentSpec(
    name="ask",
    system_prompt=(
        "You answer questions. You have no tools: answer from the conversation, the results "
        "of earlier subtasks given to you, and what you know. Be direct: lead with the "
        "answer, then the reasoning or example that supports it, and keep it as short as "
        "the question allows. Say plainly what you are unsure of or cannot know from what "
        "you were given, rather than guessing, and say what information would settle it. "
        "Your reply is your final answer: it ends your turn and is what the plan keeps, so "
        "make it complete on its own."
    ),
    tools=(),
    max_turns=4,
)

BUILTIN_CATALOG: Final = AgentCatalog(agents=(_ORCHESTRATOR, _ARCHITECT, _CODER, _DEBUG, _ASK))
BUILTIN_AGENT_NAMES: Final[tuple[str, ...]] = BUILTIN_CATALOG.names()
BUILTIN_AGENT_SPECS: Final[Mapping[str, AgentSpec]] = {a.name: a for a in BUILTIN_CATALOG.agents}
"""The built-ins by name (kept for callers that want a mapping, e.g. plan validation)."""


def agent_spec(
    name: str, catalog: AgentCatalog | Mapping[str, AgentSpec] | None = None
) -> AgentSpec:
    """Look an agent up (built-ins by default); an unknown name raises UnknownAgentError."""
    if catalog is None:
        catalog = BUILTIN_CATALOG
    if isinstance(catalog, AgentCatalog):
        return catalog.get(name)
    try:
        return catalog[name]
    except KeyError:
        raise UnknownAgentError(name, catalog) from None
