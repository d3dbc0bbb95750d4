"""Running git for the workspace: one subprocess per command, an environment built from
scratch, and git's failures sorted into the three kinds a workflow acts on.

Nothing the worker's user configured may change a commit: the same inputs must give the
same commit id on every host, so local commands run with no system or global config, an
empty ``HOME``, no hooks, no signing, no fsmonitor or sparse checkout borrowed from the
user's checkout. Commands that talk to a remote are the exception: they keep ``HOME``,
the global config and the ssh agent, because that is where git finds the credentials
(credential helpers, ssh keys, ``insteadOf`` rewrites) an operator already set up; they
never make a commit, so they cannot change one.

Failures: ``WorkspaceUnavailable`` (a repository or remote that cannot be used: wrong
path, no access, not a repository; retrying will not help), ``WorkspaceBusy`` (a remote
that did not answer this time: worth another attempt), and ``WorkspaceConflict`` (raised
by the merge). Messages are one line and never carry a URL's credentials.

Synchronous on purpose: the activities call it from worker threads.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from durable_plans.domain.secrets import scrub_secrets
from durable_plans.domain.workspace import WorkspaceConflictDetails

__all__ = [
    "MIN_GIT_VERSION",
    "GitFailed",
    "GitRunner",
    "WorkspaceBusy",
    "WorkspaceConflict",
    "WorkspaceError",
    "WorkspaceUnavailable",
    "classify_remote_failure",
    "error_line",
    "git_version",
    "redact_url",
]

# ``git merge-tree --write-tree`` (merging without a checkout) came with git 2.38.
MIN_GIT_VERSION = (2, 38)
NETWORK_TIMEOUT_S = 300.0
LOCAL_TIMEOUT_S = 600.0

# Config that must never come from the repository's own settings when we work in a tree
# of our own: hooks and the fsmonitor run programs and answer for the user's checkout,
# sparse checkout would leave files out of our trees, signing and encodings change ids.
# The untracked cache trusts directory mtimes, which a tool may set back (``tar x``):
# a new file could be missed by a commit. A tree's index is written in version 4 (paths
# prefix-compressed: a smaller file read and written by every commit), and a tree of
# many files is checked out by one worker process per core.
_LOCAL_OVERRIDES = (
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "i18n.commitEncoding=UTF-8",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "index.version=4",
    "checkout.workers=0",
    "core.sparseCheckout=false",
    "core.sparseCheckoutCone=false",
    "index.sparse=false",
    "core.splitIndex=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
    "init.defaultBranch=main",
)
# What a command talking to a remote keeps from the worker's environment: where git and
# ssh find credentials and proxies. Nothing else (no API keys) reaches the subprocess.
_NETWORK_PASSTHROUGH = (
    "HOME",
    "USER",
    "LOGNAME",
    "XDG_CONFIG_HOME",
    "GIT_CONFIG_GLOBAL",
    "SSH_AUTH_SOCK",
    "SSH_ASKPASS",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_SSH_VARIANT",
    "GIT_ASKPASS",
    "GIT_PROXY_COMMAND",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "GIT_SSL_CERT",
    "GIT_SSL_KEY",
    "GIT_SSL_NO_VERIFY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")
# A remote's answer that no retry will change: a wrong address, no access, not a repository.
_PERMANENT = re.compile(
    r"(?i)does not appear to be a git repository|not a git repository|repository not found"
    r"|not exported|access denied|authentication failed|permission denied"
    r"|could not read (?:username|password)|host key verification failed"
    r"|returned error: 40[134]|no such file or directory|invalid (?:url|port)"
    r"|unsupported protocol|protocol '.*' is not supported|couldn't find remote ref"
)


class WorkspaceError(Exception):
    """A workspace operation that did not happen; ``str(exc)`` is one line for a person."""


class WorkspaceUnavailable(WorkspaceError):
    """The repository or remote cannot be used as configured, or a stale writer was
    refused: another attempt would fail the same way."""


class WorkspaceBusy(WorkspaceError):
    """A remote did not answer this time (connection refused, timed out, reset): worth
    another attempt."""


class WorkspaceConflict(WorkspaceError):
    """Dependencies changed the same lines; ``details`` names the files, the subtasks and
    where a resolution can be pushed."""

    def __init__(self, message: str, details: WorkspaceConflictDetails) -> None:
        super().__init__(message)
        self.details = details


class GitFailed(Exception):
    """A git command that exited non-zero (caught and explained by the workspace layer)."""

    def __init__(self, args_shown: str, returncode: int, stderr: str) -> None:
        super().__init__(f"git {args_shown} exited {returncode}: {error_line(stderr)}")
        self.args_shown = args_shown
        self.returncode = returncode
        self.stderr = stderr


def redact_url(text: str) -> str:
    """``text`` with the credentials of every URL in it left out
    (``https://bot:token@host/x`` -> ``https://host/x``) and known key shapes scrubbed."""
    return scrub_secrets(_USERINFO.sub(r"\1", text))


def error_line(stderr: str) -> str:
    """The line of git's error output that says what went wrong (its first ``fatal:``
    or ``error:`` line, the cause; later ones are consequences), else its last non-empty
    one; credentials left out."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return "no error output"
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return redact_url(line)
    return redact_url(lines[-1])


def classify_remote_failure(what: str, stderr: str) -> WorkspaceError:
    """``WorkspaceUnavailable`` for an answer no retry changes, else ``WorkspaceBusy``."""
    line = error_line(stderr)
    if _PERMANENT.search(stderr):
        return WorkspaceUnavailable(f"{what} cannot be used: {line}")
    return WorkspaceBusy(f"{what} did not answer: {line}")


class GitRunner:
    """Runs git against one repository (``git_dir``) with the environment described above.

    ``home`` is an empty directory standing in for ``HOME`` in local commands; ``hooks``
    an empty directory given as ``core.hooksPath`` so no hook of the repository runs.
    """

    def __init__(self, git_dir: Path, home: Path) -> None:
        self.git_dir = git_dir
        self.home = home
        self.hooks = home / "no-hooks"
        self.home.mkdir(parents=True, exist_ok=True)
        self.hooks.mkdir(exist_ok=True)

    def local_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(self.home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
            "LC_ALL": "C",
            "LANG": "C",
            "TZ": "UTC",
        }
        if extra:
            env.update(extra)
        return env

    def network_env(self) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C",
            "LANG": "C",
        }
        for name in _NETWORK_PASSTHROUGH:
            value = os.environ.get(name)
            if value is not None:
                env[name] = value
        return env

    def _base(self) -> list[str]:
        args = ["git", f"--git-dir={self.git_dir}", "-c", f"core.hooksPath={self.hooks}"]
        for item in _LOCAL_OVERRIDES:
            args += ["-c", item]
        return args

    def run(
        self,
        *args: str,
        work_tree: Path | None = None,
        index: Path | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        check: bool = True,
        input_: bytes | None = None,
        ok_codes: Sequence[int] = (0,),
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``git <args>``; ``GitFailed`` when it exits with a code not in ``ok_codes``
        (and ``check``). A tree command runs inside the tree, on its own index."""
        command = self._base()
        if work_tree is not None:
            command.append(f"--work-tree={work_tree}")
        command += args
        base_env = self.network_env() if network else self.local_env()
        if index is not None:
            base_env["GIT_INDEX_FILE"] = str(index)
        if env:
            base_env.update(env)
        cwd = work_tree or (self.git_dir if self.git_dir.is_dir() else self.git_dir.parent)
        try:
            done = subprocess.run(
                command,
                cwd=cwd,
                env=base_env,
                input=input_,
                stdin=None if input_ is not None else subprocess.DEVNULL,
                capture_output=True,
                timeout=NETWORK_TIMEOUT_S if network else LOCAL_TIMEOUT_S,
                check=False,
            )
        except FileNotFoundError:
            if not cwd.is_dir():
                raise WorkspaceUnavailable(f"{cwd} is gone (removed while in use?)") from None
            raise WorkspaceUnavailable(
                "git is not installed on this worker (the workspace is a git repository)"
            ) from None
        except subprocess.TimeoutExpired:
            shown = redact_url(" ".join(args[:3]))
            if network:
                raise WorkspaceBusy(f"git {shown} timed out talking to the remote") from None
            raise WorkspaceUnavailable(f"git {shown} did not finish") from None
        if check and done.returncode not in ok_codes:
            raise GitFailed(
                redact_url(" ".join(a for a in args[:4] if not a.startswith("-"))),
                done.returncode,
                done.stderr.decode("utf-8", "replace"),
            )
        return done

    def out(
        self,
        *args: str,
        work_tree: Path | None = None,
        index: Path | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
    ) -> str:
        """A command's standard output as text, stripped (``GitFailed`` on failure)."""
        done = self.run(*args, work_tree=work_tree, index=index, env=env, network=network)
        return done.stdout.decode("utf-8", "replace").strip()


def git_version() -> tuple[int, int]:
    """The installed git's (major, minor); ``WorkspaceUnavailable`` without git."""
    try:
        done = subprocess.run(
            ["git", "--version"],
            capture_output=True,
            check=True,
            timeout=30,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
        )
    except (FileNotFoundError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        raise WorkspaceUnavailable(
            "git is not installed on this worker (the workspace is a git repository)"
        ) from None
    match = re.search(rb"(\d+)\.(\d+)", done.stdout)
    if match is None:
        raise WorkspaceUnavailable(f"cannot read the git version from {done.stdout[:80]!r}")
    return int(match.group(1)), int(match.group(2))
