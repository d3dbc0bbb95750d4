"""The workspace as git: a plan's base, each subtask's tree, its commits, the merges
along the DAG and the plan's result branch.

The workflows carry commit ids only; everything here turns an id into files and files
back into an id, the same way on every host:

- The repository is ``DPLAN_WORKSPACE`` (a plain directory is initialised, its content
  the first commit). Without a remote its object store holds every commit, under
  ``refs/dplan/<plan>/...`` and the result branch; the user's checkout, index, ``HEAD``
  and other branches are never touched. With ``DPLAN_WORKSPACE_REMOTE`` this worker keeps
  a bare cache clone in the state directory, fetches a commit it lacks and pushes every
  commit before the call that made it returns.
- A tree is a plain directory under ``<state dir>/trees/<plan>/<tree>`` with a private
  index, worked on with ``--git-dir``/``--work-tree`` (no ``git worktree`` registered in
  the user's repository). A state file beside it says at which commit it is and whether
  a call may have changed it since; a tree that is not known to be clean at the commit a
  call names is reset to it exactly (tracked files restored, untracked ones removed,
  files ignored by ``.gitignore`` too). One call at a time holds a tree (a file lock).
- Commits are deterministic: author, committer, both dates and the message come from
  the call, so a retried call makes the same commit, never a second one. A tree's ref
  only moves forward from the head the call started at (compare-and-swap, also on the
  remote): a stale writer is refused, never wins.
- Merges run without a checkout (``git merge-tree --write-tree``); changes to the same
  lines are a ``WorkspaceConflict`` naming the files and the subtasks, never a side
  silently chosen.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from durable_plans._errors import WorkspaceBusy, WorkspaceConflict, WorkspaceUnavailable
from durable_plans.activities.commit_files import CONVERTING, CommitFiles, NeedsTree
from durable_plans.activities.git_run import (
    MIN_GIT_VERSION,
    GitFailed,
    GitRunner,
    ObjectReader,
    classify_remote_failure,
    error_line,
    git_version,
    redact_url,
)
from durable_plans.domain.workspace_refs import (
    COMMIT_RE,
    DEFAULT_BRANCH_PREFIX,
    GitIdentity,
    WorkspaceConflictDetails,
    WorkspaceMergeInput,
    WorkspacePublishInput,
    WorkspaceRef,
    WorkspaceSummary,
    resolution_ref,
    result_branch,
    tree_ref,
)

if TYPE_CHECKING:
    from durable_plans.settings import Settings

__all__ = [
    "INIT_IDENTITY",
    "TREES_DIR",
    "GitWorkspace",
    "NeedsTree",
    "TreeLease",
    "dir_name_text",
    "tool_commit_message",
]

_log = logging.getLogger("durable_plans.workspace")

ZERO = "0" * 40
INIT_IDENTITY = GitIdentity(name="dplan", email="dplan@localhost")
"""Who the first commit of an initialised directory is by."""
CACHE_NAME = "workspace-cache.git"
TREES_DIR = "trees"
"""``<state dir>/trees/<plan>/<tree>``: the trees and their files (``workspace_gc.py``)."""
# A repository being initialised is built under this name beside .git, then renamed.
_INIT_PREFIX = ".git-dplan-init-"
# Taken (flock) in the git directory by every process of ours that moves a ref.
_REFS_LOCK = "dplan-refs.lock"
# A lock on a ref that is not ours (a result branch a person may be moving) older than
# this was left by a dead process: no live git holds a ref's lock for so long.
_FOREIGN_LOCK_AGE_S = 30.0
_CAS_ROUNDS = 5
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9@_-]")
_HEX = re.compile(r"^[0-9a-f]{4,40}$")


def tool_commit_message(tree: str, turn: int, call_index: int, tool: str, scope: str = "") -> str:
    """A tool call's commit message: fixed by the call, so a retry writes the same one.

    ``scope`` (the call's message-id scope: its plan execution and subtask) makes the
    message differ between two executions that use the same tree name, so a call never
    takes another execution's commit for an earlier attempt of its own.
    """
    subject = f"{tree} turn {turn}.{call_index}: {tool}"
    return f"{subject}\n\ndplan-scope: {scope}" if scope else subject


def _date(at_s: float) -> str:
    return f"@{max(int(at_s), 0)} +0000"


def _identity_env(identity: GitIdentity, at_s: float) -> dict[str, str]:
    date = _date(at_s)
    return {
        "GIT_AUTHOR_NAME": identity.name,
        "GIT_AUTHOR_EMAIL": identity.email,
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": identity.name,
        "GIT_COMMITTER_EMAIL": identity.email,
        "GIT_COMMITTER_DATE": date,
    }


def _plan_refs(plan_id: str) -> str:
    """``refs/dplan/<plan>``: every ref a plan makes is below it (the tree ref's prefix;
    plan ids hold no ``/``)."""
    return tree_ref(plan_id, "_").rsplit("/trees/", 1)[0]


def _keep_ref(plan_id: str, commit: str) -> str:
    """Keeps a merge commit reachable (and fetchable by other hosts) under its own id."""
    return f"{_plan_refs(plan_id)}/keep/{commit}"


def _dir_name(text: str) -> str:
    """``text`` as one safe path component, distinct texts giving distinct names."""
    return _NAME_UNSAFE.sub(lambda m: f"%{ord(m.group()):02X}", text) or "%"


_ESCAPED = re.compile(r"%([0-9A-F]{2})")


def dir_name_text(name: str) -> str:
    """The text a tree's or a plan's directory name stands for (``_dir_name`` undone):
    ``workspace_gc`` reads which plan a folder of ``trees/`` belongs to."""
    return "" if name == "%" else _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), name)


def _short(commit: str | None) -> str:
    return commit[:12] if commit else "nothing"


def _and(names: Sequence[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


@dataclass(frozen=True)
class _TreePaths:
    path: Path  # the work tree itself
    index: Path
    state: Path
    lock: Path


@dataclass(frozen=True)
class _TreeState:
    head: str
    clean: bool


class _Conflict(Exception):
    def __init__(self, files: tuple[str, ...], subtasks: tuple[str, ...]) -> None:
        super().__init__(", ".join(files))
        self.files = files
        self.subtasks = subtasks


class TreeLease:
    """One call's hold on a tree: materialised at the call's head and locked until
    ``close``. A call that may change files commits the whole tree with ``commit``."""

    def __init__(
        self, owner: GitWorkspace, ref: WorkspaceRef, paths: _TreePaths, lock_fd: int
    ) -> None:
        self._owner = owner
        self._paths = paths
        self._lock_fd: int | None = lock_fd
        self.ref = ref
        self.path = paths.path

    def mark_changing(self) -> None:
        """Say the tree may change from now on: a crash before ``commit`` makes the next
        call reset it instead of trusting it."""
        self._owner._write_state(self._paths, _TreeState(self.ref.head, clean=False))

    def commit(self, message: str, at_s: float) -> str | None:
        """Commit the whole tree (untracked files included, ignored ones not) on top of
        the call's head and move the tree's ref there; returns the new head, or None
        when nothing changed."""
        return self._owner._commit_tree(self.ref, self._paths, message, at_s)

    def close(self) -> None:
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> TreeLease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class GitWorkspace:
    """The git side of one worker's workspace (thread-safe; every method blocks).

    ``repository``: ``DPLAN_WORKSPACE``; ``state_dir``: where trees, their state and the
    cache clone live; ``remote``: ``DPLAN_WORKSPACE_REMOTE`` or None. Nothing is touched
    until the first call that needs the repository.
    """

    def __init__(
        self,
        repository: Path,
        state_dir: Path,
        *,
        remote: str | None = None,
        branch_prefix: str = DEFAULT_BRANCH_PREFIX,
    ) -> None:
        self.repository = Path(repository).expanduser().absolute()
        self.state_dir = Path(state_dir).expanduser().absolute()
        self.remote = remote
        self.branch_prefix = branch_prefix
        self._lock = threading.Lock()
        self._fetch_lock = threading.Lock()
        self._runner: GitRunner | None = None
        self._reader: ObjectReader | None = None
        self._plain: bool | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> GitWorkspace:
        return cls(
            settings.workspace,
            settings.state_dir,
            remote=settings.workspace_remote,
            branch_prefix=settings.workspace_branch_prefix,
        )

    # ------------------------------------------------------------------ the repository

    @property
    def git(self) -> GitRunner:
        """The runner for the object store plans use (opened, or initialised, once)."""
        with self._lock:
            if self._runner is None:
                found = git_version()
                if found < MIN_GIT_VERSION:
                    raise WorkspaceUnavailable(
                        f"git {'.'.join(map(str, MIN_GIT_VERSION))} or newer is needed for "
                        f"the workspace; this worker has git {found[0]}.{found[1]}"
                    )
                try:
                    self._runner = self._open_cache() if self.remote else self._open_repository()
                except GitFailed as err:
                    raise WorkspaceUnavailable(
                        f"{self.where} cannot be used: {error_line(err.stderr)}"
                    ) from None
            return self._runner

    @property
    def objects(self) -> ObjectReader:
        """A long-lived reader of the object store plans use (``git_run.ObjectReader``):
        lookups without a git process each."""
        git = self.git
        with self._lock:
            if self._reader is None:
                self._reader = ObjectReader(git)
            return self._reader

    @property
    def where(self) -> str:
        """The repository plans use, as a person would name it (no credentials)."""
        if self.remote:
            return f"the workspace remote {redact_url(self.remote)}"
        return f"the workspace repository {self.repository}"

    @property
    def _home(self) -> Path:
        return self.state_dir / "git-home"

    def _open_repository(self) -> GitRunner:
        path = self.repository
        if path.exists() and not path.is_dir():
            raise WorkspaceUnavailable(f"DPLAN_WORKSPACE {path} is a file, not a directory")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise WorkspaceUnavailable(
                f"DPLAN_WORKSPACE {path} cannot be created: {err.strerror}"
            ) from None
        # Two workers (or a worker and dplan run --embedded) may meet a plain directory at
        # once: one initialises it while the other waits, then finds the repository (not
        # a half-made one). The lock is on the directory itself, so nothing is written
        # into the user's files.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            found = self._discover(path)
            if found is not None:
                return GitRunner(found, self._home)
            return self._initialise(path)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _discover(self, path: Path) -> Path | None:
        """The git directory of the repository at ``path`` (not one above it), or None."""
        env = GitRunner(path, self._home).local_env({"GIT_CEILING_DIRECTORIES": str(path.parent)})
        done = subprocess.run(
            ["git", "rev-parse", "--absolute-git-dir"],
            cwd=path,
            env=env,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if done.returncode == 0:
            return Path(done.stdout.decode().strip())
        stderr = done.stderr.decode("utf-8", "replace")
        if (path / ".git").exists() or "not a git repository" not in stderr:
            raise WorkspaceUnavailable(f"{self.where} cannot be used: {error_line(stderr)}")
        return None

    def _initialise(self, path: Path) -> GitRunner:
        """Make ``path`` a repository whose first commit is its content (``.gitignore``
        respected); the state directory is left out when it lies inside.

        Built in a git directory of its own beside ``.git`` and renamed into place last,
        so a worker killed half-way leaves no half-made repository (one without a commit
        would be refused as the user's own): the next opener finds the leftover, removes
        it and starts again.
        """
        for leftover in path.glob(f"{_INIT_PREFIX}*"):
            shutil.rmtree(leftover, ignore_errors=True)
        building = path / f"{_INIT_PREFIX}{os.getpid()}"
        git = GitRunner(building, self._home)
        git.run("init", "--quiet", "--bare", str(building))
        git.run("config", "core.bare", "false")
        exclude = building / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with exclude.open("a") as f:
            f.write(f"\n/{_INIT_PREFIX}*/\n")
            if self.state_dir.is_relative_to(path) and self.state_dir != path:
                f.write(f"/{self.state_dir.relative_to(path).as_posix()}/\n")
        git.run("add", "--all", work_tree=path)
        tree = git.out("write-tree", work_tree=path)
        commit = git.out(
            "commit-tree",
            tree,
            "-m",
            "The workspace as it was when durable-plans first used it",
            env=_identity_env(INIT_IDENTITY, time.time()),
        )
        git.run("update-ref", "HEAD", commit)
        os.rename(building, path / ".git")
        git = GitRunner(path / ".git", self._home)
        files = len(git.out("ls-files", work_tree=path, index=None).splitlines())
        _log.warning(
            "DPLAN_WORKSPACE %s was not a git repository: initialised it, its %d files "
            "the first commit %s",
            path,
            files,
            commit[:12],
        )
        return git

    def _open_cache(self) -> GitRunner:
        remote = self.remote or ""
        if remote.startswith("-"):
            raise WorkspaceUnavailable(f"DPLAN_WORKSPACE_REMOTE {remote!r} is not a remote")
        cache = self.state_dir / CACHE_NAME
        git = GitRunner(cache, self._home)
        with self._state_lock("workspace-cache.lock"):
            if not (cache / "HEAD").exists():
                git.run("init", "--bare", "--quiet", str(cache))
        return git

    @contextlib.contextmanager
    def _state_lock(self, name: str) -> Iterator[None]:
        """A lock shared with every process using this state directory."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / name, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # ------------------------------------------------------------------ the remote

    def _fetch(self, *refspecs: str, prune: bool = False) -> None:
        args = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head"]
        if prune:
            args.append("--prune")
        git = self.git  # opened first: opening takes the same lock
        with self._fetch_lock, self._state_lock("workspace-cache.lock"):
            try:
                git.run(*args, "--", self.remote or "", *refspecs, network=True)
            except GitFailed as err:
                raise classify_remote_failure(self.where, err.stderr) from None

    def _remote_ref(self, ref: str) -> str | None:
        """The remote's value of ``ref`` now (one round trip)."""
        try:
            out = self.git.out("ls-remote", "--", self.remote or "", ref, network=True)
        except GitFailed as err:
            raise classify_remote_failure(self.where, err.stderr) from None
        for line in out.splitlines():
            sha, _, name = line.partition("\t")
            if name == ref:
                return sha
        return None

    def _push(self, commit: str, ref: str, expect: str | None) -> bool:
        """Set the remote's ``ref`` to ``commit`` if it is at ``expect`` (None: absent);
        False when it is not (someone else moved it)."""
        done = self.git.run(
            "push",
            "--quiet",
            "--porcelain",
            "--no-verify",
            f"--force-with-lease={ref}:{expect or ''}",
            "--",
            self.remote or "",
            f"{commit}:{ref}",
            network=True,
            check=False,
        )
        if done.returncode == 0:
            return True
        text = (done.stdout + done.stderr).decode("utf-8", "replace")
        if "stale info" in text or "[rejected]" in text or "fetch first" in text:
            return False
        raise classify_remote_failure(self.where, text)

    def _push_new(self, commit: str, ref: str) -> None:
        """Create ``ref`` at ``commit`` on the remote (already there: fine)."""
        if not self._push(commit, ref, None) and self._remote_ref(ref) != commit:
            raise WorkspaceUnavailable(f"{ref} on {self.where} is not at {_short(commit)}")

    # ------------------------------------------------------------------ commits and refs

    def _info(self, spec: str) -> tuple[str, str, int] | None:
        """``ObjectReader.info``, None also when the reader cannot answer (the caller
        then asks a git process of its own)."""
        try:
            return self.objects.info(spec)
        except GitFailed:
            return None

    def _has(self, commit: str) -> bool:
        if self._info(f"{commit}^{{commit}}") is not None:
            return True
        # Not there, or the reader could not say: a git process has the last word.
        done = self.git.run("cat-file", "-e", f"{commit}^{{commit}}", check=False)
        return done.returncode == 0

    def _missing(self, commits: Sequence[str]) -> list[str]:
        """The commits not here. With a remote, asked while no fetch is writing into the
        cache: a small fetch writes its objects one by one, a commit before its tree, so
        a commit seen then may not have its files yet (a checkout of it failed, and its
        call was retried, when another call's fetch was under way)."""
        if not self.remote:
            return [c for c in commits if not self._has(c)]
        _ = self.objects  # opened first: opening the cache takes the same lock
        with self._fetch_lock, self._state_lock("workspace-cache.lock"):
            return [c for c in commits if not self._has(c)]

    def _ensure(self, plan_id: str, *commits: str) -> None:
        """Every commit present locally (fetched from the remote when it is not)."""
        missing = self._missing(list(dict.fromkeys(commits)))
        if missing and self.remote:
            prefix = _plan_refs(plan_id)
            self._fetch(f"+{prefix}/*:{prefix}/*")
            missing = self._missing(missing)
            if missing:
                self._fetch("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
                missing = self._missing(missing)
        if not missing:
            return
        if self.remote:
            raise WorkspaceUnavailable(
                f"commit {_short(missing[0])} of plan {plan_id} is neither in this worker's "
                f"cache nor on {self.where}"
            )
        raise WorkspaceUnavailable(
            f"commit {_short(missing[0])} of plan {plan_id} is not in {self.where}: it was "
            "made on another host; set DPLAN_WORKSPACE_REMOTE to a remote every worker reaches"
        )

    def ensure_commit(self, plan_id: str, commit: str) -> None:
        """``commit`` present in the object store plans use (fetched when it is not)."""
        self._ensure(plan_id, commit)

    def _ref(self, ref: str) -> str | None:
        """The local value of ``ref`` (peeled to a commit), None when absent."""
        out = self.git.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", ok_codes=(0, 1))
        value = out.stdout.decode().strip()
        return value or None

    def read_ref(self, plan_id: str, ref: str) -> str | None:
        """The current value of one of a plan's refs (on the remote, when there is one;
        its commits then fetched)."""
        if not self.remote:
            return self._ref(ref)
        value = self._remote_ref(ref)
        if value is not None:
            self._ensure(plan_id, value)
        return value

    def _is_ancestor(self, older: str, newer: str) -> bool:
        if older == newer:
            return True  # a commit is its own ancestor (merge-base --is-ancestor agrees)
        done = self.git.run("merge-base", "--is-ancestor", older, newer, ok_codes=(0, 1))
        return done.returncode == 0

    def _tree_of(self, commit: str) -> str:
        found = self._info(f"{commit}^{{tree}}")
        if found is not None and found[1] == "tree":
            return found[0]
        return self.git.out("rev-parse", f"{commit}^{{tree}}")

    def _commit(
        self, tree: str, parents: Sequence[str], message: str, identity: GitIdentity, at_s: float
    ) -> str:
        args = ["commit-tree", "--no-gpg-sign", tree]
        for parent in parents:
            args += ["-p", parent]
        return self.git.out(*args, "-m", message, env=_identity_env(identity, at_s))

    def _parents_and_message(self, commit: str) -> tuple[list[str], str]:
        try:
            found = self.objects.contents(commit)
        except GitFailed:
            found = None
        if found is not None and found[0] == "commit":
            raw = found[1].decode("utf-8", "replace").strip()
        else:
            raw = self.git.out("cat-file", "commit", commit)
        head, _, message = raw.partition("\n\n")
        parents = [line[7:] for line in head.splitlines() if line.startswith("parent ")]
        return parents, message.strip()

    def _own_attempt(self, plan_id: str, commit: str, start: str, message: str) -> bool:
        """Whether ``commit`` is an earlier attempt of this very call: its message, on
        top of the head the call started from."""
        self._ensure(plan_id, commit)
        parents, said = self._parents_and_message(commit)
        return said == message and parents[:1] == [start]

    def _movable(self, current: str | None, start: str) -> bool:
        """Whether a tree's ref at ``current`` may move on from ``start``: it is absent
        (the tree's first commit), at ``start``, or behind it (the head moved forward
        without a commit of this tree: a sub-agent's work taken over)."""
        return current is None or current == start or self._is_ancestor(current, start)

    def _set_local(self, ref: str, new: str, old: str | None) -> bool:
        with self._refs_lock():
            done = self.git.run("update-ref", ref, new, old or ZERO, check=False)
            stderr = done.stderr.decode("utf-8", "replace")
            if done.returncode != 0 and self._stale_ref_lock(ref, stderr):
                done = self.git.run("update-ref", ref, new, old or ZERO, check=False)
                stderr = done.stderr.decode("utf-8", "replace")
        if done.returncode == 0:
            return True
        if ".lock" in stderr and "File exists" in stderr:
            time.sleep(0.05)  # another writer holds the ref's lock for a moment
            return False
        if "but expected" in stderr or "already exists" in stderr or "unable to resolve" in stderr:
            return False
        raise WorkspaceUnavailable(f"{ref} cannot be updated in {self.where}: {error_line(stderr)}")

    @contextlib.contextmanager
    def _refs_lock(self) -> Iterator[None]:
        """Held by every process of ours while it moves a ref of this repository (on
        this host), so a ref's lock file found meanwhile is a dead process's."""
        fd = os.open(self.git.git_dir / _REFS_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _stale_ref_lock(self, ref: str, stderr: str) -> bool:
        """Remove the lock file of ``ref`` left by a process killed while it moved the
        ref; True when there was one. Our refs are only ever moved under ``_refs_lock``;
        a result branch a person might be moving is taken only once its lock is old."""
        if ".lock" not in stderr or "File exists" not in stderr:
            return False
        lock = self.git.git_dir / f"{ref}.lock"
        try:
            age = time.time() - lock.stat().st_mtime
        except OSError:
            return False
        if not ref.startswith("refs/dplan/") and age < _FOREIGN_LOCK_AGE_S:
            return False
        lock.unlink(missing_ok=True)
        _log.warning("removed %s, left by a process that died moving %s", lock.name, ref)
        return True

    def _set_ref(self, ref: str, new: str, expected: str | None) -> bool:
        """Compare-and-swap ``ref`` from ``expected`` to ``new`` (on the remote first
        when there is one); False when it was not at ``expected``."""
        if self.remote:
            if not self._push(new, ref, expected):
                return False
            self.git.run("update-ref", ref, new)
            return True
        return self._set_local(ref, new, expected)

    def _current(self, plan_id: str, ref: str, fresh: bool) -> str | None:
        """``ref``'s value: local, or the remote's (its commit fetched) when ``fresh``."""
        if fresh:
            return self.read_ref(plan_id, ref)
        return self._ref(ref)

    def _pin(self, plan_id: str, commit: str) -> None:
        ref = _keep_ref(plan_id, commit)
        if self._ref(ref) == commit:
            return
        if self.remote:
            self._push_new(commit, ref)
        self.git.run("update-ref", ref, commit)

    # ------------------------------------------------------------------ plans

    def open_plan(self, plan_id: str, requested: str | None) -> str:
        """The commit a plan starts from: ``requested`` (a branch, tag or commit) or the
        repository's ``HEAD``, resolved once and kept under the plan's refs."""
        name = requested or "HEAD"
        if name.startswith("-") or any(c in name for c in "\0\n\r"):
            raise WorkspaceUnavailable(
                f"workspace base {name!r} is not a branch, tag or commit name"
            )
        if self.remote:
            self._fetch("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*", prune=True)
            if requested is None:
                try:
                    self._fetch("+HEAD:refs/dplan-remote/HEAD")
                except WorkspaceUnavailable:
                    raise WorkspaceUnavailable(
                        f"{self.where} has no commit yet (its HEAD names none): push a first "
                        "commit to it, or name the plan's workspace_base"
                    ) from None
                name = "refs/dplan-remote/HEAD"
        base = self._resolve(name)
        if base is None and self.remote and _HEX.match(name) and len(name) == 40:
            with contextlib.suppress(WorkspaceUnavailable, WorkspaceBusy):
                self._fetch(name)
            base = self._resolve(name)
        if base is None:
            if requested is None:
                raise WorkspaceUnavailable(
                    f"{self.where} has no commit yet (its HEAD names none): commit its "
                    "files, or name the plan's workspace_base"
                )
            raise WorkspaceUnavailable(
                f"workspace base {requested!r} names no commit in {self.where} (a branch, "
                "tag or commit id is expected)"
            )
        self._pin(plan_id, base)
        return base

    def _resolve(self, name: str) -> str | None:
        done = self.git.run(
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            f"{name}^{{commit}}",
            ok_codes=(0, 1, 128),
        )
        value = done.stdout.decode().strip()
        return value if done.returncode == 0 and COMMIT_RE.match(value) else None

    # ------------------------------------------------------------------ trees

    def _paths(self, ref: WorkspaceRef) -> _TreePaths:
        folder = self.state_dir / "trees" / _dir_name(ref.plan_id)
        name = _dir_name(ref.tree)
        return _TreePaths(
            path=folder / name,
            index=folder / f"{name}.index",
            state=folder / f"{name}.state",
            lock=folder / f"{name}.lock",
        )

    def tree_dir(self, ref: WorkspaceRef) -> Path:
        """Where ``ref``'s tree is materialised on this host."""
        return self._paths(ref).path

    def files_at(self, ref: WorkspaceRef) -> CommitFiles | None:
        """``ref.head``'s files for a call that only reads them, without a tree, or None
        when the call is to take the tree (``checkout``): this host has it, known clean
        (it may hold what no commit does, such as the ignored files a command made, and
        a read has always seen them), or the repository converts files on checkout. A
        ``CommitFiles`` may still raise ``NeedsTree`` for a call it cannot answer alike."""
        paths = self._paths(ref)
        state = self._read_state(paths)
        if state is not None and state.clean and paths.path.is_dir():
            return None
        if not self._plain_checkout():
            return None
        self._ensure(ref.plan_id, ref.head)
        try:
            return CommitFiles(self.objects, ref.head)
        except NeedsTree:
            return None

    def _plain_checkout(self) -> bool:
        """Whether a checkout writes every blob as it is: no line-end conversion in the
        repository's config, nothing converting in its ``info/attributes`` (the
        ``.gitattributes`` in a commit are ``CommitFiles``'s to check)."""
        if self._plain is None:
            git = self.git
            plain = True
            with contextlib.suppress(OSError):
                plain = not CONVERTING.search((git.git_dir / "info" / "attributes").read_bytes())
            done = git.run("config", "--get-regexp", r"^core\.(autocrlf|eol)$", ok_codes=(0, 1))
            for line in done.stdout.decode("utf-8", "replace").splitlines():
                _, _, value = line.partition(" ")
                if value.strip().lower() not in (
                    "false",
                    "input",
                    "lf",
                    "native",
                    "0",
                    "no",
                    "off",
                ):
                    plain = False
            self._plain = plain
        return self._plain

    def checkout(self, ref: WorkspaceRef) -> TreeLease:
        """Lock ``ref``'s tree and make it exactly ``ref.head`` (reset when it is not known
        to be clean there). Close the lease when the call is done."""
        paths = self._paths(ref)
        paths.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            # Every call on this tree holds its lock, so an index lock file found now was
            # left by a process killed mid-command: without this the tree stays unusable.
            paths.index.with_name(paths.index.name + ".lock").unlink(missing_ok=True)
            self._ensure(ref.plan_id, ref.head)
            self._materialise(paths, ref.head)
        except BaseException:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        return TreeLease(self, ref, paths, fd)

    def _read_state(self, paths: _TreePaths) -> _TreeState | None:
        try:
            raw = json.loads(paths.state.read_text())
            return _TreeState(head=str(raw["head"]), clean=bool(raw["clean"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write_state(self, paths: _TreePaths, state: _TreeState) -> None:
        tmp = paths.state.with_name(paths.state.name + ".tmp")
        tmp.write_text(json.dumps({"head": state.head, "clean": state.clean}))
        os.replace(tmp, paths.state)

    def _materialise(self, paths: _TreePaths, commit: str) -> None:
        tree_root = self.state_dir / "trees"
        if not paths.path.absolute().is_relative_to(tree_root):
            raise AssertionError(f"{paths.path} is not under {tree_root}")  # never clean elsewhere
        state = self._read_state(paths)
        known = state is not None and state.clean and paths.index.exists()
        if known and state is not None and state.head == commit and paths.path.is_dir():
            return
        # A tree made now is empty but for what read-tree writes: nothing to clean.
        fresh = not paths.path.exists()
        paths.path.mkdir(parents=True, exist_ok=True)
        self._write_state(paths, _TreeState(commit, clean=False))
        # Tracked files become ``commit``'s (a file changed since is rewritten, one left
        # over removed); a tree that may hold anything else is cleaned too, ignored files
        # included, so it is exactly ``commit`` whatever a crash left in it.
        self.git.run("read-tree", "--reset", "-u", commit, work_tree=paths.path, index=paths.index)
        if not known and not fresh:
            self.git.run("clean", "-ffdxq", work_tree=paths.path, index=paths.index)
        self._write_state(paths, _TreeState(commit, clean=True))

    def _commit_tree(
        self, ref: WorkspaceRef, paths: _TreePaths, message: str, at_s: float
    ) -> str | None:
        git = self.git
        git.run("add", "--all", work_tree=paths.path, index=paths.index)
        tree = git.out("write-tree", work_tree=paths.path, index=paths.index)
        name = tree_ref(ref.plan_id, ref.tree)
        start = ref.head
        fresh = False
        for _ in range(_CAS_ROUNDS):
            current = self._current(ref.plan_id, name, fresh)
            if not self._movable(current, start):
                if current is not None and self._own_attempt(ref.plan_id, current, start, message):
                    # An earlier attempt of this call committed already (and may have been
                    # answered): its commit stands, a retry never makes a second one. The
                    # tree holds this run's files, so the next call resets it.
                    same = tree == self._tree_of(current)
                    self._write_state(paths, _TreeState(current if same else start, clean=same))
                    return current
                if self.remote and not fresh:
                    fresh = True  # this cache may be behind the remote: ask it
                    continue
                raise WorkspaceUnavailable(
                    f"{name} is at {_short(current)}, not at {_short(start)} where this "
                    "call started: another attempt moved it on (a stale writer is refused)"
                )
            if tree == self._tree_of(start):
                self._write_state(paths, _TreeState(start, clean=True))
                return None
            commit = self._commit(tree, [start], message, ref.identity, at_s)
            if self._set_ref(name, commit, current):
                self._write_state(paths, _TreeState(commit, clean=True))
                return commit
            fresh = True
        raise WorkspaceBusy(f"{name} kept moving while this call tried to commit; try again")

    def answered_commit(self, ref: WorkspaceRef, message: str) -> str | None:
        """The commit an earlier attempt of an already answered call made: the tree's ref,
        when it moved from the call's head to a commit of this call; None otherwise."""
        current = self.read_ref(ref.plan_id, tree_ref(ref.plan_id, ref.tree))
        if current is None or current == ref.head:
            return None
        if self._own_attempt(ref.plan_id, current, ref.head, message):
            return current
        return None

    # ------------------------------------------------------------------ merges

    def changed_files(self, plan_id: str, older: str, newer: str) -> tuple[str, ...]:
        """The files that differ between two of a plan's commits (``git diff --name-only``,
        renames as a removal and an addition), their commits fetched when missing."""
        self._ensure(plan_id, older, newer)
        done = self.git.run("diff", "--name-only", "--no-renames", "-z", older, newer)
        return tuple(p for p in done.stdout.decode("utf-8", "replace").split("\0") if p)

    def _merge_tree(self, ours: str, theirs: str) -> tuple[str, tuple[str, ...]]:
        """The merged tree of two commits and the files that conflict (none: clean)."""
        done = self.git.run(
            "merge-tree",
            "--write-tree",
            "--name-only",
            "-z",
            "--no-messages",
            ours,
            theirs,
            ok_codes=(0, 1),
        )
        parts = done.stdout.decode("utf-8", "replace").split("\0")
        files = tuple(dict.fromkeys(p for p in parts[1:] if p))
        if done.returncode == 1 and not files:
            files = ("(unnamed)",)
        return parts[0].strip(), files if done.returncode == 1 else ()

    def _changed(self, base: str, commit: str, files: Sequence[str]) -> bool:
        out = self.git.run(
            "diff",
            "--name-only",
            "--no-renames",
            base,
            commit,
            "--",
            *files,
            env={"GIT_LITERAL_PATHSPECS": "1"},
        )
        return bool(out.stdout.strip())

    def _fold(
        self,
        base: str,
        parents: Sequence[tuple[str, str]],
        message: Callable[[str], str],
        identity: GitIdentity,
        at_s: float,
        *,
        leave_out: bool,
    ) -> tuple[str, list[str]]:
        """Merge ``parents`` onto ``base`` in order: a commit already contained is
        skipped, one that contains everything so far is taken as is, others are merged
        with a deterministic merge commit. A conflict raises ``_Conflict`` or, with
        ``leave_out``, leaves that commit out (named in the second value)."""
        accumulated = base
        taken: list[tuple[str, str]] = []
        left_out: list[str] = []
        for subtask, commit in parents:
            if self._is_ancestor(commit, accumulated):
                taken.append((subtask, commit))
                continue
            if self._is_ancestor(accumulated, commit):
                accumulated = commit
                taken.append((subtask, commit))
                continue
            tree, files = self._merge_tree(accumulated, commit)
            if files:
                if leave_out:
                    left_out.append(subtask)
                    continue
                involved = [
                    s for s, c in [*taken, (subtask, commit)] if self._changed(base, c, files)
                ]
                if subtask not in involved:
                    involved.append(subtask)
                raise _Conflict(files, tuple(involved))
            accumulated = self._commit(
                tree, [accumulated, commit], message(subtask), identity, at_s
            )
            taken.append((subtask, commit))
        return accumulated, left_out

    def merge(self, inp: WorkspaceMergeInput) -> str:
        """A subtask's starting commit: its dependencies' results merged onto the base in
        the plan's order, or the operator's resolution after a conflict."""
        commits = [c for _, c in inp.parents]
        self._ensure(inp.plan_id, inp.base, *commits)
        try:
            result, _ = self._fold(
                inp.base,
                inp.parents,
                lambda dep: f"{inp.subtask}: merge {dep}",
                inp.identity,
                inp.at_s,
                leave_out=False,
            )
        except _Conflict as conflict:
            where = resolution_ref(inp.plan_id, inp.subtask)
            resolved = self.read_ref(inp.plan_id, where)
            if resolved is not None and all(self._is_ancestor(c, resolved) for c in commits):
                return resolved
            raise self._conflict_error(conflict, where, resolved) from None
        if result != inp.base and result not in commits:
            self._pin(inp.plan_id, result)
        return result

    @staticmethod
    def _conflict_error(conflict: _Conflict, where: str, resolved: str | None) -> WorkspaceConflict:
        both = "both" if len(conflict.subtasks) == 2 else "all of them"
        files = _and(list(conflict.files))
        stale = (
            f" ({where} is at {_short(resolved)}, which does not contain {both})"
            if resolved is not None
            else ""
        )
        message = (
            f"workspace conflict: {files} changed by subtasks {_and(list(conflict.subtasks))}; "
            f"resolve it by pushing a commit that contains {both} to {where}, then dplan "
            f"resume{stale}"
        )
        return WorkspaceConflict(
            message,
            WorkspaceConflictDetails(
                files=conflict.files, subtasks=conflict.subtasks, resolution_ref=where
            ),
        )

    def publish(self, inp: WorkspacePublishInput) -> WorkspaceSummary:
        """The plan's result: its completed subtasks' commits merged onto the base (one
        that conflicts is left out and named), set as the branch ``<prefix><plan-id>``."""
        self._ensure(inp.plan_id, inp.base, *(c for _, c in inp.commits))
        result, left_out = self._fold(
            inp.base,
            inp.commits,
            lambda subtask: f"plan {inp.plan_id}: merge {subtask}",
            inp.identity,
            inp.at_s,
            leave_out=True,
        )
        branch = result_branch(inp.plan_id, self.branch_prefix)
        self._set_branch(inp.plan_id, f"refs/heads/{branch}", result)
        return WorkspaceSummary(
            base=inp.base, result=result, branch=branch, left_out=tuple(left_out)
        )

    def _set_branch(self, plan_id: str, ref: str, commit: str) -> None:
        if not self.remote:
            head = self.git.run("symbolic-ref", "--quiet", "HEAD", ok_codes=(0, 1))
            if head.stdout.decode().strip() == ref:
                raise WorkspaceUnavailable(
                    f"branch {ref.removeprefix('refs/heads/')} is checked out in "
                    f"{self.repository}; check out another branch so the plan's result "
                    "can be published there"
                )
        for _ in range(_CAS_ROUNDS):
            current = self._current(plan_id, ref, fresh=True)
            if current == commit:
                if self.remote:
                    self.git.run("update-ref", ref, commit)
                return
            if self._set_ref(ref, commit, current):
                return
        raise WorkspaceBusy(f"{ref} kept moving while the plan's result was published")
