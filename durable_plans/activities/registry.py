"""One place that lists every activity a worker registers, bound to its store and settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durable_plans.activities.approval_args import ApprovalActivities
from durable_plans.activities.chat_branch import ChatWorkspaceActivities
from durable_plans.activities.checks import CheckActivities
from durable_plans.activities.commands import CommandActivities
from durable_plans.activities.compaction import CompactionActivities
from durable_plans.activities.conversation import ConversationActivities
from durable_plans.activities.delegation import DelegationActivities
from durable_plans.activities.git_workspace import GitWorkspace
from durable_plans.activities.git_workspace_activities import WorkspaceActivities
from durable_plans.activities.llm import LlmActivities
from durable_plans.activities.mcp import McpActivities
from durable_plans.activities.plan_data import PlanDataActivities
from durable_plans.activities.plan_revisions import PlanRevisionActivities
from durable_plans.activities.sessions import SessionActivities
from durable_plans.activities.subagents import SubagentActivities
from durable_plans.activities.tenant_caps import TenantActivities
from durable_plans.activities.tool_calls import ToolErrorActivities
from durable_plans.activities.tools import ToolActivities
from durable_plans.activities.webhook_delivery import NotifyActivities
from durable_plans.domain.agents_loader import load_catalog
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings


class PlanActivities:
    def __init__(self, store: SessionStore, settings: Settings) -> None:
        # One git workspace for every activity that touches files: its trees' locks and
        # the repository it opened are shared.
        git = GitWorkspace.from_settings(settings)
        self.sessions = SessionActivities(store)
        self.plan_data = PlanDataActivities(store)
        self.revisions = PlanRevisionActivities(store)
        self.llm = LlmActivities(store, settings)
        self.tenants = TenantActivities(self.llm.tenants)
        self.tools = ToolActivities(store, settings, git)
        self.workspace = WorkspaceActivities(git)
        self.chat_workspace = ChatWorkspaceActivities(git)
        self.delegation = DelegationActivities(store, settings, self.llm)
        self.compaction = CompactionActivities(store, settings, self.llm)
        self.subagents = SubagentActivities(store)
        self.conversation = ConversationActivities(store)
        self.notify = NotifyActivities()
        self.approvals = ApprovalActivities(store)
        self.commands = CommandActivities(store, settings, git)
        self.checks = CheckActivities(store, settings, git)
        self.tool_errors = ToolErrorActivities(store)
        # MCP servers come from the worker's own agents file: a workflow names a server,
        # the worker decides what that starts and which secrets it gets.
        self.mcp = McpActivities(store, load_catalog(settings.agents_file).mcp_servers, settings)

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.sessions.end_subtask,
            self.sessions.merge_results,
            self.sessions.branch_spend,
            self.plan_data.plan_data_unpack,
            self.plan_data.plan_data_check,
            self.plan_data.plan_data_save_report,
            self.revisions.revise_plan_call,
            self.llm.call_llm,
            self.tenants.tenant_room,
            self.tools.run_tool,
            self.delegation.delegate,
            self.compaction.compact_history,
            self.subagents.prepare_spawn,
            self.subagents.finish_spawn,
            self.subagents.append_notes,
            self.conversation.session_append,
            self.conversation.switch_agent_context,
            self.conversation.check_plan_call,
            self.conversation.check_switch_call,
            self.conversation.answer_tool_call,
            self.conversation.read_history,
            self.conversation.undo_turn_messages,
            self.notify.deliver_webhook,
            self.approvals.describe_tool_call,
            self.approvals.answer_tool_call_with,
            self.commands.run_command,
            self.checks.run_check,
            self.checks.append_check_feedback,
            self.tool_errors.answer_tool_error,
            self.mcp.list_mcp_tools,
            self.mcp.call_mcp_tool,
            self.workspace.workspace_open,
            self.workspace.workspace_merge,
            self.workspace.workspace_publish,
            self.chat_workspace.chat_publish,
        ]

    async def aclose(self) -> None:
        """Release what the activities hold across calls (the webhook and LLM HTTP clients,
        the MCP servers they started); the plugin calls it when the worker stops."""
        await self.notify.aclose()
        await self.llm.aclose()
        await self.mcp.aclose()
