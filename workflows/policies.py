"""Timeouts and retry policies, in one place so every call site agrees.

Temporal owns every retry (litellm's own are off), so these numbers bound how long a plan
keeps trying and how fast a dead worker is noticed (heartbeat timeout).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# Errors classified non-retryable by activities/llm_errors.py; listed here too so that a
# wrongly flagged error of these types is still never retried.
NON_RETRYABLE_LLM_ERRORS = [
    "BadRequest",
    "ContextWindowExceeded",
    "ContentPolicy",
    "Authentication",
    "PermissionDenied",
    "NotFound",
    "BudgetExceeded",
    "UnprocessableEntity",
]

LLM_START_TO_CLOSE = timedelta(minutes=3)
# Long enough that a busy worker's event loop (hundreds of subtasks on two cores) does
# not miss it and get a live call retried; short enough that a dead worker's calls move
# to another worker within seconds.
LLM_HEARTBEAT = timedelta(seconds=15)
LLM_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=6,
    non_retryable_error_types=NON_RETRYABLE_LLM_ERRORS,
)

# Workspace tools run as local activities: no heartbeat, the SDK keeps the workflow task
# alive while one runs; a dead worker's tool call runs again on the next worker.
TOOL_START_TO_CLOSE = timedelta(minutes=2)
# Runs recorded before that ran tools as regular activities, heartbeating every second;
# a silent one was retried elsewhere after this. Kept so those histories still replay.
SHORT_HEARTBEAT = timedelta(seconds=5)
TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
)

SESSION_START_TO_CLOSE = timedelta(minutes=2)
SESSION_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=10,
)
