"""``dplan gc``: remove finished plans' trees from this host's state directory.

A layer over ``Client.gc`` (``durable_plans/workspace_gc.py`` has the rules): it reads
``--older-than`` (default ``DPLAN_TREE_RETENTION``), prints one line per plan folder (or
the report as JSON) and a total. Exit 0 when the pass ran (even if it removed nothing),
1 when Temporal cannot be reached (nothing is removed then), 2 on a bad duration.
"""

from __future__ import annotations

import json
from datetime import timedelta

from durable_plans._errors import DurationError
from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, Usage, err, read_settings, reported
from durable_plans.client import Client
from durable_plans.domain.durations import format_duration, parse_duration
from durable_plans.settings import Settings
from durable_plans.workspace_gc import GcReport

__all__ = ["gc_command", "render_bytes"]


def render_bytes(count: int) -> str:
    """``count`` bytes for a person: ``0 B``, ``4.2 KB``, ``121.0 MB``."""
    size = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"  # pragma: no cover - the loop always returns


def _older_than(text: str | None) -> timedelta | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except DurationError as error:
        raise Usage(f"error: --older-than: {error}") from None


def _print(report: GcReport) -> None:
    verb = "would remove" if report.dry_run else "removed"
    for row in report.plans:
        freed = (
            f"{verb} {row.trees_removed} trees ({row.files_removed} files, "
            f"{render_bytes(row.bytes_removed)})"
            if row.trees_removed
            else "kept"
        )
        kept = f"; kept {row.trees_kept} trees" if row.trees_removed and row.trees_kept else ""
        why = f": {row.reason}" if row.reason else ""
        print(f"{row.plan_id}  {row.status}  {freed}{kept}{why}")
    ended = (
        f"ended more than {format_duration(report.older_than)} ago"
        if report.older_than
        else "that ended"
    )
    print(
        f"{report.state_dir}: {verb} {report.trees_removed} trees, {report.files_removed} "
        f"files, {render_bytes(report.bytes_removed)} of plans {ended}; kept "
        f"{report.trees_kept} trees"
    )


async def gc_command(
    *,
    older_than: str | None,
    dry_run: bool,
    json_output: bool,
    settings: Settings | None = None,
) -> int:
    """One pass over the state directory; see the module for the exit codes."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        retention = _older_than(older_than)
        client = await Client.connect(read_settings(settings))
        report = await client.gc(older_than=retention, dry_run=dry_run)
        if json_output:
            print(json.dumps(report.to_json(), indent=2))
        else:
            _print(report)
        if not report.temporal_reachable:
            err("error: Temporal could not be reached: nothing was removed")
            return Exit.FAILED
        return Exit.OK

    return await reported(body())
