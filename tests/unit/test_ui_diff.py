"""A subtask's diff as ``dplan ui`` shows it: only what its own tool calls changed, read
from a real git repository, or a sentence saying why there is none."""

from __future__ import annotations

from pathlib import Path

from durable_plans.ui.diff import subtask_diff
from tests.gitrepos import git


def _commit(repo: Path, name: str, text: str, message: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def _repository(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "workspace"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = _commit(repo, "README.md", "# base\n", "Add the project skeleton")
    return repo, base


async def test_the_diff_is_the_subtasks_own_commits(tmp_path: Path) -> None:
    repo, base = _repository(tmp_path)
    # A dependency's commit, then the subtask's two tool calls, one on a retried tree.
    dep = _commit(repo, "api.txt", "api\n", "1b4e7c0d2a/api turn 0.0: write_file")
    _commit(repo, "cli.txt", "cli v1\n", "1b4e7c0d2a/cli turn 0.0: write_file")
    head = _commit(repo, "cli.txt", "cli v2\n", "1b4e7c0d2a/cli~1 turn 1.0: write_file")

    diff = await subtask_diff(repo, "cli", head)
    assert diff["start"] == dep and diff["commit"] == head
    assert "+cli v2" in diff["diff"] and "cli.txt" in diff["stat"]
    assert "api.txt" not in diff["diff"]  # the dependency's work is not the subtask's
    assert not diff["truncated"]

    # The first subtask's diff starts at the base.
    first = await subtask_diff(repo, "api", dep)
    assert first["start"] == base and "+api" in first["diff"]


async def test_no_diff_says_why(tmp_path: Path) -> None:
    repo, base = _repository(tmp_path)
    assert "no workspace commit" in (await subtask_diff(repo, "x", None))["unavailable"]
    assert "not a commit id" in (await subtask_diff(repo, "x", "HEAD; rm -rf"))["unavailable"]
    nothing = await subtask_diff(repo, "x", base)
    assert nothing["unavailable"].startswith("no file changed")
    elsewhere = await subtask_diff(repo, "x", "ab" * 20, remote="git://host/repo")
    assert "made on another host" in elsewhere["unavailable"]
    assert "git://host/repo" in elsewhere["unavailable"]
    plain = tmp_path / "plain"
    plain.mkdir()
    missing = await subtask_diff(plain, "x", base)
    assert "not a git repository" in missing["unavailable"]
