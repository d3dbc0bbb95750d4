"""``git_run.ObjectReader``: one long-lived ``git cat-file --batch-command`` answers as a
git process of its own would, finds objects written after it started, and comes back
after its process died."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from durable_plans.activities.git_run import GitFailed, GitRunner, ObjectReader
from tests.gitrepos import git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    (path / "a.txt").write_text("alpha\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "first")
    return path


def test_reads_commits_trees_and_blobs_and_says_missing(repo: Path, tmp_path: Path) -> None:
    reader = ObjectReader(GitRunner(repo / ".git", tmp_path / "home"))
    head = git(repo, "rev-parse", "HEAD")
    assert reader.info(f"{head}^{{commit}}") == (
        head,
        "commit",
        int(git(repo, "cat-file", "-s", head)),
    )
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    info = reader.info(f"{head}^{{tree}}")
    assert info is not None and info[:2] == (tree, "tree")
    blob = git(repo, "rev-parse", "HEAD:a.txt")
    assert reader.contents(blob) == ("blob", b"alpha\n")
    assert reader.info("0" * 40) is None
    assert reader.contents("0" * 40) is None
    with pytest.raises(GitFailed):
        reader.info("a\nb")
    reader.close()


def test_finds_new_objects_and_outlives_its_process(repo: Path, tmp_path: Path) -> None:
    reader = ObjectReader(GitRunner(repo / ".git", tmp_path / "home"))
    assert reader.info("HEAD") is not None  # started
    (repo / "b.txt").write_text("beta\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "second")
    new = git(repo, "rev-parse", "HEAD")
    assert reader.info(f"{new}^{{commit}}") is not None  # written after it started
    git(repo, "repack", "-adq")  # every object moved into a pack
    assert reader.contents(git(repo, "rev-parse", "HEAD:b.txt")) == ("blob", b"beta\n")
    proc = reader._proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert reader.info(f"{new}^{{commit}}") is not None  # a new process answers
    assert reader._proc is not proc
    reader.close()
    assert proc.returncode is not None
