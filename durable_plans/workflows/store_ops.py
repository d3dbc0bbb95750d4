"""Session-store operations as local activities.

They are short, touch only the session store and are idempotent (deterministic ids), so
they run inside the workflow task that asks for them instead of taking a round trip
through the server's task queue each: a subtask needs half the workflow tasks it would
otherwise, which is most of the orchestration overhead per dependency hop. A worker that
dies during one simply runs it again on the next attempt. Workspace tools run the same way
(``workflows.agent_loop``); LLM calls and delegations stay regular activities: they are
slow, must heartbeat, and are what Temporal Web should show as they run.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from durable_plans.workflows import policies


async def store_op(
    activity: str, arg: Any, *, result_type: type | None = None, summary: str | None = None
) -> Any:
    """Run one session-store operation as a local activity (``summary``: what Temporal Web
    shows of it). Every store operation of every workflow goes through here, so they all
    share one timeout and one retry policy (``policies.STORE_OP_*``)."""
    return await workflow.execute_local_activity(
        activity,
        arg,
        result_type=result_type,
        start_to_close_timeout=policies.STORE_OP_TIMEOUT,
        retry_policy=policies.STORE_OP_RETRY,
        local_retry_threshold=policies.LOCAL_RETRY_THRESHOLD,
        summary=summary,
    )
