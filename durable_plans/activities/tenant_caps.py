"""Tenants' daily caps on the worker: refuse a call past its tenant's cap, and say when
a paused subtask's tenant has room again.

The caps come from the file ``DPLAN_TENANTS`` names (``domain/tenants.py``), read when
the worker starts (a bad file stops it, naming every problem) and again whenever the file
changes: raising a cap is an edit of that file, seen by every worker at its next call. A
later edit that breaks the file is logged once and the last good caps stay in force.

What a tenant spent is its day's ledger in the session store, which every worker shares;
``activities/spend.py`` charges it with each answer. The check before a call reads that
ledger, so it costs one read of the store per LLM call of a capped tenant, and nothing
for a plan without a tenant or a tenant without a cap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from temporalio import activity

from durable_plans.activities.budget import refused_call
from durable_plans.activities.log import get_logger
from durable_plans.activities.shared_limits import estimate_tokens
from durable_plans.domain.contracts import ACT_TENANT_ROOM, TenantRoom, TenantRoomInput
from durable_plans.domain.failures import FailureType
from durable_plans.domain.tenants import (
    TenantCaps,
    TenantsConfigError,
    ledger_of,
    no_room,
    read_tenants,
    refusal,
)
from durable_plans.session_store import SessionStore

__all__ = ["TenantActivities", "TenantCapsFile", "TenantGate", "today"]


def today() -> date:
    """The UTC day a spend is counted in (caps are per UTC day)."""
    return datetime.now(UTC).date()


@dataclass
class TenantCapsFile:
    """The worker's view of ``DPLAN_TENANTS``: read again when its size or time changes."""

    path: Path | None
    _caps: TenantCaps = field(default_factory=TenantCaps, init=False)
    _stamp: tuple[int, int] | None = field(default=None, init=False)
    _bad_stamp: tuple[int, int] | None = field(default=None, init=False)

    @classmethod
    def load(cls, path: Path | None) -> TenantCapsFile:
        """Read at once: ``TenantsConfigError`` for a file that cannot be used."""
        caps = cls(path)
        if path is not None:
            caps._caps = read_tenants(path)
            try:
                caps._stamp = _stamp(path)
            except OSError:
                caps._stamp = None  # gone since: the caps read stay until it is back
        return caps

    def current(self) -> TenantCaps:
        path = self.path
        if path is None:
            return self._caps
        try:
            stamp = _stamp(path)
        except OSError:
            stamp = None
        if stamp is None or stamp == self._stamp or stamp == self._bad_stamp:
            return self._caps
        try:
            self._caps = read_tenants(path)
        except TenantsConfigError as err:
            self._bad_stamp = stamp
            get_logger(component="tenants").error(
                "tenants.file_invalid",
                path=str(path),
                problems=str(err).splitlines(),
                note="the caps read before stay in force until the file is fixed",
            )
            return self._caps
        self._stamp, self._bad_stamp = stamp, None
        get_logger(component="tenants").info(
            "tenants.file_read", path=str(path), tenants=sorted(self._caps.tenants)
        )
        return self._caps


def _stamp(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size)


@dataclass
class TenantGate:
    """The check before every provider call of a plan that names a tenant."""

    store: SessionStore
    caps: TenantCapsFile

    async def check(self, tenant: str | None, kwargs: Mapping[str, Any]) -> None:
        """Refuse the call (non-retryable ``TenantBudgetExceeded``) when the tenant's spend
        today plus what ``kwargs`` sends would pass its cap."""
        if tenant is None:
            return  # most plans: not even a look at the file
        cap = self.caps.current().cap_of(tenant)
        if cap is None:
            return
        day = today()
        spent = await self.store.total_usage(ledger_of(tenant, day))
        tokens = estimate_tokens(kwargs)
        why = refusal(tenant, cap, spent, day=day, tokens=tokens, usd=_estimate_usd(kwargs, tokens))
        if why is not None:
            raise refused_call(FailureType.TENANT_BUDGET_EXCEEDED, f"{why} (cap: {cap.describe()})")

    async def room(self, tenant: str) -> TenantRoom:
        """Whether a call of the smallest size would be sent for ``tenant`` now."""
        caps = self.caps.current()
        cap = caps.cap_of(tenant)
        if cap is None:
            return TenantRoom(room=True, recheck_s=caps.recheck_s, why="no cap")
        day = today()
        spent = await self.store.total_usage(ledger_of(tenant, day))
        why = no_room(tenant, cap, spent, day=day)
        return TenantRoom(room=why is None, recheck_s=caps.recheck_s, why=why or "")


def _estimate_usd(kwargs: Mapping[str, Any], tokens: int) -> float:
    """What ``tokens`` prompt tokens cost at the model's input price (0: not priced)."""
    model = str(kwargs.get("model") or "")
    if not model or model.startswith("scripted/"):
        return 0.0
    try:
        from durable_plans.activities.llm import import_litellm

        prompt_cost, _ = import_litellm().cost_per_token(model=model, prompt_tokens=tokens)
        return max(float(prompt_cost), 0.0)
    except Exception:
        return 0.0  # an unpriced model: tokens still count


class TenantActivities:
    def __init__(self, gate: TenantGate) -> None:
        self._gate = gate

    @activity.defn(name=ACT_TENANT_ROOM)
    async def tenant_room(self, inp: TenantRoomInput) -> TenantRoom:
        """Whether a subtask paused on its tenant's cap may run again (the cap was raised,
        or a new day began), and when to look again if not."""
        return await self._gate.room(inp.tenant)
