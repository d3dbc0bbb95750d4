"""Worker CPU per subtask, side by side: ours, ours at another commit, and peers.

    python -m bench.cpu [--short] [--widths 4,5] [--layers 4] [--latency-ms 500]
                        [--repeats 1] [--before REV_OR_DIR] [--no-peers] [--variants V,...]
                        [--servers memory,file] [--agents coder,ask]

When five subtasks run at once on two cores, the CPU each one costs the worker is what
they wait for. This benchmark measures that CPU directly, not wall time: every runner is
its own worker *process* on one shared dev server and one fake provider process, and the
benchmark reads the worker's and the dev server's CPU time (``/proc/PID/stat``, user +
system) right before and right after each plan. Runners are alternated run by run, so
each sees the same machine load.

The DAG: ``--layers`` layers of ``--width`` subtasks, each subtask depending on the whole
previous layer; each subtask is an agent loop of two LLM calls and one tool call
(``list_dir``), 500 ms provider latency. Ideal plan time: layers x 2 x latency.

Runners:

* ``ours``: this tree's worker (``durable_plans.worker``: PlanWorkflow → one
  SubtaskWorkflow per subtask, LLM calls through litellm as activities);
* ``ours-acompletion``, ``ours-asyncio``, ``ours-stock-runner``, ``ours-regular-llm``
  (``--variants``; all by default, only ``ours-regular-llm`` with ``--short``): this tree
  with one default switched back (``DPLAN_LLM_LEAN=0``: every call through
  ``litellm.acompletion``; ``DPLAN_EVENT_LOOP=asyncio``; ``DPLAN_WORKFLOW_RUNNER_LEAN=0``:
  the SDK's stock sandboxed runner; ``DPLAN_LLM_LOCAL=0``: a subtask's LLM calls as
  regular activities, the history shape before issue 25), so each default's worth is
  measured in the same run (``bench.private_apis`` runs the two on private APIs);
* ``ours-file`` (``--servers``, by default): this tree's worker against a second dev
  server, one writing its state file (``--db-filename``, as ``dplan run --embedded`` runs
  it): the user's path; its server CPU is that server's. Every dev server here registers
  the project's search attributes, as ``dplan setup`` and ``--embedded`` leave it (before
  issue 30 this bench's server had none, so plans skipped their upserts);
* ``ours-ask`` (``--agents``, by default): this tree with agent ``ask`` (one LLM call, no
  tool: the plan's shape with no workspace change), beside ``ours`` with ``coder``;
* ``before`` (with ``--before REV``): the same worker at another commit, checked out
  into a temporary git worktree (or a directory given as is) and run from there on the
  same interpreter, so the only difference is the project's code;
* ``openai-agents``: the OpenAI Agents SDK's Temporal integration
  (``temporalio.contrib.openai_agents``), one agent run per child workflow, model calls
  as activities, the tool an activity (``bench._peer_agents``);
* ``pydantic-ai``: Pydantic AI's Temporal integration (``pydantic_ai.durable_exec.temporal``,
  an ``Agent`` with the ``TemporalDurability`` capability), one agent run per child
  workflow, model requests and the tool as activities (``bench._peer_pydantic_ai``).

The peers need the ``bench`` extra (``pip install -e '.[bench]'``); each is skipped, saying
so, without its package, or if its worker fails to warm up.

Printed per runner and width: wall s, wall / ideal, worker CPU ms per subtask and per LLM
call, dev-server CPU ms per subtask, history events per subtask (the plan's and every
child's, divided by the subtasks), Temporal Cloud actions, completed workflow tasks and
activity tasks per subtask, counted from the same histories (``bench/_actions.py`` gives
the rules and their source), LLM requests the provider answered; then the ratios
between runners. Nothing is asserted: the numbers are for reading.

``--short`` (CI): 2 layers, 100 ms latency, no ``--before``, and one peer (``openai-agents``:
a fourth worker process made the run a third longer and crowded the others); under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench._actions import HistoryCost, history_cost
from bench._peer_dag import run_peer_plan
from bench._user_path import DevServer, load
from bench._user_path import dev_server as user_dev_server
from durable_plans.domain.models import PlanReport, PlanStatus
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.testing import FakeProviderProcess

MODEL = "openai/fake-model"
FAKE_KEY = "sk-bench-fake-000000000000000000000000000"  # the fake provider checks no key
LLM_CALLS_PER_SUBTASK = 2
REPO = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# ``--variants``: this tree with one default switched back (what each default is worth).
VARIANTS: dict[str, dict[str, str]] = {
    "ours-acompletion": {"DPLAN_LLM_LEAN": "0"},  # every call through litellm.acompletion
    "ours-asyncio": {"DPLAN_EVENT_LOOP": "asyncio"},  # asyncio's loop, not uvloop
    # The SDK's stock sandboxed runner, a trip into the sandbox per payload visit.
    "ours-stock-runner": {"DPLAN_WORKFLOW_RUNNER_LEAN": "0"},
    # The LLM calls as regular activities, as before issue 25 (the server's share).
    "ours-regular-llm": {"DPLAN_LLM_LOCAL": "0"},
}
# ``--short`` (CI) runs this one: the server's share before and after, side by side.
SHORT_VARIANTS = ("ours-regular-llm",)


# --------------------------------------------------------------------------- measuring


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def full_layer_plan(layers: int, width: int, *, prefix: str) -> list[dict[str, Any]]:
    """Subtasks as plain dicts: ``layers`` x ``width``, each needing the whole layer below."""
    subtasks: list[dict[str, Any]] = []
    for depth in range(layers):
        for k in range(width):
            subtasks.append(
                {
                    "id": f"l{depth}-s{k}",
                    "description": (
                        f"Layer {depth}, step {k}: look at the workspace and report what "
                        "the project contains."
                    ),
                    "depends_on": [f"l{depth - 1}-s{p}" for p in range(width)] if depth else [],
                }
            )
    return subtasks


async def history_events(client: Client, workflow_id: str) -> HistoryCost:
    """Events, tasks and Temporal Cloud actions (``bench/_actions.py``) of a workflow and,
    recursively, of every child it started."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    total = history_cost(history.events)
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            child = e.child_workflow_execution_started_event_attributes.workflow_execution
            total = total + await history_events(client, child.workflow_id)
    return total


# --------------------------------------------------------------------------- runners


@dataclass
class Runner:
    """One worker process and how to start a plan on it."""

    name: str
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    start_plan: Callable[[Client, str, list[dict[str, Any]], int], Awaitable[None]]
    queue: str = ""
    last_id: str = ""  # the workflow id of the last plan started
    optional: bool = False  # a peer: its failure is reported and skipped, never fatal
    proc: subprocess.Popen[bytes] | None = None
    spy: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    # A runner on a server of its own (``ours-file``: the dev server with its state file):
    # its client and the server whose CPU is its share; None: the shared ones.
    client: Client | None = None
    server_pid: int | None = None

    def start(self, logs: Path) -> None:
        self.log = logs / f"{self.name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def start_profile(self, profile: Path) -> None:
        """py-spy on the worker from outside (its CPU stays the worker's own figure)."""
        if self.proc is not None:
            beside = Path(sys.executable).parent / "py-spy"
            spy = str(beside) if beside.exists() else "py-spy"
            argv = [spy, "record", "--format", "raw", "-r", "100", "--nonblocking"]
            argv += ["-p", str(self.proc.pid), "-o", str(profile / f"{self.name}.txt")]
            self.spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.spy is not None and self.spy.poll() is None:
            self.spy.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
            try:
                self.spy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.spy.kill()
                self.spy.wait()
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def _base_env() -> dict[str, str]:
    """Our environment without any Temporal or durable-plans configuration."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DPLAN_", "TEMPORAL_", "OPENAI_", "PYTHONPATH"))
    }


async def _start_ours(
    client: Client, queue: str, subtasks: list[dict[str, Any]], par: int, agent: str = "coder"
) -> str:
    """Start the plan from its plan file's JSON, as ``temporal workflow start`` would: every
    release since the raw-input change accepts it, whatever fields ``PlanInput`` has grown
    since (a ``--before`` tree refuses fields it does not know)."""
    plan_id = f"cpu-{uuid.uuid4().hex[:10]}"
    plan_file = {
        "id": plan_id,
        "goal": "worker CPU benchmark",
        "max_parallel": par,
        "subtasks": [
            {
                "id": s["id"],
                "description": s["description"],
                "agent": agent,
                "depends_on": list(s["depends_on"]),
            }
            for s in subtasks
        ],
    }
    report = await client.execute_workflow(
        "PlanWorkflow", plan_file, id=plan_id, task_queue=queue, result_type=PlanReport
    )
    if report.status is not PlanStatus.COMPLETED:
        raise RuntimeError(f"plan {plan_id} ended {report.status.value}: {report.counts}")
    return plan_id


def ours_runner(
    name: str,
    tree: Path,
    *,
    address: str,
    provider: str,
    tmp: Path,
    workspace: Path,
    extra_env: dict[str, str] | None = None,
    agent: str = "coder",
) -> Runner:
    queue = f"cpu-{name}-{uuid.uuid4().hex[:6]}"
    env = (
        _base_env()
        | {
            "TEMPORAL_ADDRESS": address,
            "DPLAN_TASK_QUEUE": queue,
            "DPLAN_MODEL": MODEL,
            "DPLAN_API_BASE": provider,
            "DPLAN_API_KEY": FAKE_KEY,
            "DPLAN_SESSION_STORE": str(tmp / f"{name}-sessions.db"),
            "DPLAN_WORKSPACE": str(workspace),
            "DPLAN_STATE_DIR": str(tmp / f"{name}-state"),
            "PYTHONPATH": str(tree),
        }
        | (extra_env or {})
    )
    # ``-c`` puts the working directory first on sys.path: ``durable_plans`` is the tree's.
    argv = [sys.executable, "-c", "from durable_plans.worker import main; main()"]

    async def start(client: Client, _q: str, subtasks: list[dict[str, Any]], par: int) -> None:
        runner.last_id = await _start_ours(client, queue, subtasks, par, agent)

    runner = Runner(name, argv, tree, env, start, queue=queue)
    return runner


def _peer_env(queue: str, *, address: str, provider: str, workspace: Path) -> dict[str, str]:
    """What a peer worker reads: where the server, the provider and the workspace are."""
    return _base_env() | {
        "TEMPORAL_ADDRESS": address,
        "PEER_TASK_QUEUE": queue,
        "PEER_API_BASE": provider,
        "PEER_API_KEY": FAKE_KEY,
        "PEER_WORKSPACE": str(workspace),
        "PYTHONPATH": str(REPO),
    }


def _peer_runner(
    name: str, module: str, workflow_name: str, *, address: str, provider: str, workspace: Path
) -> Runner:
    """A peer's worker process (``python -m MODULE``) and how to start its plan."""
    queue = f"cpu-{name}-{uuid.uuid4().hex[:6]}"
    env = _peer_env(queue, address=address, provider=provider, workspace=workspace)
    argv = [sys.executable, "-m", module]

    async def start(client: Client, _q: str, subtasks: list[dict[str, Any]], par: int) -> None:
        runner.last_id = await run_peer_plan(client, queue, workflow_name, subtasks, par)

    runner = Runner(name, argv, REPO, env, start, queue=queue, optional=True)
    return runner


def peer_runner(*, address: str, provider: str, workspace: Path) -> Runner | str:
    """The OpenAI Agents SDK peer, or the reason it cannot run here."""
    try:
        import agents  # noqa: F401
        from temporalio.contrib import openai_agents  # noqa: F401
    except ImportError as err:
        return f"openai-agents is not installed ({err}); pip install -e '.[bench]'"
    return _peer_runner(
        "openai-agents",
        "bench._peer_agents",
        "PeerPlanWorkflow",
        address=address,
        provider=provider,
        workspace=workspace,
    )


def pydantic_ai_runner(*, address: str, provider: str, workspace: Path) -> Runner | str:
    """The Pydantic AI peer (its Temporal integration), or the reason it cannot run here."""
    try:
        from pydantic_ai.durable_exec import temporal  # noqa: F401
        from pydantic_ai.models import openai  # noqa: F401
    except ImportError as err:
        return f"pydantic-ai is not installed ({err}); pip install -e '.[bench]'"
    return _peer_runner(
        "pydantic-ai",
        "bench._peer_pydantic_ai",
        "PydaiPlanWorkflow",
        address=address,
        provider=provider,
        workspace=workspace,
    )


# --------------------------------------------------------------------------- the runs


@dataclass
class Sample:
    wall_s: float
    worker_cpu_s: float
    server_cpu_s: float
    cost: HistoryCost
    llm_requests: int


@dataclass
class Results:
    samples: dict[tuple[str, int], list[Sample]] = field(default_factory=dict)


@contextlib.contextmanager
def dev_server(tmp: Path, kind: str = "memory") -> Iterator[tuple[DevServer, str]]:
    """A dev server as users have it (``bench._user_path``: the project's search
    attributes registered; ``kind`` "file": with its state file, as ``--embedded``)."""
    with user_dev_server(tmp, kind) as server:
        yield server, server.address


async def _connect(address: str) -> Client:
    deadline = time.monotonic() + 60
    while True:
        try:
            return await Client.connect(address, plugins=[DurablePlansPlugin()])
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


def _checkout(rev: str, tmp: Path) -> tuple[Path, Callable[[], None]]:
    """A directory holding ``rev``'s tree: the directory itself, or a temporary worktree."""
    if Path(rev).is_dir():
        return Path(rev).resolve(), lambda: None
    where = tmp / f"tree-{rev[:12]}"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(where), rev],
        check=True,
    )

    def remove() -> None:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(where)], check=False
        )

    return where, remove


async def measure(args: argparse.Namespace) -> tuple[Results, list[str], dict[str, str]]:
    results = Results()
    skipped: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dplan-bench-cpu-")))
        workspace = tmp / "workspace"
        workspace.mkdir()
        (workspace / "README.md").write_text("# bench workspace\n\nA small demo project.\n")
        logs = tmp / "logs"
        logs.mkdir()
        provider = stack.enter_context(
            FakeProviderProcess(tmp / "requests.jsonl", latency_ms=args.latency_ms)
        )
        server, address = stack.enter_context(dev_server(tmp))
        client = await _connect(address)
        runners: list[Runner] = []
        if args.before:
            tree, remove = _checkout(args.before, tmp)
            stack.callback(remove)
            runners.append(
                ours_runner(
                    "before", tree, address=address, provider=provider.base_url, tmp=tmp,
                    workspace=workspace,
                )
            )  # fmt: skip
        runners.append(
            ours_runner(
                "ours", REPO, address=address, provider=provider.base_url, tmp=tmp,
                workspace=workspace,
            )
        )  # fmt: skip
        # The user's path: the same worker against a dev server writing its state file
        # (as ``dplan run --embedded`` starts it), its CPU that server's.
        if "file" in args.servers:
            file_server, file_address = stack.enter_context(dev_server(tmp, "file"))
            on_file = ours_runner(
                "ours-file", REPO, address=file_address, provider=provider.base_url, tmp=tmp,
                workspace=workspace,
            )  # fmt: skip
            on_file.client = await _connect(file_address)
            on_file.server_pid = file_server.pid
            runners.append(on_file)
        # The agent without tools: one LLM call, no tool call, no change to the workspace.
        if "ask" in args.agents:
            runners.append(
                ours_runner(
                    "ours-ask", REPO, address=address, provider=provider.base_url, tmp=tmp,
                    workspace=workspace, agent="ask",
                )
            )  # fmt: skip
        # This tree with one of its defaults switched back, to show what each is worth.
        for variant in args.variants:
            runners.append(
                ours_runner(
                    variant, REPO, address=address, provider=provider.base_url, tmp=tmp,
                    workspace=workspace, extra_env=VARIANTS[variant],
                )
            )  # fmt: skip
        if args.peers:
            peers = {"openai-agents": peer_runner}
            if not args.short:  # --short (CI): one peer, see the module docstring
                peers["pydantic-ai"] = pydantic_ai_runner
            for peer_name, make_peer in peers.items():
                peer = make_peer(address=address, provider=provider.base_url, workspace=workspace)
                if isinstance(peer, str):
                    skipped[peer_name] = peer
                else:
                    runners.append(peer)
        try:
            for r in runners:
                r.start(logs)
                stack.callback(r.stop)
            # Warm-up: imports, the sandbox's first load of each workflow, first connections.
            warm = await asyncio.gather(
                *(_run_once(r, client, full_layer_plan(2, 2, prefix="warm"), 2) for r in runners),
                return_exceptions=True,
            )
            for r, outcome in zip(list(runners), warm, strict=True):
                if isinstance(outcome, BaseException):
                    if not r.optional:
                        raise outcome
                    skipped[r.name] = f"failed to warm up: {outcome!r} (see its log)"
                    runners.remove(r)
            if args.profile is not None:
                for r in runners:
                    r.start_profile(args.profile)
            order = list(runners)
            for _ in range(args.repeats):
                for width in args.widths:
                    subtasks = full_layer_plan(args.layers, width, prefix="cpu")
                    for r in list(order):
                        try:
                            sample = await _sample(r, client, server.pid, provider, subtasks, width)
                        except Exception as err:
                            if not r.optional:
                                raise
                            skipped[r.name] = f"failed: {err!r}"
                            order.remove(r)
                            continue
                        results.samples.setdefault((r.name, width), []).append(sample)
                order.reverse()  # alternate which runner goes first
        except Exception:
            for r in runners:
                if r.log is not None and r.log.exists():
                    tail = r.log.read_text(errors="replace")[-3000:]
                    print(f"--- {r.name} worker log (tail):\n{tail}", file=sys.stderr)
            raise
    return results, [r.name for r in runners if r.name not in skipped], skipped


async def _run_once(r: Runner, client: Client, subtasks: list[dict[str, Any]], par: int) -> None:
    if not r.alive():
        raise RuntimeError(f"the {r.name} worker exited (see its log)")
    await asyncio.wait_for(r.start_plan(r.client or client, "", subtasks, par), timeout=300)


async def _sample(
    r: Runner,
    client: Client,
    server_pid: int,
    provider: FakeProviderProcess,
    subtasks: list[dict[str, Any]],
    width: int,
) -> Sample:
    assert r.proc is not None
    server_pid = r.server_pid or server_pid
    requests_before = len(provider.log_entries())
    w0, s0, t0 = cpu_seconds(r.proc.pid), cpu_seconds(server_pid), time.perf_counter()
    await _run_once(r, client, subtasks, width)
    wall = time.perf_counter() - t0
    w1, s1 = cpu_seconds(r.proc.pid), cpu_seconds(server_pid)
    requests = len(provider.log_entries()) - requests_before
    events = await history_events(r.client or client, r.last_id)
    return Sample(wall, w1 - w0, s1 - s0, events, requests)


# --------------------------------------------------------------------------- the report


def _med(values: Sequence[float]) -> float:
    return statistics.median(values)


def report(
    results: Results,
    names: list[str],
    skipped: dict[str, str],
    args: argparse.Namespace,
    load_before: str = "",
) -> None:
    ideal = args.layers * LLM_CALLS_PER_SUBTASK * args.latency_ms / 1000
    if load_before:
        print(f"load before: {load_before}\nload after:  {load()}")
    print(
        f"DAG: {args.layers} layers x width, each subtask depending on the whole previous "
        f"layer; {LLM_CALLS_PER_SUBTASK} LLM calls + 1 tool call per subtask; provider "
        f"latency {args.latency_ms:.0f} ms; ideal {ideal:.2f} s; median of {args.repeats} "
        "run(s) per runner, runners alternated; CPU from /proc (user + system)"
    )
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}")
    head = (
        f"{'runner':<15}{'width':>6}{'wall s':>8}{'/ideal':>8}{'worker ms/subtask':>19}"
        f"{'ms/LLM call':>13}{'server ms/subtask':>19}{'events/subtask':>16}"
        f"{'actions/subtask':>17}{'WFT/subtask':>13}{'act.tasks/subtask':>19}{'LLM reqs':>10}"
    )
    print()
    print(head)
    table: dict[tuple[str, int], dict[str, float]] = {}
    for width in args.widths:
        n = args.layers * width
        for name in names:
            samples = results.samples.get((name, width), [])
            if not samples:
                continue
            row = {
                "wall": _med([s.wall_s for s in samples]),
                "worker": _med([s.worker_cpu_s for s in samples]) * 1000 / n,
                "per_call": _med([s.worker_cpu_s / max(s.llm_requests, 1) for s in samples]) * 1000,
                "server": _med([s.server_cpu_s for s in samples]) * 1000 / n,
                "events": _med([s.cost.events for s in samples]) / n,
                "actions": _med([s.cost.actions for s in samples]) / n,
                "wft": _med([s.cost.workflow_tasks for s in samples]) / n,
                "acts": _med([s.cost.activity_tasks for s in samples]) / n,
                "requests": _med([s.llm_requests for s in samples]),
            }
            table[(name, width)] = row
            print(
                f"{name:<15}{width:>6}{row['wall']:>8.2f}{row['wall'] / ideal:>7.2f}x"
                f"{row['worker']:>19.0f}{row['per_call']:>13.1f}{row['server']:>19.0f}"
                f"{row['events']:>16.1f}{row['actions']:>17.2f}{row['wft']:>13.2f}"
                f"{row['acts']:>19.2f}{row['requests']:>10.0f}"
            )
    print()
    for width in args.widths:
        ours = table.get(("ours", width))
        if ours is None:
            continue
        for other in names:
            theirs = table.get((other, width))
            if other == "ours" or theirs is None:
                continue
            print(
                f"width {width}: ours / {other}: wall {ours['wall'] / theirs['wall']:.2f}, "
                f"worker CPU {ours['worker'] / theirs['worker']:.2f}, "
                f"server CPU {ours['server'] / theirs['server']:.2f}, "
                f"events {ours['events'] / theirs['events']:.2f}, "
                f"actions {ours['actions'] / theirs['actions']:.2f}"
            )


# --------------------------------------------------------------------------- entry points


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cpu",
        description="Worker and dev-server CPU per subtask, ours against a commit and peers.",
    )
    parser.add_argument("--short", action="store_true", help="2 layers, 100 ms latency (CI)")
    parser.add_argument("--widths", default="4,5", help="comma-separated widths (default 4,5)")
    parser.add_argument("--layers", type=int, help="layers (default 4; 2 with --short)")
    parser.add_argument("--latency-ms", type=float, help="provider latency (default 500)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per runner and width")
    parser.add_argument(
        "--before", metavar="REV_OR_DIR", help="also run the worker at this commit / tree"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run each worker under py-spy, collapsed stacks into DIR (CPU figures then "
        "include py-spy's own)",
    )
    parser.add_argument("--no-peers", dest="peers", action="store_false", help="skip peers")
    parser.add_argument(
        "--servers",
        default="memory,file",
        help="ours on which dev servers: memory (shared by every runner), file (its state "
        "file, as dplan run --embedded: runner ours-file); default both",
    )
    parser.add_argument(
        "--agents",
        default="coder,ask",
        help="ours with which agents: coder (every runner), ask (runner ours-ask); default both",
    )
    parser.add_argument(
        "--variants",
        help=f"comma-separated, from {', '.join(VARIANTS)}; 'none' for none "
        f"(default: all; {', '.join(SHORT_VARIANTS)} with --short)",
    )
    args = parser.parse_args(argv)
    args.servers = {v.strip() for v in args.servers.split(",") if v.strip()}
    args.agents = {v.strip() for v in args.agents.split(",") if v.strip()}
    if not args.servers <= {"memory", "file"} or not args.agents <= {"coder", "ask"}:
        parser.error("--servers: memory, file; --agents: coder, ask")
    if args.variants is None:
        args.variants = ",".join(SHORT_VARIANTS if args.short else VARIANTS)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip() not in ("", "none")]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    try:
        args.widths = [int(w) for w in str(args.widths).split(",") if w.strip()]
    except ValueError:
        parser.error(f"--widths must be comma-separated integers, got {args.widths!r}")
    if args.layers is None:
        args.layers = 2 if args.short else 4
    if args.latency_ms is None:
        args.latency_ms = 100.0 if args.short else 500.0
    if not args.widths or min(args.widths) < 1 or args.layers < 1 or args.repeats < 1:
        parser.error("widths, layers and repeats must be positive")
    if args.latency_ms <= 0:
        parser.error("--latency-ms must be positive")
    if sys.platform != "linux":
        parser.error("bench.cpu reads /proc: Linux only")
    if args.before and not Path(args.before).is_dir() and shutil.which("git") is None:
        parser.error("--before REV needs git")
    return args


async def run(argv: Sequence[str] | None = None) -> None:
    args = _parse(argv)
    before = load()
    results, names, skipped = await measure(args)
    report(results, names, skipped, args, before)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(run(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
