"""One LLM call from workflow code: a local activity or a regular one.

Either way the call is the ``call_llm`` activity, retried by Temporal with the same policy
(DESIGN.md: every LLM call is a retryable activity); only where it runs differs.

* **Local** (a plan's subtasks' calls when its worker said so, ``WorkerFacts.llm_local``,
  carried in ``SubtaskInput.llm_local``): the worker that
  runs the workflow task runs the call and records its result as a marker. No activity
  task is scheduled, matched, started and completed, and no workflow task is needed to
  hand the result back: a subtask's common path (call, tool call, call) is one workflow
  task, where it was three plus two activity tasks (bench/RESULTS.md, issue 25). The
  price: while a call runs, the worker keeps the workflow task alive by completing it
  every 80 % of the task timeout (three events each, so a call of a minute costs a few);
  a worker that dies mid-call is noticed when the workflow task times out (10 s, against
  the regular activity's 15 s heartbeat timeout) and the next worker runs the call again
  (the stored answer makes a second run of a finished call answer the same); signals,
  updates and queries reach the workflow between calls or at those task completions.
* **Regular** (conversations, subtasks whose calls stream): an
  activity task any worker may take, heartbeating, with its own events.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from durable_plans.domain.contracts import LlmCallOutput

from durable_plans.workflows import policies

__all__ = ["execute_llm_activity", "execute_local"]

T = TypeVar("T")


async def execute_llm_activity(
    activity: str,
    arg: object,
    *,
    local: bool,
    result_type: type[LlmCallOutput],
    start_to_close_timeout: timedelta,
    heartbeat_timeout: timedelta,
    retry_policy: RetryPolicy,
) -> LlmCallOutput:
    """``workflow.execute_activity``'s call, run as a local activity when ``local``
    (without the heartbeat timeout, which a local activity has no use for)."""
    if local:
        return await execute_local(
            activity,
            arg,
            result_type=result_type,
            start_to_close_timeout=start_to_close_timeout,
            retry_policy=retry_policy,
        )
    ran: LlmCallOutput = await workflow.execute_activity(
        activity,
        arg,
        result_type=result_type,
        start_to_close_timeout=start_to_close_timeout,
        heartbeat_timeout=heartbeat_timeout,
        retry_policy=retry_policy,
    )
    return ran


async def execute_local(
    activity: str,
    arg: object,
    *,
    result_type: type[T],
    start_to_close_timeout: timedelta,
    retry_policy: RetryPolicy,
    summary: str | None = None,
) -> T:
    """A local activity that fails as a regular one does: an ``ActivityError`` whose cause
    is the activity's error. The SDK raises a local activity's error itself (an
    ``ApplicationError``, a ``CancelledError``...), which the callers' ``except
    ActivityError`` would miss: a non-retryable LLM error would then fail the subtask
    without the spend its failure carries."""
    try:
        out: T = await workflow.execute_local_activity(
            activity,
            arg,
            result_type=result_type,
            start_to_close_timeout=start_to_close_timeout,
            retry_policy=retry_policy,
            local_retry_threshold=policies.LOCAL_RETRY_THRESHOLD,
            summary=summary,
        )
    except ActivityError:
        raise
    except FailureError as err:
        raise ActivityError(
            f"local activity {activity} failed",
            scheduled_event_id=0,
            started_event_id=0,
            identity="",
            activity_type=activity,
            activity_id="",
            retry_state=None,
        ) from err
    return out
