"""``dplan list`` and ``dplan setup``: finding plans in Temporal visibility.

``setup`` registers the ``Dplan*`` search attributes on the server of
``TEMPORAL_ADDRESS`` (the embedded and test dev servers register them at start);
``list`` reads plans back, with those attributes when they are there and from execution
status and memo when they are not.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, read_settings, reported
from durable_plans.client import Client, PlanSummary, SearchAttributesUnavailable
from durable_plans.settings import Settings

__all__ = ["list_command", "render_duration", "setup_command"]


async def setup_command(*, settings: Settings | None = None) -> int:
    """Register what is missing; say what was added, or that nothing was. 0 ok, 1 not."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        client = await Client.connect(read_settings(settings))
        namespace = client.settings.temporal_namespace
        try:
            added, present = await client.setup_search_attributes()
        except SearchAttributesUnavailable as error:
            raise SearchAttributesUnavailable(
                f"cannot register search attributes in namespace '{namespace}': {error}\n"
                "  (Temporal Cloud: add them with `tcld namespace search-attributes add`)"
            ) from None
        if added:
            print(
                f"added {len(added)} search attributes to namespace '{namespace}': "
                f"{', '.join(added)}"
            )
        else:
            print(
                f"nothing to add: namespace '{namespace}' has all {len(present)} search "
                f"attributes ({', '.join(present)})"
            )
        return Exit.OK

    return await reported(body())


async def list_command(
    *,
    status: str | None,
    query: str | None,
    json_output: bool,
    limit: int = 50,
    tenant: str | None = None,
    settings: Settings | None = None,
) -> int:
    """Print plans newest first; 0 listed (even none), 1 unreachable, 2 bad query/status/tenant."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        client = await Client.connect(read_settings(settings))
        rows, with_attributes = await client.list_plans(
            status=status, query=query, limit=limit, tenant=tenant
        )
        if json_output:
            print(json.dumps([row.to_json() for row in rows], indent=2))
        else:
            _print_table(rows, with_attributes=with_attributes)
        return Exit.OK

    return await reported(body())


def render_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _print_table(rows: list[PlanSummary], *, with_attributes: bool) -> None:
    console = Console(highlight=False, soft_wrap=True)
    if not rows:
        console.print("no plans found", markup=False)
        return
    # A tenant column only where some plan has one: most namespaces have no tenants.
    with_tenant = any(row.tenant for row in rows)
    table = Table(box=None, pad_edge=False)
    table.add_column("PLAN")
    if with_tenant:
        table.add_column("TENANT")
    table.add_column("STATUS")
    table.add_column("DONE", justify="right")
    if with_attributes:
        table.add_column("TOKENS", justify="right")
        table.add_column("COST", justify="right")
    table.add_column("STARTED")
    table.add_column("DURATION", justify="right")
    now = datetime.now(UTC)
    for row in rows:
        total = "?" if row.total is None else str(row.total)
        done = f"{row.completed}/{total}" if row.completed is not None else f"-/{total}"
        duration = row.duration_s
        if duration is None:  # still running: time so far
            duration = (now - row.started).total_seconds()
        cells = [row.plan_id]
        if with_tenant:
            cells.append(row.tenant or "-")
        cells += [row.status, done]
        if with_attributes:
            cells += [
                "-" if row.tokens is None else str(row.tokens),
                "-" if row.cost_usd is None else f"${row.cost_usd:.4f}",
            ]
        cells += [
            row.started.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
            render_duration(duration),
        ]
        table.add_row(*(Text(cell) for cell in cells))
    console.print(table)
    for row in rows:
        for subtask, why in (row.paused or {}).items():
            console.print(
                f"{row.plan_id}: {subtask} paused — {why} "
                f"(dplan resume|skip {row.plan_id} {subtask})",
                markup=False,
            )
    if not with_attributes:
        console.print(
            "(search attributes not registered: run `dplan setup` for tokens, cost and "
            "progress columns)",
            markup=False,
        )
