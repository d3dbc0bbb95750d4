"""The operator's actions on a plan: one table that the CLI and the page both serve.

Pure data (no client import), so ``dplan --help`` builds its subcommands from it cheaply.

Each action is named once, with what it takes besides the plan id and the ``Client``
method that runs it. ``dplan NAME PLAN ...`` is its subcommand and ``POST
/api/do/{plan}/{NAME}`` its control on the page; ``tests/unit/test_operator_actions.py``
fails when either misses an action, serves one the table lacks, or when a method's
parameters stop matching ``takes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["OPERATOR_ACTIONS", "OperatorAction", "action_summary", "operator_action"]


@dataclass(frozen=True)
class OperatorAction:
    """One thing an operator does to a plan."""

    name: str
    """The ``dplan`` subcommand and the page's ``/api/do/{plan}/{name}`` action."""
    method: str
    """The ``Client`` method that runs it; its first parameter is the plan id."""
    takes: tuple[str, ...]
    """What it takes besides the plan id: the method's parameter names, in order."""
    optional: frozenset[str]
    """Which of ``takes`` may be left out."""
    summary: str
    """What it does, in one line (the subcommand's help)."""


OPERATOR_ACTIONS: Final[tuple[OperatorAction, ...]] = (
    OperatorAction(
        "approve",
        "approve",
        ("call", "arguments"),
        frozenset({"arguments"}),
        "let a waiting tool call run",
    ),
    OperatorAction(
        "reject",
        "reject",
        ("call", "reason"),
        frozenset(),
        "refuse a waiting tool call; the reason becomes its tool result",
    ),
    OperatorAction(
        "resume",
        "resume",
        ("subtask",),
        frozenset(),
        "run a paused subtask again, on a fresh branch from the base session",
    ),
    OperatorAction(
        "edit",
        "edit",
        ("subtask", "changes"),
        frozenset(),
        "change a paused subtask (description, agent, model) and run it again",
    ),
    OperatorAction(
        "add",
        "revise",
        ("add", "remove", "reason"),
        frozenset({"add", "remove", "reason"}),
        "revise a running plan: add subtasks, remove ones not yet started",
    ),
    OperatorAction(
        "skip",
        "skip",
        ("subtask",),
        frozenset(),
        "fail a paused subtask for good (its dependents are skipped)",
    ),
    OperatorAction(
        "budget",
        "raise_budget",
        ("max_tokens", "max_cost_usd"),
        frozenset({"max_tokens", "max_cost_usd"}),
        "set a running plan's budget and resume what paused on it",
    ),
    OperatorAction(
        "cancel",
        "cancel",
        (),
        frozenset(),
        "stop a running plan (it ends cancelled; `dplan retry` runs the rest later)",
    ),
    OperatorAction(
        "fork",
        "fork",
        ("from_subtask", "changes", "new_id"),
        frozenset({"changes", "new_id"}),
        "start a new plan from a step: it and what follows run again, the rest is reused",
    ),
    OperatorAction(
        "retry",
        "retry",
        ("subtasks", "changes"),
        frozenset({"subtasks", "changes"}),
        "re-run what failed, was skipped or cancelled; keep what completed",
    ),
)

_BY_NAME: Final = {action.name: action for action in OPERATOR_ACTIONS}


def operator_action(name: str) -> OperatorAction | None:
    """The action called ``name``, or None when there is none."""
    return _BY_NAME.get(name)


def action_summary(name: str) -> str:
    """The one-line help of action ``name`` (``KeyError`` for none: a typo in a caller)."""
    return _BY_NAME[name].summary
