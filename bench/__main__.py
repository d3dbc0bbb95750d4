"""Run every benchmark in bench/: ``python -m bench [--short] [NAME ...]``.

A benchmark is any module of this package with an entry point of one of two shapes:

* ``async def main(short: bool) -> None``: called as ``asyncio.run(main(short))``;
* ``def main(argv)`` (argparse style, e.g. ``bench.sessions``): called with
  ``["--short"]`` in short mode and ``[]`` otherwise, so each keeps its own defaults.

Modules are found by listing the package rather than by a hand-kept list, so a new
benchmark runs in CI the day it is added. Helpers without ``main`` (``bench.fake_dag``)
are skipped. One benchmark failing does not hide the others' numbers: all run, the
failures are summarised at the end and the exit status is 1. Nothing here looks at
timings; benchmarks print numbers and assert nothing about them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import pkgutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PACKAGE = "bench"


def benchmark_names() -> list[str]:
    """The package's modules in name order (``__main__`` and private ones excluded)."""
    here = Path(__file__).resolve().parent
    return sorted(
        info.name
        for info in pkgutil.iter_modules([str(here)])
        if not info.name.startswith("_") and not info.ispkg
    )


def entry_point(module: Any) -> Callable[[bool], None] | None:
    """A uniform ``run(short)`` for the module's ``main``, or None if it has none we know."""
    main = getattr(module, "main", None)
    if not callable(main):
        return None
    params = list(inspect.signature(main).parameters.values())
    if inspect.iscoroutinefunction(main):
        if len(params) != 1:
            return None
        return lambda short: asyncio.run(main(short))
    if not params:
        return None
    return lambda short: main(["--short"] if short else [])


def run_all(names: Sequence[str], *, short: bool) -> list[str]:
    """Run the named benchmarks in order; returns the names of those that failed."""
    failed: list[str] = []
    for name in names:
        try:
            module = importlib.import_module(f"{PACKAGE}.{name}")
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        run = entry_point(module)
        if run is None:
            continue  # a helper module, not a benchmark
        print(f"\n=== {PACKAGE}.{name}{' (short)' if short else ''} ===", flush=True)
        started = time.perf_counter()
        try:
            run(short)
        except SystemExit as exit_:  # argparse-style mains may exit; 0/None is success
            if exit_.code not in (0, None):
                failed.append(name)
        except Exception:
            traceback.print_exc()
            failed.append(name)
        sys.stdout.flush()
        print(f"--- {PACKAGE}.{name}: {time.perf_counter() - started:.1f} s", flush=True)
    return failed


def main(argv: Sequence[str] | None = None) -> None:
    available = benchmark_names()
    parser = argparse.ArgumentParser(
        prog=f"python -m {PACKAGE}", description="Run the benchmarks in bench/."
    )
    parser.add_argument("--short", action="store_true", help="short mode (CI)")
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"only these (of: {', '.join(available)})"
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in available]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    failed = run_all(args.names or available, short=args.short)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
