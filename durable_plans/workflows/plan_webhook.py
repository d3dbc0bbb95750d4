"""A plan's end, told to its webhook: the workflow side of ``notify``.

Called by PlanWorkflow once its report is final (completed, failed, or cancelled), and
before it returns or raises, so the delivery is part of the plan's durable run: a worker
crash mid-delivery loses nothing, and the plan's workflow ends only when the delivery has
an outcome. The delivery window (``notify_deliver_for``, or the plan's own
``notify.deliver_for_s``) bounds that wait: the plan never waits forever.

The outcome goes to the memo (``MEMO_KEY``), where ``dplan status`` and Temporal Web read
it, and never into the report: a receiver's trouble does not change what the plan did.
Deterministic (no I/O, no clock): the activity does the POST.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    RetryState,
    TimeoutError,
)

with workflow.unsafe.imports_passed_through():
    from durable_plans.domain.contracts import ACT_DELIVER_WEBHOOK, WebhookAttempt, WebhookInput
    from durable_plans.domain.ids import webhook_message_id
    from durable_plans.domain.models import (
        DeliveryOutcome,
        DeliveryStatus,
        Notify,
        PlanReport,
    )
    from durable_plans.domain.webhook import NOTIFY_MEMO_KEY

from durable_plans.workflows.policies import ActivityParameters, current_parameters

__all__ = [
    "MEMO_KEY",
    "deliver_report",
    "delivery_window",
    "outcome_of_failure",
]

# The memo field holding the DeliveryOutcome (as JSON): {"status", "webhook_id",
# "attempts", "last_status", "reason"}.
MEMO_KEY = NOTIFY_MEMO_KEY


def delivery_window(notify: Notify, parameters: ActivityParameters) -> timedelta:
    """How long the delivery may keep retrying: the plan's own window, else the worker's."""
    return parameters.delivery_window(notify.deliver_for_s)


async def deliver_report(plan_run_id: str, notify: Notify, report: PlanReport) -> DeliveryOutcome:
    """POST ``report`` to ``notify.webhook`` (retried within the window) and record how it
    went in the memo. Never raises for a failed delivery: the caller ends the plan as its
    report says, whatever the receiver did."""
    webhook_id = webhook_message_id(plan_run_id)
    parameters = current_parameters()
    window = delivery_window(notify, parameters)
    _record(DeliveryOutcome(status=DeliveryStatus.PENDING, webhook_id=webhook_id))
    try:
        delivered = await workflow.execute_activity(
            ACT_DELIVER_WEBHOOK,
            WebhookInput(
                webhook_id=webhook_id,
                url=notify.webhook,
                secret_env=notify.secret_env,
                report=report,
            ),
            result_type=WebhookAttempt,
            schedule_to_close_timeout=window,
            start_to_close_timeout=min(parameters.notify_attempt_timeout, window),
            retry_policy=parameters.notify_retry,
            summary=f"notify webhook: plan {report.status.value}",
        )
        outcome = DeliveryOutcome(
            status=DeliveryStatus.DELIVERED,
            webhook_id=webhook_id,
            attempts=delivered.attempt,
            last_status=delivered.status_code,
        )
    except ActivityError as err:
        outcome = outcome_of_failure(err, webhook_id, window)
        workflow.logger.warning(
            "plan %s: webhook %s not delivered: %s", report.plan_id, webhook_id, outcome.reason
        )
    _record(outcome)
    return outcome


def _record(outcome: DeliveryOutcome) -> None:
    workflow.upsert_memo({MEMO_KEY: outcome.model_dump(mode="json")})


def _last_attempt(err: BaseException | None) -> tuple[ApplicationError | None, WebhookAttempt]:
    """The last attempt's failure and what it saw, following a timeout to the failure it
    wraps (the server attaches an attempt's failure to the timeout that ended retrying)."""
    seen = 0
    while err is not None and seen < 4:
        if isinstance(err, ApplicationError):
            detail = err.details[0] if err.details else None
            try:
                attempt = (
                    detail
                    if isinstance(detail, WebhookAttempt)
                    else WebhookAttempt.model_validate(detail)
                )
            except ValueError:
                attempt = WebhookAttempt(attempt=0, reason=err.message)
            return err, attempt
        err = err.cause if isinstance(err, FailureError) else None
        seen += 1
    return None, WebhookAttempt(attempt=0)


def outcome_of_failure(err: ActivityError, webhook_id: str, window: timedelta) -> DeliveryOutcome:
    """A failed delivery as the memo shows it: attempts, the last HTTP status, and why."""
    app, last = _last_attempt(err.cause)
    reason = last.reason or (app.message if app is not None else "")
    out_of_time = err.retry_state is RetryState.TIMEOUT or isinstance(err.cause, TimeoutError)
    if out_of_time:
        since = f"{window.total_seconds():g}s"
        last_words = f"; last: {reason}" if reason else ""
        reason = f"gave up after retrying for {since}{last_words}"
    elif not reason:
        reason = str(err.cause or err)
    return DeliveryOutcome(
        status=DeliveryStatus.FAILED,
        webhook_id=webhook_id,
        attempts=last.attempt,
        last_status=last.status_code,
        reason=reason[:500],
    )
