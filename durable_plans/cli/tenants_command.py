"""``dplan tenants``: what each tenant spent today beside its daily cap.

A layer over ``Client.tenant_spend``: the tenants ``DPLAN_TENANTS`` names (and any given),
their ledgers in the workers' session store for a UTC day, one line each or JSON. Exit 0
listed, 1 the store cannot be read, 2 a bad ``--day`` or tenants file.
"""

from __future__ import annotations

import json
from datetime import date

from durable_plans._errors import TenantsConfigError
from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, Usage, read_settings, reported
from durable_plans.client import Client
from durable_plans.domain.tenants import TenantSpend
from durable_plans.settings import Settings

__all__ = ["render_spend", "tenants_command"]


def render_spend(row: TenantSpend) -> str:
    """``team-a  1,204 / 2,000,000 tokens  $0.0031 / $25  room`` (caps absent: ``-``)."""
    cap = row.cap
    tokens = f"{row.used.total_tokens:,}"
    if cap is not None and cap.tokens is not None:
        tokens += f" / {cap.tokens:,}"
    usd = f"${row.used.cost_usd:.4f}"
    if cap is not None and cap.usd is not None:
        usd += f" / ${cap.usd:g}"
    state = "no cap" if cap is None else ("AT CAP" if row.at_cap else "room")
    return f"{row.tenant}  {tokens} tokens  {usd}  {state}"


async def tenants_command(
    tenants: list[str],
    *,
    day: str | None,
    json_output: bool,
    settings: Settings | None = None,
) -> int:
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        when = _day(day)
        client = await Client.connect(read_settings(settings))
        try:
            rows = await client.tenant_spend(tenants, day=when)
        except TenantsConfigError as error:
            raise Usage(f"error: DPLAN_TENANTS: {error}") from None
        finally:
            await client.close()
        if json_output:
            print(json.dumps([row.model_dump(mode="json") for row in rows], indent=2))
        elif not rows:
            print("no tenants: DPLAN_TENANTS names none, and none were given")
        else:
            print(f"spend on {rows[0].day.isoformat()} (UTC)")
            for row in rows:
                print(render_spend(row))
        return Exit.OK

    return await reported(body())


def _day(text: str | None) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise Usage(f"error: --day: expected YYYY-MM-DD, got {text!r}") from None
