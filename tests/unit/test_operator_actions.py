"""One table of operator actions (``domain/operator_actions.py``) serves the CLI and the
page: each action has a ``dplan`` subcommand and a page control of its name, run by the
``Client`` method the table names with the parameters it lists."""

from __future__ import annotations

import argparse
import inspect

import pytest

from durable_plans.cli.main import build_parser
from durable_plans.client import (
    OPERATOR_ACTIONS,
    Client,
    InvalidArgument,
    OperatorAction,
    operator_action,
)
from durable_plans.ui.server import CONTROLS, _do

NAMES = [action.name for action in OPERATOR_ACTIONS]


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _helps() -> dict[str, str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {choice.dest: choice.help or "" for choice in sub._choices_actions}


def test_the_table_names_each_action_once() -> None:
    assert len(NAMES) == len(set(NAMES))
    assert set(NAMES) >= {"approve", "reject", "resume", "skip", "budget", "cancel", "retry"}
    assert operator_action("nothing") is None


@pytest.mark.parametrize("action", OPERATOR_ACTIONS, ids=NAMES)
def test_each_action_is_run_by_the_client_method_it_names(action: OperatorAction) -> None:
    """The method exists, takes the plan id then exactly ``takes``, and the optional ones
    have defaults while the others do not."""
    assert action is operator_action(action.name)
    method = getattr(Client, action.method)
    params = list(inspect.signature(method).parameters.values())[1:]  # past self
    assert params[0].name == "plan_id"
    assert tuple(p.name for p in params[1:]) == action.takes
    for p in params[1:]:
        has_default = p.default is not inspect.Parameter.empty
        assert has_default == (p.name in action.optional), p.name


def test_the_cli_has_a_subcommand_for_every_action_with_the_tables_help() -> None:
    subcommands = _subcommands()
    helps = _helps()
    for action in OPERATOR_ACTIONS:
        assert action.name in subcommands, action.name
        assert helps[action.name] == action.summary
        positional = [
            a.dest
            for a in subcommands[action.name]._actions
            if not a.option_strings and a.dest != "help"
        ]
        assert positional[0] == "plan_id", action.name


def test_the_page_controls_exactly_the_tables_actions() -> None:
    assert set(CONTROLS) == set(NAMES)


async def test_the_page_refuses_an_action_the_table_lacks() -> None:
    """Checked before the client is used: a bad action is the caller's mistake (400)."""
    with pytest.raises(InvalidArgument, match="unknown action 'explode'"):
        await _do(None, "p", "explode", {})  # type: ignore[arg-type]
