"""Recurring plans as Temporal Schedules (``dplan schedule``, ``Client.create_schedule``).

A nightly dependency bump needs no cron and no script: a Schedule starts the plan, shows in
Temporal Web, and survives whatever Temporal survives (overlap policy, pause, trigger).
Each run is an ordinary plan: the schedule sends the plan without its id, so the run takes
its workflow id, which Temporal makes ``SCHEDULE-<time>``; Temporal also marks every run
with ``TemporalScheduledById``, which ``dplan list --schedule`` filters on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.service import RPCError, RPCStatusCode

from durable_plans._errors import InvalidArgument, Refused
from durable_plans.client._plans import plan_priority
from durable_plans.domain.agents import AgentCatalog
from durable_plans.domain.contracts import PLAN_TASK_TIMEOUT, PLAN_WORKFLOW
from durable_plans.domain.models import Plan
from durable_plans.domain.plan_loader import ID_RULE, is_valid_id
from durable_plans.domain.secrets import scrub_secrets

__all__ = ["OVERLAP_POLICIES", "ScheduleSummary", "create_schedule", "list_schedules"]

OVERLAP_POLICIES: Final = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer-one": ScheduleOverlapPolicy.BUFFER_ONE,
    "allow-all": ScheduleOverlapPolicy.ALLOW_ALL,
}
# Every run's workflow id is ``SCHEDULE-<time>``: the schedule id leaves room for it.
MAX_SCHEDULE_ID = 100


@dataclass(frozen=True)
class ScheduleSummary:
    """One schedule, as ``dplan schedule list`` shows it."""

    schedule_id: str
    goal: str
    spec: str
    paused: bool
    next_runs: tuple[datetime, ...]
    recent_plans: tuple[str, ...]  # the plan ids of its latest runs, oldest first

    def to_json(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "goal": self.goal,
            "spec": self.spec,
            "paused": self.paused,
            "next_runs": [t.isoformat() for t in self.next_runs],
            "recent_plans": list(self.recent_plans),
        }


def _spec(cron: str | None, every: timedelta | None) -> ScheduleSpec:
    if (cron is None) == (every is None):
        raise InvalidArgument("name when it runs: a cron expression or an interval, one of them")
    if every is not None:
        if every < timedelta(seconds=1):
            raise InvalidArgument(f"the interval must be a second or more, not {every}")
        return ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)])
    assert cron is not None
    if len(cron.split()) not in (5, 6, 7) and not cron.startswith("@"):
        raise InvalidArgument(f"cron {cron!r}: expected 5 fields (minute hour day month weekday)")
    return ScheduleSpec(cron_expressions=[cron])


def _describe_spec(spec: ScheduleSpec) -> str:
    if spec.cron_expressions:
        return "cron " + " | ".join(spec.cron_expressions)
    if spec.intervals:
        return "every " + ", ".join(str(i.every) for i in spec.intervals)
    return "calendar"


async def create_schedule(
    client: Client,
    schedule_id: str,
    plan: Plan,
    catalog: AgentCatalog | None,
    task_queue: str,
    *,
    cron: str | None = None,
    every: timedelta | None = None,
    overlap: str = "skip",
    paused: bool = False,
) -> None:
    """A Temporal Schedule that starts ``plan`` (validated by the caller) as a new plan
    each time it fires."""
    if not is_valid_id(schedule_id) or len(schedule_id) > MAX_SCHEDULE_ID:
        raise InvalidArgument(
            f"schedule id {schedule_id!r}: {ID_RULE}, at most {MAX_SCHEDULE_ID} characters"
        )
    policy = OVERLAP_POLICIES.get(overlap)
    if policy is None:
        raise InvalidArgument(
            f"overlap {overlap!r}: one of {', '.join(OVERLAP_POLICIES)} (what a run that "
            "comes while the last one still runs does)"
        )
    spec = _spec(cron, every)
    body = plan.model_dump(mode="json", exclude_none=True, exclude={"id"})
    arg: dict[str, Any] = {"plan": body}
    if catalog is not None and catalog.agents:
        arg["agents"] = [a.model_dump(mode="json", exclude_none=True) for a in catalog.agents]
    goal = scrub_secrets(plan.goal)[:200]
    action = ScheduleActionStartWorkflow(
        PLAN_WORKFLOW,
        arg,
        id=schedule_id,
        task_queue=task_queue,
        task_timeout=PLAN_TASK_TIMEOUT,
        memo={"goal": goal, "subtask_count": len(plan.subtasks)},
        static_summary=f"schedule {schedule_id}" + (f": {goal[:100]}" if goal else ""),
        priority=plan_priority(plan),
    )
    try:
        await client.create_schedule(
            schedule_id,
            Schedule(
                action=action,
                spec=spec,
                policy=SchedulePolicy(overlap=policy),
                state=ScheduleState(paused=paused, note="dplan schedule create"),
            ),
            memo={"goal": goal},
        )
    except ScheduleAlreadyRunningError:
        raise Refused(f"a schedule with id '{schedule_id}' exists already") from None


async def list_schedules(client: Client) -> list[ScheduleSummary]:
    out: list[ScheduleSummary] = []
    async for entry in await client.list_schedules():
        info = entry.info
        actions = info.recent_actions if info is not None else []
        recent = tuple(getattr(a.action, "workflow_id", "") for a in actions)
        goal: Any = None
        try:
            goal = await entry.memo_value("goal", "")
        except Exception:  # another codec's memo: no goal to show
            goal = ""
        out.append(
            ScheduleSummary(
                schedule_id=entry.id,
                goal=str(goal or ""),
                spec=_describe_spec(entry.schedule.spec) if entry.schedule else "",
                paused=bool(entry.schedule and entry.schedule.state.paused),
                next_runs=tuple(info.next_action_times[:3]) if info else (),
                recent_plans=tuple(r for r in recent if r),
            )
        )
    return sorted(out, key=lambda s: s.schedule_id)


async def act_on_schedule(client: Client, schedule_id: str, action: str) -> None:
    """``pause``, ``unpause``, ``trigger`` or ``delete``; ``Refused`` for no such schedule."""
    handle = client.get_schedule_handle(schedule_id)
    note = f"dplan schedule {action}"
    try:
        if action == "pause":
            await handle.pause(note=note)
        elif action == "unpause":
            await handle.unpause(note=note)
        elif action == "trigger":
            # Started now whatever runs: an operator asking for a run gets one.
            await handle.trigger(overlap=ScheduleOverlapPolicy.ALLOW_ALL)
        elif action == "delete":
            await handle.delete()
        else:
            raise InvalidArgument(f"unknown schedule action {action!r}")
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            raise Refused(f"no schedule with id '{schedule_id}'") from None
        raise
