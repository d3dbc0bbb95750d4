"""A subtask's conversation, read from the session store the workers write.

The page reads it through ``Client.messages``, which opens the store as the CLI opens it
(``DPLAN_SESSION_STORE``), lazily and once: a UI that cannot reach the store still draws
plans, and the panel says why the conversation is missing. Every text leaves here with
its secrets scrubbed (``domain/secrets.py``), whatever the workers already did.

A finished subtask names its session in the report; a running one does not yet, so its
branch is derived the way the plan names it (``domain/ids.py``: base session, plan run,
attempt).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from durable_plans.client import Client, DurablePlansError
from durable_plans.domain.ids import (
    attempt_key,
    branch_session_id,
    merged_result_id,
    plan_run_id,
    plan_session_id,
)
from durable_plans.domain.models import Message, Plan, SubtaskResult
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.session_store import SessionNotFound, SessionStoreError
from durable_plans.session_store.factory import describe_store_target

__all__ = ["Conversations", "merged_results", "message_json", "running_session_id"]

MAX_TEXT_CHARS = 20_000


def _text(value: str | None) -> str | None:
    if value is None:
        return None
    text = scrub_secrets(value)
    if len(text) > MAX_TEXT_CHARS:
        return f"{text[:MAX_TEXT_CHARS]}\n… ({len(text) - MAX_TEXT_CHARS} more characters)"
    return text


def message_json(message: Message, from_subtask: str | None = None) -> dict[str, Any]:
    """A message as the page shows it; ``from_subtask`` names the subtask whose result it
    is, for a result merged into the plan's conversation before this subtask began."""
    return {
        "id": message.id,
        "from_subtask": from_subtask,
        "role": message.role,
        "content": _text(message.content),
        "tool_calls": [
            {
                "id": call.id,
                "name": call.function.name,
                "arguments": _text(call.function.arguments),
            }
            for call in message.tool_calls or ()
        ],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
        "usage": (
            {
                "prompt_tokens": message.usage.prompt_tokens,
                "completion_tokens": message.usage.completion_tokens,
                "cost_usd": message.usage.cost_usd,
            }
            if message.usage is not None
            else None
        ),
    }


def merged_results(plan: Plan, first_run_ids: Iterable[str]) -> dict[str, str]:
    """The ids the plan's subtasks' results have once merged into its conversation, by
    run (each run of a plan names its merges after its first execution), to the subtask:
    an earlier subtask's result shows in a later one's conversation as a plain assistant
    message, and this says whose it is."""
    out: dict[str, str] = {}
    for first_run in dict.fromkeys(first_run_ids):
        run_id = plan_run_id(plan.id, first_run)
        for subtask in plan.subtasks:
            out[merged_result_id(run_id, subtask.id)] = subtask.id
    return out


def running_session_id(plan: Plan, first_run_id: str, result: SubtaskResult) -> str:
    """The branch a subtask works on before the report names it."""
    return branch_session_id(
        plan_session_id(plan.id, plan.session_id),
        plan_run_id(plan.id, first_run_id),
        attempt_key(result.id, result.retries),
    )


class Conversations:
    """Subtasks' conversations, read through ``Client.messages`` (the workers' session
    store, opened by the client on first use and closed with ``close``)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def messages(
        self, session_id: str, sources: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """``{"session_id", "messages"}`` or ``{"session_id", "unavailable": why}``;
        ``sources`` maps merged results' ids to their subtasks (``merged_results``)."""
        sources = sources or {}
        try:
            messages = await self._client.messages(session_id)
        except SessionNotFound:
            target = self._client.settings.session_store
            return {
                "session_id": session_id,
                "unavailable": f"no conversation {session_id!r} in the session store "
                f"({describe_store_target(target)}) yet",
            }
        except (SessionStoreError, DurablePlansError, OSError) as err:
            return {"session_id": session_id, "unavailable": f"session store: {err}"}
        return {
            "session_id": session_id,
            "messages": [message_json(m, sources.get(m.id)) for m in messages],
        }

    async def close(self) -> None:
        await self._client.close()
