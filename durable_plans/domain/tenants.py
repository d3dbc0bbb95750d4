"""Tenants' daily caps: the file ``DPLAN_TENANTS`` names, and the rule a call meets.

Budgets are per plan; a team running many plans a day needs a cap across them. A plan
names its ``tenant``; the file gives each tenant a cap per UTC day, in tokens, in US
dollars or both::

    recheck_s = 300          # optional: how often a subtask paused on its cap looks again

    [tenants.team-a]
    tokens = 2_000_000
    usd = 25.0

(or the same as JSON: ``{"recheck_s": 300, "tenants": {"team-a": {"tokens": ...}}}``).
A tenant the file does not name has no cap.

What a tenant spent is a ledger in the session store, one per tenant and day
(``ledger_of``), charged with the same entries as the plan's own ledgers: one per
provider answer (``activities/spend.py``), so retries, replays and a worker killed
mid-call count every answer exactly once. A call is not sent when the day's spend plus
what the call itself is estimated to use would pass the cap (``refusal``). The estimate
covers what is sent; the answer's own tokens are known only when it arrives, so the last
call before the cap may end the day a little past it, by at most its answer.

Pure: the worker reads the file (``activities/tenant_caps.py``), and the plan's pause
desk only sees the failure type ``TenantBudgetExceeded``.
"""

from __future__ import annotations

import json
import tomllib
from datetime import date
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from durable_plans._errors import TenantsConfigError
from durable_plans.domain.models import Usage

__all__ = [
    "DEFAULT_RECHECK_S",
    "TenantCap",
    "TenantCaps",
    "TenantSpend",
    "TenantsConfigError",
    "ledger_of",
    "no_room",
    "parse_tenants",
    "read_tenants",
    "refusal",
]

# How often a subtask paused on its tenant's cap asks whether the cap has room again:
# each look is an activity and a timer in the plan's history, so minutes, not seconds.
DEFAULT_RECHECK_S = 300.0


class TenantCap(BaseModel):
    """One tenant's limits per UTC day; at least one is set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: int | None = Field(default=None, ge=0)
    usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _some_limit(self) -> TenantCap:
        if self.tokens is None and self.usd is None:
            raise ValueError("sets no limit: give tokens, usd or both")
        return self

    def describe(self) -> str:
        parts = []
        if self.tokens is not None:
            parts.append(f"{self.tokens:,} tokens")
        if self.usd is not None:
            parts.append(f"${self.usd:g}")
        return " and ".join(parts) + " a day"


class TenantCaps(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tenants: dict[str, TenantCap] = Field(default_factory=dict)
    recheck_s: float = Field(default=DEFAULT_RECHECK_S, ge=0.1, le=86_400)

    @model_validator(mode="after")
    def _names(self) -> TenantCaps:
        for name in self.tenants:
            if not 1 <= len(name) <= 64:
                raise ValueError(f"tenant name {name!r} must have 1 to 64 characters")
        return self

    def cap_of(self, tenant: str | None) -> TenantCap | None:
        return self.tenants.get(tenant) if tenant else None


class TenantSpend(BaseModel):
    """What a tenant spent on a UTC day, beside its cap (``dplan tenants``)."""

    model_config = ConfigDict(frozen=True)

    tenant: str
    day: date
    used: Usage
    cap: TenantCap | None = None  # None: the file does not cap this tenant

    @property
    def at_cap(self) -> bool:
        """Whether not even a one-token call would be sent now."""
        return (
            self.cap is not None
            and no_room(self.tenant, self.cap, self.used, day=self.day) is not None
        )


def ledger_of(tenant: str, day: date) -> str:
    """The ledger (a charge root of the session store) of ``tenant``'s spend on ``day``."""
    return f"tenant:{tenant}:{day.isoformat()}"


def refusal(
    tenant: str,
    cap: TenantCap,
    spent: Usage,
    *,
    day: date,
    tokens: int = 0,
    usd: float = 0.0,
) -> str | None:
    """Why a call estimated at ``tokens`` and ``usd`` may not be sent (None: it may)."""
    when = f"today ({day.isoformat()} UTC)"
    if cap.tokens is not None and spent.total_tokens + tokens > cap.tokens:
        return (
            f"tenant {tenant!r} has used {spent.total_tokens:,} of its {cap.tokens:,} tokens "
            f"{when}; this call needs about {tokens:,} more"
        )
    if cap.usd is not None and spent.cost_usd + usd > cap.usd:
        return (
            f"tenant {tenant!r} has spent ${spent.cost_usd:.4f} of its ${cap.usd:g} {when}; "
            f"this call needs about ${usd:.4f} more"
        )
    return None


def no_room(tenant: str, cap: TenantCap, spent: Usage, *, day: date) -> str | None:
    """Why not even the smallest call may be sent (a spend exactly at its cap, in tokens
    or in dollars, leaves none); None while there is room."""
    return refusal(tenant, cap, spent, day=day, tokens=1, usd=1e-9)


def parse_tenants(text: str, *, source: str, as_json: bool) -> TenantCaps:
    """The caps in ``text`` (TOML, or JSON when ``as_json``); ``TenantsConfigError``
    naming ``source`` and every problem otherwise."""
    try:
        raw: Any = json.loads(text) if as_json else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as err:
        kind = "JSON" if as_json else "TOML"
        raise TenantsConfigError(f"{source}: not valid {kind}: {err}") from None
    if not isinstance(raw, dict):
        raise TenantsConfigError(f"{source}: expected a table of tenants, got {type(raw).__name__}")
    try:
        return TenantCaps.model_validate(raw)
    except ValidationError as err:
        lines = []
        for problem in err.errors():
            where = ".".join(str(part) for part in problem["loc"]) or "(top)"
            lines.append(f"{source}: {where}: {problem['msg']}")
        raise TenantsConfigError("\n".join(lines)) from None


def read_tenants(path: Path) -> TenantCaps:
    """The caps in the file ``path`` (``.json``: JSON; anything else: TOML)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise TenantsConfigError(f"{path}: cannot be read ({err.strerror or err})") from None
    return parse_tenants(text, source=str(path), as_json=path.suffix.lower() == ".json")
