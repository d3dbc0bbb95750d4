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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from temporalio.client import Client, WorkflowHandle

from durable_plans.activities.log import ensure_logging
from durable_plans.cli.plan_live import PlanWatch
from durable_plans.cli.progress import follow_progress, report_renderable
from durable_plans.client._plans import (
    InvalidPlanError,
    PlanAlreadyRunning,
    PlanClientError,
    TemporalUnreachable,
    connect,
    notification_outcome,
    plan_status,
    query_status,
    start_plan,
    ui_base_for,
    wait_for_report,
    web_url,
    worker_count,
)
from durable_plans.domain.agents import AgentCatalog
from durable_plans.domain.agents_loader import AgentsFileError, load_catalog
from durable_plans.domain.models import (
    DeliveryOutcome,
    DeliveryStatus,
    Plan,
    PlanReport,
    PlanStatus,
)
from durable_plans.domain.plan_loader import PlanValidationError, load_plan_file
from durable_plans.embedded import (
    EmbeddedServerError,
    EmbeddedTemporal,
    RunningWorker,
    WorkerDied,
    is_reachable,
    run_in_process_worker,
)
from durable_plans.session_store.factory import open_session_store
from durable_plans.settings import Settings, SettingsError

T = TypeVar("T")

__all__ = ["EXIT_FAILED", "EXIT_INVALID", "EXIT_OK", "run_plan", "status_command"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2

_PLAIN_WIDTH = 120


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def unreachable_message(err: TemporalUnreachable, *, suggest_embedded: bool) -> str:
    if suggest_embedded:
        return (
            f"error: {err}\n"
            "  Run with --embedded to start a local dev server and worker in this process,\n"
            "  or point TEMPORAL_ADDRESS (or a TEMPORAL_PROFILE) at a running server\n"
            "  (`temporal server start-dev`)."
        )
    return (
        f"error: {err}\n"
        "  Point TEMPORAL_ADDRESS (or a TEMPORAL_PROFILE) at the server the plan runs on\n"
        "  (default localhost:7233)."
    )


def scripted_model_note(settings: Settings) -> str:
    return (
        f"note: the worker in this process uses the built-in scripted model "
        f"({settings.model}): offline, canned answers, no LLM is called.\n"
        "  For a real model set DPLAN_MODEL (a litellm model name, e.g. openrouter/...),\n"
        "  and DPLAN_API_BASE / DPLAN_API_KEY for an OpenAI-compatible endpoint or proxy."
    )


def resolve_catalog(settings: Settings) -> AgentCatalog | None:
    try:
        return load_catalog(settings.agents_file)
    except AgentsFileError as err:
        _err(f"invalid agents file: {settings.agents_file}")
        for problem in err.problems:
            _err(f"  {problem}")
        return None


def _load(path: str, catalog: AgentCatalog) -> Plan | None:
    try:
        return load_plan_file(path, known_agents=catalog.names())
    except PlanValidationError as err:
        _err(f"invalid plan: {path}")
        for problem in err.problems:
            _err(f"  {problem}")
        return None


def resolve_settings(settings: Settings | None) -> Settings | None:
    if settings is not None:
        return settings
    try:
        return Settings.from_env()
    except SettingsError as err:
        _err(f"error: {err}")
        return None


def _print_report(report: PlanReport, *, json_output: bool, url: str | None) -> None:
    if json_output:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
        sys.stdout.flush()
    else:
        console = Console()
        if not console.is_terminal:  # a log or pipe: no terminal width to respect
            console = Console(width=max(console.width, _PLAIN_WIDTH))
        console.print(report_renderable(report, web_url=url))


def _exit_code(report: PlanReport) -> int:
    return EXIT_OK if report.status is PlanStatus.COMPLETED else EXIT_FAILED


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
    resolved = resolve_settings(settings)
    catalog = resolve_catalog(resolved) if resolved is not None else None
    plan = _load(path, catalog) if catalog is not None else None
    if plan is None or resolved is None or catalog is None:
        return EXIT_INVALID
    try:
        return await _run(
            plan, resolved, catalog, embedded=embedded, json_output=json_output, no_wait=no_wait
        )
    except TemporalUnreachable as err:
        _err(unreachable_message(err, suggest_embedded=not embedded))
    except InvalidPlanError as err:
        _err(f"error: {err}")
        return EXIT_INVALID
    except (PlanClientError, EmbeddedServerError, WorkerDied) as err:
        _err(f"error: {err}")
    except asyncio.CancelledError:
        # Ctrl-C stops this process, not the plan: it is durable and carries on (or
        # resumes, when its worker was the one in this process) without us.
        again = f"dplan run {path} --embedded" if embedded else f"dplan status {plan.id}"
        _err(f"\nstopped following plan '{plan.id}'; it is not cancelled (see `{again}`).")
        raise
    return EXIT_FAILED


@dataclass
class Connection:
    """A client, plus the server and worker this process hosts when ``--embedded`` asks."""

    client: Client
    settings: Settings  # with the address actually in use
    ui_base: str | None
    worker: RunningWorker | None  # set when this process hosts the worker
    embedded_db: Path | None = None  # set when this process started the dev server

    def watch(self, awaitable: Awaitable[T]) -> Awaitable[T]:
        """``awaitable``, failing with ``WorkerDied`` if this process's worker stops first
        (waiting on a workflow whose only worker is dead would never end)."""
        return self.worker.watch(awaitable) if self.worker is not None else awaitable


class _CannotNoWait(Exception):
    """``--no-wait --embedded`` would leave the plan with no server or worker."""


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
            raise _CannotNoWait(_NO_WAIT_EMBEDDED.format(what="the Temporal server"))
        server = await stack.enter_async_context(EmbeddedTemporal(settings))
        settings = server.client_settings(settings)
        ui_base = server.ui_url
        if server.started:
            embedded_db = server.db_path
            _err(
                f"started a Temporal dev server at {server.address} "
                f"(Web UI {server.ui_url}, state in {server.db_path})"
            )
    client = await connect(settings)

    workers = await worker_count(client, settings.task_queue)
    if workers:
        if embedded:
            _err(f"using the {workers} worker(s) already polling '{settings.task_queue}'")
        return Connection(client, settings, ui_base, None, embedded_db)
    if not embedded:
        _err(
            f"warning: no worker is polling task queue '{settings.task_queue}' at "
            f"{settings.temporal_address}; {waiting} until one starts (dplan-worker)."
        )
        return Connection(client, settings, ui_base, None)
    if no_wait:
        raise _CannotNoWait(_NO_WAIT_EMBEDDED.format(what="the worker"))
    store = await open_session_store(settings.session_store)
    stack.push_async_callback(store.close)
    running = await stack.enter_async_context(run_in_process_worker(client, settings, store))
    if settings.model_is_scripted:
        _err(scripted_model_note(settings))
    return Connection(client, settings, ui_base, running, embedded_db)


async def _run(
    plan: Plan,
    settings: Settings,
    catalog: AgentCatalog,
    *,
    embedded: bool,
    json_output: bool,
    no_wait: bool,
) -> int:
    async with contextlib.AsyncExitStack() as stack:
        try:
            conn = await open_connection(stack, settings, embedded=embedded, no_wait=no_wait)
        except _CannotNoWait as err:
            _err(str(err))
            return EXIT_INVALID
        url = (
            web_url(conn.ui_base, conn.settings.temporal_namespace, plan.id)
            if conn.ui_base
            else None
        )
        try:
            handle = await start_plan(conn.client, plan, conn.settings, catalog=catalog)
        except PlanAlreadyRunning as err:
            if conn.worker is None:
                raise
            # Typically a plan whose earlier `run --embedded` was interrupted: its state
            # is in the server's database and this process's worker resumes it.
            _err(f"{err}; resuming it with this process's worker")
            handle = conn.client.get_workflow_handle(plan.id, result_type=PlanReport)

        if no_wait:
            _announce_started(plan, url, json_output=json_output)
            return EXIT_OK
        return await follow_to_report(conn, handle, plan, url, json_output=json_output)


async def follow_to_report(
    conn: Connection,
    handle: WorkflowHandle[Any, PlanReport],
    plan: Plan,
    url: str | None,
    *,
    json_output: bool,
) -> int:
    """Show the plan's progress until it ends, print its report, return the exit code."""
    waiting = wait_for_report(handle)
    result: asyncio.Future[PlanReport] = asyncio.ensure_future(
        conn.worker.watch(waiting) if conn.worker else waiting
    )
    try:
        if not json_output:
            await follow_progress(
                lambda: query_status(handle),
                plan=plan,
                web_url=url,
                until=result,
                watch=PlanWatch(conn.client, plan.id),
            )
        report = await result
    finally:
        result.cancel()
    _print_report(report, json_output=json_output, url=url)
    if conn.embedded_db is not None and url:
        temporal = Path(sys.executable).parent / "temporal"
        _err(
            "the embedded server stops with this command; its history is kept. To browse "
            f"this run in Temporal Web:\n  {temporal} server start-dev --db-filename "
            f"{conn.embedded_db}   # then open {url}"
        )
    return _exit_code(report)


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


async def status_command(
    plan_id: str, *, json_output: bool, settings: Settings | None = None, follow: bool = False
) -> int:
    """Print a plan's live (or final) report; 0 running/completed, 1 failed/cancelled.

    ``follow``: show its progress (each running subtask's step and latest text) until it
    ends, then print the final report; the exit code is then the plan's outcome."""
    ensure_logging(json=False, level="WARNING")
    resolved = resolve_settings(settings)
    if resolved is None:
        return EXIT_INVALID
    try:
        client = await connect(resolved)
        report = await plan_status(client, plan_id)
        if follow and not report.finished:
            report = await _follow_status(client, plan_id, resolved, json_output=json_output)
        notification = await notification_outcome(client, plan_id)
    except TemporalUnreachable as err:
        _err(unreachable_message(err, suggest_embedded=False))
        return EXIT_FAILED
    except PlanClientError as err:
        _err(f"error: {err}")
        return EXIT_FAILED
    url = web_url(resolved, resolved.temporal_namespace, plan_id)
    if json_output and notification is not None:
        # The report's fields as they are, plus how its webhook went: the delivery is not
        # part of the report (it never changes it), but a script asking for the status
        # wants both.
        document = report.model_dump(mode="json")
        document["notification"] = notification.model_dump(mode="json")
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        sys.stdout.flush()
    else:
        _print_report(report, json_output=json_output, url=url)
        if notification is not None:
            print(describe_notification(notification))
    if follow:
        return _exit_code(report)
    ok = (PlanStatus.RUNNING, PlanStatus.PAUSED, PlanStatus.COMPLETED)
    return EXIT_OK if report.status in ok else EXIT_FAILED


async def _follow_status(
    client: Client, plan_id: str, settings: Settings, *, json_output: bool
) -> PlanReport:
    """Follow a running plan to its end (``dplan status --follow``); its final report."""
    handle: WorkflowHandle[Any, PlanReport] = client.get_workflow_handle(
        plan_id, result_type=PlanReport
    )
    url = web_url(settings, settings.temporal_namespace, plan_id)
    result: asyncio.Future[PlanReport] = asyncio.ensure_future(wait_for_report(handle))
    try:
        if not json_output:
            await follow_progress(
                lambda: query_status(handle),
                plan_id=plan_id,
                web_url=url,
                until=result,
                watch=PlanWatch(client, plan_id),
            )
        return await result
    finally:
        result.cancel()
