"""Arguments of ``dplan approvals``, ``dplan approve`` and ``dplan reject``.

Declared here rather than in ``cli/main.py`` so the CLI lists them with one line; the
work is done by ``cli/approvals_command.py``, imported when a command runs (it needs
the Temporal client, which ``dplan validate`` never loads).
"""

from __future__ import annotations

import argparse
from collections.abc import Coroutine
from typing import Any

from durable_plans.cli._common import add_operator_option
from durable_plans.domain.operator_actions import action_summary


def add_approval_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "approvals",
        help="tool calls waiting for a person",
        description=(
            "List tool calls waiting for approval: plan, call id (SUBTASK:TURN.INDEX), agent, "
            "tool, arguments (secrets scrubbed) and since when. Without PLAN, of every running "
            "plan. Exit 0 listed, 1 plan not found or server unreachable."
        ),
    )
    parser.add_argument("plan_id", metavar="PLAN", nargs="?", default=None, help="a plan id")
    parser.add_argument("--json", action="store_true", help="print the calls as a JSON array")
    parser.set_defaults(handler=cmd_approvals)

    approve = subparsers.add_parser(
        "approve",
        help=action_summary("approve"),
        description=(
            "Approve a waiting tool call (an Update of the subtask's workflow), optionally "
            "with replaced arguments. Exit 0 approved; 1 refused (unknown call, already "
            "decided: the message says by whom) or unreachable; 2 bad CALL or --args."
        ),
    )
    approve.add_argument("plan_id", metavar="PLAN", help="the plan id")
    approve.add_argument("call", metavar="CALL", help="the call id `dplan approvals` shows")
    approve.add_argument(
        "--args",
        dest="arguments",
        metavar="JSON",
        default=None,
        help="a JSON object replacing the call's arguments (workspace tools only)",
    )
    add_operator_option(approve)
    approve.add_argument("--json", action="store_true", help="print the decision as JSON")
    approve.set_defaults(handler=cmd_approve)

    reject = subparsers.add_parser(
        "reject",
        help=action_summary("reject"),
        description=(
            "Reject a waiting tool call (an Update): it does not run, and the model reads "
            "the reason as the call's result and carries on. Exit codes as for approve."
        ),
    )
    reject.add_argument("plan_id", metavar="PLAN", help="the plan id")
    reject.add_argument("call", metavar="CALL", help="the call id `dplan approvals` shows")
    reject.add_argument("--reason", required=True, help="why; the model reads it")
    add_operator_option(reject)
    reject.add_argument("--json", action="store_true", help="print the decision as JSON")
    reject.set_defaults(handler=cmd_reject)


def cmd_approvals(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.approvals_command import approvals_command

    return approvals_command(args.plan_id, json_output=args.json)


def _decide(args: argparse.Namespace, *, approve: bool) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.approvals_command import decide_command

    return decide_command(
        args.plan_id,
        args.call,
        approve=approve,
        operator=args.operator,
        reason=getattr(args, "reason", ""),
        arguments=getattr(args, "arguments", None),
        json_output=args.json,
    )


def cmd_approve(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    return _decide(args, approve=True)


def cmd_reject(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    return _decide(args, approve=False)
