"""Checks: a subtask is ``completed`` only when its commands pass on what it made.

A ``check`` (on a subtask, an agent or the plan) is a list of commands, each an argv list
or a string split as a shell would split it (``shlex.split``) but never run by a shell:
``|``, ``&&``, ``;``, ``>`` and the like are refused, with the reason. Each command runs
as an activity (``activities/checks.py``) on a throwaway copy of the tree at its last
commit; its result (exit code, output tail, duration, round) is recorded in history, so
a replay or a crash never runs a finished check again.

Pure: imported by workflow code through the sandbox passthrough.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Annotated, Any, Final

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    WithJsonSchema,
)

from durable_plans.domain.tools_config import SandboxPolicy
from durable_plans.domain.workspace_refs import WorkspaceRef

__all__ = [
    "ACT_APPEND_CHECK_FEEDBACK",
    "ACT_RUN_CHECK",
    "DEFAULT_CHECK_ROUNDS",
    "DEFAULT_CHECK_TIMEOUT_S",
    "MAX_CHECKS",
    "MAX_CHECK_OUTPUT_CHARS",
    "MAX_CHECK_ROUNDS",
    "CheckCommands",
    "CheckFeedbackInput",
    "CheckInput",
    "CheckRun",
    "CheckRuns",
    "check_problems",
    "check_rounds_problems",
    "failure_line",
    "feedback_message",
    "normalize_checks",
    "shown",
]

# Activity names are part of recorded histories: renaming one breaks replay.
ACT_RUN_CHECK = "run_check"
ACT_APPEND_CHECK_FEEDBACK = "append_check_feedback"

DEFAULT_CHECK_ROUNDS: Final = 3
MAX_CHECK_ROUNDS: Final = 20
MAX_CHECKS: Final = 20
MAX_ARGS: Final = 256
MAX_ARG_CHARS: Final = 4096
# What a check's run keeps of its output (head and tail): payloads stay small.
MAX_CHECK_OUTPUT_CHARS: Final = 4000
DEFAULT_CHECK_TIMEOUT_S: Final = 600.0

# Tokens a shell would treat as operators: a check is never run by a shell, so a
# command holding one would not do what its author meant.
_OPERATORS: Final = frozenset(
    {"|", "||", "&", "&&", ";", ";;", ">", ">>", "<", "<<", "<<<", "2>", "2>&1", "&>", "|&"}
)
_OPERATOR_CHARS: Final = ("|", "&&", ";", ">", "<", "`", "$(")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _operator_in(arg: str) -> str | None:
    if arg in _OPERATORS:
        return arg
    return next((op for op in _OPERATOR_CHARS if op in arg), None)


def _command(value: Any, where: str) -> tuple[str, ...]:
    """One command as argv; ValueError naming what is wrong."""
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as err:
            raise ValueError(f"{where}: cannot be split as a shell would ({err})") from None
        quoted = False
    elif isinstance(value, list | tuple) and all(isinstance(a, str) for a in value):
        argv, quoted = list(value), True
    else:
        raise ValueError(
            f"{where}: must be a command line (a string) or an argv list of strings, "
            f"got {type(value).__name__}"
        )
    if not argv or not argv[0]:
        raise ValueError(f"{where}: is empty (name a program to run)")
    if len(argv) > MAX_ARGS:
        raise ValueError(f"{where}: too many arguments ({len(argv)}, limit {MAX_ARGS})")
    for arg in argv:
        if "\x00" in arg:
            raise ValueError(f"{where}: an argument contains a NUL byte")
        if len(arg) > MAX_ARG_CHARS:
            raise ValueError(f"{where}: an argument is too long (limit {MAX_ARG_CHARS})")
        op = None if quoted else _operator_in(arg)
        if op is not None:
            raise ValueError(
                f"{where}: shell operator {op!r} in {arg!r}: checks are not run by a shell; "
                "write one command per check (a list of commands), or put the pipeline in "
                'a script and run that, e.g. ["sh", "ci.sh"]'
            )
    return tuple(argv)


def normalize_checks(value: Any) -> tuple[tuple[str, ...], ...] | None:
    """A ``check`` as argv tuples (None stays None); ValueError on the first problem."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]  # one command line on its own
    if not isinstance(value, list | tuple):
        raise ValueError(f"must be a list of commands, got {type(value).__name__}")
    if len(value) > MAX_CHECKS:
        raise ValueError(f"too many commands ({len(value)}, limit {MAX_CHECKS})")
    return tuple(_command(c, f"[{i}]") for i, c in enumerate(value))


_COMMANDS_SCHEMA: Final[dict[str, Any]] = {
    "anyOf": [
        {
            "type": "array",
            "maxItems": MAX_CHECKS,
            "items": {
                "anyOf": [
                    {"type": "string", "minLength": 1, "description": "split as a shell would"},
                    {"type": "array", "items": {"type": "string"}, "minItems": 1},
                ]
            },
        },
        {"type": "null"},
    ],
    "description": "Commands that must pass (exit code 0), each an argv list or a command "
    "line split as a shell would (shlex.split) but never run by a shell: no |, &&, ;, >.",
}

CheckCommands = Annotated[
    tuple[tuple[str, ...], ...] | None,
    BeforeValidator(normalize_checks),
    WithJsonSchema(_COMMANDS_SCHEMA, mode="validation"),
]
"""A model field's type: strings are split (``normalize_checks``) before validation."""


def check_problems(value: Any) -> tuple[tuple[tuple[str, ...], ...] | None, list[str]]:
    """``check``'s value and its problems, one line each (without the field's name)."""
    if value is None:
        return None, []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return None, [f"must be a list of commands, got {type(value).__name__}"]
    problems: list[str] = []
    if len(value) > MAX_CHECKS:
        problems.append(f"too many commands ({len(value)}, limit {MAX_CHECKS})")
    out: list[tuple[str, ...]] = []
    for i, command in enumerate(value[:MAX_CHECKS]):
        try:
            out.append(_command(command, f"[{i}]"))
        except ValueError as err:
            problems.append(str(err))
    return (tuple(out) if not problems else None), problems


def check_rounds_problems(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, int):
        return [f"must be a whole number, got {type(value).__name__}"]
    if not 1 <= value <= MAX_CHECK_ROUNDS:
        return [f"must be between 1 and {MAX_CHECK_ROUNDS}, got {value}"]
    return []


def shown(argv: Sequence[str]) -> str:
    """A command as a person would type it."""
    return shlex.join(argv)


class CheckRun(_Frozen):
    """One run of one check command, as the report and the history keep it."""

    argv: tuple[str, ...]
    exit_code: int  # negative: killed by that signal; -1 also when it could not start
    output: str = ""  # its tail (head and tail of a long output), at most a few KB
    duration_s: NonNegativeFloat = 0.0
    round: int = Field(default=1, ge=1)
    timed_out: bool = False

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _none_is_empty(value: object) -> object:
    # The Temporal CLI (`temporal workflow result -o json`) prints an empty list as null:
    # a report read back from it has ``"checks": null`` for a plan without checks.
    return () if value is None else value


CheckRuns = Annotated[tuple[CheckRun, ...], BeforeValidator(_none_is_empty)]
"""A report's check runs, every round's; empty (or null, as Temporal's CLI shows an empty
list) without a check."""


class CheckInput(_Frozen):
    """Run ``argv`` on a throwaway copy of ``workspace``'s tree at ``workspace.head``."""

    workspace: WorkspaceRef
    argv: tuple[str, ...]
    round: int = 1
    timeout_s: float = DEFAULT_CHECK_TIMEOUT_S
    # The sandbox the agent's commands run in (its ``run_command`` table: network,
    # read-only paths, memory); None: offline, with the defaults (a plan's own check).
    sandbox: SandboxPolicy | None = None


class CheckFeedbackInput(_Frozen):
    """The failed check, told to the model as a user message on ``session_id``."""

    session_id: str
    scope: str
    round: int
    text: str


def failure_line(run: CheckRun) -> str:
    why = "timed out" if run.timed_out else f"exited with code {run.exit_code}"
    return f"check `{shown(run.argv)}` {why}"


def feedback_message(run: CheckRun, rounds_left: int) -> str:
    """What the model is told when a check fails after its final answer."""
    return (
        f"Your work is not done: the {failure_line(run)} (round {run.round}). "
        f"Its output ends with:\n\n{run.output}\n\n"
        f"Fix the work and answer again ({rounds_left} more failing round(s) and the "
        "subtask fails)."
    )
