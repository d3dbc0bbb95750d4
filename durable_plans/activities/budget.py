"""Budgets across a session tree: checked before every LLM call, charged after it.

The ledger lives in the session store, keyed by the root session, so a plan's subtasks,
their sub-agents and delegations all draw on one budget whichever worker runs them. A
charge is keyed by the answer it paid for, one per attempt that received one
(``activities/spend.py``): a retried activity charges nothing twice, and an answer the
provider returned twice (the first lost with a crashed worker) is charged twice.
"""

from __future__ import annotations

from durable_plans.activities import observe
from durable_plans.activities.llm_errors import LlmErrorClass, to_application_error
from durable_plans.domain.failures import FailureType
from durable_plans.domain.models import Budget, Usage
from durable_plans.session_store import SessionStore


async def ensure_within_budget(store: SessionStore, root: str, budget: Budget | None) -> None:
    """Refuse the call (non-retryable ``BudgetExceeded``) once the root's budget is spent."""
    if budget is None or not root:
        return
    used = await store.total_usage(root)
    reason = budget.exceeded_by(used)
    if reason is not None:
        raise refused_call(FailureType.BUDGET_EXCEEDED, f"{reason} (session tree {root})")


def refused_call(type_: FailureType, message: str) -> Exception:
    """A call not sent for want of budget (the plan's, or its tenant's daily cap): never
    retried, and counted in the refusals metric."""
    observe.budget_refused()
    return to_application_error(
        LlmErrorClass(type=type_.value, message=message, retryable=False, retry_after_s=None)
    )


async def charge(store: SessionStore, root: str, charge_id: str, usage: Usage) -> None:
    if root:
        await store.charge(root, charge_id, usage)
