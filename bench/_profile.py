"""Where a worker's CPU goes: py-spy's collapsed stacks (``--format raw``) by category.

``bench.cpu --profile DIR`` records each worker with py-spy after the warm-up; this turns
a recording into a table of samples per category. A sample belongs to the first category
whose marker appears in its stack, outermost frame first... except that the rules are
tried in order, so a specific rule (litellm's cost calculation) wins over a general one
(litellm) wherever both match. Samples whose innermost frame is a wait (epoll, a thread
waiting for work) are idle and left out; py-spy cannot always tell idle threads itself.
Python frames only: the SDK's Rust core threads do not appear, so the sampled total is
below the process's CPU time.

    python -m bench._profile RECORDING.txt [--per N]   (N: divide by N, e.g. subtasks)
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Sequence
from pathlib import Path

# (category, markers): the first rule with a marker in the stack takes the sample.
RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("litellm: cost calculation", ("completion_cost", "cost_calculator", "cost_per_token")),
    ("openai SDK: request transform", ("openai/_utils/_transform.py",)),
    (
        "litellm: response parsing",
        (
            "convert_to_model_response_object",
            "transform_response",
            "response_metadata.py",
            "ModelResponse",
        ),
    ),
    ("litellm: request building (sync, in a thread)", ("client.<locals>.wrapper (",)),
    (
        "litellm: request building",
        (
            "get_optional_params",
            "get_llm_provider",
            "transform_request",
            "get_litellm_params",
            "pre_process",
        ),
    ),
    (
        "HTTP (httpx / aiohttp / openai client)",
        ("httpx", "aiohttp", "openai/_base_client.py", "httpcore", "openai/_legacy_response.py"),
    ),
    (
        "litellm: logging and callbacks",
        ("litellm_logging.py", "logging_utils.py", "success_handler"),
    ),
    ("litellm: other", ("litellm/",)),
    ("session store: aiosqlite thread", ("_connection_worker_thread",)),
    ("session store (ours, SQL, codec)", ("session_store/", "aiosqlite")),
    ("heartbeats", ("heartbeat",)),
    ("logging (structlog / stdlib)", ("structlog", "logging/__init__.py", "activities/log.py")),
    ("workflow sandbox: module re-import", ("Importer._import",)),
    ("workflow sandbox: instance and activation", ("workflow_sandbox/",)),
    (
        "payload conversion (pydantic, visitors)",
        ("temporalio/converter.py", "contrib/pydantic", "_visitor.py", "pydantic"),
    ),
    ("workflow code (ours)", ("durable_plans/workflows/",)),
    ("Temporal SDK: workflow worker", ("temporalio/worker/_workflow",)),
    ("Temporal SDK: activity worker", ("temporalio/worker/_activity",)),
    ("Temporal SDK: bridge", ("temporalio/bridge",)),
    ("activities (ours)", ("durable_plans/activities/",)),
    (
        "thread hand-offs (executor futures, call_soon_threadsafe)",
        ("concurrent/futures", "call_soon_threadsafe"),
    ),
    # Under uvloop the loop is C: a sample whose only Python frame is ``Runner.run`` is
    # uvloop's own work, or one of its waits py-spy could not tell from work.
    ("event loop (asyncio; uvloop's C loop)", ("asyncio/",)),
)
IDLE_LEAVES = (
    "EpollSelector.select",
    "_connection_worker_thread",
    "_worker (concurrent",
    "Condition.wait",
    "wait (threading",
)


def categorise(path: Path) -> tuple[collections.Counter[str], int]:
    counts: collections.Counter[str] = collections.Counter()
    idle = 0
    for line in path.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        if not stack:
            continue
        n = int(number)
        leaf = stack.rsplit(";", 1)[-1]
        if leaf.startswith(IDLE_LEAVES) or not leaf.strip():
            idle += n
            continue
        for name, markers in RULES:
            if any(m in stack for m in markers):
                counts[name] += n
                break
        else:
            counts["other"] += n
    return counts, idle


def table(path: Path, *, rate_hz: float, per: float) -> str:
    counts, idle = categorise(path)
    total = sum(counts.values())
    lines = [f"{'category':<45}{'samples':>8}{'share':>8}{'ms per unit':>13}"]
    for name, n in counts.most_common():
        lines.append(f"{name:<45}{n:>8}{n / total:>8.1%}{n * 1000 / rate_hz / per:>13.1f}")
    busy_ms = total * 1000 / rate_hz / per
    lines.append(f"{'total (busy Python samples)':<45}{total:>8}{1:>8.0%}{busy_ms:>13.1f}")
    lines.append(f"(idle samples left out: {idle})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._profile")
    parser.add_argument("recording", type=Path)
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's sampling rate (Hz)")
    parser.add_argument("--per", type=float, default=1.0, help="divide by this (e.g. subtasks)")
    args = parser.parse_args(argv)
    print(table(args.recording, rate_hz=args.rate, per=args.per))


if __name__ == "__main__":
    main()
