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

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

from durable_plans.workflows import policies

STORE_OP_TIMEOUT = timedelta(seconds=30)
STORE_OP_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=20,
)


async def store_op(activity: str, arg: Any, *, result_type: type | None = None) -> Any:
    return await workflow.execute_local_activity(
        activity,
        arg,
        result_type=result_type,
        start_to_close_timeout=STORE_OP_TIMEOUT,
        retry_policy=STORE_OP_RETRY,
        local_retry_threshold=policies.LOCAL_RETRY_THRESHOLD,
    )
