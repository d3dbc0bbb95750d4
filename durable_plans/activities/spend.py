"""Exact cost: every answer the provider returned is paid for, and counted, once per attempt.

An LLM call answered, then lost with its worker before the answer was stored, is asked
again on retry: the provider is paid twice. The stored answer (the truth for the
conversation) can only say what one answer cost, so what was *paid* is recorded apart,
the moment an answer arrives and before anything else is done with it: one ledger entry
per attempt (``<call>#attempt-<n>``; attempts of one activity have distinct numbers, even
two that overlap; a local activity's entry adds its start time, since a run again on
another worker after a crash counts from attempt 1 anew), in a ledger of the call's own
(``paid:<call>``) and in the root session's budget ledger. The session store's ``charge``
is idempotent per entry and returns the ledger's total, so the call's total is read back
in the same step. A plan that names a tenant charges the same entry to the tenant's
ledger of the day (``domain/tenants.py``), which its daily cap is checked against.

What the activity reports to its workflow (and so the plan report) is that total: the
sum over every attempt that got an answer, including answers never stored. A call
answered before this ledger existed has no entries; its stored answer's usage stands.
The ledger keeps tokens and cost; cached prompt tokens are the stored answer's.
"""

from __future__ import annotations

from temporalio import activity

from durable_plans.activities.tenant_caps import today
from durable_plans.domain.models import Usage
from durable_plans.domain.tenants import ledger_of
from durable_plans.session_store import SessionStore

__all__ = ["call_ledger", "paid_for", "record_paid"]


def call_ledger(call_id: str) -> str:
    """The ledger (a charge root of its own) holding every answer paid for ``call_id``."""
    return f"paid:{call_id}"


def _attempt_entry(call_id: str) -> str:
    if not activity.in_activity():
        return f"{call_id}#attempt-1"
    info = activity.info()
    if info.is_local:
        # A local activity run again after its worker died (the workflow task timed out)
        # starts over at attempt 1: the run's start time tells its runs apart.
        started = int(info.started_time.timestamp() * 1_000_000)
        return f"{call_id}#attempt-{info.attempt}-local-{started}"
    return f"{call_id}#attempt-{info.attempt}"


async def record_paid(
    store: SessionStore, root: str, call_id: str, usage: Usage, *, tenant: str | None = None
) -> Usage:
    """Record an answer this attempt received for ``call_id`` (and charge it to ``root``'s
    budget, and to ``tenant``'s ledger of the day); returns everything paid for
    ``call_id`` so far, this answer included."""
    entry = _attempt_entry(call_id)
    if tenant:
        # First: the ledger that stops further calls (``activities/tenant_caps.py``).
        await store.charge(ledger_of(tenant, today()), entry, usage)
    total = await store.charge(call_ledger(call_id), entry, usage)
    if root:
        await store.charge(root, entry, usage)
    return _with_cached(total, usage)


async def paid_for(store: SessionStore, call_id: str, stored: Usage) -> Usage:
    """Everything paid for ``call_id``; ``stored`` (the stored answer's usage) for a call
    answered before the paid ledger existed."""
    total = await store.total_usage(call_ledger(call_id))
    return _with_cached(total, stored) if total != Usage() else stored


def _with_cached(total: Usage, answer: Usage) -> Usage:
    """The ledger's total with the answer's cached prompt tokens: the ledger keeps tokens
    and cost (what budgets need); how many prompt tokens the provider read from its cache
    is the stored answer's (an answer paid for and lost says it no more)."""
    if not answer.cached_tokens:
        return total
    return total.model_copy(
        update={"cached_tokens": min(answer.cached_tokens, total.prompt_tokens)}
    )
