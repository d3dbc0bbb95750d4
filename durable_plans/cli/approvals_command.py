"""``dplan approvals``, ``dplan approve`` and ``dplan reject``: tool calls waiting for a person.

The work is ``Client.approvals``, ``approve`` and ``reject``; this module prints it.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime

from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, read_settings, reported
from durable_plans.client import Client, PendingCall, check_decision
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.settings import Settings

__all__ = ["approvals_command", "decide_command"]


def _age(since: str, now: datetime) -> str:
    try:
        seconds = max(0, int((now - datetime.fromisoformat(since)).total_seconds()))
    except ValueError:
        return "?"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _print_rows(rows: list[PendingCall]) -> None:
    if not rows:
        print("no tool calls are waiting for approval")
        return
    now = datetime.now(UTC)
    for r in rows:
        timeout = f", rejected after {r.timeout_s:g}s" if r.timeout_s is not None else ""
        print(
            f"{r.plan}  {r.call}  {r.agent}  {r.tool}  waiting {_age(r.since, now)} "
            f"(since {r.since}{timeout})"
        )
        print(f"    arguments: {scrub_secrets(r.arguments)}")
    print(
        "\napprove: dplan approve PLAN CALL [--args JSON]; reject: dplan reject PLAN CALL "
        "--reason TEXT"
    )


async def approvals_command(
    plan_id: str | None, *, json_output: bool = False, settings: Settings | None = None
) -> int:
    """List waiting calls of one plan (or of every running plan). 0 listed, 1 not."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        client = await Client.connect(read_settings(settings))
        calls = await client.approvals(plan_id)
        if json_output:
            print(json.dumps([asdict(c) for c in calls], indent=2))
        else:
            _print_rows(calls)
        return Exit.OK

    return await reported(body())


async def decide_command(
    plan_id: str,
    call: str,
    *,
    approve: bool,
    operator: str | None,
    reason: str = "",
    arguments: str | None = None,
    json_output: bool = False,
    settings: Settings | None = None,
) -> int:
    """Approve or reject one call. 0 decided, 1 refused or unreachable, 2 bad input."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        check_decision(call, arguments)  # bad input is exit 2 before any connection
        client = await Client.connect(read_settings(settings), operator=operator)
        if approve:
            decision = await client.approve(plan_id, call, arguments=arguments)
        else:
            decision = await client.reject(plan_id, call, reason=reason)
        who = client.operator
        if json_output:
            print(decision.model_dump_json(indent=2))
        elif decision.approved:
            edited = " with the given arguments" if decision.arguments is not None else ""
            print(f"approved {decision.tool} call {call} of plan {plan_id}{edited} (by {who})")
        else:
            print(f"rejected {decision.tool} call {call} of plan {plan_id} (by {who})")
        return Exit.OK

    return await reported(body())
