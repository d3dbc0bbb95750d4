"""The suite's file order (tests/file_order.py): longest files first, nothing lost."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from tests.file_order import DEFAULT_S, durations_from_junit, load_durations, longest_files_first


@dataclass
class _Item:
    nodeid: str


def _items(*ids: str) -> list[pytest.Item]:
    return cast(list[pytest.Item], [_Item(i) for i in ids])


def test_files_go_longest_first_and_keep_their_tests_together_in_order() -> None:
    items = _items("a.py::t1", "c.py::t1", "a.py::t2", "b.py::t1", "c.py::t2")
    longest_files_first(items, {"a.py": 10.0, "b.py": 50.0, "c.py": 0.5})
    assert [i.nodeid for i in items] == ["b.py::t1", "a.py::t1", "a.py::t2", "c.py::t1", "c.py::t2"]


def test_a_file_the_table_does_not_know_counts_by_its_tests() -> None:
    many = [f"new.py::t{n}" for n in range(100)]
    items = _items("known.py::t", *many)
    longest_files_first(items, {"known.py": 100 * DEFAULT_S / 2})
    assert items[0].nodeid == "new.py::t0" and items[-1].nodeid == "known.py::t"
    assert sorted(i.nodeid for i in items) == sorted(["known.py::t", *many])


def test_a_missing_or_broken_table_is_no_table(tmp_path: Path) -> None:
    assert load_durations(tmp_path / "absent.json") == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert load_durations(tmp_path / "bad.json") == {}
    (tmp_path / "mixed.json").write_text(json.dumps({"a.py": 2, "b.py": "x"}))
    assert load_durations(tmp_path / "mixed.json") == {"a.py": 2.0}


def test_the_table_is_read_from_a_junit_report_per_file(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_x.py").write_text("")
    report = tmp_path / "r.xml"
    report.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.unit.test_x" name="a" time="1.5"/>'
        '<testcase classname="tests.unit.test_x.TestGroup" name="b" time="2.25"/>'
        "</testsuite></testsuites>"
    )
    monkeypatch.chdir(tmp_path)
    assert durations_from_junit(report) == {"tests/unit/test_x.py": 3.8}
