"""``dplan run`` and ``dplan status``: the command bodies, separate from argument parsing.

Exit codes: 0 the plan completed (or, for ``status``, is running or completed), 1 it
failed or was cancelled, or Temporal could not be used, 2 the input was invalid.

Output discipline: with ``--json`` stdout carries exactly one JSON document (the report)
so it can be piped into ``jq``; every note, warning and error goes to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable
from dataclasses import asdict, dataclass
from datetime import UTC
from pathlib import Path
from typing import Any, Final, TypeVar

from rich.console import Console

from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, Usage, err, read_settings, reported
from durable_plans.cli.progress import follow_progress, report_renderable
from durable_plans.cli.workspace_lines import workspace_hints
from durable_plans.client import (
    Client,
    InvalidPlan,
    PlanAlreadyRunning,
    PlanWatch,
    RunSummary,
    agents_of,
    load_plan,
)
from durable_plans.domain.models import (
    DeliveryOutcome,
    DeliveryStatus,
    Plan,
    PlanReport,
    PlanStatus,
)
from durable_plans.domain.plan_log import describe_entry
from durable_plans.embedded import (
    EmbeddedTemporal,
    RunningWorker,
    is_reachable,
    run_in_process_worker,
)
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings
from durable_plans.temporal_client import connect, ui_base_for, web_url

T = TypeVar("T")

__all__ = [
    "Connection",
    "follow_to_report",
    "open_connection",
    "print_report",
    "run_plan",
    "status_command",
]

_PLAIN_WIDTH = 120


FOLLOWED_IN_TERMINAL: Final = 10
"""How many running subtasks a terminal follows (the first in plan order)."""


def terminal_watch(plans: Client, plan_id: str) -> PlanWatch:
    """What a terminal follows of a plan's running subtasks: as many as it shows, their
    streams only where this configuration streams plan calls (``Client.live``)."""
    return plans.live(plan_id, at_most=FOLLOWED_IN_TERMINAL, streams=plans.settings.stream == "all")


def scripted_model_note(settings: Settings) -> str:
    return (
        f"note: the worker in this process uses the built-in scripted model "
        f"({settings.model}): offline, canned answers, no LLM is called.\n"
        "  For a real model set DPLAN_MODEL (a litellm model name, e.g. openrouter/...),\n"
        "  and DPLAN_API_BASE / DPLAN_API_KEY for an OpenAI-compatible endpoint or proxy."
    )


def print_report(
    report: PlanReport, *, json_output: bool, url: str | None, settings: Settings | None = None
) -> None:
    """The report; with ``settings``, then how to look at the plan's result branch."""
    if json_output:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
        sys.stdout.flush()
        return
    console = Console()
    if not console.is_terminal:  # a log or pipe: no terminal width to respect
        console = Console(width=max(console.width, _PLAIN_WIDTH))
    console.print(report_renderable(report, web_url=url))
    if settings is not None:
        hints = workspace_hints(
            report, settings.workspace, remote=settings.workspace_remote is not None
        )
        for line in hints:
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def exit_code(report: PlanReport) -> int:
    return Exit.OK if report.status is PlanStatus.COMPLETED else Exit.FAILED


async def run_plan(
    path: str,
    *,
    embedded: bool,
    json_output: bool,
    no_wait: bool,
    settings: Settings | None = None,
) -> int:
    """Validate PLAN, start it, and (unless ``no_wait``) follow it to its report."""
    # Warnings only, as text: an in-process worker's INFO lines would bury the progress.
    ensure_logging(json=False, level="WARNING")
    plan: Plan | None = None

    async def body() -> int:
        nonlocal plan
        resolved = read_settings(settings)
        try:
            plan = load_plan(path, agents=agents_of(resolved))
        except InvalidPlan as error:
            raise InvalidPlan(f"invalid plan: {path}", error.problems) from None
        return await _run(
            plan, resolved, embedded=embedded, json_output=json_output, no_wait=no_wait
        )

    try:
        return await reported(body(), suggest_embedded=not embedded)
    except asyncio.CancelledError:
        # Ctrl-C stops this process, not the plan: it is durable and carries on (or
        # resumes, when its worker was the one in this process) without us.
        if plan is not None:
            again = f"dplan run {path} --embedded" if embedded else f"dplan status {plan.id}"
            err(f"\nstopped following plan '{plan.id}'; it is not cancelled (see `{again}`).")
        raise


@dataclass
class Connection:
    """A client, plus the server and worker this process hosts when ``--embedded`` asks."""

    plans: Client
    ui_base: str | None
    worker: RunningWorker | None  # set when this process hosts the worker
    embedded_db: Path | None = None  # set when this process started the dev server

    @property
    def settings(self) -> Settings:
        """With the address actually in use."""
        return self.plans.settings

    def watch(self, awaitable: Awaitable[T]) -> Awaitable[T]:
        """``awaitable``, failing with ``WorkerDied`` if this process's worker stops first
        (waiting on a workflow whose only worker is dead would never end)."""
        return self.worker.watch(awaitable) if self.worker is not None else awaitable


_NO_WAIT_EMBEDDED = (
    "error: --no-wait with --embedded needs a server and worker that outlive this command, "
    "but {what} would run inside it and stop when it exits.\n"
    "  Start them separately (`temporal server start-dev`, `dplan-worker`), or drop --no-wait."
)


async def open_connection(
    stack: contextlib.AsyncExitStack,
    settings: Settings,
    *,
    embedded: bool,
    no_wait: bool = False,
    waiting: str = "the plan waits",
    operator: str | None = None,
) -> Connection:
    """Connect, hosting the server and/or worker in this process when embedded needs it.

    A worker already polling the task queue is used rather than joined: an in-process
    worker would take a share of the plan with this shell's settings (model, key), which
    may not be the ones the operator gave the real workers.
    """
    ui_base: str | None = ui_base_for(settings)
    embedded_db: Path | None = None
    if embedded:
        if no_wait and not await is_reachable(settings.temporal_address):
            raise Usage(_NO_WAIT_EMBEDDED.format(what="the Temporal server"))
        server = await stack.enter_async_context(EmbeddedTemporal(settings))
        settings = server.client_settings(settings)
        ui_base = server.ui_url
        if server.started:
            embedded_db = server.db_path
            err(
                f"started a Temporal dev server at {server.address} "
                f"(Web UI {server.ui_url}, state in {server.db_path})"
            )
    plans = Client(await connect(settings, identity=operator), settings, operator=operator)

    workers = await plans.worker_count()
    if workers:
        if embedded:
            err(f"using the {workers} worker(s) already polling '{settings.task_queue}'")
        return Connection(plans, ui_base, None, embedded_db)
    if not embedded:
        err(
            f"warning: no worker is polling task queue '{settings.task_queue}' at "
            f"{settings.temporal_address}; {waiting} until one starts (dplan-worker)."
        )
        return Connection(plans, ui_base, None)
    if no_wait:
        raise Usage(_NO_WAIT_EMBEDDED.format(what="the worker"))
    store = await open_session_store(settings.session_store)
    stack.push_async_callback(store.close)
    plans.use_plan_store(store)  # the worker's own: big plans go there by reference
    running = await stack.enter_async_context(
        run_in_process_worker(plans.temporal, settings, store)
    )
    if settings.model_is_scripted:
        err(scripted_model_note(settings))
    return Connection(plans, ui_base, running, embedded_db)


async def _run(
    plan: Plan, settings: Settings, *, embedded: bool, json_output: bool, no_wait: bool
) -> int:
    async with contextlib.AsyncExitStack() as stack:
        conn = await open_connection(stack, settings, embedded=embedded, no_wait=no_wait)
        url = (
            web_url(conn.ui_base, conn.settings.temporal_namespace, plan.id)
            if conn.ui_base
            else None
        )
        try:
            await conn.plans.start(plan)
        except PlanAlreadyRunning as error:
            if conn.worker is None:
                raise
            # Typically a plan whose earlier `run --embedded` was interrupted: its state
            # is in the server's database and this process's worker resumes it.
            err(f"{error}; resuming it with this process's worker")

        if no_wait:
            _announce_started(plan, url, json_output=json_output)
            return Exit.OK
        return await follow_to_report(conn, plan.id, url, json_output=json_output, plan=plan)


async def follow_to_report(
    conn: Connection,
    plan_id: str,
    url: str | None,
    *,
    json_output: bool,
    plan: Plan | None = None,
) -> int:
    """Show the plan's progress until it ends, print its report, return the exit code."""
    result: asyncio.Future[PlanReport] = asyncio.ensure_future(
        conn.watch(conn.plans.report(plan_id))
    )
    try:
        if not json_output:
            await follow_progress(
                lambda: conn.plans.live_status(plan_id),
                plan=plan,
                plan_id=plan_id,
                web_url=url,
                until=result,
                watch=terminal_watch(conn.plans, plan_id),
            )
        report = await result
    finally:
        result.cancel()
    print_report(report, json_output=json_output, url=url, settings=conn.settings)
    if conn.embedded_db is not None and url:
        temporal = Path(sys.executable).parent / "temporal"
        err(
            "the embedded server stops with this command; its history is kept. To browse "
            f"this run in Temporal Web:\n  {temporal} server start-dev --db-filename "
            f"{conn.embedded_db}   # then open {url}"
        )
    return exit_code(report)


def _announce_started(plan: Plan, url: str | None, *, json_output: bool) -> None:
    if json_output:
        document: dict[str, Any] = {"plan_id": plan.id, "status": "running", "web_url": url}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        print(plan.id)
        if url:
            print(url)


def describe_notification(outcome: DeliveryOutcome) -> str:
    """One line on a plan's webhook for ``dplan status``: delivered, failed (why), or under
    way."""
    tries = f"{outcome.attempts} attempt{'s' if outcome.attempts != 1 else ''}"
    answer = f"HTTP {outcome.last_status}" if outcome.last_status is not None else "no answer"
    if outcome.status is DeliveryStatus.DELIVERED:
        return f"webhook: delivered ({answer}, {tries}; webhook-id {outcome.webhook_id})"
    if outcome.status is DeliveryStatus.FAILED:
        return f"webhook: FAILED after {tries}: {outcome.reason or answer}"
    return f"webhook: delivering (webhook-id {outcome.webhook_id})"


def print_log(report: PlanReport) -> None:
    """The plan's decisions under its report, oldest first: pauses, resumes, skips,
    budgets, approvals, rejections, cancels, retries and edits, with who and when."""
    if not report.log:
        return
    dropped = f" ({report.log_omitted} older not kept)" if report.log_omitted else ""
    print(f"log{dropped}:")
    for entry in report.log:
        print(f"  {describe_entry(entry)}")


def describe_run(run: RunSummary) -> str:
    """``run 1  failed  2026-11-27 23:40:31 → 23:40:32  RUN_ID``: one run of a plan."""
    when = "%Y-%m-%d %H:%M:%S"
    ended = run.closed_at.astimezone(UTC).strftime(when) if run.closed_at else "…"
    latest = "  (latest)" if run.latest else ""
    return (
        f"run {run.number}  {run.status:<10} {run.started_at.astimezone(UTC).strftime(when)} → "
        f"{ended} UTC  {run.run_id}{latest}"
    )


async def status_command(
    plan_id: str,
    *,
    json_output: bool,
    settings: Settings | None = None,
    follow: bool = False,
    run: str | None = None,
    runs: bool = False,
) -> int:
    """Print a plan's live (or final) report; 0 running/completed, 1 failed/cancelled.

    ``follow``: show its progress (each running subtask's step and latest text) until it
    ends, then print the final report; the exit code is then the plan's outcome. ``run``:
    an earlier run's report instead; ``runs``: list the runs (exit 0)."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        resolved = read_settings(settings)
        plans = Client(await connect(resolved), resolved)
        url = web_url(resolved, resolved.temporal_namespace, plan_id)
        if runs:
            listed = await plans.runs(plan_id)
            if json_output:
                rows = [{**asdict(r), "started_at": r.started_at.isoformat(),
                         "closed_at": r.closed_at.isoformat() if r.closed_at else None}
                        for r in listed]  # fmt: skip
                sys.stdout.write(json.dumps(rows, indent=2) + "\n")
            else:
                for each in listed:
                    print(describe_run(each))
            return Exit.OK
        report = await plans.status(plan_id, run=run)
        if follow and not report.finished:
            report = await _follow(plans, plan_id, url, json_output=json_output)
        # The webhook's outcome and the edits are the latest run's (its memo).
        notification = None if run else await plans.notification(plan_id)
        edits = [] if run else await plans.edits(plan_id)
        if json_output and (notification is not None or edits):
            # The report's fields as they are, plus how its webhook went and who edited
            # which subtasks: neither is part of the report (the delivery never changes
            # it, an edit is the operator's), but a script asking for the status wants all.
            document = report.model_dump(mode="json")
            if notification is not None:
                document["notification"] = notification.model_dump(mode="json")
            if edits:
                document["edits"] = [e.model_dump(mode="json") for e in edits]
            sys.stdout.write(json.dumps(document, indent=2) + "\n")
            sys.stdout.flush()
        else:
            print_report(report, json_output=json_output, url=url, settings=resolved)
        if not json_output:
            print_log(report)
            if notification is not None:
                print(describe_notification(notification))
            if run is None and (count := len(await plans.runs(plan_id))) > 1:
                print(f"runs: {count} (this is the latest; `dplan status {plan_id} --runs`)")
        if follow:
            return exit_code(report)
        ok = (PlanStatus.RUNNING, PlanStatus.PAUSED, PlanStatus.COMPLETED)
        return Exit.OK if report.status in ok else Exit.FAILED

    return await reported(body())


async def _follow(plans: Client, plan_id: str, url: str, *, json_output: bool) -> PlanReport:
    """Follow a running plan to its end (``dplan status --follow``); its final report."""
    result: asyncio.Future[PlanReport] = asyncio.ensure_future(plans.report(plan_id))
    try:
        if not json_output:
            await follow_progress(
                lambda: plans.live_status(plan_id),
                plan_id=plan_id,
                web_url=url,
                until=result,
                watch=terminal_watch(plans, plan_id),
            )
        return await result
    finally:
        result.cancel()
