"""What each use of another library's private parts is worth, on the user's path.

    python -m bench.private_apis [--short] [--repeats 7]

Issue 31 keeps such a use only where it pays (about a fifth of the worker's CPU or of the
plan's wall time) and behind one switch. This runs ``bench.cpu``'s rig (each runner a
``dplan-worker`` process, configured through its environment, on one dev server and one
fake OpenAI-compatible provider) with three runners alternated round by round:

* ``ours``: every default;
* ``ours-acompletion``: ``DPLAN_LLM_LEAN=0``, every LLM call through
  ``litellm.acompletion`` instead of litellm's internal provider transforms
  (``activities/llm_client.py``);
* ``ours-stock-runner``: ``DPLAN_WORKFLOW_RUNNER_LEAN=0``, the SDK's stock sandboxed
  runner instead of ``sandbox_runner.ContextFreeSandboxedRunner``.

The DAG is ``bench.cpu``'s: 4 layers of 5 subtasks (2 with ``--short``), two LLM calls
and a tool call each, 100 ms provider latency. Printed: ``bench.cpu``'s table, then for
each switch the worker CPU and wall time of ``ours`` over the switched-off runner, as the
median of the per-round ratios (each round runs every runner once, back to back, so a
ratio compares runs under the same load) and as the ratio of the medians. Below 0.8 the
use pays. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Sequence

from bench import cpu
from bench._user_path import load

SWITCHES = {
    "ours-acompletion": "DPLAN_LLM_LEAN (activities/llm_client.py)",
    "ours-stock-runner": "DPLAN_WORKFLOW_RUNNER_LEAN (sandbox_runner.py)",
}
WIDTH = 5


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.private_apis",
        description="Worker CPU and wall time with each private-API use on and off.",
    )
    parser.add_argument("--short", action="store_true", help="2 layers, 3 rounds (CI)")
    parser.add_argument("--repeats", type=int, help="rounds (default 7; 3 with --short)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.short else 7)
    if repeats < 1:
        parser.error("--repeats must be positive")
    cpu_args = cpu._parse(
        [
            *(["--short"] if args.short else []),
            f"--widths={WIDTH}",
            f"--layers={2 if args.short else 4}",
            "--latency-ms=100",
            f"--repeats={repeats}",
            "--no-peers",
            "--servers=memory",
            "--agents=coder",
            f"--variants={','.join(SWITCHES)}",
        ]
    )
    return args, cpu_args


def ratios(results: cpu.Results, other: str) -> dict[str, float]:
    """``ours`` over ``other``: medians of the per-round ratios and ratios of the medians."""
    ours = results.samples.get(("ours", WIDTH), [])
    theirs = results.samples.get((other, WIDTH), [])
    pairs = list(zip(ours, theirs, strict=False))
    if not pairs:
        return {}
    return {
        "cpu_paired": statistics.median(a.worker_cpu_s / b.worker_cpu_s for a, b in pairs),
        "wall_paired": statistics.median(a.wall_s / b.wall_s for a, b in pairs),
        "cpu_medians": statistics.median(a.worker_cpu_s for a in ours)
        / statistics.median(b.worker_cpu_s for b in theirs),
        "wall_medians": statistics.median(a.wall_s for a in ours)
        / statistics.median(b.wall_s for b in theirs),
        "rounds": float(len(pairs)),
    }


async def run(argv: Sequence[str]) -> None:
    _args, cpu_args = _parse(argv)
    before = load()
    results, names, skipped = await cpu.measure(cpu_args)
    cpu.report(results, names, skipped, cpu_args, before)
    print()
    print("ours / switched off (below 1: the use saves that share; about 0.8 or less pays)")
    for other, switch in SWITCHES.items():
        r = ratios(results, other)
        if not r:
            print(f"  {switch}: no samples")
            continue
        print(
            f"  {switch}, {r['rounds']:.0f} rounds: worker CPU {r['cpu_paired']:.2f} "
            f"(medians {r['cpu_medians']:.2f}), wall {r['wall_paired']:.2f} "
            f"(medians {r['wall_medians']:.2f})"
        )


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(run(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
