"""Longest test files first, so the suite's wall time is its work shared out, not a tail.

``make test`` gives whole files to xdist workers (``--dist loadfile``). By default
pytest-xdist hands out the files with the most tests first, which puts a file of one
long test (the 2,500-subtask plan, a SIGKILL round) at the end of the queue: one worker
is still running it minutes after the other three went idle. Handing out the files by
their measured time instead, longest first, is the classic rule for sharing jobs among
machines (no worse than 4/3 of the best possible order).

``tests/file_durations.json`` holds each file's seconds from a real run (setup, call
and teardown of all its tests). A file it does not know counts as ``DEFAULT_S`` per test,
so a new file is neither first nor lost. Refresh the table after a change that moves
time around::

    .venv/bin/pytest -n 4 --dist loadfile --junitxml=/tmp/suite.xml
    .venv/bin/python -m tests.file_order /tmp/suite.xml

The order is a plan for speed only: every file still runs, in its own order inside.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("file_durations.json")
DEFAULT_S = 0.2


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The table, or nothing when it is missing or unreadable (plain order then)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def longest_files_first(items: list[pytest.Item], durations: dict[str, float]) -> None:
    """Reorder ``items`` in place: files by expected seconds, longest first; each file's
    tests stay together and in their own order."""
    counts = Counter(file_of(item) for item in items)
    expected = {f: durations.get(f, DEFAULT_S * n) for f, n in counts.items()}
    position = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda it: (-expected[file_of(it)], file_of(it), position[id(it)]))


def durations_from_junit(xml_path: Path) -> dict[str, float]:
    """Seconds per test file from a ``--junitxml`` report (setup + call + teardown)."""
    totals: defaultdict[str, float] = defaultdict(float)
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        module = case.get("classname", "")
        # ``tests.unit.test_x`` or ``tests.unit.test_x.TestClass``: the file is the
        # longest prefix that exists.
        parts = module.split(".")
        for end in range(len(parts), 0, -1):
            candidate = "/".join(parts[:end]) + ".py"
            if Path(candidate).exists():
                totals[candidate] += float(case.get("time", "0") or 0)
                break
    return {f: round(s, 1) for f, s in sorted(totals.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.file_order JUNIT_XML", file=sys.stderr)
        return 2
    table = durations_from_junit(Path(argv[0]))
    if not table:
        print(f"no test cases in {argv[0]}", file=sys.stderr)
        return 1
    DURATIONS.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{DURATIONS}: {len(table)} files, {sum(table.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
