"""The state directory's side of gc: which plan a folder is, which files make one tree,
and that a tree in use is never removed (Temporal's side: tests/integration)."""

from __future__ import annotations

import fcntl
import os
from datetime import timedelta
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from durable_plans.activities.git_workspace import _dir_name, dir_name_text
from durable_plans.workspace_gc import _remove, _trees, gc_interval, workflow_of


@given(st.text(st.characters(max_codepoint=0xFF), max_size=40))
def test_a_folder_name_gives_back_the_text_it_was_made_from(text: str) -> None:
    """Plan and session ids are ASCII (``domain.ids``); a character past U+00FF would be
    escaped with more than two digits, which no id holds."""
    assert dir_name_text(_dir_name(text)) == text


def test_a_conversations_trees_follow_its_session_workflow() -> None:
    assert workflow_of("chat/demo") == "session/demo"
    assert workflow_of("release-notes") == "release-notes"


def test_the_worker_looks_every_quarter_retention_between_a_minute_and_an_hour() -> None:
    assert gc_interval(timedelta(days=1)) == timedelta(hours=1)
    assert gc_interval(timedelta(hours=2)) == timedelta(minutes=30)
    assert gc_interval(timedelta(0)) == timedelta(minutes=1)


def _tree(folder: Path, tree: str) -> str:
    name = _dir_name(tree)
    (folder / name / "src").mkdir(parents=True)
    (folder / name / "src" / "a.py").write_text("x = 1\n")
    for suffix in (".index", ".state", ".lock"):
        (folder / f"{name}{suffix}").write_text("{}")
    return name


def test_a_tree_is_its_directory_and_the_files_named_after_it(tmp_path: Path) -> None:
    one = _tree(tmp_path, "0123456789/write@0")
    sub = _tree(tmp_path, "0123456789/write@0/coder-1-0")
    _tree(tmp_path, "no-run-key")
    found = {t.key: t for t in _trees(tmp_path)}
    assert set(found) == {one, sub, _dir_name("no-run-key")}
    assert found[one].run_key == found[sub].run_key == "0123456789"
    assert found[_dir_name("no-run-key")].run_key is None
    assert _remove(tmp_path, found[one]) == (4, len("x = 1\n") + 6)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [_dir_name("no-run-key") + s for s in ("", ".index", ".state", ".lock")]
        + [sub + s for s in ("", ".index", ".state", ".lock")]
    )


def test_a_tree_a_call_holds_is_kept(tmp_path: Path) -> None:
    name = _tree(tmp_path, "0123456789/write@0")
    fd = os.open(tmp_path / f"{name}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        (tree,) = _trees(tmp_path)
        assert _remove(tmp_path, tree) is None
        assert (tmp_path / name / "src" / "a.py").exists()
    finally:
        os.close(fd)
    assert _remove(tmp_path, tree) is not None
    assert list(tmp_path.iterdir()) == []
