"""What streaming costs and what it buys: time to first text in ``dplan chat``,
and the worker CPU each streamed LLM call adds.

    python -m bench.stream [--short] [--messages 10] [--layers 4] [--width 4]
                           [--repeats 3] [--latency-ms 300] [--chunk-delay-ms 30]

One dev server, one fake provider process streaming its answers a few characters per
event every ``--chunk-delay-ms`` (like tokens), and two worker processes on their own task
queues: ``DPLAN_STREAM=all`` and ``DPLAN_STREAM=off``. Nothing is asserted.

1. First text. A real ``python -m durable_plans.cli chat`` process, stdin and stdout
   piped, talks to the ``all`` worker (a conversation streams under ``all`` exactly as
   under the default ``chat``). For each of ``--messages`` messages, the wall-clock time
   (``time.time()``) at which the chat's stdout first shows the answer
   (``orchestrator: Done: ``) is set against the provider's own record of when it wrote
   that answer's first text chunk (``first_text`` in its request log). The difference is
   what streaming adds between a token leaving the provider and a person seeing it:
   litellm → activity → signal → workflow stream → the CLI's subscription → the screen.
   The goal is 300 ms or less.

2. CPU per call. The same plan (``--layers`` x ``--width`` subtasks, each needing the
   whole previous layer, two LLM calls and one tool call each; ``bench.cpu``'s DAG and
   runners) runs on each worker in turn, alternated run by run. The worker's and the dev
   server's CPU (``/proc/PID/stat``) are read right before and after each plan and divided
   by the LLM calls the provider answered. Each worker's idle CPU rate is measured too:
   a streamed plan takes longer (the answer arrives over time instead of at once), and
   idle polling during that extra time is not what streaming costs, so the difference is
   also given with each run's idle share taken out.

``--short`` (CI): 3 messages, one 2 x 4 plan per worker; under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import math
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cpu import (
    REPO,
    Runner,
    Sample,
    _connect,
    _run_once,
    _sample,
    cpu_seconds,
    dev_server,
    full_layer_plan,
    ours_runner,
)
from durable_plans.testing import FakeProviderProcess

ANSWER_MARK = "orchestrator: Done: "
GOAL_MS = 300.0
WARMUP_MESSAGES = 1
CHAT_TIMEOUT_S = 120.0
IDLE_S = 2.0  # how long each worker's idle CPU rate is measured


# --------------------------------------------------------------------------- pure logic


@dataclass(frozen=True)
class Turn:
    """One chat message: when it was sent and when its answer's text was first on stdout."""

    sent: float
    visible: float


def first_text_delays(turns: Sequence[Turn], entries: Sequence[Mapping[str, Any]]) -> list[float]:
    """Seconds from the provider's first answer text to the chat showing it, per turn.

    A turn's provider record is the first one whose ``first_text`` lies between the turn's
    sending and its text showing up (turns run one after another, so the windows do not
    overlap; the tool-call turn of each message has no text and no ``first_text``). A turn
    with no such record (the log lost a line) is left out rather than matched wrongly.
    """
    texts = sorted(float(e["first_text"]) for e in entries if e.get("first_text") is not None)
    delays: list[float] = []
    for turn in turns:
        match = next((t for t in texts if turn.sent <= t <= turn.visible), None)
        if match is not None:
            delays.append(turn.visible - match)
    return delays


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100): an observed value, fine for a few."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(math.ceil(q / 100 * len(ordered)), 1)
    return ordered[rank - 1]


# --------------------------------------------------------------------------- first text


class _Stdout:
    """The chat's stdout read as it comes, noting when each piece arrived."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self.pos = 0  # where the next search starts

    async def until(self, needle: str) -> float:
        """Read until ``needle`` shows up after ``pos``: the time.time() of the read that
        brought it (the benchmark's loop waits on nothing else meanwhile)."""
        at = time.time()
        async with asyncio.timeout(CHAT_TIMEOUT_S):
            while (found := self.text.find(needle, self.pos)) < 0:
                piece = await self._stream.read(4096)
                at = time.time()
                if not piece:
                    raise RuntimeError(f"chat stdout ended before {needle!r}:\n{self.text}")
                self.text += self._decoder.decode(piece)
        self.pos = found + len(needle)
        return at


async def spawn_chat(runner: Runner) -> asyncio.subprocess.Process:
    """A ``dplan chat`` process on ``runner``'s task queue, stdin and stdout piped."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "durable_plans.cli",
        "chat",
        "--session",
        f"bench-stream-{uuid.uuid4().hex[:8]}",
        cwd=REPO,
        env=runner.env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def chat_turns(proc: asyncio.subprocess.Process, messages: int) -> list[Turn]:
    """Send ``messages`` (after a warm-up) through the chat, one after another, then quit."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out = _Stdout(proc.stdout)
    turns: list[Turn] = []
    try:
        for k in range(WARMUP_MESSAGES + messages):
            sent = time.time()
            proc.stdin.write(f"Message {k}: what is in the workspace?\n".encode())
            await proc.stdin.drain()
            visible = await out.until(ANSWER_MARK)
            await out.until("\n")  # the whole answer is out before the next message
            if k >= WARMUP_MESSAGES:
                turns.append(Turn(sent, visible))
        proc.stdin.write(b"/quit\n")
        proc.stdin.close()
        async with asyncio.timeout(30):
            await proc.wait()
    except BaseException:
        err = b""
        with contextlib.suppress(Exception):
            err = await asyncio.wait_for(proc.stderr.read(), 1)
        print(f"--- chat stdout:\n{out.text}\n--- stderr:\n{err.decode()}", file=sys.stderr)
        raise
    return turns


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


# --------------------------------------------------------------------------- CPU per call


@dataclass
class Measured:
    turns: list[Turn] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    idle_rate: dict[str, float] = field(default_factory=dict)  # CPU s per wall s


async def _idle_rate(runner: Runner) -> float:
    """CPU seconds the idle worker uses per second (its pollers and heartbeats)."""
    assert runner.proc is not None
    c0, t0 = cpu_seconds(runner.proc.pid), time.perf_counter()
    await asyncio.sleep(IDLE_S)
    return (cpu_seconds(runner.proc.pid) - c0) / (time.perf_counter() - t0)


async def measure(args: argparse.Namespace) -> Measured:
    result = Measured()
    async with contextlib.AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dplan-bench-stream-")))
        workspace = tmp / "workspace"
        workspace.mkdir()
        (workspace / "README.md").write_text("# bench workspace\n\nA small demo project.\n")
        logs = tmp / "logs"
        logs.mkdir()
        provider = stack.enter_context(
            FakeProviderProcess(
                tmp / "requests.jsonl",
                latency_ms=args.latency_ms,
                chunk_delay_ms=args.chunk_delay_ms,
            )
        )
        server, address = stack.enter_context(dev_server(tmp))
        client = await _connect(address)
        runners = {
            mode: ours_runner(
                f"stream-{mode}", REPO, address=address, provider=provider.base_url, tmp=tmp,
                workspace=workspace, extra_env={"DPLAN_STREAM": mode},
            )
            for mode in ("all", "off")
        }  # fmt: skip
        try:
            for r in runners.values():
                r.start(logs)
                stack.callback(r.stop)
            streaming = runners["all"]
            chat = await spawn_chat(streaming)  # its imports overlap the workers' start
            stack.push_async_callback(_stop, chat)
            # Warm-up: imports, the sandbox's first load of each workflow, first connections.
            warm = full_layer_plan(1, 2, prefix="warm")
            await asyncio.gather(*(_run_once(r, client, warm, 2) for r in runners.values()))

            first = len(provider.log_entries())
            result.turns = await chat_turns(chat, args.messages)
            await asyncio.sleep(0.5)  # the log line is written when the answer is finished
            result.delays = first_text_delays(result.turns, provider.log_entries()[first:])

            rates = await asyncio.gather(*(_idle_rate(r) for r in runners.values()))
            result.idle_rate = dict(zip(runners, rates, strict=True))
            subtasks = full_layer_plan(args.layers, args.width, prefix="stream")
            order = ["off", "all"]
            for _ in range(args.repeats):
                for mode in order:
                    sample = await _sample(
                        runners[mode], client, server.pid, provider, subtasks, args.width
                    )
                    result.samples.setdefault(mode, []).append(sample)
                order.reverse()  # alternate which goes first
        except Exception:
            for r in runners.values():
                if r.log is not None and r.log.exists():
                    tail = r.log.read_text(errors="replace")[-3000:]
                    print(f"--- {r.name} worker log (tail):\n{tail}", file=sys.stderr)
            raise
    return result


# --------------------------------------------------------------------------- the report


def _per_call(samples: Sequence[Sample], idle_rate: float = 0.0) -> float:
    """Median worker CPU ms per LLM call, optionally without the idle share of the wall."""
    return statistics.median(
        (s.worker_cpu_s - idle_rate * s.wall_s) / max(s.llm_requests, 1) * 1000 for s in samples
    )


def report(m: Measured, args: argparse.Namespace) -> None:
    print(
        f"provider: {args.latency_ms:.0f} ms before each answer, then streamed events every "
        f"{args.chunk_delay_ms:.0f} ms (8 characters of text each) when asked to stream"
    )
    print()
    print(
        f"1. Provider's first answer text -> first text on `dplan chat` stdout "
        f"({len(m.delays)} of {len(m.turns)} messages matched, after {WARMUP_MESSAGES} warm-up)"
    )
    if m.delays:
        ms = [d * 1000 for d in m.delays]
        print(
            f"   median {statistics.median(ms):.0f} ms, p90 {percentile(ms, 90):.0f} ms, "
            f"max {max(ms):.0f} ms  (goal <= {GOAL_MS:.0f} ms)"
        )
        sent = [(t.visible - t.sent) * 1000 for t in m.turns]
        print(
            f"   for context: message sent -> answer text visible, median "
            f"{statistics.median(sent):.0f} ms (two LLM calls and a tool call)"
        )
    else:
        print("   no turn could be matched to a provider record")
    print()
    n = args.layers * args.width
    print(
        f"2. Worker CPU per LLM call, DPLAN_STREAM=all vs off: {args.layers} x {args.width} "
        f"subtasks, 2 LLM calls + 1 tool call each; median of {args.repeats} run(s), alternated"
    )
    head = (
        f"   {'DPLAN_STREAM':<13}{'wall s':>8}{'worker ms/call':>16}{'minus idle':>12}"
        f"{'server ms/call':>16}{'events/subtask':>16}{'LLM reqs':>10}{'idle ms/s':>11}"
    )
    print(head)
    rows: dict[str, tuple[float, float, float]] = {}
    for mode in ("off", "all"):
        samples = m.samples.get(mode, [])
        if not samples:
            continue
        idle = m.idle_rate.get(mode, 0.0)
        raw, net = _per_call(samples), _per_call(samples, idle)
        server = statistics.median(s.server_cpu_s / max(s.llm_requests, 1) * 1000 for s in samples)
        rows[mode] = (raw, net, server)
        print(
            f"   {mode:<13}{statistics.median(s.wall_s for s in samples):>8.2f}{raw:>16.1f}"
            f"{net:>12.1f}{server:>16.1f}"
            f"{statistics.median(s.cost.events for s in samples) / n:>16.1f}"
            f"{statistics.median(s.llm_requests for s in samples):>10.0f}{idle * 1000:>11.1f}"
        )
    if "off" in rows and "all" in rows:
        (off_raw, off_net, off_srv), (all_raw, all_net, all_srv) = rows["off"], rows["all"]
        print(
            f"   streaming adds per LLM call: worker {all_raw - off_raw:+.1f} ms "
            f"({all_net - off_net:+.1f} ms without idle), dev server {all_srv - off_srv:+.1f} ms"
        )


# --------------------------------------------------------------------------- entry points


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.stream",
        description="Time to first text in dplan chat, and the worker CPU streaming costs.",
    )
    parser.add_argument("--short", action="store_true", help="3 messages, one 2 x 4 plan (CI)")
    parser.add_argument("--messages", type=int, help="chat messages (default 10; 3 short)")
    parser.add_argument("--layers", type=int, help="plan layers (default 4; 2 short)")
    parser.add_argument("--width", type=int, default=4, help="subtasks per layer (default 4)")
    parser.add_argument("--repeats", type=int, help="plans per worker (default 3; 1 short)")
    parser.add_argument("--latency-ms", type=float, default=300.0, help="before each answer")
    parser.add_argument(
        "--chunk-delay-ms", type=float, default=30.0, help="between streamed events"
    )
    args = parser.parse_args(argv)
    if args.messages is None:
        args.messages = 3 if args.short else 10
    if args.layers is None:
        args.layers = 2 if args.short else 4
    if args.repeats is None:
        args.repeats = 1 if args.short else 3
    if min(args.messages, args.layers, args.width, args.repeats) < 1:
        parser.error("messages, layers, width and repeats must be positive")
    if args.latency_ms < 0 or args.chunk_delay_ms < 0:
        parser.error("latencies cannot be negative")
    if sys.platform != "linux":
        parser.error("bench.stream reads /proc: Linux only")
    return args


async def run(argv: Sequence[str] | None = None) -> None:
    args = _parse(argv)
    report(await measure(args), args)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(run(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
