"""``dplan plan "GOAL"``: let the orchestrator agent plan a goal, then follow the plan.

The goal goes to a conversation (``SessionWorkflow``, new or ``--session``) as a
``plan_goal`` update: the orchestrator writes the plan with its ``create_plan`` tool and
the session starts it as a child ``PlanWorkflow``. From there this command behaves like
``dplan run``: the same live progress, the same report, the same exit codes (0 completed,
1 failed / cancelled / no plan started / Temporal unusable, 2 invalid input).

With ``--json`` stdout carries exactly one JSON document: the report, or an array of
reports when the orchestrator started several plans; everything else goes to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

from pydantic import ValidationError

from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, Usage, err, read_settings, reported
from durable_plans.cli.progress import follow_progress
from durable_plans.cli.run_command import Connection, open_connection, print_report
from durable_plans.client import (
    SessionCommandError,
    agents_of,
    check_session_id,
    new_session_id,
)
from durable_plans.domain.models import PlanReport, PlanStatus
from durable_plans.domain.session_contracts import (
    PlanGoalInput,
)
from durable_plans.settings import Settings
from durable_plans.temporal_client import web_url

__all__ = ["plan_goal_command"]


async def plan_goal_command(
    goal: str,
    *,
    embedded: bool,
    session_id: str | None,
    json_output: bool,
    settings: Settings | None = None,
) -> int:
    """Plan ``goal`` in a conversation and follow every plan it starts to its report."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        resolved = read_settings(settings)
        agents_of(resolved)  # a bad agents file is exit 2 before any connection
        problem = _goal_problem(goal)
        if problem is None and session_id is not None:
            problem = check_session_id(session_id)
        if problem is not None:
            raise Usage(f"error: {problem}")
        async with contextlib.AsyncExitStack() as stack:
            conn = await open_connection(stack, resolved, embedded=embedded)
            return await _plan_and_follow(
                conn, goal.strip(), session_id or new_session_id(), json_output
            )

    try:
        return await reported(body(), suggest_embedded=not embedded)
    except asyncio.CancelledError:
        # Ctrl-C stops this process, not the plans nor the conversation: both are durable.
        err("\nstopped following; the plans are not cancelled (see `dplan status PLAN_ID`).")
        raise


def _goal_problem(goal: str) -> str | None:
    try:
        PlanGoalInput(goal=goal.strip())
    except ValidationError as err:
        return "invalid goal: " + "; ".join(str(e["msg"]) for e in err.errors())
    return None


async def _plan_and_follow(
    conn: Connection,
    goal: str,
    session_id: str,
    json_output: bool,
) -> int:
    conversation = await conn.plans.conversation(session_id)
    err(f"conversation {session_id} (continue it with: dplan chat --session {session_id})")
    err("planning…")
    try:
        result = await conn.watch(conversation.plan(goal))
    except SessionCommandError as refused:
        err(f"error: {refused.type}: {refused.message}")
        return Exit.FAILED
    # The orchestrator's words are commentary; in --json mode stdout is for the report.
    answer = f"{result.agent}: {result.answer}"
    if json_output or not result.plan_ids:
        err(answer)
    else:
        print(answer, flush=True)
    if not result.plan_ids:
        err("error: the orchestrator started no plan for this goal")
        return Exit.FAILED

    reports = [await _follow(conn, plan_id, json_output=json_output) for plan_id in result.plan_ids]
    if json_output:
        document: Any = (
            reports[0].model_dump(mode="json")
            if len(reports) == 1
            else [r.model_dump(mode="json") for r in reports]
        )
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        sys.stdout.flush()
    completed = all(r.status is PlanStatus.COMPLETED for r in reports)
    return Exit.OK if completed else Exit.FAILED


async def _follow(conn: Connection, plan_id: str, *, json_output: bool) -> PlanReport:
    """Show ``plan_id``'s progress until it ends; return (and, unless JSON, print) its
    report, whose status is the plan's real outcome as Temporal recorded it."""
    url = web_url(conn.ui_base, conn.settings.temporal_namespace, plan_id) if conn.ui_base else None
    result: asyncio.Future[PlanReport] = asyncio.ensure_future(
        conn.watch(conn.plans.report(plan_id))
    )
    try:
        if not json_output:
            await follow_progress(
                lambda: conn.plans.live_status(plan_id), plan_id=plan_id, web_url=url, until=result
            )
        report = await result
    finally:
        result.cancel()
    if not json_output:  # the report, then how to look at the plan's result branch
        print_report(report, json_output=False, url=url, settings=conn.settings)
    return report
