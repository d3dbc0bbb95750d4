"""A provider key handed to a worker process never lands anywhere durable or visible.

DESIGN: "Secrets never enter workflow inputs, results, memos, logs or the session store".
A distinctive fake key (``sk-or-v1-`` + 48 hex chars, new per run) is put in a real
``python -m durable_plans.worker`` subprocess's environment (``DPLAN_API_KEY`` and
``OPENROUTER_API_KEY``), logging at DEBUG into a file. The provider the worker talks to is
hostile on purpose: it echoes the ``Authorization`` header's key back in its error
messages (as some proxies do), in answers and in tool-call arguments (a model repeating a
key), and a workspace ``.env`` holding the key is read by a tool. Three plans run: one
that succeeds (tool calls, several subtasks), one that fails with 401/400 (run through
the ``dplan`` CLI, whose output is captured), and one that delegates and spawns a nested
sub-agent. Then the key, and its last 24 characters alone, must be absent from every
workflow history, memo, search attribute and summary of those runs, the worker's log, the
CLI's and the test's output, and every byte and row of the SQLite session store.

Positive controls keep this from passing vacuously: every request the provider received
carried ``Authorization: Bearer <key>``, the provider really sent the key back in errors
and completions, and a marker placed in a subtask's text is found by the same scans of
history and store (so those scans do look inside payloads and rows).

Userinfo in ``DPLAN_API_BASE`` (``http://user:<key>@host/v1``) is not exercised: litellm's
HTTP transport refuses a URL with credentials next to the ``Authorization`` header
("Cannot combine AUTHORIZATION header with ... credentials encoded in URL"), so such a
request never reaches any provider; every call would end in a retried Connection error.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from durable_plans.client._plans import start_plan, wait_for_report
from durable_plans.domain.models import PlanReport, PlanStatus, SubtaskStatus
from durable_plans.settings import Settings
from durable_plans.testing import (
    ChatRequest,
    Completion,
    FakeProvider,
    HttpError,
    RecordedRequest,
    Reply,
    ToolCallSpec,
)
from tests.integration.plans import make_plan
from tests.integration.workers import REPO_ROOT, WorkerProcess

pytestmark = pytest.mark.integration

ECHO = "[echo-key]"  # every completion of the conversation repeats the key
READ_ENV = "[read-env]"  # the tool-call turn reads the workspace's .env
SUFFIX_CHARS = 24

_authorization: contextvars.ContextVar[str] = contextvars.ContextVar("authorization", default="")


def fresh_key() -> str:
    return "sk-or-v1-" + (uuid.uuid4().hex + uuid.uuid4().hex)[:48]


class KeyEchoingProvider(FakeProvider):
    """The fake provider, recording each request's ``Authorization`` and leaking its key.

    The stock fake records bodies, not headers; this subclass keeps the header (the
    positive control) and, like a careless proxy or model, sends the key back: quoted in
    every error message, and for conversations marked ``[echo-key]`` in the answer text
    and in tool-call arguments.
    """

    def __init__(self) -> None:
        super().__init__(latency_ms=0)
        self.authorizations: list[str] = []
        self.echoed_errors = 0
        self.echoed_completions = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        self.authorizations.append(header)
        # Each request is handled in its own task, so _decide below sees this value.
        _authorization.set(header)
        return await super()._handle(request)

    def _decide(
        self, record: RecordedRequest, body: dict[str, Any] | None, invalid: Any
    ) -> tuple[Reply, ChatRequest | None]:
        reply, chat = super()._decide(record, body, invalid)
        header = _authorization.get()
        key = header.removeprefix("Bearer ")
        if not key:
            return reply, chat
        if isinstance(reply, HttpError):
            self.echoed_errors += 1
            told = reply.body()["error"]["message"]
            message = f"{told} Request had 'Authorization: {header}'; key {key} was refused."
            return replace(reply, message=message), chat
        if isinstance(reply, Completion) and chat is not None:
            text = chat.last_user_text
            if READ_ENV in text and reply.tool_calls:
                reply = replace(reply, tool_calls=(ToolCallSpec("read_file", '{"path": ".env"}'),))
            if ECHO in text:
                self.echoed_completions += 1
                reply = replace(
                    reply,
                    content=f"{reply.content} (I used the key {key}.)" if reply.content else None,
                    tool_calls=tuple(_leaky_call(c, key) for c in reply.tool_calls),
                )
        return reply, chat


def _leaky_call(call: ToolCallSpec, key: str) -> ToolCallSpec:
    """The same call with the key inside its arguments (still valid for the tool if it can)."""
    try:
        args = json.loads(call.arguments)
    except json.JSONDecodeError:
        return call
    if not isinstance(args, dict):
        return call
    if "task" in args:  # delegate_to_sub_agent / spawn_subagent: the key leads the task
        args["task"] = f"With {key}: {args['task']}"
    elif "path" in args:  # a workspace tool: a path that quotes the key (and is refused)
        args["path"] = f"./{key}"
    else:
        args["token"] = key
    return replace(call, arguments=json.dumps(args))


class DebugWorkerProcess(WorkerProcess):
    """``WorkerProcess`` logging at DEBUG: the most a log file can say."""

    def start(self) -> DebugWorkerProcess:
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "durable_plans.worker", "--log-level", "DEBUG"],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=self._log,
            stderr=self._log,
        )
        return self


@dataclass(frozen=True)
class Needles:
    key: str

    @property
    def all(self) -> tuple[str, str]:
        return self.key, self.key[-SUFFIX_CHARS:]

    def found_in(self, data: bytes | str) -> list[str]:
        blob = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
        return [n for n in self.all if n.encode() in blob]


# --------------------------------------------------------------------------- plans


def success_plan(marker: str) -> Any:
    return make_plan(
        [
            ("scan", f"Inspect the repository {marker}", []),
            ("env", f"Check the configuration {READ_ENV}", ["scan"]),
            ("echo", f"Write module b [turns:2] {ECHO}", ["scan"]),
            ("final", "Summarise the work", ["env", "echo"]),
        ],
        session_id=f"sec-ok-{uuid.uuid4().hex[:8]}",
        prefix="sec-ok",
    )


def delegation_plan() -> Any:
    return make_plan(
        [
            ("notes", f"Summarise the notes [call:delegate_to_sub_agent] {ECHO}", []),
            ("deep", f"Investigate [call:spawn_subagent] [agent:coder] {ECHO}", []),
        ],
        agent="orchestrator",
        prefix="sec-deleg",
    )


def failing_plan_file(path: Path) -> str:
    plan_id = f"sec-fail-{uuid.uuid4().hex[:10]}"
    document = {
        "id": plan_id,
        "goal": "A plan whose provider refuses the key",
        "subtasks": [
            {"id": "auth", "description": "Deploy the service [fail:401]", "agent": "coder"},
            {"id": "bad", "description": "Migrate the schema [fail:400]", "agent": "coder"},
            {
                "id": "after",
                "description": "Announce the release",
                "agent": "coder",
                "depends_on": ["auth"],
            },
            {"id": "fine", "description": f"Write the notes {ECHO}", "agent": "coder"},
        ],
    }
    path.write_text(json.dumps(document))
    return plan_id


# --------------------------------------------------------------------------- scans


async def workflow_ids_on_queue(client: Client, task_queue: str, expected: set[str]) -> set[str]:
    """Every workflow of the queue (visibility is eventually consistent: wait for them)."""
    deadline = time.monotonic() + 15
    while True:
        found = {w.id async for w in client.list_workflows(f"TaskQueue = '{task_queue}'")}
        if expected <= found or time.monotonic() > deadline:
            return found | expected
        await asyncio.sleep(0.3)


async def workflow_texts(handle: WorkflowHandle[Any, Any]) -> dict[str, bytes]:
    """What Temporal keeps of one workflow, as bytes to search.

    ``History.to_json()`` base64-encodes payload data, so the binary protobuf (where
    payloads are raw JSON) is scanned as well: that is where a leaked key would be.
    """
    history = await handle.fetch_history()
    description = await handle.describe()
    memo = await description.memo()
    summary, details = await description.static_summary(), await description.static_details()
    return {
        "history.to_json": history.to_json().encode(),
        "history (protobuf)": b"".join(e.SerializeToString() for e in history.events),
        "describe (protobuf)": description.raw_description.SerializeToString(),
        "memo": json.dumps(memo, default=str).encode(),
        "search attributes": repr(description.search_attributes).encode(),
        "summary": f"{summary} {details}".encode(),
    }


def sqlite_files(db: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-journal"))
        if p.exists()
    }


def sqlite_rows(db: Path) -> Iterable[tuple[str, int, str]]:
    """(table, rowid, text of every column) for every row of every table."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for n, row in enumerate(conn.execute(f'SELECT * FROM "{table}"')):
                yield table, n, " | ".join(str(v) for v in row)
    finally:
        conn.close()


@dataclass
class Leaks:
    """Every place the key was found, so one failing run names them all."""

    needles: Needles
    places: list[str] = field(default_factory=list)

    def check(self, where: str, data: bytes | str) -> None:
        found = self.needles.found_in(data)
        if found:  # the suffix alone is named only where the whole key is not
            what = "the key" if self.needles.key in found else "the key's suffix"
            self.places.append(f"{what} in {where}")


# --------------------------------------------------------------------------- the test


async def test_the_key_reaches_the_provider_and_nothing_else(
    temporal_env: WorkflowEnvironment,
    client: Client,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    key = fresh_key()
    needles = Needles(key)
    leaks = Leaks(needles)
    marker = f"marker-{uuid.uuid4().hex}"
    tq = f"secrets-{uuid.uuid4().hex[:8]}"
    db = tmp_path / "sessions.db"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("# secrets test\n")
    (workspace / ".env").write_text(f"OPENROUTER_API_KEY={key}\nDPLAN_API_KEY={key}\n")
    plan_file = tmp_path / "failing.json"
    failing_id = failing_plan_file(plan_file)

    provider = KeyEchoingProvider()
    async with provider:
        env = {
            "TEMPORAL_ADDRESS": client.service_client.config.target_host,
            "DPLAN_TASK_QUEUE": tq,
            "DPLAN_MODEL": "openai/fake-model",
            "DPLAN_SUBAGENT_MODEL": "openai/cheap-model",
            "DPLAN_API_BASE": provider.base_url,
            "DPLAN_API_KEY": key,
            "OPENROUTER_API_KEY": key,
            "DPLAN_SESSION_STORE": str(db),
            "DPLAN_WORKSPACE": str(workspace),
            "DPLAN_STATE_DIR": str(tmp_path / "state"),
        }
        worker = DebugWorkerProcess(env, tmp_path / "worker.log").start()
        try:
            await asyncio.to_thread(worker.wait_ready)
            # The test process never holds the key in its own settings: start_plan only
            # needs the task queue.
            settings = Settings(task_queue=tq)
            ok_plan, deleg_plan = success_plan(marker), delegation_plan()
            ok_handle = await start_plan(client, ok_plan, settings)
            deleg_handle = await start_plan(client, deleg_plan, settings)
            cli = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "starter",
                "run",
                str(plan_file),
                "--json",
                cwd=REPO_ROOT,
                env={**worker.env},
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            ok_report, deleg_report, (cli_out, cli_err) = await asyncio.wait_for(
                asyncio.gather(
                    wait_for_report(ok_handle), wait_for_report(deleg_handle), cli.communicate()
                ),
                timeout=90,
            )
            # While the worker still holds the store open: the WAL has the latest pages.
            store_live = sqlite_files(db)
        finally:
            await asyncio.to_thread(worker.stop)
    store_closed = sqlite_files(db)
    fail_report = PlanReport.model_validate_json(cli_out)

    # The runs did what they are meant to exercise.
    assert ok_report.status is PlanStatus.COMPLETED, ok_report
    assert deleg_report.status is PlanStatus.COMPLETED, deleg_report
    # Exit 1 (plan failed). A short-lived Temporal client process may instead abort while
    # the interpreter finalizes (the SDK's native threads: "PyGILState_Release ...
    # finalizing") after the report is written; that is not what this test is about.
    crashed_at_exit = cli.returncode == -6 and b"runtime state: finalizing" in cli_err
    assert cli.returncode == 1 or crashed_at_exit, cli_err.decode()
    assert fail_report.plan_id == failing_id and fail_report.status is PlanStatus.FAILED
    failed = {r.id: r for r in fail_report.subtasks}
    assert failed["auth"].error is not None and failed["auth"].error.type == "Authentication"
    assert failed["bad"].error is not None and failed["bad"].error.type == "BadRequest"
    assert failed["after"].status is SubtaskStatus.SKIPPED
    # The echoed key was scrubbed out of the error, not lost on the way: the rest is there.
    assert "was refused" in (failed["auth"].error.message or "")

    # Positive control: the key did reach the provider, on every request, as a bearer
    # token; and the provider did send it back (errors, answers, tool arguments).
    assert len(provider.authorizations) >= 12
    assert set(provider.authorizations) == {f"Bearer {key}"}
    assert provider.echoed_errors >= 2 and provider.echoed_completions >= 4
    # ... and the worker got it back and scrubbed it: later requests replay redactions.
    replayed = json.dumps([r.body for r in provider.requests])
    assert "[REDACTED:openrouter]" in replayed

    # Temporal: every workflow of these runs, children and nested sub-agents included.
    expected = {ok_plan.id, deleg_plan.id, failing_id}
    for report in (ok_report, deleg_report, fail_report):
        expected |= {
            f"{report.plan_id}/{r.id}"
            for r in report.subtasks
            if r.status is not SubtaskStatus.SKIPPED
        }
    ids = await workflow_ids_on_queue(client, tq, expected)
    nested = {i for i in ids if i.count("/") >= 2}
    assert nested, f"no nested sub-agent workflow among {sorted(ids)}"
    marker_seen_in = set()
    for wf_id in sorted(ids):
        for where, data in (await workflow_texts(client.get_workflow_handle(wf_id))).items():
            leaks.check(f"{where} of workflow {wf_id}", data)
            if marker.encode() in data:
                marker_seen_in.add(wf_id)
    assert {ok_plan.id, f"{ok_plan.id}/scan"} <= marker_seen_in, "history scan sees nothing"

    # The session store: raw bytes of the database and its WAL, then every row.
    assert any(marker.encode() in data for data in store_live.values()), "store scan is blind"
    for stage, files in (("live", store_live), ("closed", store_closed)):
        for name, data in files.items():
            leaks.check(f"session store file {name} ({stage})", data)
    rows = list(sqlite_rows(db))
    assert any(marker in text for _, _, text in rows)
    for table, n, text in rows:
        leaks.check(f"session store row {table}#{n}", text)

    # Logs and output: the worker's DEBUG log, the CLI's stdout/stderr, this test's output.
    log = (tmp_path / "worker.log").read_bytes()
    assert b"worker.started" in log and b'"level": "debug"' in log
    leaks.check("the worker's log", log)
    leaks.check("the CLI's stdout", cli_out)
    leaks.check("the CLI's stderr", cli_err)
    out, err = capfd.readouterr()
    leaks.check("the test's stdout", out)
    leaks.check("the test's stderr", err)
    assert not leaks.places, "the key leaked:\n  " + "\n  ".join(leaks.places)
