"""Structured logs for the worker and the CLI: JSON lines on stderr, never a secret.

Logs outlive the process (they are shipped, pasted into issues, kept by CI), while keys
are meant to live only in the worker's environment. So every event passes a redaction
step right before rendering: keys that name a secret are dropped outright, and every
remaining value (the message, exception text, nested dicts) is scrubbed of anything that
looks like a key. The Temporal SDK and other libraries log through the standard
``logging`` module; they are routed through the same pipeline, so their lines are JSON
and scrubbed too.

stdout is left alone on purpose: ``dplan run --json`` promises that only the report is
written there.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, cast

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger
from temporalio import activity

from durable_plans.domain.secrets import is_secret_label, scrub_value

__all__ = [
    "activity_logger",
    "configure_logging",
    "ensure_logging",
    "get_logger",
    "redact_secrets",
]

_HANDLER_NAME = "dplan-structlog"

# ``is_secret_label`` knows credential *values* (api_key, password, tokens); these are
# header names whose whole value is a credential whatever its shape.
_SECRET_HEADER = re.compile(r"(?i)^(proxy[_\-]?)?authorization$|^(set[_\-])?cookie$")

# Which keys structlog itself owns; they are never secrets and must survive redaction.
_RESERVED = frozenset({"event", "level", "timestamp", "logger"})

_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


def _is_secret_key(key: str) -> bool:
    return key not in _RESERVED and (is_secret_label(key) or bool(_SECRET_HEADER.match(key)))


def redact_secrets(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: drop secret-named keys, scrub every remaining value.

    Dropping (rather than masking) a key like ``api_key`` keeps even its length out of the
    log; scrubbing the rest catches keys that leak sideways, e.g. a provider error that
    quotes the request's ``Authorization`` header.
    """
    return {key: scrub_value(value) for key, value in event_dict.items() if not _is_secret_key(key)}


def _level_number(level: str) -> int:
    name = level.strip().upper()
    if name == "WARN":
        name = "WARNING"
    if name not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(_LEVELS)}")
    return cast(int, logging.getLevelName(name))


def configure_logging(*, json: bool = True, level: str = "INFO") -> None:
    """Route structlog and stdlib logging to stderr through one redacting pipeline.

    Idempotent: calling it again (tests, a CLI that re-reads ``--log-level``) replaces the
    previous handler instead of stacking duplicates.
    """
    number = _level_number(level)
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Processor = (
        structlog.processors.JSONRenderer(default=str)
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.StackInfoRenderer(),
            # Exceptions become text before redaction, so a key quoted in a traceback's
            # message is scrubbed like any other value.
            structlog.processors.format_exc_info,
            redact_secrets,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)

    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(number)

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            # Also here, not only in the formatter: any other handler on the root logger
            # (pytest's capture, a user's file handler) then receives scrubbed records too.
            redact_secrets,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: module-level loggers must follow a later configure_logging call.
        cache_logger_on_first_use=False,
    )


def ensure_logging(*, json: bool = True, level: str = "INFO") -> None:
    """``configure_logging`` unless the process has configured logging already.

    For code that may run in a process whose entry point chose its own settings (the CLI
    runs a worker in process): the entry point's choice wins.
    """
    if not structlog.is_configured():
        configure_logging(json=json, level=level)


def get_logger(**bound: Any) -> structlog.stdlib.BoundLogger:
    """A logger with ``bound`` context on every line it writes.

    Unconfigured structlog prints to stdout, which ``dplan run --json`` reserves for the
    report, so a first use without configuration sets up the stderr pipeline.
    """
    ensure_logging()
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger("dplan")
    return logger.bind(**bound) if bound else logger


def _ids_from_workflow_id(workflow_id: str, workflow_type: str | None) -> dict[str, str]:
    """Plan and subtask ids are encoded in workflow ids (``plan_id/subtask_id``); binding
    them lets one grep follow a subtask across retries, workers and restarts."""
    if "/" in workflow_id:
        plan_id, subtask_id = workflow_id.split("/", 1)
        return {"plan_id": plan_id, "subtask_id": subtask_id}
    if workflow_type == "PlanWorkflow":
        return {"plan_id": workflow_id}
    return {}


def activity_logger(**bound: Any) -> structlog.stdlib.BoundLogger:
    """A logger bound to the running activity: workflow id, type, attempt, plan, subtask.

    Must be called inside an activity (``temporalio.activity.info()`` raises otherwise).
    """
    info = activity.info()
    context: MutableMapping[str, Any] = {
        "workflow_id": info.workflow_id,
        "activity_type": info.activity_type,
        "attempt": info.attempt,
    }
    if info.workflow_id:
        context.update(_ids_from_workflow_id(info.workflow_id, info.workflow_type))
    context.update(bound)
    return get_logger(**context)
