"""Where the Temporal SDK core's own log goes: Python's logging, not standard output.

The core (the Rust half of the SDK) writes its warnings (a workflow task that failed and
will run again, an activity result that arrived too late...) to standard output unless it
is told otherwise. A command whose output is for a program (``dplan run --json``,
``dplan status --json``) would then print a line of log before its JSON, which no
program can parse. So the ``dplan`` process forwards the core's log to the Python logger
``temporalio.core``, whose records go to standard error like every other log line, and a
worker's metrics runtime (``telemetry.metrics_runtime``) does the same.
"""

from __future__ import annotations

import logging

from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

__all__ = ["CORE_LOGGER", "core_logging", "route_core_log"]

CORE_LOGGER = "temporalio.core"


def core_logging() -> LoggingConfig:
    """The SDK's default levels (the core's warnings, others' errors), forwarded to the
    ``temporalio.core`` logger."""
    return LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER)),
    )


def route_core_log() -> bool:
    """Make the process's default runtime one that forwards the core's log; call before
    any client connects. False, and nothing changed, when a default runtime is already
    set (an embedding program's own, or the metrics runtime)."""
    try:
        Runtime.set_default(
            Runtime(telemetry=TelemetryConfig(logging=core_logging())),
            error_if_already_set=True,
        )
    except RuntimeError:
        return False
    return True
