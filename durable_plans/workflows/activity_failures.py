"""What an activity that failed for good says, read the same way by every workflow.

An ``ActivityError`` wraps its cause, which may wrap another activity's (a local activity
retried on a timer, a nested failure); what a person or a model should read is the
innermost cause. The agent loop answers a lost command or MCP call with it, and the
workspace steps of plans and conversations fail with its type and message.
"""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError

from durable_plans.domain.failures import FailureType

__all__ = ["root_cause", "why", "workspace_failure"]


def root_cause(err: ActivityError) -> BaseException:
    """The innermost cause of ``err`` (``err`` itself when it has none)."""
    cause: BaseException | None = err.cause
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    return cause or err


def _text(cause: BaseException) -> str:
    return str(cause) or type(cause).__name__


def why(err: ActivityError) -> str:
    """One line saying why ``err`` failed, at most 300 characters (it goes to a model or
    a log line)."""
    return _text(root_cause(err))[:300]


def workspace_failure(err: ActivityError) -> tuple[str, str]:
    """The failure type and message of a workspace activity that failed for good: the
    activity's own when it raised one, else ``WorkspaceUnavailable`` and what went wrong
    (at most 500 characters)."""
    cause = root_cause(err)
    if isinstance(cause, ApplicationError):
        return cause.type or FailureType.WORKSPACE_UNAVAILABLE.value, cause.message
    return FailureType.WORKSPACE_UNAVAILABLE.value, _text(cause)[:500]
