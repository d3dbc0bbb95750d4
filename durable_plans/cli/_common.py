"""What every ``dplan`` command shares: exit codes, running an async body, and turning the
client's errors into one line on stderr.

A command's body raises the client's errors and returns an ``Exit``; ``run`` is the only
place that decides how a refusal, an unreachable server, bad input or Ctrl-C is said and
which exit code it gets, so every command says them alike.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

# Only the error classes: ``dplan validate`` must start without loading Temporal's client.
from durable_plans._errors import (
    DurablePlansError,
    InvalidArgument,
    TemporalUnreachable,
)

if TYPE_CHECKING:
    from durable_plans.settings import Settings

__all__ = [
    "Exit",
    "Usage",
    "add_operator_option",
    "err",
    "read_settings",
    "reported",
    "run",
    "unreachable_message",
]


class Exit(enum.IntEnum):
    """The exit codes of every ``dplan`` command."""

    OK = 0
    FAILED = 1  # the plan failed or was cancelled, a request was refused, Temporal unusable
    INVALID = 2  # the input was invalid: nothing was started or changed
    INTERRUPTED = 130  # Ctrl-C: the plan itself is durable and carries on


class Usage(Exception):
    """Input a command refuses before doing anything (exit 2): one line, as given."""


def err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def unreachable_message(error: TemporalUnreachable, *, suggest_embedded: bool = False) -> str:
    if suggest_embedded:
        return (
            f"error: {error}\n"
            "  Run with --embedded to start a local dev server and worker in this process,\n"
            "  or point TEMPORAL_ADDRESS (or a TEMPORAL_PROFILE) at a running server\n"
            "  (`temporal server start-dev`)."
        )
    return (
        f"error: {error}\n"
        "  Point TEMPORAL_ADDRESS (or a TEMPORAL_PROFILE) at the server the plan runs on\n"
        "  (default localhost:7233)."
    )


def read_settings(settings: Settings | None = None) -> Settings:
    """``settings``, or the environment's; a bad variable is ``Usage`` (exit 2)."""
    from durable_plans._errors import SettingsError
    from durable_plans.settings import Settings

    if settings is not None:
        return settings
    try:
        return Settings.from_env()
    except SettingsError as error:
        raise Usage(f"error: {error}") from None


async def reported(body: Awaitable[int], *, suggest_embedded: bool = False) -> int:
    """``body``'s exit code, or the one line and exit code its error deserves."""
    from temporalio.service import RPCError

    try:
        return await body
    except Usage as error:
        err(str(error))
        return Exit.INVALID
    except TemporalUnreachable as error:
        err(unreachable_message(error, suggest_embedded=suggest_embedded))
    except InvalidArgument as error:  # an invalid plan too
        err(error.header if error.problems else f"error: {error}")
        for problem in error.problems:
            err(f"  {problem}")
        return Exit.INVALID
    except DurablePlansError as error:
        problems: tuple[str, ...] = getattr(error, "problems", ())
        if problems and not isinstance(error, InvalidArgument):  # a revision refused
            err(f"error: {str(error).split(': ', 1)[0]}:")
            for problem in problems:
                err(f"  {problem}")
        else:
            err(f"error: {error}")
    except RPCError as error:  # the server refused a call (namespace, permissions, overload)
        err(f"error: the Temporal server refused a request: {error.status.name}: {error.message}")
    return Exit.FAILED


def run(body: Coroutine[Any, Any, int]) -> int:
    """Run a command's async body to its exit code; Ctrl-C is exit 130, not a traceback."""
    try:
        return int(asyncio.run(body))
    except KeyboardInterrupt:
        return Exit.INTERRUPTED


Handler = Callable[[argparse.Namespace], "int | Coroutine[Any, Any, int]"]


def add_operator_option(parser: argparse.ArgumentParser) -> None:
    """``--by NAME``: who decides, as the workflow records it (default ``user@host``).
    ``--who`` is the name ``dplan approve`` once used; it still works, unlisted."""
    parser.add_argument(
        "--by",
        dest="operator",
        metavar="NAME",
        default=None,
        help="who decides (default user@host)",
    )
    parser.add_argument("--who", dest="operator", default=None, help=argparse.SUPPRESS)
