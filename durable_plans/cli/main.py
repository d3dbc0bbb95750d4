"""The ``dplan`` command line.

Each subcommand is two functions: ``_add_<name>_parser`` declares its arguments and
``cmd_<name>`` runs it and returns the exit code. Adding a command means writing that pair
and listing the first in ``_SUBCOMMANDS``; ``main`` stays untouched.

Exit codes: 0 success, 2 invalid input (an invalid plan, or a usage error from argparse).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from durable_plans._errors import AgentsFileError, PlanValidationError
from durable_plans.cli._common import Exit, add_operator_option, err, run
from durable_plans.cli.approvals_cli import add_approval_parsers
from durable_plans.domain.agents import BUILTIN_CATALOG
from durable_plans.domain.agents_loader import load_agents_file
from durable_plans.domain.models import Plan
from durable_plans.domain.operator_actions import action_summary
from durable_plans.domain.plan_data import size_problems
from durable_plans.domain.plan_loader import plan_from_data, read_plan_file
from durable_plans.domain.scheduling import critical_path_length

# A command's handler returns its exit code, or the coroutine that computes it (run here,
# so Ctrl-C and the event loop are handled in one place for every command).
Handler = Callable[[argparse.Namespace], "int | Coroutine[Any, Any, int]"]


def _add_embedded_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="start a Temporal dev server and a worker in this process if none is reachable",
    )


# --------------------------------------------------------------------------- validate


def _add_validate_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check a plan file without running it",
        description=(
            "Check a plan file (JSON or YAML). Exit 0 if valid, 2 if not. Agent names are "
            "checked against the built-ins plus DPLAN_AGENTS's file, as `dplan run` sees them."
        ),
    )
    parser.add_argument("plan", metavar="PLAN", help="path to the plan file")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"valid", "problems", "plan_id", "subtasks"} as JSON on stdout',
    )
    parser.set_defaults(handler=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate PLAN; problems go to stderr one per line (or into the JSON object)."""
    path: str = args.plan
    data: dict[str, Any] | None = None
    plan: Plan | None = None
    problems: tuple[str, ...] = ()
    header = f"invalid plan: {path}"
    try:
        known_agents = _known_agents()
        data = read_plan_file(path)
        built = plan_from_data(data, known_agents=known_agents, source=path)
        too_big = size_problems(built, packed=False)  # would stop it from being carried
        if too_big:
            raise PlanValidationError(f"{path}: {line}" for line in too_big)
        plan = built
        # Only a client that cannot put it in the session store is stopped by this one.
        for line in size_problems(built, packed=True):
            print(f"warning: {path}: {line}", file=sys.stderr)
    except PlanValidationError as exc:
        problems = exc.problems
    except AgentsFileError as exc:  # the plan cannot be judged without its agents
        header = f"invalid agents file (DPLAN_AGENTS): {os.environ['DPLAN_AGENTS'].strip()}"
        problems = exc.problems

    # A plan without an id gets a random one at run time; reporting the random one here
    # would suggest it is stable, so validation reports the id the file declares.
    declared_id = data.get("id") if data is not None else None
    plan_id = declared_id if isinstance(declared_id, str) else None
    if plan is not None:
        count = len(plan.subtasks)
    else:
        raw_subtasks = data.get("subtasks") if data is not None else None
        count = len(raw_subtasks) if isinstance(raw_subtasks, list) else 0

    if args.json:
        report: dict[str, Any] = {
            "valid": plan is not None,
            "problems": list(problems),
            "plan_id": plan_id,
            "subtasks": count,
        }
        print(json.dumps(report, indent=2))
    elif plan is None:
        print(header, file=sys.stderr)
        for line in problems:
            print(line, file=sys.stderr)
    else:
        name = f"plan {plan_id!r}" if plan_id else "plan (id generated at run time)"
        length = critical_path_length(plan)
        print(f"ok: {path}: {name}, {count} subtasks, critical path {length:g}")
    return Exit.OK if plan is not None else Exit.INVALID


def _known_agents() -> frozenset[str]:
    """The agents a run would know: a plan naming DPLAN_AGENTS's ``reviewer`` is valid
    exactly when ``dplan run`` with the same environment would accept it."""
    agents_file = os.environ.get("DPLAN_AGENTS", "").strip()
    if not agents_file:
        return frozenset(BUILTIN_CATALOG.names())
    return frozenset(load_agents_file(agents_file).names())


# --------------------------------------------------------------------------- run, status
# The client side (Temporal, rich, litellm via the in-process worker) is imported on use:
# `dplan validate` stays instant and works without a server.


def _add_run_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "run",
        help="start a plan and follow it to the end",
        description=(
            "Start a plan as a PlanWorkflow. Exit 0 completed, 1 failed or cancelled, "
            "2 invalid input."
        ),
    )
    parser.add_argument("plan", metavar="PLAN", help="path to the plan file")
    _add_embedded_option(parser)
    parser.add_argument(
        "--json", action="store_true", help="print only the final report, as JSON, on stdout"
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="print the plan id and Web address, then exit"
    )
    parser.set_defaults(handler=cmd_run)


def cmd_run(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.run_command import run_plan

    return run_plan(args.plan, embedded=args.embedded, json_output=args.json, no_wait=args.no_wait)


def _add_status_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status",
        help="live per-subtask status of a plan",
        description="Query a plan's PlanWorkflow for its live status.",
    )
    parser.add_argument("plan_id", metavar="PLAN_ID", help="the plan (workflow) id")
    parser.add_argument("--json", action="store_true", help="print the status report as JSON")
    parser.add_argument(
        "--follow",
        action="store_true",
        help="follow a running plan to its end (each running subtask's step and latest "
        "text), then print its report; exit 0 completed, 1 otherwise",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--runs",
        action="store_true",
        help="list the plan's runs (its start, then each retry) with their run ids",
    )
    which.add_argument(
        "--run",
        metavar="RUN_ID",
        default=None,
        help="the report of an earlier run (a run id from --runs) instead of the latest's",
    )
    parser.set_defaults(handler=cmd_status)


def cmd_status(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.run_command import status_command

    if args.follow and (args.run or args.runs):
        raise SystemExit("dplan status: --follow follows the latest run; leave out --run/--runs")
    return status_command(
        args.plan_id, json_output=args.json, follow=args.follow, run=args.run, runs=args.runs
    )


# --------------------------------------------------------------------------- chat, plan
# A conversation is a SessionWorkflow: it outlives this process, so both commands can be
# left and resumed (`--session ID`).


def _add_chat_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "chat",
        help="talk to the agents in a resumable conversation",
        description=(
            "An interactive conversation with a SessionWorkflow, read line by line from "
            "stdin (a terminal or a pipe). Type /help inside for the commands. Without "
            "--session a new conversation is started and its id printed."
        ),
    )
    parser.add_argument(
        "--session", metavar="ID", default=None, help="resume (or start) conversation ID"
    )
    _add_embedded_option(parser)
    parser.add_argument(
        "--agent",
        metavar="NAME",
        default=None,
        help="the agent a new conversation starts with (default orchestrator)",
    )
    parser.set_defaults(handler=cmd_chat)


def cmd_chat(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.chat import chat

    return chat(args.session, embedded=args.embedded, agent=args.agent)


def _add_plan_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="let the orchestrator plan a goal, then follow the plan to the end",
        description=(
            "Send GOAL to the orchestrator of a conversation, which writes and starts a plan; "
            "follow it like `dplan run`. Exit 0 completed, 1 failed, cancelled or no plan "
            "started, 2 invalid input."
        ),
    )
    parser.add_argument("goal", metavar="GOAL", help="what the plan should achieve")
    _add_embedded_option(parser)
    parser.add_argument("--session", metavar="ID", default=None, help="plan inside conversation ID")
    parser.add_argument(
        "--json", action="store_true", help="print only the final report, as JSON, on stdout"
    )
    parser.set_defaults(handler=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.plan_command import plan_goal_command

    return plan_goal_command(
        args.goal, embedded=args.embedded, session_id=args.session, json_output=args.json
    )


# --------------------------------------------------------------------------- replay
# Replaying needs no worker: the histories are run through this process's workflow code.


def _add_replay_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay workflow histories against the current workflow code",
        description=(
            "Fetch WORKFLOW_ID's history (every run back through continue-as-new) from "
            "TEMPORAL_ADDRESS, or read it from --file, and replay it through the current "
            "workflow code: a non-determinism error means a code change would break that "
            "workflow while it runs. Exit 0 all replayed, 1 a replay failed or the history "
            "could not be fetched, 2 invalid input."
        ),
    )
    parser.add_argument(
        "workflow_id",
        metavar="WORKFLOW_ID",
        nargs="?",
        default=None,
        help="the workflow to fetch (a plan id, PLAN/SUBTASK, session/ID); not with --file",
    )
    parser.add_argument("--run-id", metavar="RUN", default=None, help="replay only this run")
    parser.add_argument(
        "--children",
        action="store_true",
        help="also replay every child workflow the runs started, recursively",
    )
    parser.add_argument(
        "--file",
        metavar="HISTORY.json",
        action="append",
        default=[],
        help="replay a history saved as JSON instead of fetching one (repeatable)",
    )
    parser.add_argument(
        "--workflow-id",
        dest="file_workflow_id",
        metavar="ID",
        default=None,
        help="the workflow id of --file histories (default: from the file name)",
    )
    parser.add_argument(
        "--save",
        metavar="DIR",
        default=None,
        help="write each fetched history to DIR as <workflow id, / as __>.<run index>.json",
    )
    parser.set_defaults(handler=cmd_replay, parser=parser)


def cmd_replay(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.replay_command import replay_command

    parser: argparse.ArgumentParser = args.parser
    if args.file:
        if args.workflow_id is not None:
            parser.error("give either WORKFLOW_ID or --file, not both")
        if args.children or args.run_id or args.save:
            parser.error("--children, --run-id and --save need a server: not with --file")
    elif args.workflow_id is None:
        parser.error("WORKFLOW_ID or --file is required")
    elif args.file_workflow_id is not None:
        parser.error("--workflow-id names the workflow of --file histories")
    return replay_command(
        args.workflow_id,
        run_id=args.run_id,
        children=args.children,
        files=args.file,
        file_workflow_id=args.file_workflow_id,
        save_dir=args.save,
    )


# --------------------------------------------------------------------------- codec-server
# Temporal Web's remote codec endpoint: decrypts payloads for an operator holding the key.


def _add_codec_server_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    parser = subparsers.add_parser(
        "codec-server",
        help="serve Temporal Web's remote codec endpoint (decrypts payloads)",
        description=(
            "Serve POST /decode and /encode (Temporal's remote codec protocol) with the "
            "payload keys of DPLAN_PAYLOAD_KEY / DPLAN_PAYLOAD_KEY_FILE / DPLAN_PAYLOAD_KEYS, "
            "so Temporal Web (--ui-codec-endpoint, or the UI's codec setting) and "
            "`temporal ... --codec-endpoint` show encrypted payloads as plain JSON. Anyone "
            "who can reach it can decrypt: it listens on localhost unless told otherwise. "
            "Exit 2 when no key is configured."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8081, help="port to listen on (0: any)")
    parser.add_argument(
        "--cors-origin",
        metavar="URL",
        action="append",
        default=[],
        help=(
            "a Temporal Web origin allowed to call it (repeatable; '*' allows any); "
            "default: the UI of the configured server (TEMPORAL_UI_URL, else gRPC port + 1000)"
        ),
    )
    parser.set_defaults(handler=cmd_codec_server)


def cmd_codec_server(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli._common import Usage, read_settings, reported
    from durable_plans.codec_server import run_codec_server
    from durable_plans.temporal_client import ui_base_for

    async def body() -> int:
        settings = read_settings()
        if settings.payload_keys is None:
            raise Usage(
                "error: no payload key configured: set DPLAN_PAYLOAD_KEY (or "
                "DPLAN_PAYLOAD_KEY_FILE) to the key the workers use"
            )
        origins = args.cors_origin or [ui_base_for(settings)]
        try:
            await run_codec_server(
                settings.payload_keys.codec(),
                origins,
                host=args.host,
                port=args.port,
                namespace=settings.temporal_namespace,
            )
        except OSError as error:
            err(f"error: cannot listen on {args.host}:{args.port}: {error.strerror or error}")
            return Exit.FAILED
        return Exit.OK

    return reported(body())


# --------------------------------------------------------------------------- ui
# The plan page: the DAG, each agent's work and the operator's controls (durable_plans/ui).


def _add_mcp_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "mcp",
        help="serve the plans as MCP tools (stdio, or streamable HTTP with --http)",
        description=(
            "An MCP server for agents: tools start_plan (a plan object or a goal; wait: "
            "progress, then the report), plan_status, plan_report, list_plans, "
            "approve_call, reject_call, cancel_plan, retry_plan, and each plan's report and "
            "subtask conversations as resources. Over stdio by default; --http HOST:PORT "
            "serves streamable HTTP at /mcp, on a loopback address unless --token is given "
            "(clients send Authorization: Bearer TOKEN). Exit 0 stopped, 1 Temporal "
            "unreachable, 2 invalid arguments."
        ),
    )
    parser.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP instead")
    parser.add_argument(
        "--token", metavar="TOKEN", help="a bearer token every HTTP request must carry"
    )
    add_operator_option(parser)
    parser.set_defaults(handler=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.mcp_command import mcp_command

    return mcp_command(args.http, args.token, operator=args.operator)


def _add_ui_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "ui",
        help="serve the plan page: the DAG, conversations, approvals and controls",
        description=(
            "Serve a local web page of the plans (list, DAG, timeline, each subtask's "
            "conversation and diff) with the operator's controls (approve, reject, retry, "
            "edit and re-run, resume, skip, budget, cancel), done through the same client "
            "as the CLI. Listens on 127.0.0.1; any other address needs --token (or "
            "DPLAN_UI_TOKEN) and TLS in front. Exit 0 stopped, 1 Temporal unreachable or "
            "the port taken, 2 a non-local address without a token."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8300, help="port to listen on (0: any)")
    parser.add_argument(
        "--token",
        default=None,
        metavar="TOKEN",
        help="required on a non-local --host (default DPLAN_UI_TOKEN)",
    )
    parser.add_argument(
        "--temporal-ui",
        default=None,
        metavar="URL",
        help="Temporal Web for the links (default TEMPORAL_UI_URL, else gRPC port + 1000)",
    )
    add_operator_option(parser)
    parser.set_defaults(handler=cmd_ui)


def cmd_ui(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.ui_command import ui_command

    return ui_command(
        host=args.host,
        port=args.port,
        token=args.token,
        operator=args.operator,
        temporal_ui=args.temporal_ui,
    )


# --------------------------------------------------------------------------- list, setup
# Finding plans in Temporal visibility, by the Dplan* search attributes when registered.


def _add_list_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "list",
        help="list plans, newest first",
        description=(
            "List plans from Temporal visibility, newest first: id, tenant (when any plan "
            "has one), status, done/total, tokens, cost, started, duration. Without the "
            "search attributes (`dplan setup`) fewer columns, from the execution status and "
            "memo. Exit 0 listed, 1 server unreachable, 2 invalid --status, --tenant or "
            "--query."
        ),
    )
    parser.add_argument(
        "--status",
        metavar="S",
        default=None,
        help="running, completed, failed, cancelled, paused (also terminated, timed_out)",
    )
    parser.add_argument(
        "--tenant", metavar="T", default=None, help="only the plans of tenant T (DplanTenant)"
    )
    parser.add_argument(
        "--query",
        metavar="Q",
        default=None,
        help="a visibility query ANDed to the list, e.g. 'DplanTokens > 1000'",
    )
    parser.add_argument(
        "--schedule", metavar="ID", default=None, help="only the plans schedule ID started"
    )
    parser.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON array")
    parser.set_defaults(handler=cmd_list)


def cmd_list(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.list_command import list_command

    query = args.query
    if args.schedule:
        scheduled = f"TemporalScheduledById = {json.dumps(args.schedule)}"
        query = f"({query}) AND {scheduled}" if query else scheduled
    return list_command(
        status=args.status,
        query=query,
        json_output=args.json,
        limit=args.limit,
        tenant=args.tenant,
    )


def _add_tenants_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tenants",
        help="what each tenant spent today beside its daily cap",
        description=(
            "Each tenant DPLAN_TENANTS names (and each TENANT given): tokens and dollars "
            "spent on a UTC day, from the workers' session store, beside its cap. Exit 0 "
            "listed, 1 the store cannot be read, 2 a bad --day or tenants file."
        ),
    )
    parser.add_argument("tenant", nargs="*", metavar="TENANT", help="tenants to add to the list")
    parser.add_argument("--day", metavar="YYYY-MM-DD", default=None, help="default: today (UTC)")
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON array")
    parser.set_defaults(handler=cmd_tenants)


def cmd_tenants(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.tenants_command import tenants_command

    return tenants_command(args.tenant, day=args.day, json_output=args.json)


def _add_schedule_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "schedule",
        help="recurring plans: Temporal Schedules that start a plan",
        description=(
            "Temporal Schedules of plans: they show in Temporal Web and survive whatever "
            "Temporal survives. Each run is an ordinary plan, id SCHEDULE_ID-<time>; `dplan "
            "list --schedule ID` lists them. Exit 0 done, 1 refused or Temporal unusable, "
            "2 invalid arguments or plan."
        ),
    )
    actions = parser.add_subparsers(dest="schedule_action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a schedule for a plan file")
    create.add_argument("schedule_id", metavar="ID", help="the schedule's id")
    create.add_argument("plan", metavar="PLAN", help="the plan file (its id is not used)")
    when = create.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", metavar="EXPR", help="a cron expression, e.g. '0 3 * * *'")
    when.add_argument("--every", metavar="DURATION", help="an interval, e.g. 10s, 1h, 1d")
    create.add_argument(
        "--overlap",
        choices=("skip", "buffer-one", "allow-all"),
        default="skip",
        help="a run that comes while the last still runs (default skip)",
    )
    create.add_argument("--paused", action="store_true", help="create it paused")
    create.set_defaults(handler=cmd_schedule)
    listing = actions.add_parser("list", help="the schedules, their next runs and last plans")
    listing.add_argument("--json", action="store_true", help="print them as a JSON array")
    listing.set_defaults(handler=cmd_schedule)
    for name, text in (
        ("pause", "stop starting plans"),
        ("unpause", "start plans again"),
        ("trigger", "start one plan now"),
        ("delete", "remove the schedule (its plans stay)"),
    ):
        one = actions.add_parser(name, help=text)
        one.add_argument("schedule_id", metavar="ID", help="the schedule's id")
        one.set_defaults(handler=cmd_schedule)


def cmd_schedule(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli import schedule_command as sc

    if args.schedule_action == "create":
        return sc.schedule_create_command(
            args.schedule_id,
            args.plan,
            cron=args.cron,
            every=args.every,
            overlap=args.overlap,
            paused=args.paused,
        )
    if args.schedule_action == "list":
        return sc.schedule_list_command(json_output=args.json)
    return sc.schedule_action_command(args.schedule_action, args.schedule_id)


def _add_setup_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "setup",
        help="register the search attributes on a Temporal server",
        description=(
            "Register the Dplan* search attributes in TEMPORAL_NAMESPACE through the "
            "operator service; idempotent, says what it added. Exit 0 ok, 1 not possible."
        ),
    )
    parser.set_defaults(handler=cmd_setup)


def cmd_setup(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.list_command import setup_command

    return setup_command()


def _add_gc_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "gc",
        help="remove finished plans' trees from the state directory",
        description=(
            "Remove the checked-out trees and their state files of plans that ended more "
            "than DURATION ago from this host's state directory (DPLAN_STATE_DIR); commits, "
            "refs and result branches stay. Plans Temporal reports running (paused ones "
            "too) or does not know are kept; nothing is removed when Temporal cannot be "
            "reached. Exit 0 done, 1 Temporal unreachable, 2 bad duration."
        ),
    )
    parser.add_argument(
        "--older-than",
        metavar="DURATION",
        default=None,
        help="e.g. 1d, 12h, 30m, 0 (default: DPLAN_TREE_RETENTION, one day)",
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=cmd_gc)


def cmd_gc(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.gc_command import gc_command

    return gc_command(older_than=args.older_than, dry_run=args.dry_run, json_output=args.json)


def _add_schemas_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "schemas",
        help="write the JSON Schemas of the plan file, the inputs and the report",
        description=(
            "Generate the JSON Schemas (plan file, PlanWorkflow wrapper input, plan report, "
            "SessionWorkflow input) from the models into DIR. With --check, write nothing: "
            "exit 1 and name the files that are missing or stale."
        ),
    )
    parser.add_argument("--out", default="schemas", metavar="DIR", help="default: ./schemas")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.set_defaults(handler=cmd_schemas)


def cmd_schemas(args: argparse.Namespace) -> int:
    from pathlib import Path

    from durable_plans.domain.json_schemas import schema_files, write_schemas

    out = Path(args.out)
    if args.check:
        stale = [
            name
            for name, text in schema_files().items()
            if not (out / name).is_file() or (out / name).read_text(encoding="utf-8") != text
        ]
        for name in stale:
            print(f"{out / name}: stale or missing (run `dplan schemas --out {out}`)")
        return 1 if stale else 0
    for path in write_schemas(out):
        print(path)
    return 0


# --------------------------------------------------------------------------- step in
# What an operator does when a plan failed or paused (cli/operate_command.py).


def _add_set_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--set FIELD=VALUE``: a subtask's new description, agent or model."""
    parser.add_argument(
        "--set", dest="changes", action="append", default=[], metavar="FIELD=VALUE", help=help_text
    )


def _add_retry_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "retry",
        help=action_summary("retry"),
        description=(
            "Start a new run of a finished plan (same id) that re-runs its failed, skipped "
            "and cancelled subtasks and reuses every completed one's result, branch and "
            "usage (no LLM call for them). --subtask also re-runs a completed subtask and "
            "its dependents; with --set (edit and re-run) it runs with a changed "
            "description, agent or model, recorded in the plan's memo under --by's name. "
            "A worker must be polling: the last run's state is read by replaying it. "
            "Exit 0 completed, 1 refused, failed or Temporal unusable, 2 invalid arguments."
        ),
    )
    parser.add_argument("plan_id", metavar="PLAN", help="the plan (workflow) id")
    parser.add_argument(
        "--subtask",
        action="append",
        default=[],
        metavar="ID",
        help="also re-run this completed subtask and its dependents (repeatable)",
    )
    _add_set_option(
        parser,
        "edit and re-run: change a field (description, agent or model) of each --subtask "
        "given, before it runs again (repeatable)",
    )
    _add_start_options(parser)
    parser.set_defaults(handler=cmd_retry)


def cmd_retry(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.operate_command import retry_command

    return retry_command(
        args.plan_id,
        subtasks=args.subtask,
        changes=args.changes,
        operator=args.operator,
        embedded=args.embedded,
        json_output=args.json,
        no_wait=args.no_wait,
    )


def _add_start_options(parser: argparse.ArgumentParser) -> None:
    """What every command that starts a plan run from another takes (retry, fork)."""
    add_operator_option(parser)
    _add_embedded_option(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-wait", action="store_true", help="start it and return")


def _add_fork_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "fork",
        help=action_summary("fork"),
        description=(
            "Start a new plan from a plan's step: SUBTASK (changed by --set) and what "
            "depends on it run again, with whatever had not completed; every other "
            "completed subtask's result, session and commit are reused (no LLM call). The "
            "original plan, its report and its branch stay as they are; the new report "
            "says forked_from. A worker must be polling (the plan's state is read from "
            "it). Exit 0 completed, 1 refused, failed or Temporal unusable, 2 invalid "
            "arguments."
        ),
    )
    parser.add_argument("plan_id", metavar="PLAN", help="the plan (workflow) id")
    parser.add_argument(
        "--from", dest="from_subtask", required=True, metavar="SUBTASK", help="the step"
    )
    _add_set_option(parser, "change a field of SUBTASK (description, agent or model)")
    parser.add_argument("--id", dest="new_id", metavar="NEW", help="the new plan's id")
    _add_start_options(parser)
    parser.set_defaults(handler=cmd_fork)


def cmd_fork(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.operate_command import fork_command

    return fork_command(
        args.plan_id,
        args.from_subtask,
        changes=args.changes,
        new_id=args.new_id,
        operator=args.operator,
        embedded=args.embedded,
        json_output=args.json,
        no_wait=args.no_wait,
    )


def _add_subtask_action_parsers(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    for action in ("resume", "skip"):
        help_text = action_summary(action)
        parser = subparsers.add_parser(
            action,
            help=help_text,
            description=f"{help_text[0].upper()}{help_text[1:]}. An Update of the running "
            "plan: refused (exit 1, nothing changed) when the subtask is unknown or not "
            "paused. Exit 0 done, 1 refused or Temporal unusable.",
        )
        parser.add_argument("plan_id", metavar="PLAN", help="the plan (workflow) id")
        parser.add_argument("subtask", metavar="SUBTASK", help="the paused subtask's id")
        add_operator_option(parser)
        parser.set_defaults(handler=cmd_subtask_action, action=action)


def cmd_subtask_action(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.operate_command import subtask_command

    return subtask_command(args.action, args.plan_id, args.subtask, operator=args.operator)


def _add_edit_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "edit",
        help=action_summary("edit"),
        description=(
            "Change a paused subtask of a running plan (--set description=..., agent=... "
            "or model=...) and run it again on a fresh branch, while the rest of the plan "
            "carries on; recorded in the plan's log under --by's name. Refused (exit 1, "
            "nothing changed) when the subtask is not paused or a value cannot be right. "
            "Exit 0 done, 1 refused or Temporal unusable, 2 invalid arguments."
        ),
    )
    parser.add_argument("plan_id", metavar="PLAN", help="the plan (workflow) id")
    parser.add_argument("subtask", metavar="SUBTASK", help="the paused subtask's id")
    _add_set_option(parser, "a field to change: description, agent or model (repeatable)")
    add_operator_option(parser)
    parser.set_defaults(handler=cmd_edit)


def cmd_edit(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.operate_command import edit_command

    return edit_command(args.plan_id, args.subtask, args.changes, operator=args.operator)


def _add_add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "add",
        help=action_summary("add"),
        description=(
            'Revise a running plan: add FILE\'s subtasks (a list, or {"subtasks": [...]}, '
            "each as in a plan file; they may depend on any subtask of the plan) and remove "
            "--remove's subtasks, which must not have started. Checked as a plan is, "
            "against the plan as it stands, and recorded in its report's revisions and its "
            "log under --by's name. FILE may be '-' with --remove alone. Exit 0 done, 1 "
            "refused (each problem on its line; nothing changed) or Temporal unusable, 2 "
            "an unreadable FILE or a subtask in it that cannot be right."
        ),
    )
    parser.add_argument("plan_id", metavar="PLAN", help="the plan (workflow) id")
    parser.add_argument("file", metavar="FILE", help="JSON or YAML: the subtasks to add")
    parser.add_argument(
        "--remove",
        metavar="ID",
        action="append",
        default=[],
        help="a subtask not yet started to remove (repeatable)",
    )
    parser.add_argument("--reason", default="", help="why, for the record")
    add_operator_option(parser)
    parser.set_defaults(handler=cmd_add)


def cmd_add(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.operate_command import add_command

    return add_command(
        args.plan_id, args.file, remove=args.remove, reason=args.reason, operator=args.operator
    )


def _add_budget_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "budget",
        help=action_summary("budget"),
        description=(
            "Set new limits for the plan's session tree (a limit not named keeps its value) "
            "and resume every subtask paused with BudgetExceeded. Exit 0 done, 1 refused "
            "or Temporal unusable, 2 no limit named."
        ),
    )
    parser.add_argument("plan_id", metavar="PLAN", help="the plan (workflow) id")
    parser.add_argument("--max-tokens", type=int, default=None, metavar="N")
    parser.add_argument("--max-cost-usd", type=float, default=None, metavar="X")
    add_operator_option(parser)
    parser.set_defaults(handler=cmd_budget)


def cmd_budget(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.operate_command import budget_command

    return budget_command(
        args.plan_id,
        max_tokens=args.max_tokens,
        max_cost_usd=args.max_cost_usd,
        operator=args.operator,
    )


def _add_cancel_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "cancel",
        help=action_summary("cancel"),
        description=(
            "Ask a running plan to stop: its running subtasks are cancelled and their "
            "conversations rolled back; what completed is kept. Exit 0 asked, 1 refused "
            "(not running) or Temporal unusable."
        ),
    )
    parser.add_argument("plan_id", metavar="PLAN", help="the plan (workflow) id")
    parser.set_defaults(handler=cmd_cancel)


def cmd_cancel(args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    from durable_plans.cli.operate_command import cancel_command

    return cancel_command(args.plan_id)


# --------------------------------------------------------------------------- entry point

_SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    _add_validate_parser,
    _add_run_parser,
    _add_status_parser,
    _add_chat_parser,
    _add_plan_parser,
    _add_replay_parser,
    _add_list_parser,
    _add_tenants_parser,
    _add_setup_parser,
    _add_gc_parser,
    _add_codec_server_parser,
    _add_schemas_parser,
    _add_retry_parser,
    _add_subtask_action_parsers,
    _add_edit_parser,
    _add_add_parser,
    _add_fork_parser,
    _add_mcp_parser,
    _add_schedule_parser,
    _add_budget_parser,
    _add_cancel_parser,
    add_approval_parsers,
    _add_ui_parser,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dplan",
        description="Run multi-agent LLM plans as durable Temporal workflows.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in _SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit code (tests call this in-process)."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    outcome = handler(args)
    return outcome if isinstance(outcome, int) else run(outcome)


def console_main() -> None:
    """Entry point of the ``dplan`` console script and ``python -m durable_plans.cli``.

    The SDK core's log goes to standard error (``durable_plans.core_log``): a command's
    standard output is its own. Exits with ``os._exit`` once output is flushed: the
    Temporal SDK's native threads can abort the interpreter's normal finalization
    ("PyGILState_Release ... finalizing"), which would turn a finished command's exit
    code into a crash after its report was printed.
    """
    import os

    from durable_plans.core_log import route_core_log

    route_core_log()
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
