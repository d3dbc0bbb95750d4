"""The ``dplan ui`` server: the page, its JSON API, its live event stream, its controls.

Reads (``GET /api/...``) and the event stream (``GET /api/plans/{id}/events``, server-sent
events from ``Client.watch``) change nothing. Every control is ``POST /api/do/{plan}/
{action}`` with a JSON body, checked by ``UiSecurity`` (Origin, CSRF header, token), then
done through the typed ``Client`` exactly as the CLI does it: the same validation, the
same sentences (a ``DurablePlansError``'s one line, ``error: ...``), and the operator's
name the client was made with (``--by``, default ``user@host``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from aiohttp import web
from temporalio.service import RPCError, RPCStatusCode

from durable_plans._errors import PlanValidationError
from durable_plans.client import (
    ApprovalWaiting,
    Client,
    DurablePlansError,
    InvalidArgument,
    PlanEnded,
    PlanNotFound,
    PlanRevised,
    Refused,
    StatusUnavailable,
    SubtaskChanged,
    TemporalUnreachable,
    TextStreamed,
    operator_action,
)
from durable_plans.domain.ids import subtask_workflow_id
from durable_plans.domain.models import Plan, SubtaskResult, SubtaskStatus
from durable_plans.domain.operations import SubtaskChanges
from durable_plans.domain.plan_loader import subtasks_from_data
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.temporal_client import ui_base_for, web_url
from durable_plans.ui.conversation import Conversations, merged_results, running_session_id
from durable_plans.ui.diff import subtask_diff
from durable_plans.ui.security import UiSecurity, harden
from durable_plans.ui.views import (
    PlanDefinitions,
    approval_json,
    plan_json,
    report_json,
    result_json,
    run_json,
    subtask_lookup,
    summary_json,
    timeline_json,
)

__all__ = ["DEFAULT_PORT", "UiServer", "build_app", "run_ui", "running_ui"]

DEFAULT_PORT = 8300
_KEEPALIVE_S = 15.0
_CLIENT = web.AppKey("client", Client)
_SECURITY = web.AppKey("security", UiSecurity)
_DEFINITIONS = web.AppKey("definitions", PlanDefinitions)
_CONVERSATIONS = web.AppKey("conversations", Conversations)
_INDEX = web.AppKey("index", str)

Json = dict[str, Any]


def static_dir() -> Path:
    return Path(str(resources.files("durable_plans.ui") / "static"))


# --------------------------------------------------------------------------- errors


def _error_response(error: BaseException) -> web.Response:
    """The CLI's sentence for ``error`` (``cli/_common.reported``), with a status."""
    if isinstance(error, InvalidArgument):
        text = error.header if error.problems else f"error: {error}"
        lines = [text, *(f"  {p}" for p in error.problems)]
        return web.json_response({"error": "\n".join(lines)}, status=400)
    if isinstance(error, PlanNotFound):
        return web.json_response({"error": f"error: {error}"}, status=404)
    if isinstance(error, Refused):
        if error.problems:  # a revision refused: each problem on its line
            lines = [f"error: {str(error).split(': ', 1)[0]}:", *(f"  {p}" for p in error.problems)]
            return web.json_response({"error": "\n".join(lines)}, status=409)
        return web.json_response({"error": f"error: {error}"}, status=409)
    if isinstance(error, PlanValidationError):  # a revision's subtasks, read
        lines = ["error: subtasks that cannot be added:", *(f"  {p}" for p in error.problems)]
        return web.json_response({"error": "\n".join(lines)}, status=400)
    if isinstance(error, TemporalUnreachable | StatusUnavailable):
        return web.json_response({"error": f"error: {error}"}, status=503)
    if isinstance(error, DurablePlansError):
        return web.json_response({"error": f"error: {error}"}, status=409)
    if isinstance(error, RPCError):
        return web.json_response(
            {
                "error": "error: the Temporal server refused a request: "
                f"{error.status.name}: {error.message}"
            },
            status=502,
        )
    raise error


def _answer(
    fn: Callable[[web.Request], Awaitable[Json | list[Any]]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            return web.json_response(await fn(request))
        except (DurablePlansError, RPCError) as error:
            return _error_response(error)

    return handler


def _bad(message: str) -> InvalidArgument:
    return InvalidArgument(message)


async def _body(request: web.Request) -> Json:
    try:
        data = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _bad("the request body is not JSON") from None
    if not isinstance(data, dict):
        raise _bad("the request body must be a JSON object")
    return data


def _string(body: Json, name: str, *, required: bool = True) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise _bad(f"{name} must be a non-empty string")
    return value


def _number(body: Json, name: str, kind: type[int] | type[float]) -> Any:
    value = body.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(f"{name} must be a number, not {value!r}")
    if kind is int and not float(value).is_integer():
        raise _bad(f"{name} must be a whole number, not {value!r}")
    return kind(value)


# --------------------------------------------------------------------------- reads


async def _index(request: web.Request) -> web.StreamResponse:
    if request.query.get("token"):
        # The middleware keeps the token in a cookie; drop it from the address bar.
        return web.Response(status=303, headers={"Location": "/"})
    return web.Response(text=request.app[_INDEX], content_type="text/html")


@_answer
async def _config(request: web.Request) -> Json:
    client = request.app[_CLIENT]
    return {
        "operator": client.operator,
        "namespace": client.settings.temporal_namespace,
        "temporal_ui": ui_base_for(client.settings),
        "task_queue": client.settings.task_queue,
    }


NO_ATTRIBUTES_NOTE = (
    "the namespace has no Dplan search attributes: goal, progress, tokens and cost are "
    "unknown (–) until `dplan setup` registers them"
)


@_answer
async def _plans(request: web.Request) -> Json:
    client = request.app[_CLIENT]
    limit_text = request.query.get("limit", "50")
    try:
        limit = int(limit_text)
    except ValueError:
        raise _bad(f"limit must be a whole number, not {limit_text!r}") from None
    rows, with_attributes = await client.list_plans(
        status=request.query.get("status") or None,
        query=request.query.get("query") or None,
        limit=limit,
        tenant=request.query.get("tenant") or None,
    )
    # What `dplan list` says under its table when the columns cannot be filled.
    note = "" if with_attributes else NO_ATTRIBUTES_NOTE
    return {"plans": [summary_json(row) for row in rows], "note": note}


def _run_of(request: web.Request) -> str | None:
    """The earlier run the page asks about (``?run=``, a ``RunSummary.run_id``); None: the
    latest."""
    return request.query.get("run") or None


@_answer
async def _plan(request: web.Request) -> Json:
    plan_id = request.match_info["plan_id"]
    client = request.app[_CLIENT]
    run = _run_of(request)
    plan = await request.app[_DEFINITIONS].plan(plan_id, run)
    settings = client.settings
    out: Json = {"plan": plan_json(plan, ui_base_for(settings), settings.temporal_namespace, run)}
    try:
        report = await client.status(plan_id, run=run)
        out["report"] = report_json(report)
        if report.revisions and not run:  # the input's plan lacks what they changed
            current = await client.current_plan(plan_id)
            if current is not None:
                out["plan"] = plan_json(
                    current, ui_base_for(settings), settings.temporal_namespace, run
                )
    except StatusUnavailable as error:
        out["report"] = None
        out["report_unavailable"] = f"error: {error}"
    # The subtasks' workflows keep their ids from run to run: visibility holds the latest
    # run's only.
    out["timeline"] = (
        {"available": False, "reason": "it is kept for the latest run only"}
        if run
        else await timeline_json(client, plan_id)
    )
    return out


@_answer
async def _runs(request: web.Request) -> list[Any]:
    runs = await request.app[_CLIENT].runs(request.match_info["plan_id"])
    return [run_json(r) for r in runs]


@_answer
async def _timeline(request: web.Request) -> Json:
    return await timeline_json(request.app[_CLIENT], request.match_info["plan_id"])


@_answer
async def _approvals(request: web.Request) -> list[Any]:
    calls = await request.app[_CLIENT].approvals(request.match_info["plan_id"])
    return [approval_json(c) for c in calls]


@_answer
async def _subtask(request: web.Request) -> Json:
    plan_id = request.match_info["plan_id"]
    sid = request.match_info["subtask"]
    client = request.app[_CLIENT]
    definitions = request.app[_DEFINITIONS]
    run = _run_of(request)
    plan = await definitions.plan(plan_id, run)
    declared = next((s for s in plan.subtasks if s.id == sid), None)
    if declared is None and not run:  # added by a revision?
        declared = await client.current_subtask(plan_id, sid)
    if declared is None:
        raise _bad(f"plan '{plan_id}' has no subtask '{sid}'")
    report = await client.status(plan_id, run=run)
    result = subtask_lookup(report, sid)
    if run is None and not report.finished:  # as it runs now: an edit included
        declared = await client.current_subtask(plan_id, sid) or declared
    session_id = result.session_id if result is not None else None
    if session_id is None and result is not None and result.status in _WORKING:
        session_id = running_session_id(plan, definitions.first_run.get(plan_id, ""), result)
    conversation = (
        await request.app[_CONVERSATIONS].messages(
            session_id, await _merged_sources(client, plan, definitions)
        )
        if session_id
        else {"unavailable": _never_started(result)}
    )
    return {
        "subtask": {
            "id": declared.id,
            "description": scrub_secrets(declared.description),
            "agent": declared.agent,
            "depends_on": list(declared.depends_on),
        },
        "result": result_json(result) if result is not None else None,
        "conversation": conversation,
        # An earlier run's subtask workflow has the latest run's id: no link leads to it.
        "temporal_url": (
            None if run else await _started_url(client, subtask_workflow_id(plan_id, sid))
        ),
    }


async def _merged_sources(
    client: Client, plan: Plan, definitions: PlanDefinitions
) -> dict[str, str]:
    """Merged results' ids to their subtasks, for every run of the plan (a retry's
    conversation holds what earlier runs merged); the latest run's alone when the runs
    cannot be listed."""
    try:
        first_runs = [r.first_run_id for r in await client.runs(plan.id)]
    except (DurablePlansError, RPCError):
        first_runs = []
    latest = definitions.first_run.get(plan.id)
    return merged_results(plan, [*first_runs, *([latest] if latest else [])])


# Statuses of a subtask at work on its branch before the report names it.
_WORKING = frozenset({SubtaskStatus.RUNNING, SubtaskStatus.PAUSED})


def _never_started(result: SubtaskResult | None) -> str:
    """Why a subtask has no conversation: it never ran, and for what reason."""
    if result is None or result.status is SubtaskStatus.PENDING:
        return "this subtask has not started"
    why = f": {result.error.message}" if result.error is not None else ""
    return f"no conversation: this subtask never ran ({result.status.value}{why})"


async def _started_url(client: Client, workflow_id: str) -> str | None:
    """Temporal Web's page of ``workflow_id``, or None when Temporal has no such workflow
    (a subtask that never started: skipped, cancelled first, still pending), whose link
    would lead to Temporal Web's "not found"."""
    try:
        await client.temporal.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            return None
        raise
    settings = client.settings
    return web_url(ui_base_for(settings), settings.temporal_namespace, workflow_id)


@_answer
async def _diff(request: web.Request) -> Json:
    plan_id = request.match_info["plan_id"]
    sid = request.match_info["subtask"]
    client = request.app[_CLIENT]
    result = subtask_lookup(await client.status(plan_id, run=_run_of(request)), sid)
    if result is None:
        raise _bad(f"plan '{plan_id}' has no subtask '{sid}'")
    settings = client.settings
    return await subtask_diff(
        settings.workspace, sid, result.commit, remote=settings.workspace_remote
    )


def _sse(event: Json) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


async def _events(request: web.Request) -> web.StreamResponse:
    """The plan's events as server-sent events, until it ends or the page goes away."""
    plan_id = request.match_info["plan_id"]
    client = request.app[_CLIENT]
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
    )
    harden(response)
    await response.prepare(request)
    queue: asyncio.Queue[Json | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in client.watch(plan_id, poll_interval_s=0.5):
                if isinstance(event, SubtaskChanged):
                    await queue.put({"type": "subtask", "result": result_json(event.result)})
                elif isinstance(event, TextStreamed):
                    await queue.put(
                        {
                            "type": "text",
                            "subtask": event.subtask,
                            "text": scrub_secrets(event.text),
                            "done": event.done,
                        }
                    )
                elif isinstance(event, ApprovalWaiting):
                    await queue.put({"type": "approval", "call": approval_json(event.call)})
                elif isinstance(event, PlanRevised):
                    revision = event.revision.model_dump(mode="json")
                    await queue.put({"type": "revised", "revision": revision})
                elif isinstance(event, PlanEnded):
                    await queue.put({"type": "ended", "report": report_json(event.report)})
        except (DurablePlansError, RPCError) as error:
            message = json.loads(_error_response(error).text or "{}").get("error", str(error))
            await queue.put({"type": "error", "error": message})
        finally:
            await queue.put(None)

    task = asyncio.create_task(pump())
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=_KEEPALIVE_S)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            if item is None:
                break
            await response.write(_sse(item))
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    return response


# --------------------------------------------------------------------------- controls


async def _control(request: web.Request) -> web.StreamResponse:
    plan_id = request.match_info["plan_id"]
    action = request.match_info["action"]
    client = request.app[_CLIENT]
    try:
        body = await _body(request)
        done = await _do(client, plan_id, action, body)
    except (DurablePlansError, RPCError) as error:
        return _error_response(error)
    return web.json_response({"ok": True, **done})


async def _do(client: Client, plan_id: str, action: str, body: Json) -> Json:
    """One control, through the client; the answer's ``message`` is what the CLI says.

    The actions are the operator's table (``OPERATOR_ACTIONS``, shared with the CLI);
    ``CONTROLS`` reads each one's arguments from the body."""
    known = operator_action(action)
    if known is None:
        raise _bad(f"unknown action {action!r}")
    return await CONTROLS[known.name](client, plan_id, body)


async def _approve(client: Client, plan_id: str, body: Json) -> Json:
    call = _string(body, "call")
    assert call is not None
    arguments = _string(body, "arguments", required=False)
    decision = await client.approve(plan_id, call, arguments=arguments or None)
    what = "approved" + (" with edited arguments" if decision.arguments else "")
    return {"message": f"{call}: {what} by {decision.who}"}


async def _reject(client: Client, plan_id: str, body: Json) -> Json:
    call = _string(body, "call")
    assert call is not None
    reason = body.get("reason")
    if not isinstance(reason, str):
        raise _bad("a rejection needs a reason: the model reads it")
    decision = await client.reject(plan_id, call, reason=reason)
    return {"message": f"{call}: rejected by {decision.who}"}


async def _resume(client: Client, plan_id: str, body: Json) -> Json:
    subtask = _string(body, "subtask")
    assert subtask is not None
    return {"message": await client.resume(plan_id, subtask)}


async def _edit(client: Client, plan_id: str, body: Json) -> Json:
    subtask = _string(body, "subtask")
    assert subtask is not None
    raw = body.get("changes")
    if not isinstance(raw, dict):
        raise _bad("changes must be {description, agent, model}")
    changes = SubtaskChanges.from_fields(raw)  # naming an unknown field or a non-string
    return {"message": await client.edit(plan_id, subtask, changes)}


async def _add(client: Client, plan_id: str, body: Json) -> Json:
    """A revision: ``add`` (subtasks as in a plan file) and ``remove`` (ids)."""
    raw_remove = body.get("remove") or []
    if not isinstance(raw_remove, list) or not all(isinstance(s, str) for s in raw_remove):
        raise _bad("remove must be a list of subtask ids")
    add = subtasks_from_data(body["add"], source="add") if body.get("add") else ()
    reason = body.get("reason") or ""
    if not isinstance(reason, str):
        raise _bad("reason must be text")
    revision = await client.revise(plan_id, add=add, remove=raw_remove, reason=reason)
    return {
        "message": f"revision {revision.number}: {revision.describe()}",
        "revision": revision.model_dump(mode="json"),
    }


async def _skip(client: Client, plan_id: str, body: Json) -> Json:
    subtask = _string(body, "subtask")
    assert subtask is not None
    return {"message": await client.skip(plan_id, subtask)}


async def _budget(client: Client, plan_id: str, body: Json) -> Json:
    resumed = await client.raise_budget(
        plan_id,
        max_tokens=_number(body, "max_tokens", int),
        max_cost_usd=_number(body, "max_cost_usd", float),
    )
    names = ", ".join(resumed) if resumed else "none"
    return {"message": f"budget set; resumed: {names}", "resumed": resumed}


async def _cancel(client: Client, plan_id: str, body: Json) -> Json:
    await client.cancel(plan_id)
    return {"message": f"plan '{plan_id}' asked to stop"}


async def _retry(client: Client, plan_id: str, body: Json) -> Json:
    raw_subtasks = body.get("subtasks") or []
    if not isinstance(raw_subtasks, list) or not all(isinstance(s, str) for s in raw_subtasks):
        raise _bad("subtasks must be a list of subtask ids")
    changes = _changes(body.get("changes"))
    if changes:
        rerun = await _retry_with_changes(client, plan_id, raw_subtasks, changes)
    else:
        rerun = await client.retry(plan_id, raw_subtasks or None)
    return {"message": f"retrying: {', '.join(rerun) or 'nothing'}", "rerun": rerun}


async def _fork(client: Client, plan_id: str, body: Json) -> Json:
    subtask = _string(body, "subtask")
    assert subtask is not None
    raw = body.get("changes") or {}
    if not isinstance(raw, dict):
        raise _bad("changes must be {description, agent, model}")
    new_id = _string(body, "new_id", required=False) or None
    data: Mapping[str, Any] = {subtask: raw} if raw else {}
    fork = await client.fork(plan_id, subtask, changes=data or None, new_id=new_id)
    return {
        "message": f"forked as {fork.plan_id}: runs {', '.join(fork.rerun)}",
        "plan_id": fork.plan_id,
        "rerun": fork.rerun,
    }


def _changes(raw: object) -> dict[str, dict[str, object]]:
    """``{subtask: {field: value}}`` as sent; the client judges the fields and values
    (``check_changes``: the same sentences as ``dplan retry --set``)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise _bad("changes must map subtask ids to {description, agent, model}")
    return {str(sid): dict(fields) for sid, fields in raw.items() if fields}


async def _retry_with_changes(
    client: Client, plan_id: str, subtasks: list[str], changes: dict[str, dict[str, object]]
) -> list[str]:
    """Edit and re-run: ``Client.retry`` with ``changes`` (each changed subtask re-runs
    with what depends on it; everything else completed is reused)."""
    data: Mapping[str, Any] = changes  # read as SubtaskChanges by the client, or refused
    return await client.retry(plan_id, subtasks or None, changes=data)


Control = Callable[[Client, str, Json], Awaitable[Json]]

CONTROLS: Mapping[str, Control] = {
    "approve": _approve,
    "reject": _reject,
    "resume": _resume,
    "edit": _edit,
    "add": _add,
    "skip": _skip,
    "budget": _budget,
    "cancel": _cancel,
    "retry": _retry,
    "fork": _fork,
}
"""The page's control of each operator action, by its name in ``OPERATOR_ACTIONS``."""


# --------------------------------------------------------------------------- the app


def _index_html(security: UiSecurity) -> str:
    html = (static_dir() / "index.html").read_text(encoding="utf-8")
    return html.replace("{{CSRF_TOKEN}}", security.csrf)


def build_app(client: Client, security: UiSecurity) -> web.Application:
    """The UI's routes over ``client``; ``security`` guards every request."""
    app = web.Application(middlewares=[security.middleware()], client_max_size=1024 * 1024)
    app[_CLIENT] = client
    app[_SECURITY] = security
    app[_DEFINITIONS] = PlanDefinitions(client)
    app[_CONVERSATIONS] = Conversations(client)
    app[_INDEX] = _index_html(security)
    app.router.add_get("/", _index)
    app.router.add_static("/static/", static_dir(), follow_symlinks=False)
    app.router.add_get("/api/config", _config)
    app.router.add_get("/api/plans", _plans)
    app.router.add_get("/api/plans/{plan_id}", _plan)
    app.router.add_get("/api/plans/{plan_id}/timeline", _timeline)
    app.router.add_get("/api/plans/{plan_id}/runs", _runs)
    app.router.add_get("/api/plans/{plan_id}/approvals", _approvals)
    app.router.add_get("/api/plans/{plan_id}/events", _events)
    app.router.add_get("/api/plans/{plan_id}/subtasks/{subtask}", _subtask)
    app.router.add_get("/api/plans/{plan_id}/subtasks/{subtask}/diff", _diff)
    app.router.add_post("/api/do/{plan_id}/{action}", _control)

    async def close_store(app: web.Application) -> None:
        await app[_CONVERSATIONS].close()

    app.on_cleanup.append(close_store)
    return app


@dataclass(frozen=True)
class UiServer:
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if host in ("0.0.0.0", "[::]"):
            host = "127.0.0.1"
        return f"http://{host}:{self.port}/"


@contextlib.asynccontextmanager
async def running_ui(
    client: Client, security: UiSecurity, *, port: int = DEFAULT_PORT
) -> AsyncIterator[UiServer]:
    """Serve until the block exits (``port=0``: any free port, read it from the result)."""
    runner = web.AppRunner(build_app(client, security), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, security.bind_host, port)
        await site.start()
        bound = runner.addresses[0]
        yield UiServer(security.bind_host, int(bound[1]))
    finally:
        await runner.cleanup()


async def run_ui(
    client: Client,
    security: UiSecurity,
    *,
    port: int = DEFAULT_PORT,
    out: TextIO | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (or forever), after saying where and as whom."""
    out = out or sys.stdout
    async with running_ui(client, security, port=port) as server:
        lines = [f"dplan ui on {server.url} (decisions recorded as {client.operator})"]
        if security.token is not None:
            lines.append(
                f"  listening on {security.bind_host}: open {server.url}?token=<DPLAN_UI_TOKEN> "
                "once; put TLS in front (a reverse proxy): the token and the page travel "
                "in clear over plain HTTP"
            )
        print("\n".join(lines), file=out, flush=True)
        await (stop or asyncio.Event()).wait()
