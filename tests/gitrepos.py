"""Real git repositories for workspace tests: a user's repository (branches, a tag, a
dirty checkout), what a person would see of it, the files of a commit, and a bare
remote served by ``git daemon`` on loopback.

The test's own git commands run with no user or system config and fixed dates, so the
commits they make (a repository's base) have the same ids in every run.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FIXED_DATE = "@1700000000 +0000"


def git_env(home: Path | None = None) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home or Path(os.devnull)),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Person",
        "GIT_AUTHOR_EMAIL": "person@example.invalid",
        "GIT_COMMITTER_NAME": "Person",
        "GIT_COMMITTER_EMAIL": "person@example.invalid",
        "GIT_AUTHOR_DATE": FIXED_DATE,
        "GIT_COMMITTER_DATE": FIXED_DATE,
        "LC_ALL": "C",
    }


def git(cwd: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=git_env(),
        capture_output=True,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {done.stderr.decode()}")
    return done.stdout.decode().strip()


def user_repo(path: Path) -> Path:
    """A repository as a person has it: ``main`` (two commits, the first tagged ``v1``),
    a ``feature`` branch, an ignore file, and a dirty checkout (a modified file, a staged
    new file, an untracked one, an ignored one)."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README.md").write_text("# project\n")
    (path / "shared.txt").write_text("one\ntwo\nthree\n")
    (path / ".gitignore").write_text("*.log\nbuild/\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "first")
    git(path, "tag", "v1")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("print('hello')\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "second")
    git(path, "checkout", "-qb", "feature")
    (path / "feature.txt").write_text("feature\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "feature")
    git(path, "checkout", "-q", "main")
    (path / "README.md").write_text("# project\n\nan edit not committed yet\n")
    (path / "staged.txt").write_text("staged, not committed\n")
    git(path, "add", "staged.txt")
    (path / "notes.txt").write_text("untracked notes\n")
    (path / "debug.log").write_text("ignored\n")
    return path


def user_view(path: Path) -> dict[str, object]:
    """Everything of a repository a person works with: HEAD, branches and tags, the
    index, what ``git status`` says, and every file of the checkout."""
    files = {
        p.relative_to(path).as_posix(): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(path).parts
    }
    return {
        "HEAD": git(path, "symbolic-ref", "HEAD"),
        "refs": git(path, "for-each-ref", "refs/heads", "refs/tags", "refs/remotes"),
        "index": hashlib.sha256((path / ".git" / "index").read_bytes()).hexdigest(),
        "status": git(path, "status", "--porcelain=v1", "--untracked-files=all", "--ignored"),
        "files": files,
    }


def files_at(git_dir: Path, commit: str) -> dict[str, str]:
    """Every file of ``commit`` and its text."""
    names = git(git_dir, "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", commit)
    return {
        name: git(git_dir, "--git-dir", str(git_dir), "show", f"{commit}:{name}")
        for name in names.splitlines()
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(url: str) -> bool:
    done = subprocess.run(
        ["git", "ls-remote", url], env=git_env(), capture_output=True, check=False, timeout=10
    )
    return done.returncode == 0


@contextmanager
def git_daemon(base: Path) -> Iterator[str]:
    """Serve the repositories under ``base`` over ``git://`` on loopback (pushes allowed);
    yields the URL prefix (``git://127.0.0.1:<port>``)."""
    probe = next(iter(sorted(base.glob("*.git"))), None)
    for _ in range(5):  # a port taken between choosing it and listening: choose again
        port = free_port()
        proc = subprocess.Popen(
            [
                "git",
                "daemon",
                "--export-all",
                "--enable=receive-pack",
                f"--base-path={base}",
                "--reuseaddr",
                "--listen=127.0.0.1",
                f"--port={port}",
                str(base),
            ],
            env=git_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"git://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        answered = False
        while proc.poll() is None and time.monotonic() < deadline:
            if probe is None or _answers(f"{url}/{probe.name}"):
                answered = True
                break
            time.sleep(0.05)
        if not answered:
            proc.kill()
            proc.wait()
            continue
        try:
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return
    raise AssertionError("git daemon did not answer on any of 5 ports")
