"""``dplan replay``: replay recorded workflow histories against the current workflow code.

Temporal recovers a running workflow by replaying its history through the workflow code
that a worker runs *now*. A code change that makes that code issue different commands
than the ones recorded (an activity added in the middle, a reordered call, a renamed child)
breaks every plan in flight the moment a new worker picks it up. Replaying real histories
before deploying finds that first, without a worker, without touching the workflows.

Histories come from the server (``WORKFLOW_ID``: every run of it back through
continue-as-new, ``--children``: and every child workflow those runs started,
recursively) or from JSON files in Temporal's format (``--file``; what ``--save`` and
``temporal workflow show --output json`` write).

Exit codes: 0 every run replayed, 1 a replay failed or the histories could not be fetched
(unknown workflow, unreachable server), 2 invalid input (settings, unreadable file).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from google.protobuf.json_format import ParseError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer, WorkflowReplayResult
from temporalio.workflow import NondeterminismError

from durable_plans._errors import (
    HistoryFileError,
    PayloadKeyError,
    SettingsError,
    TemporalUnreachable,
    WorkflowNotFound,
)
from durable_plans.cli._common import Exit
from durable_plans.payload_codec import key_ids_in, keyring_from_env
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.settings import Settings
from durable_plans.temporal_client import connect

__all__ = [
    "HistoryFileError",
    "ReplayOutcome",
    "RunHistory",
    "WorkflowNotFound",
    "collect_runs",
    "history_file_name",
    "load_history_file",
    "make_replayer",
    "replay_command",
    "replay_history",
    "replay_runs",
    "runs_forward",
    "save_runs",
    "started_children",
    "workflow_id_from_file_name",
]


_RUN_SUFFIX = re.compile(r"\.(\d+)$")
# The SDK reports a failed replay as core's debug dump of the failure; its message field
# is the part a person needs ("[TMPRL1100] Nondeterminism error: ...").
_CORE_MESSAGE = re.compile(r'Failure \{ message: "((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class RunHistory:
    """One run of one workflow id; ``run_index`` counts runs of a continue-as-new chain
    from 0, so saved files sort in the order the runs happened."""

    workflow_id: str
    run_index: int
    history: WorkflowHistory

    @property
    def run_id(self) -> str:
        return self.history.run_id if self.history.events else "?"

    @property
    def event_count(self) -> int:
        return len(self.history.events)


@dataclass(frozen=True)
class ReplayOutcome:
    run: RunHistory
    failure: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def nondeterministic(self) -> bool:
        return isinstance(self.failure, NondeterminismError)

    @property
    def message(self) -> str:
        """The failure's own message, without the SDK's wrapping ("" when it replayed)."""
        if self.failure is None:
            return ""
        text = str(self.failure)
        found = _CORE_MESSAGE.search(text)
        return found.group(1).replace('\\"', '"') if found else text


# --------------------------------------------------------------------------- file names


def history_file_name(workflow_id: str, run_index: int) -> str:
    """``plan-1/a`` run 0 → ``plan-1__a.0.json``: child ids contain slashes, files can't."""
    return f"{workflow_id.replace('/', '__')}.{run_index}.json"


def workflow_id_from_file_name(path: str | Path) -> str:
    """The inverse of ``history_file_name`` (a name without a run index is accepted)."""
    name = Path(path).name
    if name.endswith(".json"):
        name = name[: -len(".json")]
    name = _RUN_SUFFIX.sub("", name)
    return name.replace("__", "/")


def _run_index_from_file_name(path: Path) -> int:
    stem = path.name[: -len(".json")] if path.name.endswith(".json") else path.name
    found = _RUN_SUFFIX.search(stem)
    return int(found.group(1)) if found else 0


def load_history_file(path: str | Path, workflow_id: str | None = None) -> RunHistory:
    """A history saved as JSON; the workflow id is not in Temporal's JSON, hence the name."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise HistoryFileError(f"cannot read {p}: {err.strerror or err}") from err
    try:
        history = WorkflowHistory.from_json(workflow_id or workflow_id_from_file_name(p), text)
    except (ParseError, ValueError, KeyError, TypeError) as err:
        raise HistoryFileError(f"{p} is not a Temporal history in JSON: {err}") from err
    if not history.events or not history.events[0].HasField(
        "workflow_execution_started_event_attributes"
    ):
        raise HistoryFileError(f"{p} does not start with a WorkflowExecutionStarted event")
    return RunHistory(history.workflow_id, _run_index_from_file_name(p), history)


def save_runs(runs: Iterable[RunHistory], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for run in runs:
        target = directory / history_file_name(run.workflow_id, run.run_index)
        target.write_text(run.history.to_json() + "\n", encoding="utf-8")
        written.append(target)
    return written


# --------------------------------------------------------------------------- history links


def _continued_from(history: WorkflowHistory) -> str | None:
    started = history.events[0].workflow_execution_started_event_attributes
    return started.continued_execution_run_id or None


def _continued_to(history: WorkflowHistory) -> str | None:
    last = history.events[-1] if history.events else None
    if last is None or last.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        return None
    return last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id or None


def started_children(history: WorkflowHistory) -> list[tuple[str, str]]:
    """(workflow id, first run id) of every child this run started, in start order."""
    children = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            execution = event.child_workflow_execution_started_event_attributes.workflow_execution
            children.append((execution.workflow_id, execution.run_id))
    return children


# --------------------------------------------------------------------------- fetching


async def _fetch(client: Client, workflow_id: str, run_id: str | None) -> WorkflowHistory:
    try:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            what = f"workflow with id '{workflow_id}'"
            if run_id:
                what = f"run '{run_id}' of workflow '{workflow_id}'"
            raise WorkflowNotFound(f"no {what} in namespace '{client.namespace}'") from err
        raise
    if not history.events:
        raise WorkflowNotFound(f"workflow '{workflow_id}' has an empty history")
    return history


async def _first_event_link(client: Client, workflow_id: str, run_id: str) -> str | None:
    """The run this one continued from, reading one event instead of the whole history."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    async for event in handle.fetch_history_events(page_size=1):
        return event.workflow_execution_started_event_attributes.continued_execution_run_id or None
    return None


async def _chain_back(client: Client, workflow_id: str) -> list[RunHistory]:
    """Every run from the latest back to the first of its continue-as-new chain.

    Only the chain is followed: an earlier, separate execution that reused the id (a plan
    run again) is a different workflow and is not part of this one's replay.
    """
    histories = [await _fetch(client, workflow_id, None)]
    while (previous := _continued_from(histories[-1])) is not None:
        histories.append(await _fetch(client, workflow_id, previous))
    histories.reverse()
    return [RunHistory(workflow_id, i, h) for i, h in enumerate(histories)]


async def runs_forward(client: Client, workflow_id: str, first_run_id: str) -> list[RunHistory]:
    """A child's runs, from the exact run its parent started: the id may have been reused
    by a later execution, the run id cannot."""
    histories = [await _fetch(client, workflow_id, first_run_id)]
    while (following := _continued_to(histories[-1])) is not None:
        histories.append(await _fetch(client, workflow_id, following))
    return [RunHistory(workflow_id, i, h) for i, h in enumerate(histories)]


async def _single_run(client: Client, workflow_id: str, run_id: str) -> list[RunHistory]:
    history = await _fetch(client, workflow_id, run_id)
    index = 0
    previous = _continued_from(history)
    while previous is not None:
        index += 1
        previous = await _first_event_link(client, workflow_id, previous)
    return [RunHistory(workflow_id, index, history)]


async def collect_runs(
    client: Client, workflow_id: str, *, run_id: str | None = None, children: bool = False
) -> list[RunHistory]:
    """The histories to replay, parents before their children (depth first, start order)."""
    top = await (
        _single_run(client, workflow_id, run_id) if run_id else _chain_back(client, workflow_id)
    )
    if not children:
        return top
    seen: set[tuple[str, str]] = set()
    ordered: list[RunHistory] = []

    async def visit(runs: list[RunHistory]) -> None:
        for run in runs:
            key = (run.workflow_id, run.run_id)
            if key in seen:
                continue
            seen.add(key)
            ordered.append(run)
        for run in runs:
            for child_id, child_run in started_children(run.history):
                if (child_id, child_run) not in seen:
                    await visit(await runs_forward(client, child_id, child_run))

    await visit(top)
    return ordered


# --------------------------------------------------------------------------- replaying


def make_replayer(
    workflows: Sequence[type] | None = None, *, settings: Settings | None = None
) -> Replayer:
    """The Replayer a worker would be: the worker's plugin, so the same workflows, payload
    converter, sandbox passthrough and failure types (``workflows`` replaces ours).

    ``settings`` are the worker's (what the plugin derives from them applies; no store, so
    no activities: a replayer runs none).
    """
    return Replayer(
        workflows=[], plugins=[DurablePlansPlugin(settings=settings, workflows=workflows)]
    )


# The SDK's code for an activation that did not yield within its deadlock timeout (2 s).
DEADLOCK_CODE = "[TMPRL1101]"
# How many times a history is replayed while its replays only overrun that timeout.
REPLAY_ATTEMPTS = 3


def overran(failure: BaseException | None) -> bool:
    """Whether a replay failed only because an activation overran the deadlock timeout."""
    return failure is not None and DEADLOCK_CODE in str(failure)


async def replay_history(
    replayer: Replayer, history: WorkflowHistory, *, attempts: int = REPLAY_ATTEMPTS
) -> WorkflowReplayResult:
    """``history`` replayed; a replay that only overran the SDK's deadlock timeout is tried
    again, up to ``attempts`` replays in all. The timeout counts wall time: on a loaded host
    a garbage collection or a thread starved of CPU overruns it in code that is fine, and
    that says nothing of determinism; code that really never yields overruns every time,
    and is reported."""
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    for _ in range(attempts - 1):
        if not overran(result.replay_failure):
            break
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    return result


async def replay_runs(
    runs: Sequence[RunHistory],
    replayer: Replayer | None = None,
    *,
    on_outcome: Callable[[ReplayOutcome], None] | None = None,
) -> list[ReplayOutcome]:
    """Replay every run on one replay worker; failures are collected, not raised, so one
    broken history does not hide the state of the others. ``on_outcome`` sees each result
    as it comes (a long tree shows progress)."""
    replayer = replayer or make_replayer()
    outcomes: list[ReplayOutcome] = []

    async def histories() -> AsyncIterator[WorkflowHistory]:
        for run in runs:
            yield run.history

    async with replayer.workflow_replay_iterator(histories()) as results:
        async for result in results:
            # One result per pushed history, in push order.
            run = runs[len(outcomes)]
            failure = result.replay_failure
            if overran(failure):  # load, or a real deadlock: replayed again on its own
                again = await replay_history(replayer, run.history, attempts=REPLAY_ATTEMPTS - 1)
                failure = again.replay_failure
            outcome = ReplayOutcome(run, failure)
            outcomes.append(outcome)
            if on_outcome is not None:
                on_outcome(outcome)
    return outcomes


# --------------------------------------------------------------------------- the command


@dataclass
class _Printer:
    out: TextIO
    err: TextIO
    width: int = 0

    def outcome(self, o: ReplayOutcome) -> None:
        status = "ok" if o.ok else "FAIL"
        print(
            f"{status:<4}  {o.run.workflow_id:<{self.width}}  run {o.run.run_id}  "
            f"{o.run.event_count} events",
            file=self.out,
            flush=True,
        )

    def failure(self, o: ReplayOutcome) -> None:
        kind = "non-determinism error" if o.nondeterministic else "replay failed"
        print(
            f"error: {kind} in workflow '{o.run.workflow_id}' run {o.run.run_id} "
            f"(run index {o.run.run_index}):",
            file=self.err,
        )
        for line in o.message.splitlines() or [type(o.failure).__name__]:
            print(f"  {line}", file=self.err)


def _unreachable(err: TemporalUnreachable) -> str:
    return (
        f"error: {err}\n"
        "  Point TEMPORAL_ADDRESS at the server the workflow ran on (default localhost:7233)."
    )


async def _load_from_server(
    settings: Settings, workflow_id: str, run_id: str | None, children: bool
) -> list[RunHistory]:
    client = await connect(settings)
    return await collect_runs(client, workflow_id, run_id=run_id, children=children)


def _missing_key_ids(runs: Sequence[RunHistory], settings: Settings | None) -> set[str]:
    """Key ids the runs' payloads need that ``settings`` do not configure."""
    needed = key_ids_in(e for run in runs for e in run.history.events)
    have = set(settings.payload_keys.ids) if settings and settings.payload_keys else set()
    return needed - have


async def replay_command(
    workflow_id: str | None,
    *,
    run_id: str | None = None,
    children: bool = False,
    files: Sequence[str] = (),
    file_workflow_id: str | None = None,
    save_dir: str | None = None,
    settings: Settings | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Fetch (or load), optionally save, replay and report; returns the exit code."""
    printer = _Printer(out or sys.stdout, err or sys.stderr)
    runs: list[RunHistory]
    resolved: Settings | None = settings
    if files:
        try:
            runs = [load_history_file(f, file_workflow_id) for f in files]
        except HistoryFileError as exc:
            print(f"error: {exc}", file=printer.err)
            return Exit.INVALID
        if resolved is None:
            # No server to reach, so only the payload keys matter: encrypted histories
            # decode with the worker's keys (DPLAN_PAYLOAD_KEY...), as on a worker.
            try:
                resolved = Settings(payload_keys=keyring_from_env(os.environ))
            except PayloadKeyError as exc:
                print(f"error: {exc}", file=printer.err)
                return Exit.INVALID
    else:
        assert workflow_id is not None
        try:
            resolved = settings or Settings.from_env()
        except SettingsError as exc:
            print(f"error: {exc}", file=printer.err)
            return Exit.INVALID
        try:
            runs = await _load_from_server(resolved, workflow_id, run_id, children)
        except TemporalUnreachable as exc:
            print(_unreachable(exc), file=printer.err)
            return Exit.FAILED
        except WorkflowNotFound as exc:
            print(f"error: {exc}", file=printer.err)
            return Exit.FAILED
        except RPCError as exc:
            print(f"error: cannot fetch the history of '{workflow_id}': {exc}", file=printer.err)
            return Exit.FAILED
        if save_dir is not None:
            written = save_runs(runs, Path(save_dir))
            print(f"saved {len(written)} histories to {save_dir}", file=printer.err)

    missing = _missing_key_ids(runs, resolved)
    if missing:
        # Said up front: without the key the input does not decode, and the replay would
        # fail with a misleading non-determinism error instead.
        print(
            "error: the histories hold payloads encrypted with key id(s) "
            f"{', '.join(repr(k) for k in sorted(missing))}, which this process does not "
            "have: set DPLAN_PAYLOAD_KEY / DPLAN_PAYLOAD_KEY_FILE / DPLAN_PAYLOAD_KEYS as "
            "on the workers",
            file=printer.err,
        )
        return Exit.FAILED
    printer.width = max(len(r.workflow_id) for r in runs)
    # Of the settings, replay needs only the payload keys (timeouts and attempts do not
    # take part in replay).
    keyed = resolved is not None and resolved.payload_keys is not None
    replayer = make_replayer(settings=resolved) if keyed else make_replayer()
    outcomes = await replay_runs(runs, replayer, on_outcome=printer.outcome)
    failed = [o for o in outcomes if not o.ok]
    workflows = len({r.workflow_id for r in runs})
    print(
        f"replayed {len(outcomes)} runs of {workflows} workflows: "
        f"{len(outcomes) - len(failed)} ok, {len(failed)} failed",
        file=printer.out,
    )
    for o in failed:
        printer.failure(o)
    return Exit.FAILED if failed else Exit.OK
