"""The durable agent loop shared by SubtaskWorkflow and SessionWorkflow.

LLM call → tool calls (run concurrently) → LLM call … until the model answers without
calling a tool. Every step is an activity whose writes carry ids derived from ``scope``
and the turn, so a replayed or retried step never writes twice. The loop only knows ids:
the conversation itself is read and written by the activities.

Tools are dispatched by kind (``domain.tool_contracts.ToolKind``) through one table,
``TOOL_HANDLERS``: workspace tools run as the local activity ``run_tool``, delegation as
its own LLM activity, ``spawn_subagent`` as a nested SubtaskWorkflow, ``run_command`` and
MCP servers' tools as regular activities with their own timeouts and retries (a command
at most once unless declared idempotent), and a workflow may add its own
(SessionWorkflow's ``switch_agent`` and ``create_plan``) through ``custom_tools``.

With a ``workspace`` (a tree at a commit, ``domain.workspace_refs``), every call that may
change files names the tree's head and returns the commit it made, which becomes the
head; such calls run one at a time (``_on_tree``), in the order the model made them, so
each starts from the commit the previous one made and no write is lost to a parallel one.
A sub-agent works on a tree of its own from the parent's head and, when it completes,
the parent carries on from its last commit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
)

with workflow.unsafe.imports_passed_through():
    from durable_plans.domain.agents import (
        ORCHESTRATION_TOOL_NAMES,
        WORKFLOW_ONLY_TOOLS,
        AgentCatalog,
        AgentSpec,
    )
    from durable_plans.domain.approval_rules import ApprovalPolicy, effective_policy, needs_approval
    from durable_plans.domain.compaction import (
        ACT_COMPACT_HISTORY,
        REASON_EXCEEDED,
        REASON_THRESHOLD,
        CompactInput,
        CompactOutput,
        WindowCheck,
    )
    from durable_plans.domain.contracts import (
        ACT_APPEND_NOTES,
        ACT_CALL_LLM,
        ACT_DELEGATE,
        ACT_FINISH_SPAWN,
        ACT_PREPARE_SPAWN,
        ACT_RUN_TOOL,
        SUBTASK_WORKFLOW,
        AppendNotesInput,
        BeginSubtaskInput,
        DelegateInput,
        DelegateOutput,
        EndSubtaskInput,
        FinishSpawnInput,
        LlmCallInput,
        LlmCallOutput,
        PrepareSpawnInput,
        PrepareSpawnOutput,
        SubtaskInput,
        SubtaskOutcome,
        ToolCallInput,
        ToolCallOutput,
        ToolCallRef,
    )
    from durable_plans.domain.failures import FailureType, subtask_failure_details
    from durable_plans.domain.ids import (
        short_session_id,
        spawned_subtask_id,
        spawned_workflow_id,
    )
    from durable_plans.domain.models import Budget, ModelUsage, Subtask, Usage
    from durable_plans.domain.tool_contracts import (
        ACT_ANSWER_TOOL_ERROR,
        ACT_CALL_MCP_TOOL,
        ACT_RUN_COMMAND,
        EDITABLE_TOOL_KINDS,
        CommandCallInput,
        McpCallInput,
        ToolCallAt,
        ToolErrorInput,
        ToolKind,
        tool_kind,
    )
    from durable_plans.domain.tools_config import (
        RUN_COMMAND_TOOL,
        CommandPolicy,
        McpServerTools,
        McpToolSpec,
        ToolSchema,
        agent_mcp_tools,
        mcp_tool_schemas,
        requires_approval,
    )
    from durable_plans.domain.workspace_refs import WorkspaceRef

from durable_plans.workflows import policies
from durable_plans.workflows.activity_failures import why
from durable_plans.workflows.approval_desk import ApprovalDesk, edited_note
from durable_plans.workflows.llm_call import execute_llm_activity
from durable_plans.workflows.plan_workspace import moved_to, subagent_start
from durable_plans.workflows.store_ops import store_op

# A workflow's own tool: (assistant message id, turn, call index, call) → a note for the
# session, or None. It must write the tool result itself (through an activity).
CustomTool = Callable[[str, int, int, ToolCallRef], Awaitable[str | None]]


@dataclass(frozen=True)
class _Call:
    """One tool call as its handler receives it: where the model made it, and the
    arguments a person replaced the model's with (None: the model's own)."""

    message_id: str
    index: int
    ref: ToolCallRef
    arguments: str | None


class LoopFailed(Exception):
    """The loop stopped without an answer (not an activity error): type and message."""

    def __init__(self, type_: FailureType | str, message: str) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message


@dataclass
class AgentLoop:
    session_id: str
    scope: str  # with the turn, makes every written message's id
    spec: AgentSpec
    catalog: AgentCatalog
    root_session_id: str
    budget: Budget | None = None
    tenant: str | None = None  # whose daily cap every call fits (``domain/tenants.py``)
    depth: int = 0
    # Spawned sub-agents' workflows are named under this workflow id and their runs
    # under this scope, so their ids never collide with anyone else's.
    child_scope: str = ""
    custom_tools: Mapping[str, CustomTool] = field(default_factory=dict)
    # Where calls that need approval wait (the workflow's Updates decide them), and the
    # plan's policy, which replaces the agent's own (None: the agent's).
    approvals: ApprovalDesk | None = None
    approval: ApprovalPolicy | None = None
    # Sent with every request but not stored (conversations); subtasks store theirs.
    system_prompt: str | None = None
    # A subtask's branch: built by the first LLM call, closed by the one that answers.
    begin: BeginSubtaskInput | None = None
    close_on_answer: EndSubtaskInput | None = None
    branch_closed: bool = False
    # The LLM calls run as local activities (``workflows/llm_call.py``; subtasks only).
    llm_local: bool = False
    turn: int = 0
    llm_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    # Which models answered (and sub-agents' models), with their calls and usage.
    models: tuple[ModelUsage, ...] = ()
    phase: str = "starting"
    latest: str = ""  # the last answer's text, for watchers (the progress query)
    # What this loop folded (``domain/compaction.py``): the session's compaction events.
    compactions: list[CompactOutput] = field(default_factory=list)
    # The turn whose call was last compacted for: its next call is sent as it is; and the
    # one whose call was last refused as too long (one compaction and one retry each).
    _compacted_turn: int | None = field(default=None, repr=False)
    _refused_turn: int | None = field(default=None, repr=False)
    # The MCP servers' tools fixed when the plan started; the agent's ``mcp`` picks some.
    mcp_servers: tuple[McpServerTools, ...] = ()
    # The tree the tools work on and the commit it is at; None: the worker's workspace
    # directory (a loop given no tree; plans and conversations always give one).
    workspace: WorkspaceRef | None = None
    # Held by each call that works on the tree, so such calls run one at a time.
    _tree: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def head(self) -> str | None:
        """The tree's commit now: the subtask's result when it ends."""
        return self.workspace.head if self.workspace is not None else None

    @contextlib.asynccontextmanager
    async def _on_tree(self) -> AsyncIterator[WorkspaceRef | None]:
        """The tree, to one call at a time; nothing to wait for without one."""
        if self.workspace is None:
            yield None
            return
        async with self._tree:
            yield self.workspace

    def _took(self, commit: str | None) -> None:
        """A call made ``commit``: the tree is at it from now on."""
        self.workspace = moved_to(self.workspace, commit)

    def _at_s(self) -> float:
        """The date of a commit the call makes (workflow time); unset without a tree,
        where the call makes no commit."""
        return workflow.now().timestamp() if self.workspace is not None else 0.0

    @property
    def mcp_tools(self) -> dict[str, tuple[McpServerTools, McpToolSpec]]:
        return agent_mcp_tools(self.spec.mcp, self.mcp_servers)

    @property
    def extra_tools(self) -> tuple[ToolSchema, ...]:
        return mcp_tool_schemas(self.mcp_tools)

    @property
    def tools(self) -> tuple[str, ...]:
        """What the model is offered: the agent's tools and the workflow's own; a tool
        only a workflow carries out (``revise_plan``, in a plan) where it does."""
        own = tuple(t for t in self.spec.tools if t not in WORKFLOW_ONLY_TOOLS)
        custom = tuple(t for t in self.custom_tools if t not in own)
        return (*own, *custom)

    async def run(self, max_turns: int) -> str:
        """The final answer; ``LoopFailed`` or an activity's error otherwise.

        In runs that compact, a call the provider refuses as over the model's context
        window gets one compaction of the history and one more try before it fails."""
        first_turn = self.turn
        while True:
            try:
                return await self._turns(max_turns, first_turn)
            except ActivityError as err:
                if not self._refused_as_too_long(err):
                    raise
                self._refused_turn = self.turn
                if not await self._compact(REASON_EXCEEDED, None):
                    raise err  # its cause (the provider's refusal) is what callers read

    async def _turns(self, max_turns: int, first_turn: int) -> str:
        """The loop itself, from the current turn on."""
        while self.turn - first_turn < max_turns:
            self.phase = "thinking"
            # Counted before the call: a call that fails still happened (and may be billed).
            self.llm_calls += 1
            params = policies.current_parameters()
            out: LlmCallOutput = await execute_llm_activity(
                ACT_CALL_LLM,
                LlmCallInput(
                    session_id=self.session_id,
                    agent=self.spec.name,
                    scope=self.scope,
                    turn=self.turn,
                    tools=self.tools,
                    model=self.spec.model,
                    fallback_models=self.spec.fallback_models,
                    system_prompt=self.system_prompt,
                    budget=self.budget,
                    tenant=self.tenant,
                    root_session_id=self.root_session_id,
                    begin=self.begin,
                    close_on_answer=self.close_on_answer,
                    extra_tools=self.extra_tools,
                    check_window=self._checks_window(),
                    context_window=self.spec.context_window,
                ),
                local=self.llm_local,
                result_type=LlmCallOutput,
                start_to_close_timeout=params.llm_start_to_close,
                heartbeat_timeout=params.llm_heartbeat,
                retry_policy=params.llm_retry,
            )
            self.usage = self.usage + out.usage
            self._answered_by(out)
            if out.content and out.content.strip():
                self.latest = out.content
            self.begin = None  # built: the next calls only read it
            self.branch_closed = self.branch_closed or out.branch_closed
            if out.over_window is not None:
                # Not sent, nothing paid: fold the history, then ask again for this turn.
                self.llm_calls -= 1
                await self._compact(REASON_THRESHOLD, out.over_window)
                continue
            if not out.tool_calls:
                if out.content and out.content.strip():
                    self.turn += 1
                    return out.content
                raise LoopFailed(
                    FailureType.EMPTY_ANSWER, "the model ended its turn without an answer"
                )
            self.phase = "running tools: " + ", ".join(ref.name for ref in out.tool_calls)
            notes = await asyncio.gather(
                *(self._run_call(out.message_id, i, ref) for i, ref in enumerate(out.tool_calls))
            )
            kept = tuple(n for n in notes if n)
            if kept:
                # After every answer of the turn: a system message must not split a
                # tool-call block, or the next request is invalid for a strict provider.
                await store_op(
                    ACT_APPEND_NOTES,
                    AppendNotesInput(
                        session_id=self.session_id, scope=self.scope, turn=self.turn, notes=kept
                    ),
                )
            self.turn += 1
        raise LoopFailed(
            FailureType.MAX_TURNS_REACHED,
            f"no final answer after {max_turns} turns (max_turns={max_turns})",
        )

    def _answered_by(self, out: LlmCallOutput) -> None:
        """Count an answer to the model that gave it (a fallback's too); a call that was
        not sent (nothing answered, nothing paid) counts for none."""
        if out.model and (out.tool_calls or out.content is not None or out.usage != Usage()):
            share = ModelUsage(model=out.model, llm_calls=1, usage=out.usage)
            self.models = ModelUsage.merged(self.models, (share,))

    # ------------------------------------------------------------------ compaction

    def _checks_window(self) -> bool:
        """Whether this turn's call is checked against the compaction threshold: unless the
        history was already compacted for it. What follows a check is decided by
        the call's recorded result (``over_window``), which no run from before has."""
        return self._compacted_turn != self.turn

    def _refused_as_too_long(self, err: ActivityError) -> bool:
        cause = err.cause
        return (
            isinstance(cause, ApplicationError)
            and cause.type == FailureType.CONTEXT_WINDOW_EXCEEDED.value
            and self._refused_turn != self.turn
        )

    async def _compact(self, reason: str, check: WindowCheck | None) -> bool:
        """Fold the history before this turn's call (``compact_history``, the cheap model
        writing the summary); whether anything was folded. A compaction that fails is
        logged, and the call goes on without it."""
        self._compacted_turn = self.turn
        self.phase = "compacting the history"
        params = policies.current_parameters()
        what = (
            f"~{check.estimated_tokens:,} of {check.context_window:,} tokens"
            if check is not None
            else "refused by the provider"
        )
        try:
            out: CompactOutput = await workflow.execute_activity(
                ACT_COMPACT_HISTORY,
                CompactInput(
                    session_id=self.session_id,
                    scope=self.scope,
                    turn=self.turn,
                    index=0 if reason == REASON_THRESHOLD else 1,
                    reason=reason,
                    agent=self.spec.name,
                    model=self.spec.model,
                    context_window=self.spec.context_window,
                    system_prompt=self.system_prompt,
                    tools=self.tools,
                    extra_tools=self.extra_tools,
                    budget=self.budget,
                    tenant=self.tenant,
                    root_session_id=self.root_session_id,
                ),
                result_type=CompactOutput,
                start_to_close_timeout=params.llm_start_to_close,
                heartbeat_timeout=params.llm_heartbeat,
                retry_policy=params.llm_retry,
                summary=f"compact the history of {self.spec.name} ({what})",
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise
            workflow.logger.warning("compaction of %s failed: %s", self.session_id, why(err))
            return False
        finally:
            self.phase = "thinking"
        self.usage = self.usage + out.usage
        if out.compacted:
            self.compactions.append(out)
        return out.compacted

    async def _run_call(self, message_id: str, index: int, ref: ToolCallRef) -> str | None:
        """Carry out one tool call, once approved if it needs to be; returns a note for
        the session, if any."""
        policy = effective_policy(self.approval, self.spec.approval)
        # A policy names the tool, or it is one that asks by default (run_command, unless
        # the agent switched that off).
        asks = needs_approval(ref.name, policy) or (
            ref.name in self.tools and requires_approval(ref.name, self.spec.run_command)
        )
        if self.approvals is None or not asks:
            return await self._dispatch(message_id, index, ref, None)
        self.phase = "waiting for approval"
        decision = await self.approvals.ask(
            session_id=self.session_id,
            message_id=message_id,
            scope=self.scope,
            turn=self.turn,
            index=index,
            agent=self.spec.name,
            policy=policy,
            editable=self._editable(ref.name),
        )
        self.phase = "running tools"
        if not decision.approved:
            return None  # the rejection is the tool result; the model carries on
        note = await self._dispatch(message_id, index, ref, decision.arguments)
        if decision.arguments is None:
            return note
        return "\n".join(n for n in (edited_note(decision), note) if n)

    def _kind(self, name: str) -> ToolKind:
        """How a call to ``name`` is carried out (``domain.tool_contracts.tool_kind``)."""
        return tool_kind(name, allowed=self.tools, custom=self.custom_tools, mcp=self.mcp_tools)

    def _editable(self, name: str) -> bool:
        """Whether a person approving the call may replace its arguments: its activity
        reads the arguments it is handed, and it is not an orchestration tool (whose
        arguments are never replaced, even in a call that will be refused)."""
        return self._kind(name) in EDITABLE_TOOL_KINDS and name not in ORCHESTRATION_TOOL_NAMES

    async def _dispatch(
        self, message_id: str, index: int, ref: ToolCallRef, arguments: str | None
    ) -> str | None:
        """Carry out one tool call through the handler of its kind (``TOOL_HANDLERS``);
        returns a note for the session, if any."""
        call = _Call(message_id=message_id, index=index, ref=ref, arguments=arguments)
        return await TOOL_HANDLERS[self._kind(ref.name)](self, call)

    def _at(self, call: _Call) -> ToolCallAt:
        return ToolCallAt(
            session_id=self.session_id,
            message_id=call.message_id,
            call_index=call.index,
            scope=self.scope,
            turn=self.turn,
        )

    async def _custom_tool(self, call: _Call) -> str | None:
        """``ToolKind.CUSTOM``: the workflow's own tool, which writes its result itself."""
        return await self.custom_tools[call.ref.name](
            call.message_id, self.turn, call.index, call.ref
        )

    async def _delegate(self, call: _Call) -> str | None:
        """``ToolKind.DELEGATE``: one LLM activity answers in this conversation."""
        params = policies.current_parameters()
        delegated: DelegateOutput = await workflow.execute_activity(
            ACT_DELEGATE,
            DelegateInput(
                session_id=self.session_id,
                message_id=call.message_id,
                call_index=call.index,
                scope=self.scope,
                turn=self.turn,
                budget=self.budget,
                tenant=self.tenant,
                root_session_id=self.root_session_id,
            ),
            result_type=DelegateOutput,
            start_to_close_timeout=params.llm_start_to_close,
            heartbeat_timeout=params.llm_heartbeat,
            retry_policy=params.llm_retry,
        )
        self.usage = self.usage + delegated.usage
        return None

    async def _sub_agent(self, call: _Call) -> str | None:
        """``ToolKind.SUB_AGENT``: the parent's tree waits for the sub-agent, and carries
        on from its last commit."""
        async with self._on_tree():
            return await self._spawn(call.message_id, call.index, call.ref)

    async def _command(self, call: _Call) -> str | None:
        """``ToolKind.COMMAND``: ``run_command`` on the tree, one call at a time."""
        at = self._at(call)
        async with self._on_tree():
            await self._run_command(at, call.arguments)
        return None

    async def _mcp_tool(self, call: _Call) -> str | None:
        """``ToolKind.MCP``: a tool of one of the agent's MCP servers."""
        await self._call_mcp(self._at(call), *self.mcp_tools[call.ref.name], call.arguments)
        return None

    async def _builtin(self, call: _Call) -> str | None:
        """``ToolKind.BUILTIN``: ``run_tool`` on the tree (the file tools), which refuses
        a name the agent may not call as the call's answer."""
        async with self._on_tree() as tree:
            inp = ToolCallInput(
                session_id=self.session_id,
                message_id=call.message_id,
                call_index=call.index,
                scope=self.scope,
                turn=self.turn,
                allowed_tools=self.tools,
                arguments=call.arguments,
                workspace=tree,
                at_s=self._at_s(),
            )
            out = await self._run_tool(inp)
            self._took(out.commit)
        return None

    async def _run_tool(self, inp: ToolCallInput) -> ToolCallOutput:
        """``run_tool``: a workspace tool call."""
        params = policies.current_parameters()
        # A local activity: workspace tools take milliseconds and are idempotent (atomic
        # writes, reads), so they run inside the workflow task that received the model's
        # answer instead of costing a server round trip and a workflow task of their own.
        # Temporal Web still shows each call, as a local-activity marker with its input
        # and result.
        out: ToolCallOutput = await workflow.execute_local_activity(
            ACT_RUN_TOOL,
            inp,
            result_type=ToolCallOutput,
            start_to_close_timeout=params.tool_start_to_close,
            retry_policy=params.tool_retry,
            local_retry_threshold=policies.LOCAL_RETRY_THRESHOLD,
        )
        return out

    def _approval_unavailable(self, name: str) -> bool:
        """Whether ``name`` needs a person's approval by default that nobody can give here
        (a loop without an approval desk); elsewhere ``_run_call`` has already waited for
        the decision before the command runs."""
        return self.approvals is None and requires_approval(name, self.spec.run_command)

    async def _run_command(self, at: ToolCallAt, arguments: str | None = None) -> None:
        """The guarded shell: a regular activity, not retried once started unless the
        agent declared its commands idempotent; a lost run is answered as such."""
        policy = self.spec.run_command or CommandPolicy()
        if self._approval_unavailable(RUN_COMMAND_TOOL):
            await self._answer_error(
                at,
                "run_command needs a person's approval for this agent and no approval can be "
                "asked for here; the agents file can set "
                f"[agents.{self.spec.name}.run_command] approval_required = false",
            )
            return
        try:
            out: ToolCallOutput = await workflow.execute_activity(
                ACT_RUN_COMMAND,
                CommandCallInput(
                    call=at,
                    policy=policy,
                    arguments=arguments,
                    workspace=self.workspace,
                    at_s=self._at_s(),
                ),
                result_type=ToolCallOutput,
                start_to_close_timeout=policies.command_start_to_close(policy.timeout_s),
                heartbeat_timeout=policies.SHORT_HEARTBEAT,
                retry_policy=policies.command_retry(policy.idempotent),
            )
            self._took(out.commit)
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise
            await self._answer_error(
                at,
                f"the command's run was lost ({why(err)}); it may have run in part: check "
                "the workspace before running it again",
            )

    async def _call_mcp(
        self,
        at: ToolCallAt,
        server: McpServerTools,
        tool: McpToolSpec,
        arguments: str | None = None,
    ) -> None:
        """One MCP tool call: an activity with the server's own timeout and attempts."""
        try:
            await workflow.execute_activity(
                ACT_CALL_MCP_TOOL,
                McpCallInput(call=at, server=server.server, tool=tool.name, arguments=arguments),
                result_type=ToolCallOutput,
                start_to_close_timeout=policies.mcp_call_start_to_close(server.timeout_s),
                heartbeat_timeout=policies.SHORT_HEARTBEAT,
                retry_policy=policies.mcp_call_retry(server.max_attempts),
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise
            await self._answer_error(
                at,
                f"MCP server {server.server!r} failed on {tool.name} after "
                f"{server.max_attempts} attempt(s): {why(err)}",
            )

    async def _answer_error(self, at: ToolCallAt, text: str) -> None:
        await workflow.execute_local_activity(
            ACT_ANSWER_TOOL_ERROR,
            ToolErrorInput(call=at, text=text),
            result_type=ToolCallOutput,
            start_to_close_timeout=policies.TOOL_ERROR_START_TO_CLOSE,
            local_retry_threshold=policies.LOCAL_RETRY_THRESHOLD,
        )

    async def _spawn(self, message_id: str, index: int, ref: ToolCallRef) -> str | None:
        """A nested SubtaskWorkflow in its own child session; its summary is the result.

        Started by its type name, not its class: the loop is part of SubtaskWorkflow, and
        importing that module from here would make the two import each other.
        """
        turn = self.turn
        prep: PrepareSpawnOutput = await store_op(
            ACT_PREPARE_SPAWN,
            PrepareSpawnInput(
                session_id=self.session_id,
                message_id=message_id,
                call_index=index,
                scope=self.scope,
                turn=turn,
                depth=self.depth,
                root_session_id=self.root_session_id,
                known_agents=self.catalog.names(),
            ),
            result_type=PrepareSpawnOutput,
        )
        if prep.refusal is not None or prep.child_session_id is None:
            return None  # the refusal is already the tool result; the agent carries on
        assert prep.agent is not None and prep.task is not None
        child_id = spawned_subtask_id(prep.agent, turn, index)
        tree = self.workspace
        child = SubtaskInput(
            plan_run_id=self.child_scope or self.scope,
            subtask=Subtask(id=child_id, description=prep.task, agent=prep.agent),
            base_session_id=prep.child_session_id,
            budget=self.budget,
            tenant=self.tenant,
            agents=self.catalog.agents,
            root_session_id=self.root_session_id,
            depth=self.depth + 1,
            llm_local=self.llm_local,
            approval=self.approval,
            mcp_tools=self.mcp_servers,
            workspace=subagent_start(tree, child_id, prep.agent) if tree is not None else None,
            report_to=self.approvals.report_to if self.approvals is not None else "",
        )
        child_workflow_id = spawned_workflow_id(workflow.info().workflow_id, child_id)
        if self.approvals is not None:  # where `dplan approvals` looks for its calls
            self.approvals.children.append(child_workflow_id)
        try:
            outcome = await workflow.execute_child_workflow(
                SUBTASK_WORKFLOW,
                child,
                result_type=SubtaskOutcome,
                id=child_workflow_id,
                static_summary=f"sub-agent {prep.agent}: {prep.task[:100]}",
            )
            ok, text, usage = True, outcome.result, outcome.usage
            self.models = ModelUsage.merged(self.models, outcome.models)
            self._took(outcome.commit)  # a failed sub-agent's commits are not taken
        except ChildWorkflowError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                raise asyncio.CancelledError() from err
            usage = Usage()
            if isinstance(cause, ApplicationError):
                text = f"{cause.type}: {cause.message}" if cause.type else cause.message
                details = subtask_failure_details(cause)
                if details is not None:
                    usage = details.usage
                    self.models = ModelUsage.merged(self.models, details.models)
            else:
                text = str(cause or err)
            ok = False
        finally:
            if self.approvals is not None:
                self.approvals.children.remove(child_workflow_id)
        self.usage = self.usage + usage
        await store_op(
            ACT_FINISH_SPAWN,
            FinishSpawnInput(
                session_id=self.session_id,
                scope=self.scope,
                turn=turn,
                call_index=index,
                tool_call_id=ref.id,
                child_session_id=prep.child_session_id,
                ok=ok,
                text=text,
            ),
        )
        short = short_session_id(prep.child_session_id)
        return f"[sub-agent {short} {'result' if ok else 'error'}] {text}"


ToolHandler = Callable[[AgentLoop, _Call], Awaitable[str | None]]

TOOL_HANDLERS: Final[Mapping[ToolKind, ToolHandler]] = MappingProxyType(
    {
        ToolKind.CUSTOM: AgentLoop._custom_tool,
        ToolKind.DELEGATE: AgentLoop._delegate,
        ToolKind.SUB_AGENT: AgentLoop._sub_agent,
        ToolKind.COMMAND: AgentLoop._command,
        ToolKind.MCP: AgentLoop._mcp_tool,
        ToolKind.BUILTIN: AgentLoop._builtin,
    }
)
"""The one table of tool kinds: each ``ToolKind`` and the method that carries its calls
out; ``_dispatch`` looks every call up here."""
