"""The worker process: polls the task queue and runs plan workflows and their activities.

Durability lives in Temporal, so a worker is disposable: it may be killed at any instant
and another one picks the work up. Stopping politely still matters, though: on SIGTERM
or SIGINT it stops polling, gives running activities (LLM calls in flight) a grace period
to finish so their results are not paid for twice, and closes the session store.

Console script ``dplan-worker``; configuration comes from the environment (see
``settings.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import Worker, WorkerDeploymentConfig

from durable_plans import event_loop, telemetry
from durable_plans._errors import SandboxUnavailable, SettingsError, TemporalUnreachable
from durable_plans.activities.log import configure_logging, get_logger
from durable_plans.activities.sandbox import checked_sandbox, sandbox_status
from durable_plans.connection import describe_connection
from durable_plans.core_log import route_core_log
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.plugin import DurablePlansPlugin, client_carrying
from durable_plans.session_store import InvalidStoreTarget, SessionStore, SessionStoreUnavailable
from durable_plans.session_store.factory import describe_store_target, open_session_store
from durable_plans.settings import Settings
from durable_plans.temporal_client import connect
from durable_plans.worker_versioning import default_build_id, describe_deployment
from durable_plans.workspace_gc import gc_interval, run_periodically

__all__ = ["build_worker", "deployment_config", "main", "run_worker", "safe_url"]

# Activities are async I/O (HTTP to the model, the session store), so many fit on one
# event loop; the cap bounds concurrent provider requests and store connections per host.
MAX_CONCURRENT_ACTIVITIES = 50
DEFAULT_GRACE_PERIOD = timedelta(seconds=30)


def build_worker(
    client: Client,
    settings: Settings,
    store: SessionStore,
    *,
    workflows: Sequence[type] | None = None,
    activities: Sequence[Callable[..., Any]] | None = None,
    grace_period: timedelta = DEFAULT_GRACE_PERIOD,
) -> Worker:
    """A worker for the plan task queue, wired by ``DurablePlansPlugin``.

    ``workflows``/``activities`` replace the defaults (tests register their own small ones
    on the same wiring). The worker's timeouts and attempts for LLM calls and tools come
    from ``settings`` (``Settings.activity_parameters``). ``client`` may carry a
    ``DurablePlansPlugin`` (``connect()`` gives it one) or not: either way the worker is
    configured once, by this worker's plugin.
    """
    sandbox = checked_sandbox(settings)  # DPLAN_SANDBOX=bwrap without it: no worker
    log = get_logger(component="worker")
    (log.info if sandbox.engine == "bwrap" else log.warning)(
        "worker.sandbox",
        sandbox=sandbox.engine or "unavailable",
        mode=sandbox.mode,
        bwrap=sandbox.bwrap,
        note=sandbox.describe(),
    )
    plugin = DurablePlansPlugin(
        settings=settings, store=store, workflows=workflows, activities=activities
    )
    versioned = deployment_config(settings)
    return Worker(
        client_carrying(client, plugin),
        task_queue=settings.task_queue,
        max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
        graceful_shutdown_timeout=grace_period,
        deployment_config=versioned,
        # An unversioned worker still tells the server a build id. Ours names the package
        # version and its workflow code, as DPLAN_BUILD_ID's default does. Left unset, the
        # SDK hashes the code of every loaded module (3,000 with litellm) at each worker
        # start: 0.8 CPU-s per dplan-worker on this 2-core host.
        build_id=None if versioned else default_build_id(),
    )


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """Worker Versioning for a worker of ``DPLAN_DEPLOYMENT`` (``worker_versioning.py``); None,
    an unversioned worker, without it.

    Pinned is the default behaviour: a plan and its subtasks (children on the same task
    queue inherit their parent's build) finish on the build they started on, so a change
    to workflow code needs no patch for them. The workflows also say so themselves
    (``versioning_behavior`` on their ``workflow.defn``), and a conversation, which lives
    for days, asks to move to the current build each time it continues as new."""
    deployment = settings.worker_deployment()
    if deployment is None:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment.name, deployment.build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


def safe_url(url: str | None) -> str | None:
    """``url`` fit for a log line: no userinfo (``user:key@``), no query, no fragment.

    A proxy URL may carry its credentials in any of those places.
    """
    if not url:
        return url
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "[unparseable url]"
    if ":" in host:
        host = f"[{host}]"
    return scrub_secrets(urlunsplit((parts.scheme, host + port, parts.path, "", "")))


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """SIGTERM/SIGINT set ``stop``; a second one gets the default behaviour back, so an
    impatient operator can still force the process down."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []

    def _handle(sig: signal.Signals) -> None:
        get_logger(component="worker").warning(
            "worker.signal", signal=sig.name, note="shutting down; repeat to force"
        )
        stop.set()
        loop.remove_signal_handler(sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, _handle, sig)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no support
            continue
        installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def _start_gc(client: Client, settings: Settings) -> asyncio.Task[None] | None:
    """The state directory's own schedule: finished plans' trees removed after
    ``DPLAN_TREE_RETENTION`` (``workspace_gc.py``); none with ``never``."""
    if settings.tree_retention is None:
        return None
    get_logger(component="worker").info(
        "worker.tree_gc",
        retention_s=settings.tree_retention.total_seconds(),
        every_s=gc_interval(settings.tree_retention).total_seconds(),
    )
    return asyncio.create_task(
        run_periodically(client, settings.state_dir, settings.tree_retention),
        name="dplan-worker-tree-gc",
    )


async def run_worker(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    grace_period: timedelta = DEFAULT_GRACE_PERIOD,
) -> None:
    """Run until SIGTERM/SIGINT or ``stop`` is set, then shut down gracefully.

    Raises ``SessionStoreUnavailable`` when the session store cannot be opened,
    ``TemporalUnreachable`` when the server cannot be reached, and whatever made the
    worker itself fail (it is never swallowed: a dead worker must not look alive).
    """
    log = get_logger(component="worker")
    # Before connecting: the metrics runtime must be the one the client is built on.
    observed = telemetry.install(settings)
    # The store first: it is this worker's own configuration, checked whether or not the
    # server is up, and a worker without it could not run a single activity.
    store = await open_session_store(settings.session_store)
    stop = stop or asyncio.Event()
    try:
        client = await connect(settings)
        worker = build_worker(client, settings, store, grace_period=grace_period)
        # Everything imported so far (litellm alone is millions of objects) lives as long
        # as the process: out of the collector's sight, each full collection stops
        # walking it again.
        gc.collect()
        gc.freeze()
        with _stop_on_signals(stop):
            deployment = settings.worker_deployment()
            log.info(
                "worker.started",
                task_queue=settings.task_queue,
                deployment=deployment.name if deployment else None,
                build_id=deployment.build_id if deployment else None,
                **describe_connection(
                    settings.temporal_address,
                    settings.temporal_namespace,
                    settings.temporal_access,
                ),
                model=settings.model,
                subagent_model=settings.effective_subagent_model,
                api_base=safe_url(settings.api_base),
                session_store=describe_store_target(settings.session_store),
                state_dir=str(settings.state_dir.expanduser().absolute()),
                tree_retention_s=(
                    settings.tree_retention.total_seconds()
                    if settings.tree_retention is not None
                    else None
                ),
                max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
                llm_timeout_s=settings.llm_timeout_s,
                llm_heartbeat_s=settings.llm_heartbeat_s,
                llm_max_attempts=settings.llm_max_attempts,
                rate_limit_patience_s=settings.rate_limit_patience_s,
                tool_timeout_s=settings.tool_timeout_s,
                tool_max_attempts=settings.tool_max_attempts,
                llm_lean=settings.llm_lean,
                event_loop=type(asyncio.get_running_loop()).__module__.split(".")[0],
                # Key ids only, never keys: which key encrypts, which ones decode.
                payload_keys=list(settings.payload_keys.ids) if settings.payload_keys else None,
                metrics_port=settings.metrics_port,
                otlp_endpoint=safe_url(settings.otlp_endpoint),
            )
            running = asyncio.create_task(worker.run(), name="dplan-worker")
            stopping = asyncio.create_task(stop.wait(), name="dplan-worker-stop")
            collecting = _start_gc(client, settings)
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if collecting is not None:
                collecting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await collecting
            if not running.done():
                log.info("worker.stopping", grace_period_s=grace_period.total_seconds())
                await worker.shutdown()
            await running  # re-raises a worker failure
        log.info("worker.stopped")
    finally:
        observed.flush()
        await store.close()


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="dplan-worker",
        description=(
            "Run a durable-plans worker. The Temporal connection comes from Temporal's "
            "environment configuration: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, "
            "TEMPORAL_API_KEY, TEMPORAL_TLS_*, TEMPORAL_PROFILE / TEMPORAL_CONFIG_FILE."
        ),
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="minimum level of the JSON log lines on stderr (default INFO)",
    )
    parser.add_argument(
        "--log-format",
        default="json",
        choices=["json", "console"],
        help="json lines (default) or human-readable console output",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="print which sandbox commands would run in (and why, if none) and which worker "
        "deployment and build the worker would poll as, then exit: "
        "0, or 1 when DPLAN_SANDBOX=bwrap and bubblewrap does not work",
    )
    parser.add_argument(
        "--grace-period",
        type=float,
        default=DEFAULT_GRACE_PERIOD.total_seconds(),
        metavar="SECONDS",
        help="how long running activities may take to finish on shutdown (default 30)",
    )
    return parser.parse_args(argv)


def _check(settings: Settings) -> int:
    """``--check``: the sandbox in force, one line, then the worker deployment and build
    (``DPLAN_DEPLOYMENT``, ``DPLAN_BUILD_ID``), one line: before a rollout the operator
    sees the build id to make current; 1 if DPLAN_SANDBOX=bwrap lacks the sandbox."""
    status = sandbox_status(settings)
    print(status.describe())
    print(describe_deployment(settings.worker_deployment()))
    return 1 if settings.sandbox == "bwrap" and status.engine != "bwrap" else 0


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point; exit 0 after a clean stop, 1 on a failure, 2 on bad config.

    Every failure it can name ends in one line on stderr saying what failed and why.
    """
    args = _parse_args(argv)
    configure_logging(json=args.log_format == "json", level=args.log_level)
    route_core_log()  # the SDK core's warnings through the same (redacting) pipeline
    try:
        settings = Settings.from_env()
    except SettingsError as err:
        print(f"dplan-worker: {err}", file=sys.stderr)
        sys.exit(2)
    if args.check:
        sys.exit(_check(settings))
    try:
        event_loop.run(
            run_worker(settings, grace_period=timedelta(seconds=args.grace_period)),
            settings.event_loop,
        )
        # A clean stop exits here, skipping interpreter finalization, which the SDK's
        # native threads can abort, turning exit 0 into a crash.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    except (
        event_loop.EventLoopUnavailable,
        InvalidStoreTarget,
        SandboxUnavailable,
        SettingsError,  # found once the worker reads its files (DPLAN_TENANTS)
    ) as err:
        print(f"dplan-worker: {err}", file=sys.stderr)
        sys.exit(2)
    except SessionStoreUnavailable as err:  # its text names the store, never a password
        print(f"dplan-worker: {err}", file=sys.stderr)
        sys.exit(1)
    except TemporalUnreachable as err:
        print(
            f"dplan-worker: {err}\n"
            "  Set TEMPORAL_ADDRESS (or a TEMPORAL_PROFILE) to a running server, or start one:\n"
            "    dplan run PLAN --embedded     (dev server + worker in one process)\n"
            "    temporal server start-dev     (a local dev server on localhost:7233)",
            file=sys.stderr,
        )
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as err:  # the last line of defence: one readable line, then exit 1
        get_logger(component="worker").exception("worker.crashed")
        print(f"dplan-worker: {type(err).__name__}: {scrub_secrets(str(err))}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
