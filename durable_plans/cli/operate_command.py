"""``dplan retry``, ``resume``, ``skip``, ``budget`` and ``cancel``: an operator steps in.

Each is one call of ``Client``; this module only prints what it returned. Exit codes: 0
done (retry: the plan completed), 1 the request was refused (nothing changed), Temporal
could not be used or the retried plan failed, 2 the arguments are invalid.
"""

from __future__ import annotations

import contextlib

from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, err, read_settings, reported
from durable_plans.cli.run_command import follow_to_report, open_connection
from durable_plans.client import Client, InvalidArgument
from durable_plans.client._plans import web_url
from durable_plans.settings import Settings

__all__ = ["budget_command", "cancel_command", "retry_command", "subtask_command"]


async def subtask_command(
    action: str,
    plan_id: str,
    subtask: str,
    *,
    operator: str | None = None,
    settings: Settings | None = None,
) -> int:
    """``dplan resume|skip PLAN SUBTASK``."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        client = await Client.connect(read_settings(settings), operator=operator)
        act = client.resume if action == "resume" else client.skip
        print(await act(plan_id, subtask))
        return Exit.OK

    return await reported(body())


def check_budget(max_tokens: int | None, max_cost_usd: float | None) -> None:
    """The new limits can be right; ``InvalidArgument`` naming the problem when not."""
    if max_tokens is None and max_cost_usd is None:
        raise InvalidArgument("name a new limit: --max-tokens N and/or --max-cost-usd X")
    for flag, value in (("--max-tokens", max_tokens), ("--max-cost-usd", max_cost_usd)):
        if value is not None and value < 0:
            raise InvalidArgument(f"{flag} must be zero or more, not {value:g}")


async def budget_command(
    plan_id: str,
    *,
    max_tokens: int | None,
    max_cost_usd: float | None,
    operator: str | None = None,
    settings: Settings | None = None,
) -> int:
    """``dplan budget PLAN --max-tokens N --max-cost-usd X``."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        check_budget(max_tokens, max_cost_usd)
        client = await Client.connect(read_settings(settings), operator=operator)
        resumed = await client.raise_budget(
            plan_id, max_tokens=max_tokens, max_cost_usd=max_cost_usd
        )
        limits = [f"max_tokens={max_tokens}"] if max_tokens is not None else []
        limits += [f"max_cost_usd={max_cost_usd:g}"] if max_cost_usd is not None else []
        print(f"budget of plan '{plan_id}' set ({', '.join(limits)})")
        print(f"resumed: {', '.join(resumed)}" if resumed else "no subtask was paused on it")
        return Exit.OK

    return await reported(body())


async def cancel_command(plan_id: str, *, settings: Settings | None = None) -> int:
    """``dplan cancel PLAN``: ask a running plan to stop (it ends ``cancelled``)."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        client = await Client.connect(read_settings(settings))
        await client.cancel(plan_id)
        print(f"plan '{plan_id}' is cancelling; `dplan status {plan_id}` shows where it stopped")
        return Exit.OK

    return await reported(body())


async def retry_command(
    plan_id: str,
    *,
    subtasks: list[str],
    embedded: bool,
    json_output: bool,
    no_wait: bool,
    settings: Settings | None = None,
) -> int:
    """``dplan retry PLAN [--subtask ID ...]``: a new run keeping what completed."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        async with contextlib.AsyncExitStack() as stack:
            conn = await open_connection(
                stack,
                read_settings(settings),
                embedded=embedded,
                no_wait=no_wait,
                waiting="the retry waits",
            )
            rerun = await conn.plans.retry(plan_id, subtasks)
            err(f"retrying plan '{plan_id}': {', '.join(rerun)} (the rest is kept)")
            if no_wait:
                print(plan_id)
                return Exit.OK
            url = (
                web_url(conn.ui_base, conn.settings.temporal_namespace, plan_id)
                if conn.ui_base
                else None
            )
            return await follow_to_report(conn, plan_id, url, json_output=json_output)

    return await reported(body(), suggest_embedded=not embedded)
