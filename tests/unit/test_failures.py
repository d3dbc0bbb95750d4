"""Failure types keep their persisted names; details round-trip and bad ones never crash."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, RetryState

from durable_plans._errors import MalformedDetails
from durable_plans.domain.contracts import SubtaskFailureDetails
from durable_plans.domain.failures import (
    NON_RETRYABLE_LLM_FAILURES,
    FailureType,
    activity_failure,
    application_error,
    describe_failure,
    failure_type,
    invalid_plan_error,
    invalid_plan_problems,
    plan_failed_error,
    plan_report_of,
    read_plan_report,
    subtask_failed_error,
    subtask_failure_details,
)
from durable_plans.domain.models import PlanReport, SubtaskResult, SubtaskStatus, Usage
from durable_plans.workflows.policies import NON_RETRYABLE_LLM_ERRORS

# Recorded histories, reports and retry policies hold these strings.
PERSISTED = {
    "PlanFailed",
    "TenantBudgetExceeded",
    "InvalidPlan",
    "SchedulerStalled",
    "DependencyFailed",
    "Cancelled",
    "EmptyAnswer",
    "MaxTurnsReached",
    "CheckFailed",
    "SandboxUnavailable",
    "InvalidAgentSwitch",
    "InvalidInput",
    "ApprovalRefused",
    "WorkspaceConflict",
    "WorkspaceUnavailable",
    "BadRequest",
    "ContextWindowExceeded",
    "ContentPolicy",
    "Authentication",
    "PermissionDenied",
    "NotFound",
    "BudgetExceeded",
    "UnprocessableEntity",
    "PaymentRequired",
    "ClientError",
    "RateLimit",
    "Timeout",
    "Connection",
    "InvalidResponse",
    "ServerError",
    "Conflict",
    "LlmError",
    "WebhookRejected",
    "WebhookMisconfigured",
    "WebhookUnavailable",
    "ApplicationError",
    # Persisted before they joined the registry (as literals): the same names.
    "PlanDataUnavailable",
    "McpConfig",
    "McpToolsUnavailable",
}


def _report() -> PlanReport:
    return PlanReport.build(
        "p1", [SubtaskResult(id="a", status=SubtaskStatus.COMPLETED, agent="coder", result="ok")]
    )


def _as_received(err: ApplicationError) -> ApplicationError:
    """What the other side sees: details decoded without a type hint (plain JSON)."""
    details = [d.model_dump(mode="json") if hasattr(d, "model_dump") else d for d in err.details]
    return ApplicationError(err.message, *details, type=err.type, non_retryable=err.non_retryable)


def test_type_names_are_unchanged() -> None:
    assert {t.value for t in FailureType} == PERSISTED


def test_the_retry_policy_lists_the_same_strings_as_before() -> None:
    assert list(NON_RETRYABLE_LLM_ERRORS) == [
        "BadRequest",
        "ContextWindowExceeded",
        "ContentPolicy",
        "Authentication",
        "PermissionDenied",
        "NotFound",
        "BudgetExceeded",
        "UnprocessableEntity",
        "TenantBudgetExceeded",
    ]
    assert all(type(t) is str for t in NON_RETRYABLE_LLM_ERRORS)
    assert len(NON_RETRYABLE_LLM_FAILURES) == len(NON_RETRYABLE_LLM_ERRORS)


def test_failure_type_is_tolerant() -> None:
    assert failure_type("PlanFailed") is FailureType.PLAN_FAILED
    assert failure_type("ValueError") is None
    assert failure_type(None) is None
    assert failure_type("") is None


def test_application_error_is_non_retryable_with_a_plain_string_type() -> None:
    err = application_error(FailureType.SCHEDULER_STALLED, "stuck")
    assert err.type == "SchedulerStalled" and type(err.type) is str
    assert err.non_retryable and err.message == "stuck"
    prefixed = application_error(FailureType.EMPTY_ANSWER, "no answer", type_in_message=True)
    assert prefixed.message == "EmptyAnswer: no answer"
    assert describe_failure(prefixed) == ("EmptyAnswer", "no answer")
    assert describe_failure(ApplicationError("bare")) == ("ApplicationError", "bare")


def test_plan_report_round_trips() -> None:
    report = _report()
    err = _as_received(plan_failed_error("plan failed", report))
    assert err.type == "PlanFailed"
    assert read_plan_report(err) == report
    assert plan_report_of(err) == report


@pytest.mark.parametrize("details", [(), ("text",), ({"plan_id": 3},), (None,), ([1, 2],)])
def test_malformed_plan_reports_read_as_none(details: tuple[Any, ...]) -> None:
    err = ApplicationError("plan failed", *details, type="PlanFailed")
    assert plan_report_of(err) is None
    with pytest.raises(MalformedDetails):
        read_plan_report(err)


def test_plan_report_of_other_failures_is_none() -> None:
    assert plan_report_of(ApplicationError("x", _report().model_dump(), type="Other")) is None
    assert plan_report_of(None) is None
    assert plan_report_of(ValueError("x")) is None


def test_plan_report_of_a_child_failure_reads_its_cause() -> None:
    child = ChildWorkflowError(
        "child failed",
        namespace="default",
        workflow_id="p1",
        run_id="r",
        workflow_type="PlanWorkflow",
        initiated_event_id=1,
        started_event_id=2,
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )
    child.__cause__ = _as_received(plan_failed_error("plan failed", _report()))
    assert plan_report_of(child) == _report()


def test_subtask_details_round_trip_and_tolerate_garbage() -> None:
    details = SubtaskFailureDetails(
        llm_calls=2, usage=Usage(prompt_tokens=5), branch_session_id="b"
    )
    err = _as_received(subtask_failed_error("BadRequest", "nope", details))
    assert err.message == "BadRequest: nope" and err.type == "BadRequest"
    assert subtask_failure_details(err) == details
    for garbage in ((), ("x",), ({"llm_calls": "many"},), ({},)):
        assert subtask_failure_details(ApplicationError("m", *garbage, type="X")) is None


def test_invalid_plan_problems() -> None:
    err = _as_received(invalid_plan_error("invalid plan 'p'", ("a: bad", "b: bad")))
    assert err.type == "InvalidPlan"
    assert invalid_plan_problems(err) == ["a: bad", "b: bad"]
    assert invalid_plan_problems(ApplicationError("only a message")) == ["only a message"]
    assert invalid_plan_problems(ApplicationError("m", {"not": "a list"})) == ["m"]


def test_activity_failure() -> None:
    def activity_error(cause: BaseException | None) -> ActivityError:
        err = ActivityError(
            "activity failed",
            scheduled_event_id=1,
            started_event_id=2,
            identity="w",
            activity_type="call_llm",
            activity_id="1",
            retry_state=RetryState.NON_RETRYABLE_FAILURE,
        )
        err.__cause__ = cause
        return err

    assert activity_failure(activity_error(ApplicationError("m", type="RateLimit"))) == (
        "RateLimit",
        "m",
    )
    assert activity_failure(activity_error(ApplicationError("m"))) == ("LlmError", "m")
    assert activity_failure(activity_error(None))[0] == "LlmError"
