"""``dplan schedule create|list|pause|unpause|trigger|delete``: recurring plans as Temporal
Schedules (``client/_schedules.py``)."""

from __future__ import annotations

import json

from durable_plans._errors import DurationError
from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, Usage, read_settings, reported
from durable_plans.client import Client, InvalidPlan
from durable_plans.domain.durations import parse_duration
from durable_plans.settings import Settings


async def schedule_create_command(
    schedule_id: str,
    path: str,
    *,
    cron: str | None,
    every: str | None,
    overlap: str,
    paused: bool,
    settings: Settings | None = None,
) -> int:
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        if (cron is None) == (every is None):
            raise Usage("error: name when it runs: --cron EXPR or --every DURATION")
        try:
            interval = parse_duration(every) if every is not None else None
        except DurationError as err:
            raise Usage(f"error: --every {every!r}: {err}") from None
        client = await Client.connect(read_settings(settings))
        try:
            await client.create_schedule(
                schedule_id, path, cron=cron, every=interval, overlap=overlap, paused=paused
            )
        except InvalidPlan as error:
            raise InvalidPlan(f"invalid plan: {path}", error.problems) from None
        when = f"cron {cron}" if cron else f"every {every}"
        print(
            f"schedule '{schedule_id}' created ({when}, overlap {overlap}"
            + (", paused" if paused else "")
            + f"); its plans: dplan list --schedule {schedule_id}"
        )
        return Exit.OK

    return await reported(body())


async def schedule_list_command(*, json_output: bool, settings: Settings | None = None) -> int:
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        client = await Client.connect(read_settings(settings))
        rows = await client.schedules()
        if json_output:
            print(json.dumps([r.to_json() for r in rows], indent=2))
            return Exit.OK
        if not rows:
            print("no schedules")
        for r in rows:
            state = "paused" if r.paused else "active"
            nxt = r.next_runs[0].isoformat(timespec="seconds") if r.next_runs else "-"
            last = r.recent_plans[-1] if r.recent_plans else "-"
            print(f"{r.schedule_id}  {state}  {r.spec}  next {nxt}  last plan {last}  {r.goal}")
        return Exit.OK

    return await reported(body())


async def schedule_action_command(
    action: str, schedule_id: str, *, settings: Settings | None = None
) -> int:
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        client = await Client.connect(read_settings(settings))
        act = {
            "pause": client.pause_schedule,
            "unpause": client.unpause_schedule,
            "trigger": client.trigger_schedule,
            "delete": client.delete_schedule,
        }[action]
        await act(schedule_id)
        done = {"trigger": "triggered: a plan starts now"}.get(action, f"{action}d")
        print(f"schedule '{schedule_id}' {done}")
        return Exit.OK

    return await reported(body())
