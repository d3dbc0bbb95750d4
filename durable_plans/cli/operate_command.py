"""``dplan retry``, ``resume``, ``skip``, ``budget`` and ``cancel``: an operator steps in.

Each is one call of ``Client``; this module only prints what it returned (and reads
``retry --set``'s words into the client's ``SubtaskChanges`` before connecting). Exit codes: 0
done (retry: the plan completed), 1 the request was refused (nothing changed), Temporal
could not be used or the retried plan failed, 2 the arguments are invalid.
"""

from __future__ import annotations

import contextlib

from durable_plans._errors import OperatorError, PlanValidationError
from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, Usage, err, read_settings, reported
from durable_plans.cli.run_command import follow_to_report, open_connection
from durable_plans.client import Client, InvalidArgument, agents_of, check_changes
from durable_plans.domain.models import Subtask
from durable_plans.domain.operations import SubtaskChanges
from durable_plans.domain.plan_loader import read_plan_file, subtasks_from_data
from durable_plans.settings import Settings
from durable_plans.temporal_client import web_url

__all__ = [
    "budget_command",
    "cancel_command",
    "retry_changes",
    "retry_command",
    "subtask_command",
]


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


async def edit_command(
    plan_id: str,
    subtask: str,
    assignments: list[str],
    *,
    operator: str | None = None,
    settings: Settings | None = None,
) -> int:
    """``dplan edit PLAN SUBTASK --set FIELD=VALUE ...``: change a paused subtask and run
    it again. A word that is not field=value, or no --set at all, is a usage error (exit
    2) before anything connects; the plan judges the values."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        if not assignments:
            raise Usage("error: name a change: --set description=..., agent=... or model=...")
        changes = parsed_changes(assignments)
        client = await Client.connect(read_settings(settings), operator=operator)
        print(await client.edit(plan_id, subtask, changes))
        return Exit.OK

    return await reported(body())


async def add_command(
    plan_id: str,
    path: str,
    *,
    remove: list[str],
    reason: str = "",
    operator: str | None = None,
    settings: Settings | None = None,
) -> int:
    """``dplan add PLAN FILE [--remove ID ...]``: revise a running plan. FILE's subtasks
    are checked before anything connects (exit 2, each problem on its line); the plan
    judges the rest (ids, dependencies, agents, cycles: exit 1, refused)."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        add: tuple[Subtask, ...] = ()
        if path != "-" or not remove:
            try:
                add = subtasks_from_data(read_plan_file(path), source=path)
            except PlanValidationError as error:
                raise InvalidArgument(
                    f"error: {path}: no subtasks to add", error.problems
                ) from None
        client = await Client.connect(read_settings(settings), operator=operator)
        revision = await client.revise(plan_id, add=add, remove=remove, reason=reason)
        print(f"revision {revision.number} of plan '{plan_id}': {revision.describe()}")
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


def parsed_changes(assignments: list[str]) -> SubtaskChanges:
    """``--set field=value`` words as changes; ``Usage`` (exit 2) for a word that is not
    field=value, an unknown field or a field set twice."""
    try:
        return SubtaskChanges.parse(assignments)
    except OperatorError as error:
        raise Usage(f"error: {error}") from None


def retry_changes(
    subtasks: list[str], assignments: list[str], settings: Settings
) -> dict[str, SubtaskChanges]:
    """``--set field=value`` for every ``--subtask``, checked before anything connects:
    ``Usage`` (one line, exit 2) for a word that is not field=value or names an unknown
    field, ``InvalidArgument`` (exit 2) for a value that cannot be right (an empty
    description, an agent the agents file and the built-ins lack, a bad model)."""
    if not assignments:
        return {}
    if not subtasks:
        raise Usage("error: --set changes a subtask: name it with --subtask ID")
    change = parsed_changes(assignments)
    return check_changes(dict.fromkeys(subtasks, change), agents_of(settings))


async def fork_command(
    plan_id: str,
    from_subtask: str,
    *,
    changes: list[str] | None = None,
    new_id: str | None = None,
    operator: str | None = None,
    embedded: bool,
    json_output: bool,
    no_wait: bool,
    settings: Settings | None = None,
) -> int:
    """``dplan fork PLAN --from SUBTASK [--set FIELD=VALUE ...] [--id NEW]``: a new plan
    that reuses what the original completed before SUBTASK and runs SUBTASK (changed) and
    what follows it; the original is left as it is."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        resolved = read_settings(settings)
        edits = retry_changes([from_subtask], changes or [], resolved)
        async with contextlib.AsyncExitStack() as stack:
            conn = await open_connection(
                stack,
                resolved,
                embedded=embedded,
                no_wait=no_wait,
                waiting="the fork waits",
                operator=operator,
            )
            fork = await conn.plans.fork(
                plan_id, from_subtask, changes=edits or None, new_id=new_id
            )
            err(
                f"forked plan '{plan_id}' at {from_subtask} as '{fork.plan_id}': runs "
                f"{', '.join(fork.rerun)} (the rest is reused; '{plan_id}' is unchanged)"
            )
            for sid, change in edits.items():
                err(f"  {sid}: {', '.join(change.fields)} changed by {conn.plans.operator}")
            if no_wait:
                print(fork.plan_id)
                return Exit.OK
            url = (
                web_url(conn.ui_base, conn.settings.temporal_namespace, fork.plan_id)
                if conn.ui_base
                else None
            )
            return await follow_to_report(conn, fork.plan_id, url, json_output=json_output)

    return await reported(body())


async def retry_command(
    plan_id: str,
    *,
    subtasks: list[str],
    changes: list[str] | None = None,
    operator: str | None = None,
    embedded: bool,
    json_output: bool,
    no_wait: bool,
    settings: Settings | None = None,
) -> int:
    """``dplan retry PLAN [--subtask ID ...] [--set FIELD=VALUE ...]``: a new run keeping
    what completed; with ``--set``, the named subtasks run again changed (edit and re-run)."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        resolved = read_settings(settings)
        edits = retry_changes(subtasks, changes or [], resolved)
        async with contextlib.AsyncExitStack() as stack:
            conn = await open_connection(
                stack,
                resolved,
                embedded=embedded,
                no_wait=no_wait,
                waiting="the retry waits",
                operator=operator,
            )
            rerun = await conn.plans.retry(plan_id, subtasks, changes=edits or None)
            err(f"retrying plan '{plan_id}': {', '.join(rerun)} (the rest is kept)")
            for sid, change in edits.items():
                err(f"  {sid}: {', '.join(change.fields)} changed by {conn.plans.operator}")
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
