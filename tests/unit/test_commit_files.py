"""``CommitFiles``: the read-only file tools answered from a commit's objects give, call
for call, what they give on the commit's checkout; where they could differ (symbolic
links, submodules, converting attributes) they ask for the tree instead."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from durable_plans.activities.commit_files import CommitFiles, NeedsTree
from durable_plans.activities.file_jail import MAX_FILE_BYTES, FileJail, ToolRefused
from durable_plans.activities.git_workspace import GitWorkspace
from durable_plans.domain.workspace_refs import GitIdentity, WorkspaceRef
from tests.gitrepos import git

AGENT = GitIdentity(name="coder", email="coder@dplan.invalid")
PATHS = (
    "", ".", "./", "README.md", "./README.md", "src", "src/", "src/../README.md",
    "src/app.py", "src/deep", "src/deep/x.py", "src/deep/../app.py", "missing",
    "missing/../README.md", "missing/x", "README.md/x", "README.md/..", "../x", "/abs",
    "~root", "dé.txt", "bin.dat", "latin1.txt", "empty.txt", "big.txt", "crlf.txt",
    "left.dplan-tmp", "src/deep/", "a\tb.txt", "x" * 300, "docs/notes.md",
)  # fmt: skip


def _repo(path: Path, files: dict[str, bytes]) -> str:
    path.mkdir()
    git(path, "init", "-q")
    for name, data in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "files")
    return git(path, "rev-parse", "HEAD")


def _files() -> dict[str, bytes]:
    return {
        "README.md": b"# project\nhello world\n",
        "src/app.py": b"print('hello')\n" * 3,
        "src/deep/x.py": b"x = 1\nhello = 2\n",
        "src/deep/y.txt": b"no match\n",
        "dé.txt": b"unicode name, hello\n",
        "bin.dat": b"\x00\x01hello\x02",
        "latin1.txt": "caf\xe9 hello\n".encode("latin-1"),
        "empty.txt": b"",
        "big.txt": (b"hello " + b"y" * 1000 + b"\n") * (MAX_FILE_BYTES // 1000 + 10),
        "crlf.txt": b"one\r\ntwo hello\r\n",
        "left.dplan-tmp": b"leftover hello\n",
        "a\tb.txt": b"tab in the name, hello\n",
        "docs/notes.md": b"line\n" * 50 + b"x" * 300 + b" hello\n",
        ".gitignore": b"*.log\n",
    }


def _answer(call: Callable[[], str]) -> str:
    try:
        return f"ok: {call()}"
    except ToolRefused as err:
        return f"refused: {err}"
    except OSError as err:  # as the registry reports it
        return f"OSError: {type(err).__name__}"


def _both(tmp_path: Path, files: dict[str, bytes]) -> tuple[FileJail, CommitFiles, GitWorkspace]:
    commit = _repo(tmp_path / "repo", files)
    gw = GitWorkspace(tmp_path / "repo", tmp_path / "state")
    ref = WorkspaceRef(plan_id="p", tree="t@0", head=commit, identity=AGENT)
    view = gw.files_at(ref)
    assert view is not None
    with gw.checkout(ref) as lease:
        tree = FileJail(lease.path)
    return tree, view, gw


def test_every_read_answers_as_on_the_checkout(tmp_path: Path) -> None:
    tree, view, _ = _both(tmp_path, _files())
    fell_back: set[str] = set()

    def same(path: str, name: str, *args: object) -> None:
        want = _answer(lambda: getattr(tree, name)(path, *args))
        try:
            got = _answer(lambda: getattr(view, name)(path, *args))
        except NeedsTree:
            fell_back.add(path)  # the call runs on the tree: the same answer
            return
        assert got == want, (name, path, args)

    for path in PATHS:
        for window in ((1, None), (2, 1), (1, 2), (40, 5), (1, 100_000)):
            same(path, "read_file", *window)
        same(path, "list_dir")
        for pattern, glob, regex in (
            ("hello", "*", False),
            ("hello", "*.py", False),
            ("h.llo", "*", True),
            ("x", "src/*", False),
            ("nothing at all", "*", False),
        ):
            same(path, "search_files", pattern, glob, regex, 3)
            same(path, "search_files", pattern, glob, regex)
    # Only the name no file system takes is left to the tree (which says OSError).
    assert fell_back == {"x" * 300}


def test_a_read_makes_no_tree(tmp_path: Path) -> None:
    commit = _repo(tmp_path / "repo", {"README.md": b"hi\n"})
    gw = GitWorkspace(tmp_path / "repo", tmp_path / "state")
    view = gw.files_at(WorkspaceRef(plan_id="p", tree="t@0", head=commit, identity=AGENT))
    assert view is not None and view.read_file("README.md") == "hi\n"
    assert not (tmp_path / "state" / "trees").exists()


def test_a_known_clean_tree_is_read_as_it_is(tmp_path: Path) -> None:
    """What the tree holds beyond its commit (a command's ignored output) stays readable
    on the host that has the tree."""
    commit = _repo(tmp_path / "repo", {"README.md": b"hi\n", ".gitignore": b"*.log\n"})
    gw = GitWorkspace(tmp_path / "repo", tmp_path / "state")
    ref = WorkspaceRef(plan_id="p", tree="t@0", head=commit, identity=AGENT)
    with gw.checkout(ref) as lease:
        (lease.path / "build.log").write_text("built\n")
    assert gw.files_at(ref) is None


@pytest.mark.parametrize(
    "files",
    [
        {".gitattributes": b"*.txt eol=crlf\n", "a.txt": b"x\n"},
        {"sub/.gitattributes": b"* filter=lfs\n", "sub/a.txt": b"x\n"},
        {".gitattributes": b"[attr]mine text eol=crlf\n", "a.txt": b"x\n"},
    ],
)
def test_converting_attributes_need_the_tree(tmp_path: Path, files: dict[str, bytes]) -> None:
    _, view, _ = _both(tmp_path, {"README.md": b"hi\n", **files})
    with pytest.raises(NeedsTree):
        view.search_files("x")


def test_harmless_attributes_are_read_from_the_commit(tmp_path: Path) -> None:
    tree, view, _ = _both(tmp_path, {".gitattributes": b"*.png binary\n", "a.txt": b"x\n"})
    assert view.read_file("a.txt") == tree.read_file("a.txt") == "x\n"
    assert view.list_dir(".") == tree.list_dir(".")


def test_symbolic_links_need_the_tree(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "real").mkdir()
    (repo / "real" / "f.txt").write_text("target\n")
    (repo / "link").symlink_to("real")
    (repo / "flink.txt").symlink_to("real/f.txt")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "links")
    commit = git(repo, "rev-parse", "HEAD")
    gw = GitWorkspace(repo, tmp_path / "state")
    view = gw.files_at(WorkspaceRef(plan_id="p", tree="t@0", head=commit, identity=AGENT))
    assert view is not None
    assert view.read_file("real/f.txt") == "target\n"
    assert view.list_dir("real") == "f.txt  7 bytes"
    calls: list[Callable[[], str]] = [
        lambda: view.read_file("link/f.txt"),
        lambda: view.read_file("flink.txt"),
        lambda: view.read_file("link/../real/f.txt"),
        lambda: view.list_dir("."),
        lambda: view.search_files("target"),
    ]
    for call in calls:
        with pytest.raises(NeedsTree):
            call()


def test_a_converting_repository_reads_its_trees(tmp_path: Path) -> None:
    commit = _repo(tmp_path / "repo", {"a.txt": b"x\n"})
    git(tmp_path / "repo", "config", "core.autocrlf", "true")
    gw = GitWorkspace(tmp_path / "repo", tmp_path / "state")
    assert gw.files_at(WorkspaceRef(plan_id="p", tree="t@0", head=commit, identity=AGENT)) is None
