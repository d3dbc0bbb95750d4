"""Failure types and their details: named, built and read back in one place.

A failure crosses process boundaries as a Temporal ``ApplicationError``: a ``type``
string, a message and optional ``details`` payloads. Those strings are persisted — in
recorded histories, in plan reports (``error.type``), in retry policies
(``non_retryable_error_types``) and on Temporal Web — so ``FailureType``'s values never
change; members may be added.

Details are written by one version and read by another (a client older or newer than the
worker, a history recorded long ago), so every reader here is tolerant: details that are
missing, of another shape or invalid read as "none", never as an exception, except where
a caller asks for the reason (``read_plan_report``).

Types are an open set: an activity that raises a plain Python exception fails with its
class name as the type (``ValueError``), so functions accept any string and the enum
names the ones this project raises and checks.

Pure apart from building ``ApplicationError`` values; imported by workflow code through
the sandbox passthrough (``durable_plans.domain``).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

from durable_plans._errors import MalformedDetails
from durable_plans.domain.contracts import SubtaskFailureDetails
from durable_plans.domain.models import PlanReport

__all__ = [
    "NON_RETRYABLE_LLM_FAILURES",
    "FailureType",
    "MalformedDetails",
    "activity_failure",
    "application_error",
    "describe_failure",
    "failure_type",
    "invalid_plan_error",
    "invalid_plan_problems",
    "plan_failed_error",
    "plan_report_of",
    "read_plan_report",
    "subtask_failed_error",
    "subtask_failure_details",
]

_M = TypeVar("_M", bound=BaseModel)


class FailureType(StrEnum):
    """Every failure type this project raises or checks, by its persisted name."""

    # A plan and its subtasks (PlanWorkflow, SubtaskWorkflow, the plan report).
    PLAN_FAILED = "PlanFailed"  # details: the PlanReport
    INVALID_PLAN = "InvalidPlan"  # details: the list of problems, one line each
    SCHEDULER_STALLED = "SchedulerStalled"
    DEPENDENCY_FAILED = "DependencyFailed"  # a skipped subtask's error in the report
    CANCELLED = "Cancelled"
    # The agent loop stopped without an answer (details: SubtaskFailureDetails).
    EMPTY_ANSWER = "EmptyAnswer"
    MAX_TURNS_REACHED = "MaxTurnsReached"
    # A check failed ``check_rounds`` rounds after the final answer, or the plan's own
    # check failed on the merged result (domain/checks.py; details: the subtask's
    # SubtaskFailureDetails with its check runs, or the PlanReport).
    CHECK_FAILED = "CheckFailed"
    # A command or check refused: no sandbox works where DPLAN_SANDBOX requires one.
    SANDBOX_UNAVAILABLE = "SandboxUnavailable"
    # A conversation (SessionWorkflow).
    INVALID_AGENT_SWITCH = "InvalidAgentSwitch"
    # A workflow input or an update argument that cannot be used (details: the problems,
    # one line each); a plan's own input fails with INVALID_PLAN instead.
    INVALID_INPUT = "InvalidInput"
    # A decision on a tool call that cannot be taken: unknown call, already decided, or
    # replacement arguments that are not a JSON object (workflows/approval_desk.py).
    APPROVAL_REFUSED = "ApprovalRefused"
    # The workspace (domain/workspace_refs.py): dependencies that changed the same lines
    # (details: WorkspaceConflictDetails), or a repository or remote that cannot be used.
    WORKSPACE_CONFLICT = "WorkspaceConflict"
    WORKSPACE_UNAVAILABLE = "WorkspaceUnavailable"
    # A big plan's data (input, report) in the session store is missing or altered
    # (activities/plan_data.py): not retryable, waiting will not bring the bytes back.
    PLAN_DATA_UNAVAILABLE = "PlanDataUnavailable"
    # MCP servers (activities/mcp.py): a server's configuration cannot be used (never
    # retried), or listing a plan's MCP tools failed, so the plan cannot start.
    MCP_CONFIG = "McpConfig"
    MCP_TOOLS_UNAVAILABLE = "McpToolsUnavailable"
    # LLM calls, as activities/llm_errors.py classifies them: never worth a retry...
    BAD_REQUEST = "BadRequest"
    CONTEXT_WINDOW_EXCEEDED = "ContextWindowExceeded"
    CONTENT_POLICY = "ContentPolicy"
    AUTHENTICATION = "Authentication"
    PERMISSION_DENIED = "PermissionDenied"
    NOT_FOUND = "NotFound"
    BUDGET_EXCEEDED = "BudgetExceeded"
    # The plan's tenant has no room left today (domain/tenants.py): paused subtasks run
    # again when the cap is raised or the day ends.
    TENANT_BUDGET_EXCEEDED = "TenantBudgetExceeded"
    UNPROCESSABLE_ENTITY = "UnprocessableEntity"
    PAYMENT_REQUIRED = "PaymentRequired"
    CLIENT_ERROR = "ClientError"
    # ... and healing with time.
    RATE_LIMIT = "RateLimit"
    TIMEOUT = "Timeout"
    CONNECTION = "Connection"
    INVALID_RESPONSE = "InvalidResponse"
    SERVER_ERROR = "ServerError"
    CONFLICT = "Conflict"
    LLM_ERROR = "LlmError"  # an LLM activity's failure of no known kind
    # A plan-end webhook (activities/webhook_delivery.py): the receiver refused it (a 4xx other than
    # 408/429), the worker cannot sign it (secret missing or malformed), or it is worth
    # another attempt (connection error, 408, 429, 5xx).
    WEBHOOK_REJECTED = "WebhookRejected"
    WEBHOOK_MISCONFIGURED = "WebhookMisconfigured"
    WEBHOOK_UNAVAILABLE = "WebhookUnavailable"
    # An ApplicationError raised without a type.
    APPLICATION_ERROR = "ApplicationError"


# Listed in every LLM retry policy, so that an error of these types wrongly flagged
# retryable is still never retried. The order is that of the policy recorded so far.
NON_RETRYABLE_LLM_FAILURES: tuple[FailureType, ...] = (
    FailureType.BAD_REQUEST,
    FailureType.CONTEXT_WINDOW_EXCEEDED,
    FailureType.CONTENT_POLICY,
    FailureType.AUTHENTICATION,
    FailureType.PERMISSION_DENIED,
    FailureType.NOT_FOUND,
    FailureType.BUDGET_EXCEEDED,
    FailureType.UNPROCESSABLE_ENTITY,
    FailureType.TENANT_BUDGET_EXCEEDED,
)


def failure_type(type_: str | None) -> FailureType | None:
    """``type_`` as a known ``FailureType``; None for a foreign or missing type."""
    if not type_:
        return None
    try:
        return FailureType(type_)
    except ValueError:
        return None


# --------------------------------------------------------------------------- building


def application_error(
    type_: FailureType | str,
    message: str,
    *details: Any,
    non_retryable: bool = True,
    type_in_message: bool = False,
) -> ApplicationError:
    """An ``ApplicationError`` of ``type_`` (non-retryable unless asked otherwise).

    ``type_in_message`` prefixes the message with the type, for failures whose message
    is all Temporal Web shows in a list (a subtask's or a conversation turn's);
    ``describe_failure`` strips the prefix again so it is never shown twice.
    """
    text = f"{type_}: {message}" if type_in_message else message
    return ApplicationError(text, *details, type=str(type_), non_retryable=non_retryable)


def plan_failed_error(message: str, report: PlanReport) -> ApplicationError:
    """PlanWorkflow's failure: the report rides in the details, so a client (or the
    session that started the plan) gets the whole truth from the failure alone."""
    return application_error(FailureType.PLAN_FAILED, message, report)


def invalid_plan_error(message: str, problems: Sequence[str]) -> ApplicationError:
    """A plan refused before any subtask ran; one detail: the problems, one line each."""
    return application_error(FailureType.INVALID_PLAN, message, list(problems))


def subtask_failed_error(
    type_: FailureType | str, message: str, details: SubtaskFailureDetails
) -> ApplicationError:
    """SubtaskWorkflow's failure: what the subtask spent rides in the details, so the
    plan report counts calls and usage of failed subtasks too."""
    return application_error(type_, message, details, type_in_message=True)


# --------------------------------------------------------------------------- reading


def _first_detail(err: ApplicationError) -> Any:
    details = err.details
    return details[0] if details else None


def _model_detail(err: ApplicationError, model: type[_M]) -> _M:
    detail = _first_detail(err)
    if isinstance(detail, model):
        return detail
    if not isinstance(detail, dict):
        raise MalformedDetails(f"expected a {model.__name__} object, got {type(detail).__name__}")
    try:
        return model.model_validate(detail)
    except ValidationError as bad:
        raise MalformedDetails(str(bad)) from None


def read_plan_report(err: ApplicationError) -> PlanReport:
    """The report a ``PlanFailed`` error carries; ``MalformedDetails`` says why not."""
    return _model_detail(err, PlanReport)


def plan_report_of(err: BaseException | None) -> PlanReport | None:
    """The report carried by ``err`` (or by the child failure it wraps) if it is a
    ``PlanFailed`` error with a readable report; None otherwise."""
    cause = err.cause if isinstance(err, ChildWorkflowError) else err
    if not isinstance(cause, ApplicationError) or cause.type != FailureType.PLAN_FAILED:
        return None
    try:
        return read_plan_report(cause)
    except MalformedDetails:
        return None


def subtask_failure_details(err: ApplicationError) -> SubtaskFailureDetails | None:
    """What a failed subtask spent, if its failure carries readable details."""
    try:
        return _model_detail(err, SubtaskFailureDetails)
    except MalformedDetails:
        return None


def invalid_plan_problems(err: ApplicationError) -> list[str]:
    """The problems an ``InvalidPlan`` error lists; ``[message]`` if it lists none."""
    detail = _first_detail(err)
    if isinstance(detail, list | tuple) and detail and all(isinstance(p, str) for p in detail):
        return list(detail)
    return [err.message]


def describe_failure(err: ApplicationError) -> tuple[str, str]:
    """``(type, message)`` for a person: a missing type reads ``ApplicationError``, and a
    message that repeats its type (``type_in_message``) is not shown with it twice."""
    type_ = err.type or FailureType.APPLICATION_ERROR.value
    return type_, err.message.removeprefix(f"{type_}: ")


def activity_failure(err: ActivityError) -> tuple[str, str]:
    """``(type, message)`` of a failed activity: its ApplicationError's type, or
    ``LlmError`` for anything else (a timeout, a typeless error)."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return cause.type or FailureType.LLM_ERROR.value, cause.message
    return FailureType.LLM_ERROR.value, str(err)
