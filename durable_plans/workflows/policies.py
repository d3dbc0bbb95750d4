"""Timeouts and retry policies, in one place so every call site agrees.

Temporal owns every retry (litellm's own are off), so these numbers bound how long a plan
keeps trying and how fast a dead worker is noticed (heartbeat timeout).

The LLM and tool numbers are an ``ActivityParameters`` object, not constants: the worker
builds one from its settings (``DPLAN_LLM_*``, ``DPLAN_TOOL_*``) and hands it to its
workflows through the plugin (``durable_plans.plugin``) as an extern function, so two
workers in one process may run with different numbers. Workflow code reads it with
``current_parameters()``. Timeouts and attempts are not part of what replay compares, so
changing them never breaks a running workflow.

This module is pure (no I/O, no state) and passed through the workflow sandbox: the
``ActivityParameters`` class inside a workflow is the very class the worker built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from durable_plans.domain.failures import NON_RETRYABLE_LLM_FAILURES, FailureType

__all__ = [
    "CHECK_GRACE",
    "COMMAND_GRACE",
    "DEFAULT_PARAMETERS",
    "LLM_BACKOFF_COEFFICIENT",
    "LOCAL_RETRY_THRESHOLD",
    "MCP_CALL_GRACE",
    "MCP_LIST_START_TO_CLOSE",
    "NON_RETRYABLE_LLM_ERRORS",
    "NON_RETRYABLE_NOTIFY_ERRORS",
    "NON_RETRYABLE_WORKSPACE_ERRORS",
    "NOTIFY_BACKOFF_COEFFICIENT",
    "ONCE",
    "PARAMETERS_EXTERN",
    "RATE_LIMIT_MIN_DELAY",
    "REVISE_RETRY",
    "REVISE_TIMEOUT",
    "SHORT_HEARTBEAT",
    "STORE_OP_RETRY",
    "STORE_OP_TIMEOUT",
    "TENANT_ROOM_RETRY",
    "TENANT_ROOM_TIMEOUT",
    "TOOL_ERROR_START_TO_CLOSE",
    "WORKER_FACTS_TIMEOUT",
    "WORKSPACE_START_TO_CLOSE",
    "ActivityParameters",
    "check_retry",
    "check_start_to_close",
    "command_retry",
    "command_start_to_close",
    "current_parameters",
    "mcp_call_retry",
    "mcp_call_start_to_close",
    "mcp_list_retry",
    "workspace_retry",
]

# Errors classified non-retryable by activities/llm_errors.py; listed here too so that a
# wrongly flagged error of these types is still never retried (the list lives with the
# failure types, in domain/failures.py; plain strings here, as the retry policy holds them).
NON_RETRYABLE_LLM_ERRORS = tuple(t.value for t in NON_RETRYABLE_LLM_FAILURES)

LLM_BACKOFF_COEFFICIENT = 2.0
# The shortest wait after a rate-limit refusal, whatever the provider's Retry-After says.
RATE_LIMIT_MIN_DELAY = timedelta(seconds=1)
NOTIFY_BACKOFF_COEFFICIENT = 2.0

# A webhook the receiver refused, or the worker cannot sign, will not fare better later.
NON_RETRYABLE_NOTIFY_ERRORS = (
    FailureType.WEBHOOK_REJECTED.value,
    FailureType.WEBHOOK_MISCONFIGURED.value,
)

# A merge whose dependencies changed the same lines conflicts again on every attempt, and
# a repository or remote the activity found unusable (a missing base, a refused push)
# needs a person; anything else (a remote that did not answer) is worth retrying.
NON_RETRYABLE_WORKSPACE_ERRORS = (
    FailureType.WORKSPACE_CONFLICT.value,
    FailureType.WORKSPACE_UNAVAILABLE.value,
)

# One attempt of a workspace activity (open, merge, publish): local git work takes
# milliseconds, but a remote may have to be fetched from or pushed to first. They
# heartbeat while they work (``SHORT_HEARTBEAT``), so an attempt on a worker that died
# runs again elsewhere within seconds, not when this bound runs out.
WORKSPACE_START_TO_CLOSE = timedelta(minutes=5)

# The heartbeat timeout of short regular activities that heartbeat every second (workspace
# open, merge and publish, checks, MCP listing): a silent one is retried elsewhere after it.
SHORT_HEARTBEAT = timedelta(seconds=5)

# The ``worker_facts`` local activity (``domain.contracts.WorkerFacts``): it reads two
# fields of the worker's own state, so one attempt, and a worker that cannot answer is
# answered by the defaults (recorded as the failed attempt) rather than retried.
WORKER_FACTS_TIMEOUT = timedelta(seconds=10)
ONCE = RetryPolicy(maximum_attempts=1)

# Every local activity passes this as its ``local_retry_threshold``: a retry whose backoff
# exceeds it waits on a workflow timer and is scheduled anew, instead of being retried
# inside the worker (the SDK's default for backoffs up to a minute). A retry inside the
# worker keeps the previous attempt's start-to-close timer running in temporalio 1.35's
# core (``TimeoutBag::mark_started`` replaces its handle without aborting it): that timer
# times out the *next* attempt at the previous attempt's start plus start-to-close,
# cancelling it mid-call and discarding its result, and once the worker has shut down it
# panics (``receive half not dropped``). A timer-backed retry starts each attempt with
# timers of its own, at the price of a workflow task and a few events per retry
# (docs/known-issues.md). A microsecond, not zero: the SDK reads zero as unset.
LOCAL_RETRY_THRESHOLD = timedelta(microseconds=1)

# One session-store operation (``workflows/store_ops.py``, and the approval desk's record of
# a decision): a local activity that reads or writes a few rows. Thirty seconds is far
# above what one takes; a store that does not answer within it is retried.
STORE_OP_TIMEOUT = timedelta(seconds=30)

# Session-store operations are idempotent (deterministic ids), so they are retried often
# and fast: a locked or briefly unreachable store is the usual cause, and a subtask waits
# on each one. Twenty attempts, backing off from 200 ms to 10 s, ride out about two
# minutes of trouble before the workflow sees the failure. A constant: it holds no list.
STORE_OP_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=20,
)

# Writing a tool's refusal (``answer_tool_error``, a local activity): one row in the store.
# An agent's revise_plan call (``workflows/revise_tool.py``): an Update of its plan, which
# waits for the plan's next workflow task (seconds on a loaded worker). Retried: its key
# makes a second send return the first revision.
REVISE_TIMEOUT = timedelta(seconds=60)
REVISE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_attempts=5
)

# A subtask paused on its tenant's cap asks whether the cap has room again (one read of
# the session store); a store that is down is asked again, never given up on: the pause
# stays a pause, which an operator can still end with resume or skip.
TENANT_ROOM_TIMEOUT = timedelta(seconds=30)
TENANT_ROOM_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=0,
)

TOOL_ERROR_START_TO_CLOSE = timedelta(seconds=30)

# Listing the MCP servers' tools when a plan starts: each server is started (a process or
# a connection) and asked for its tools, which may take a while the first time.
MCP_LIST_START_TO_CLOSE = timedelta(minutes=2)

# What ``run_command``'s activity may take beyond the command's own ``timeout_s``: the
# sandbox starting, the workspace checked out and the result committed and written.
COMMAND_GRACE = timedelta(seconds=30)

# What an MCP tool call's activity may take beyond the server's per-call ``timeout_s``:
# starting or connecting to the server.
MCP_CALL_GRACE = timedelta(seconds=30)

# What a check's activity may take beyond its command's ``timeout_s``: checking out the
# workspace's head and starting the sandbox, which may pull an image the first time.
CHECK_GRACE = timedelta(seconds=120)

# The name under which a worker exposes its parameters to its workflows.
PARAMETERS_EXTERN = "durable_plans.activity_parameters"


@dataclass(frozen=True)
class ActivityParameters:
    """Timeouts and attempts of the activities that cost time or money: LLM calls
    (``call_llm`` and ``delegate_to_sub_agent``) and workspace tools (``run_tool``).

    Frozen and free of I/O, so a workflow may hold it; built by ``Settings`` from the
    environment (see README's configuration table), defaults otherwise.
    """

    llm_start_to_close: timedelta = timedelta(minutes=3)
    """One LLM attempt, from start to result: the provider request (``DPLAN_LLM_TIMEOUT_S``)
    plus the session-store reads and writes around it."""

    llm_heartbeat: timedelta = timedelta(seconds=15)
    """Silence after which an LLM attempt counts as lost (its worker died) and runs again
    elsewhere. Long enough that a busy worker's event loop (hundreds of subtasks on two
    cores) does not miss it and get a live call retried; short enough that a dead worker's
    calls move to another worker within seconds."""

    llm_max_attempts: int = 6
    """Attempts of one LLM call on retryable errors other than rate limits (timeout, 5xx,
    connection), the first included; non-retryable errors (``NON_RETRYABLE_LLM_ERRORS``)
    stop at once. Counted by the activity, which knows which attempts were refused
    (``activities/llm_patience.py``); Temporal's own count is a backstop (``llm_retry``)."""

    llm_rate_limit_patience: timedelta = timedelta(minutes=10)
    """How long one LLM call waits out rate limits: the sum of the waits its refusals asked
    for (a provider's Retry-After, else ``rate_limit_delay``'s backoff). A refusal whose
    wait would pass it fails the call, saying how long it waited."""

    llm_initial_backoff: timedelta = timedelta(seconds=1)
    llm_max_backoff: timedelta = timedelta(seconds=30)

    tool_start_to_close: timedelta = timedelta(minutes=2)
    """One workspace tool attempt. Tools run as local activities: no heartbeat, the SDK
    keeps the workflow task alive while one runs; a dead worker's tool call runs again on
    the next worker."""

    tool_max_attempts: int = 5
    """Attempts of one tool call that raised (a tool's own error is a tool result, not a
    failure: it goes back to the model and is not retried)."""

    tool_initial_backoff: timedelta = timedelta(seconds=1)
    tool_max_backoff: timedelta = timedelta(seconds=10)

    notify_deliver_for: timedelta = timedelta(hours=6)
    """How long a plan-end webhook is retried while its receiver is down or failing
    (connection errors, 408, 429, 5xx): a receiver back within hours still hears of the plan,
    and the plan's workflow still ends. A plan's ``notify.deliver_for_s`` overrides it."""

    notify_attempt_timeout: timedelta = timedelta(seconds=30)
    """One delivery attempt (the POST has a shorter timeout of its own, so a slow receiver
    is reported as such rather than as a lost activity)."""

    notify_initial_backoff: timedelta = timedelta(seconds=1)
    notify_max_backoff: timedelta = timedelta(minutes=5)

    llm_local: bool = False
    """A subtask's LLM calls may run as local activities (``workflows/llm_call.py``):
    ``DPLAN_LLM_LOCAL`` on, subtasks not streaming, and the worker running the LLM activity
    itself. Off where a worker did not say (a replayer, a workflows-only worker). A plan run
    asks its worker once and records the answer (``WorkerFacts.llm_local``), so unlike the
    numbers above, replay never reads it."""

    def __post_init__(self) -> None:
        problems = [
            f"{name} must be positive"
            for name in (
                "llm_start_to_close",
                "llm_heartbeat",
                "llm_rate_limit_patience",
                "tool_start_to_close",
                "notify_deliver_for",
                "notify_attempt_timeout",
                "notify_initial_backoff",
                "notify_max_backoff",
            )
            if getattr(self, name) <= timedelta(0)
        ]
        problems += [
            f"{name} must be at least 1"
            for name in ("llm_max_attempts", "tool_max_attempts")
            if getattr(self, name) < 1
        ]
        if problems:
            raise ValueError("invalid activity parameters: " + "; ".join(problems))

    @property
    def llm_retry(self) -> RetryPolicy:
        """Retries of an LLM activity (an agent's call, a delegation, a compaction's
        summary). The activity decides when to stop
        (``activities/llm_patience.py``): a rate limit once its call waited
        ``llm_rate_limit_patience``, anything else after ``llm_max_attempts`` attempts
        that were not refused, by failing non-retryable; a refusal names its own wait
        (``next_retry_delay``). Temporal's attempt count is a backstop the activity never
        reaches first: every refusal waits at least ``RATE_LIMIT_MIN_DELAY``, so a call
        is refused at most ``llm_max_refusals`` times before its patience runs out."""
        return RetryPolicy(
            initial_interval=self.llm_initial_backoff,
            backoff_coefficient=LLM_BACKOFF_COEFFICIENT,
            maximum_interval=self.llm_max_backoff,
            maximum_attempts=self.llm_max_attempts + self.llm_max_refusals + 1,
            non_retryable_error_types=list(NON_RETRYABLE_LLM_ERRORS),
        )

    @property
    def llm_max_refusals(self) -> int:
        """The most rate-limit refusals one call can meet within its patience."""
        return math.ceil(self.llm_rate_limit_patience / RATE_LIMIT_MIN_DELAY)

    def rate_limit_delay(self, retry_after_s: float | None, attempt: int) -> timedelta:
        """The wait after a refusal at ``attempt``: the provider's Retry-After, else the
        backoff Temporal would have used (initial doubling, capped); never shorter than
        ``RATE_LIMIT_MIN_DELAY``, so a Retry-After of 0 is not a busy loop."""
        if retry_after_s is not None:
            wanted = timedelta(seconds=retry_after_s)
        else:
            doubled = self.llm_initial_backoff * (LLM_BACKOFF_COEFFICIENT ** max(0, attempt - 1))
            wanted = min(doubled, self.llm_max_backoff)
        return max(wanted, RATE_LIMIT_MIN_DELAY)

    def delivery_window(self, deliver_for_s: float | None) -> timedelta:
        """How long a plan-end webhook may keep retrying: the plan's own
        ``notify.deliver_for_s`` when it sets one, else ``notify_deliver_for``."""
        if deliver_for_s is not None:
            return timedelta(seconds=deliver_for_s)
        return self.notify_deliver_for

    @property
    def notify_retry(self) -> RetryPolicy:
        """Unlimited attempts, bounded in time by the activity's schedule-to-close timeout
        (``notify_deliver_for``); a refusal or a missing secret is never retried."""
        return RetryPolicy(
            initial_interval=self.notify_initial_backoff,
            backoff_coefficient=NOTIFY_BACKOFF_COEFFICIENT,
            maximum_interval=self.notify_max_backoff,
            maximum_attempts=0,
            non_retryable_error_types=list(NON_RETRYABLE_NOTIFY_ERRORS),
        )

    @property
    def tool_retry(self) -> RetryPolicy:
        return RetryPolicy(
            initial_interval=self.tool_initial_backoff,
            maximum_interval=self.tool_max_backoff,
            maximum_attempts=self.tool_max_attempts,
        )


DEFAULT_PARAMETERS = ActivityParameters()


def current_parameters() -> ActivityParameters:
    """The parameters of the worker running this workflow; the defaults where none were
    given (a Replayer or worker assembled without the plugin's parameters).

    Only callable from workflow code. Read at each call, not cached: a workflow that moves
    to a worker with other settings uses that worker's numbers from then on.
    """
    extern = workflow.extern_functions().get(PARAMETERS_EXTERN)
    if extern is None:
        return DEFAULT_PARAMETERS
    parameters = extern()
    return parameters if isinstance(parameters, ActivityParameters) else DEFAULT_PARAMETERS


def workspace_retry() -> RetryPolicy:
    """The workspace activities' retries: a few, backing off, never for a conflict or an
    unusable repository. A function, not a constant: the policy holds a list, and a module
    passed through the sandbox must not share a mutable value between runs."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=6,
        non_retryable_error_types=list(NON_RETRYABLE_WORKSPACE_ERRORS),
    )


def check_retry() -> RetryPolicy:
    """A check's retries (``workflows/checks.py``): a failing command is a result, not an
    error; what is retried is a check that could not run at all (a worker lost mid-check
    runs it again on the next), never an unusable workspace or a missing sandbox."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=10),
        maximum_attempts=5,
        non_retryable_error_types=[
            FailureType.WORKSPACE_UNAVAILABLE.value,
            FailureType.SANDBOX_UNAVAILABLE.value,
        ],
    )


def check_start_to_close(timeout_s: float) -> timedelta:
    """One check's attempt: its command's own timeout plus ``CHECK_GRACE``."""
    return timedelta(seconds=timeout_s + CHECK_GRACE.total_seconds())


def command_start_to_close(timeout_s: float) -> timedelta:
    """One ``run_command`` attempt: the agent's command timeout plus ``COMMAND_GRACE``."""
    return timedelta(seconds=timeout_s + COMMAND_GRACE.total_seconds())


def command_retry(idempotent: bool) -> RetryPolicy:
    """``run_command``'s retries: a command may have run in part when its attempt was lost,
    so it runs once unless the agent declared its commands idempotent (then three
    attempts, a second apart). A lost run is answered to the model as such."""
    return RetryPolicy(
        maximum_attempts=3 if idempotent else 1, initial_interval=timedelta(seconds=1)
    )


def mcp_list_retry() -> RetryPolicy:
    """Listing MCP servers' tools: three attempts (a server slow to start gets another
    chance), none for a server configured wrongly (``McpConfig``), which a person must fix.
    A function: the policy holds a list (see ``workspace_retry``)."""
    return RetryPolicy(maximum_attempts=3, non_retryable_error_types=[FailureType.MCP_CONFIG.value])


def mcp_call_start_to_close(timeout_s: float) -> timedelta:
    """One MCP tool call's attempt: the server's per-call timeout plus ``MCP_CALL_GRACE``."""
    return timedelta(seconds=timeout_s + MCP_CALL_GRACE.total_seconds())


def mcp_call_retry(max_attempts: int) -> RetryPolicy:
    """An MCP tool call's retries: as many attempts as the server's configuration allows
    (``max_attempts``, the operator knows whether its tools may run twice), a second to ten
    apart, none for a server configured wrongly (``McpConfig``)."""
    return RetryPolicy(
        maximum_attempts=max_attempts,
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=10),
        non_retryable_error_types=[FailureType.MCP_CONFIG.value],
    )
