"""Helpers for the chaos suite (tests/integration/test_chaos.py).

Real processes only: workers are ``worker.main`` in their own interpreter (SIGKILLed for
real), the provider is ``FakeProviderProcess``, and the server-restart case runs its own
``temporal server start-dev`` on a SQLite file. What lives here:

- ``ChaosWorker``: a worker subprocess whose log names every activity the moment the
  SDK starts it (the SDK's own DEBUG line ``Running activity <type>``), so a test can kill
  it during a given activity; litellm is imported before the worker reports ready.
- ``WriterScenario``: a fake-provider scenario whose agent writes a large file
  (``[write:PATH]`` in the task), for killing a worker in the middle of a tool write.
- ``random_plan``: a seeded DAG of subtasks.
- ``paid_answers``: what the paid ledgers held right after a kill (the usage of every
  answer the dead worker had recorded; ``stored.stored_answers`` counts its stored ones).
- ``audit_calls``: which LLM calls were made again, and whether each repeat is excused
  (its answer was lost with a killed worker, never stored).
- ``check_plan``: every invariant of a finished plan (report, base session, branches,
  snapshots) plus replay of the histories.
- ``DevServer``: a Temporal dev server subprocess that can be killed and restarted.

Run as ``python -m tests.integration.chaos_support worker`` it is the worker entry point.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from durable_plans.activities.spend import call_ledger
from durable_plans.dev_server import dynamic_config_args
from durable_plans.domain import ids as domain_ids
from durable_plans.domain.ids import merged_result_id, snapshot_id
from durable_plans.domain.models import (
    Message,
    Plan,
    PlanReport,
    PlanStatus,
    SubtaskStatus,
    Usage,
)
from durable_plans.domain.tool_ids import strict_violations
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.testing import (
    AgentScenario,
    ChatRequest,
    Completion,
    FakeProviderProcess,
    Reply,
    ToolCallSpec,
    strip_directives,
)
from durable_plans.workflows.plan import default_session_id
from tests.integration.plans import make_plan
from tests.integration.prewarmed import PrewarmedProcess
from tests.integration.replay import assert_replays
from tests.integration.stored import opened_store
from tests.integration.workers import WorkerProcess

T = TypeVar("T")

# The SDK logs this (logger below, DEBUG) when it hands an activity task to the code. If a
# new SDK words it differently, ``wait_for_activity`` times out saying what it waited for.
ACTIVITY_LOGGER = "temporalio.worker._activity"
ACTIVITY_STARTED = "Running activity {} "

TEMP_SUFFIX = ".dplan-tmp"  # activities.file_jail writes through such temp files


def selected_params(request: Any, test_file: str | Path, test_prefix: str, param: str) -> list[Any]:
    """The ``param`` values of the tests of ``test_file`` whose name starts with
    ``test_prefix`` that this session runs (after ``-k`` and node ids): what a module
    fixture starting their rounds together in the background must start, no more."""
    return [
        item.callspec.params[param]
        for item in request.session.items
        if item.path == Path(test_file)
        and item.name.startswith(test_prefix)
        and hasattr(item, "callspec")
    ]


K = TypeVar("K")


@asynccontextmanager
async def in_background(
    tasks: Mapping[K, asyncio.Task[T]],
) -> AsyncIterator[Mapping[K, asyncio.Task[T]]]:
    """``tasks`` for the block (a module fixture's rounds or cases, each test awaiting its
    own); whichever still run at its end (a test failed, or was deselected) are cancelled
    and awaited, so none outlives the module."""
    try:
        yield tasks
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


def since_last_user(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return list(messages[last + 1 :])


# --------------------------------------------------------------------------- waiting


async def wait_until(
    predicate: Callable[[], bool], *, timeout_s: float, what: str, every_s: float = 0.02
) -> None:
    """Poll ``predicate``; a TimeoutError names ``what`` was awaited."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what}")
        await asyncio.sleep(every_s)


def completions(provider: FakeProviderProcess) -> int:
    """Requests the provider answered with a completion (delivered or not)."""
    return sum(1 for e in provider.log_entries() if e.get("kind") == "completion")


async def wait_for_completions(provider: FakeProviderProcess, n: int, timeout_s: float) -> int:
    await wait_until(
        lambda: completions(provider) >= n,
        timeout_s=timeout_s,
        what=f"{n} completed LLM requests (provider log {provider.log_path})",
        every_s=0.01,
    )
    return completions(provider)


async def bounded(awaitable: Awaitable[T], timeout_s: float, what: str) -> T:
    try:
        return await asyncio.wait_for(awaitable, timeout=timeout_s)
    except TimeoutError:
        raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what}") from None


async def workflow_running(client: Client, workflow_id: str) -> bool:
    desc = await client.get_workflow_handle(workflow_id).describe()
    return desc.status is WorkflowExecutionStatus.RUNNING


# --------------------------------------------------------------------------- workers


class LogWatcher:
    """Reads a growing log file incrementally and counts how often a needle appeared."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._tail = b""
        self._needle = b""
        self._count = 0

    def count(self, needle: str) -> int:
        """Occurrences of ``needle`` so far (one needle per watcher; a new one restarts)."""
        wanted = needle.encode()
        if wanted != self._needle:
            self._needle, self._offset, self._tail, self._count = wanted, 0, b"", 0
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return self._count
        self._offset += len(chunk)
        window = self._tail + chunk
        self._count += window.count(wanted)
        # Keep a partial needle at the end for the next read, never a whole one.
        self._tail = window[-(len(wanted) - 1) :] if len(wanted) > 1 else b""
        return self._count

    def seen(self, needle: str) -> bool:
        return self.count(needle) > 0


class ChaosWorker(WorkerProcess):
    """A real worker process (``worker.main``) that logs each activity as it starts."""

    def start(self) -> ChaosWorker:
        self._log = self.log_path.open("ab")
        self._proc = PrewarmedProcess(
            "tests.integration.chaos_support:worker_main", [], self.env, self.log_path
        )
        self.watcher = LogWatcher(self.log_path)
        self._consumed: dict[str, int] = {}
        return self

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    async def ready(self, timeout_s: float = 120.0) -> ChaosWorker:
        """``wait_ready`` without blocking the event loop (other rounds run on it)."""

        def started() -> bool:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log_path.read_text()[-3000:]}")
            return b"worker.started" in self.log_path.read_bytes()

        await wait_until(started, timeout_s=timeout_s, what=f"worker ready ({self.log_path})")
        return self

    async def shutdown(self) -> None:
        """SIGTERM and wait for a graceful exit (SIGKILL after 40 s), without blocking."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await wait_until(lambda: proc.poll() is not None, timeout_s=40, what="exit")
            except TimeoutError:
                proc.kill()
                proc.wait(timeout=10)
        self.stop()  # closes the log

    def kill_now(self) -> float:
        """SIGKILL, wait for the process to be gone; returns when it died (time.time())."""
        self.kill()
        return time.time()

    async def wait_for_activity(self, activity_type: str, timeout_s: float, nth: int = 1) -> None:
        """Until this worker's SDK started ``activity_type`` ``nth`` more times than the
        previous waits for it consumed (polled every ~2 ms): consecutive waits see
        consecutive starts, however soon after each other they came."""
        needle = ACTIVITY_STARTED.format(activity_type)
        target = self._consumed.get(needle, 0) + nth

        def started() -> bool:
            if not self.alive:
                raise RuntimeError(f"worker died early:\n{self.log_path.read_text()[-3000:]}")
            return self.watcher.count(needle) >= target

        await wait_until(
            started,
            timeout_s=timeout_s,
            what=f"activity {activity_type} to start on worker ({self.log_path}), start {target}",
            every_s=0.002,
        )
        self._consumed[needle] = target


def worker_main() -> None:
    """The worker entry point with two test-only settings, neither changing behaviour:

    - the SDK's activity logger at DEBUG, so ``Running activity <type>`` is in the log;
    - litellm imported before the worker polls. Production imports it lazily in the
      first LLM activity (seconds on a loaded machine); here that cost is paid while the
      killed worker's tasks are timing out anyway, not after, which keeps the suite short.
    """
    logging.getLogger(ACTIVITY_LOGGER).setLevel(logging.DEBUG)
    from durable_plans.activities.llm import import_litellm

    import_litellm()
    from durable_plans import worker

    worker.main(["--log-level", "INFO"])


# --------------------------------------------------------------------------- plans


VERBS = ("Write", "Refactor", "Review", "Test", "Document", "Profile", "Harden", "Port")
NOUNS = ("parser", "cache", "scheduler", "router", "exporter", "config", "store", "client")


@dataclass(frozen=True)
class RandomPlan:
    plan: Plan
    turns: dict[str, int]  # tool-call turns per subtask

    @property
    def expected_requests(self) -> int:
        """LLM requests without crashes: the tool-call turns plus the final answer."""
        return sum(t + 1 for t in self.turns.values())


def random_plan(rng: random.Random, *, prefix: str, session_id: str) -> RandomPlan:
    """10–12 subtasks, each depending on up to 2 of the 5 declared just before it, about
    a third with two tool turns, each with its own extra provider latency (0–100 ms)."""
    n = rng.randint(10, 12)
    rows: list[tuple[str, str, list[str]]] = []
    turns: dict[str, int] = {}
    for i in range(n):
        sid = f"t{i:02d}"
        recent = [r[0] for r in rows[-5:]]
        k = min(len(recent), rng.choice((0, 1, 1, 2)))
        deps = sorted(rng.sample(recent, k))
        turns[sid] = 2 if rng.random() < 0.35 else 1
        text = f"{rng.choice(VERBS)} the {rng.choice(NOUNS)} part {i} [slow:{rng.randint(0, 100)}]"
        if turns[sid] == 2:
            text += " [turns:2]"
        rows.append((sid, text, deps))
    plan = make_plan(rows, session_id=session_id, max_parallel=rng.randint(3, 4), prefix=prefix)
    return RandomPlan(plan=plan, turns=turns)


def turns_of(description: str) -> int:
    return 2 if "[turns:2]" in description else 1


def plan_run_id(plan: Plan, first_execution_run_id: str | None) -> str:
    """What PlanWorkflow derives its message and snapshot ids from."""
    assert first_execution_run_id, "the plan's handle has no run id"
    return domain_ids.plan_run_id(plan.id, first_execution_run_id)


# --------------------------------------------------------------------------- the writer


def file_content(path: str, size: int = 900_000) -> str:
    """Deterministic text of ``size`` bytes for ``path`` (under the 1 MiB write limit)."""
    lines: list[str] = []
    total, i = 0, 0
    while total < size:
        digest = hashlib.sha256(f"{path}:{i}".encode()).hexdigest()
        line = f"{i:06d} {digest} {digest[:30]}\n"
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines)[:size]


def write_target(text: str) -> str | None:
    """``PATH`` of a ``[write:PATH]`` directive in ``text``."""
    start = text.find("[write:")
    if start < 0:
        return None
    end = text.find("]", start)
    return text[start + len("[write:") : end] if end > 0 else None


@dataclass
class WriterScenario:
    """The fake agent, except that a task with ``[write:PATH]`` writes ``file_content``
    to PATH with one ``write_file`` call, then answers ``Done: <task>.``."""

    agent: AgentScenario = field(default_factory=AgentScenario)

    def __call__(self, request: ChatRequest) -> Reply:
        target = write_target(request.last_user_text)
        if target is None:
            return self.agent(request)
        since = since_last_user(request.messages)
        if not any(m.get("role") == "tool" for m in since):
            args = json.dumps({"path": target, "content": file_content(target)})
            return Completion(tool_calls=(ToolCallSpec("write_file", args),))
        result = next(str(m.get("content")) for m in since if m.get("role") == "tool")
        return Completion(content=f"Done: {strip_directives(request.last_user_text)}. {result}")


def temp_leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(f"*{TEMP_SUFFIX}"))


# --------------------------------------------------------------------------- call audit


@dataclass
class CallAudit:
    requests: int
    delivered: int
    repeats: int  # deliveries of a body that had been delivered before
    distinct: int  # distinct bodies delivered: one per LLM call the plan needed
    violations: list[str]
    rejected: list[str]  # requests the strict provider refused (invalid tool pairing)
    not_completions: list[str]


@dataclass(frozen=True)
class WorkerCalls:
    """The calls one worker made, as its own provider logged them (each worker of a round
    talks to a provider of its own, so who asked is known exactly, not guessed from
    clocks), and what the session store held right after that worker was SIGKILLed
    (``stored_answers``; None when it was not killed)."""

    entries: Sequence[Mapping[str, Any]]
    stored_at_kill: Mapping[str, int] | None = None


def own_turn(messages: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """The subtask (its task text) and the turn (answers it had) a request asks for."""
    last = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    turn = sum(1 for m in messages[last + 1 :] if m.get("role") == "assistant")
    return str(messages[last].get("content")), turn


def plan_branches(plan: Plan, run_id: str) -> dict[str, str]:
    """Each subtask's branch session (task text -> session id)."""
    base_id = default_session_id(plan)
    return {
        s.description: domain_ids.branch_session_id(base_id, run_id, s.id) for s in plan.subtasks
    }


def audit_calls(workers: Sequence[WorkerCalls]) -> CallAudit:
    """No completed LLM call is made again (``workers`` in the order they ran).

    A call (request body) answered more than once: every answer but the last must have
    been lost, that is, given to a worker that was SIGKILLed before it stored the answer
    (its turn was not in the store read right after that kill). An answer the worker had
    stored, or given to a worker that was not killed, asked for again is a violation,
    however long before the kill it was delivered: on a loaded machine the time between
    the provider's answer and the store write is not bounded, so no time window decides.
    """
    answered: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for index, worker in enumerate(workers):
        for e in worker.entries:
            if e.get("kind") == "completion" and e.get("delivered"):
                answered.setdefault(str(e["body_hash"]), []).append((index, e))
    violations: list[str] = []
    for deliveries in answered.values():
        for (index, e), (later, _) in itertools.pairwise(deliveries):
            task, turn = own_turn(e["body"]["messages"])
            stored = workers[index].stored_at_kill
            what = f"turn {turn} of {task!r} (request #{e.get('seq')} of worker {index + 1})"
            if later == index:
                violations.append(f"{what} was asked for twice by the same worker")
            elif stored is None:
                violations.append(f"{what} was asked for again, the worker was not killed")
            elif stored.get(task, 0) > turn:
                violations.append(
                    f"{what} was asked for again by worker {later + 1} although the killed "
                    f"worker had stored {stored[task]} answers of {task!r}"
                )
    entries = [e for worker in workers for e in worker.entries]
    delivered = sum(len(d) for d in answered.values())
    rejected = [
        f"#{e.get('seq')}: {e.get('reason')}" for e in entries if e.get("kind") == "rejected"
    ]
    others = [
        f"#{e.get('seq')}: {e.get('kind')} {e.get('status')}"
        for e in entries
        if e.get("kind") not in ("completion", "rejected")
    ]
    return CallAudit(
        len(entries),
        delivered,
        delivered - len(answered),
        len(answered),
        violations,
        rejected,
        others,
    )


# --------------------------------------------------------------------------- cost audit


def call_ids(plan: Plan, run_id: str) -> dict[tuple[str, int], str]:
    """(task text, turn) -> the id of that LLM call's answer (the paid ledger's key)."""
    return {
        (s.description, turn): domain_ids.assistant_message_id(
            domain_ids.subtask_scope(run_id, s.id), turn
        )
        for s in plan.subtasks
        for turn in range(turns_of(s.description) + 1)
    }


async def paid_answers(store_path: Path, calls: Mapping[tuple[str, int], str]) -> dict[Any, Usage]:
    """What the paid ledgers held (``activities/spend.py``): (task, turn) -> usage.

    Read right after a SIGKILL, it is every answer the dead worker (and those before it)
    had received and recorded; what the provider delivered to it beyond that was lost in
    transit, with the process, before anyone but the provider knew of it."""
    async with opened_store(store_path) as store:
        return {key: await store.total_usage(call_ledger(cid)) for key, cid in calls.items()}


@dataclass
class CostAudit:
    served: dict[str, Usage]  # per task: every answer the providers delivered
    lost: dict[str, Usage]  # per task: delivered to a worker that died before recording it
    lost_answers: int
    problems: list[str]


def audit_cost(
    workers: Sequence[WorkerCalls], paid_at_kill: Mapping[int, Mapping[Any, Usage]]
) -> CostAudit:
    """The tokens each subtask's answers cost, from the providers' own logs.

    ``paid_at_kill[i]`` is what the paid ledgers held right after worker ``i`` was
    SIGKILLed: of what was delivered to workers ``0..i``, the rest was lost in transit
    with the dead workers. Whatever a kill lost must be whole answers of one call (each
    delivery of one request is the same answer), at most one per call (a worker asks once),
    and never an answer the store held at that kill. Workers after the last kill were not
    killed and lose nothing."""
    served: dict[str, Usage] = {}
    delivered: dict[tuple[str, int], list[tuple[int, Usage]]] = {}
    for index, worker in enumerate(workers):
        for e in worker.entries:
            if e.get("kind") == "completion" and e.get("delivered"):
                task, turn = own_turn(e["body"]["messages"])
                u = e["usage"]
                usage = Usage(
                    prompt_tokens=u["prompt_tokens"], completion_tokens=u["completion_tokens"]
                )
                served[task] = served.get(task, Usage()) + usage
                delivered.setdefault((task, turn), []).append((index, usage))
    lost: dict[str, Usage] = {}
    problems: list[str] = []
    lost_answers = 0
    for (task, turn), answers in delivered.items():
        answer = answers[0][1]
        what = f"turn {turn} of {task!r}"
        lost_before = 0
        for i in sorted(paid_at_kill):
            served_upto = sum(u.total_tokens for w, u in answers if w <= i)
            recorded = paid_at_kill[i].get((task, turn), Usage()).total_tokens
            lost_here = served_upto - recorded - lost_before
            if lost_here == 0:
                continue
            if lost_here != answer.total_tokens:
                problems.append(
                    f"{what}: worker {i + 1} died with {recorded} tokens recorded of "
                    f"{served_upto} served ({lost_before} lost before)"
                )
            elif (workers[i].stored_at_kill or {}).get(task, 0) > turn:
                problems.append(f"{what}: lost although stored when worker {i + 1} died")
            lost_before += lost_here
            lost_answers += 1
            lost[task] = lost.get(task, Usage()) + answer
    return CostAudit(served, lost, lost_answers, problems)


def check_cost(plan: Plan, report: PlanReport, audit: CostAudit) -> None:
    """The report's usage, per subtask and in total, is exactly what the providers served
    (less what was lost in transit to a killed worker, see ``audit_cost``)."""
    assert audit.problems == [], audit.problems
    tokens = ("prompt_tokens", "completion_tokens")
    for sub, result in zip(plan.subtasks, report.subtasks, strict=True):
        served = audit.served.get(sub.description, Usage())
        expected = [
            getattr(served, k) - getattr(audit.lost.get(sub.description, Usage()), k)
            for k in tokens
        ]
        assert [getattr(result.usage, k) for k in tokens] == expected, (sub.id, result.usage)
    total = Usage.total(audit.served.values())
    lost = Usage.total(audit.lost.values())
    assert [getattr(report.usage, k) for k in tokens] == [
        getattr(total, k) - getattr(lost, k) for k in tokens
    ], report.usage


# --------------------------------------------------------------------------- invariants


async def check_plan(
    client: Client,
    store_path: Path,
    plan: Plan,
    report: PlanReport,
    first_execution_run_id: str | None,
    *,
    base_before: Sequence[Message] = (),
) -> None:
    """Everything that must hold after a plan survived chaos; AssertionError otherwise."""
    n = len(plan.subtasks)
    assert report.status is PlanStatus.COMPLETED, report.model_dump_json(indent=1)[:3000]
    assert report.counts.completed == n, report.counts
    assert report.counts.total == n, report.counts
    assert [r.id for r in report.subtasks] == [s.id for s in plan.subtasks]
    run_id = plan_run_id(plan, first_execution_run_id)
    base_id = default_session_id(plan)

    async with opened_store(store_path) as store:
        base = await store.read(base_id)
        # The base session: what it held before, then exactly one merged result per
        # subtask, in plan order — no duplicate, no loss, whatever order children finished.
        head, merged = base[: len(base_before)], base[len(base_before) :]
        assert [m.id for m in head] == [m.id for m in base_before], "base history changed"
        assert head == list(base_before), "base history changed"
        assert [m.id for m in merged] == [merged_result_id(run_id, s.id) for s in plan.subtasks], (
            f"base session holds {[m.id for m in merged]}"
        )
        for sub, result, message in zip(plan.subtasks, report.subtasks, merged, strict=True):
            assert result.status is SubtaskStatus.COMPLETED, result
            assert result.llm_calls == turns_of(sub.description) + 1, (sub.id, result.llm_calls)
            assert message.role == "assistant" and message.content == result.result, sub.id
            assert result.session_id is not None
            await _check_branch(store, sub.id, sub.description, result.session_id)
            meta = await store.get_session(result.session_id)
            assert meta.ended, f"branch of {sub.id} was left open"
            snap = snapshot_id(base_id, run_id, sub.id)
            assert not await store.has_snapshot(snap), f"snapshot {snap} was not deleted"
    replayed = await assert_replays(
        client, [plan.id, *(domain_ids.subtask_workflow_id(plan.id, s.id) for s in plan.subtasks)]
    )
    assert replayed >= n + 1


async def _check_branch(store: Any, sid: str, description: str, branch_id: str) -> None:
    branch: list[Message] = await store.read(branch_id)
    ids = [m.id for m in branch]
    assert len(ids) == len(set(ids)), f"{sid}: duplicated message ids"
    problems = strict_violations([m.to_openai() for m in branch])
    assert problems == [], f"{sid}: {problems}"
    calls = [c.id for m in branch if m.role == "assistant" and m.tool_calls for c in m.tool_calls]
    answered = Counter(m.tool_call_id for m in branch if m.role == "tool")
    # Every call answered exactly once, and no answer without its call.
    assert answered == Counter(calls), f"{sid}: calls {calls} answered {dict(answered)}"
    turns = turns_of(description)
    assert len(calls) == turns, f"{sid}: {len(calls)} tool calls, expected {turns}"
    tasks = [m for m in branch if m.role == "user" and m.content == description]
    assert len(tasks) == 1, f"{sid}: the task message appears {len(tasks)} times"
    done = f"Done: {strip_directives(description)}."
    own = [m for m in branch if m.is_plain_assistant and (m.content or "").startswith(done)]
    assert len(own) == 1, f"{sid}: {len(own)} final answers"
    assert branch[-1] == own[0], f"{sid}: the final answer is not the last message"


# --------------------------------------------------------------------------- dev server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class DevServer:
    """``temporal server start-dev`` on a fixed port and SQLite file, restartable."""

    def __init__(self, db_path: Path, log_path: Path) -> None:
        self.db_path = db_path
        self.log_path = log_path
        self.port = free_port()
        self.ui_port = free_port()
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> DevServer:
        binary = Path(sys.executable).parent / "temporal"
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [
                str(binary),
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--db-filename",
                str(self.db_path),
                "--port",
                str(self.port),
                "--ui-port",
                str(self.ui_port),
                "--log-level",
                "error",
                *dynamic_config_args(),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        self.starts += 1
        return self

    async def wait_ready(self, timeout_s: float = 120.0) -> Client:
        """A connected client once the server reports itself healthy."""
        deadline = time.monotonic() + timeout_s
        last: BaseException | None = None
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"temporal dev server exited ({self._proc.returncode}):\n{self.log_tail()}"
                )
            try:
                client = await Client.connect(self.address, plugins=[DurablePlansPlugin()])
                if await client.service_client.check_health():
                    return client
            except (RuntimeError, RPCError) as err:
                last = err
            await asyncio.sleep(0.2)
        raise TimeoutError(
            f"dev server on {self.address} not ready after {timeout_s:g}s ({last!r}):\n"
            f"{self.log_tail()}"
        )

    def signal(self, sig: signal.Signals) -> float:
        """Send ``sig`` and wait for the process to exit; returns when it was gone."""
        assert self._proc is not None
        self._proc.send_signal(sig)
        try:
            self._proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return time.time()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self.signal(signal.SIGTERM)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-15:])
        return "(no log)"
