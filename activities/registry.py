"""One place that lists every activity a worker registers, bound to its store and settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durable_plans.activities.conversation import ConversationActivities
from durable_plans.activities.delegation import DelegationActivities
from durable_plans.activities.llm import LlmActivities
from durable_plans.activities.notify import NotifyActivities
from durable_plans.activities.sessions import SessionActivities
from durable_plans.activities.subagents import SubagentActivities
from durable_plans.activities.tools import ToolActivities
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings


class PlanActivities:
    def __init__(self, store: SessionStore, settings: Settings) -> None:
        self.sessions = SessionActivities(store)
        self.llm = LlmActivities(store, settings)
        self.tools = ToolActivities(store, settings)
        self.delegation = DelegationActivities(store, settings)
        self.subagents = SubagentActivities(store)
        self.conversation = ConversationActivities(store)
        self.notify = NotifyActivities()

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.sessions.begin_subtask,
            self.sessions.end_subtask,
            self.sessions.merge_results,
            self.sessions.branch_spend,
            self.llm.call_llm,
            self.tools.run_tool,
            self.delegation.delegate,
            self.subagents.prepare_spawn,
            self.subagents.finish_spawn,
            self.subagents.append_notes,
            self.conversation.session_append,
            self.conversation.switch_agent_context,
            self.conversation.check_plan_call,
            self.conversation.check_switch_call,
            self.conversation.answer_tool_call,
            self.conversation.read_history,
            self.notify.deliver_webhook,
        ]

    async def aclose(self) -> None:
        """Release what the activities hold across calls (the webhook HTTP client); the
        plugin calls it when the worker stops."""
        await self.notify.aclose()
