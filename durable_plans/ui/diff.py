"""A subtask's diff: what its tool calls changed, read with ``git`` from the workspace.

A subtask's result names its last commit (``SubtaskResult.commit``); each of its tool
calls that changed files made one commit whose subject starts with its tree's name,
``<run>/<subtask>`` (``<run>/<subtask>~N`` for a retry, ``.../<sub-agent>`` below it):
see ``activities/git_workspace.py``. Following first parents back from the commit while
the subject is the subtask's own finds where it started (its base, or the merge of what
it depends on), and ``git diff START COMMIT`` is its work alone.

The UI only reads: ``git`` runs in ``DPLAN_WORKSPACE`` with nothing written, and when the
commit is not there (another host's repository, a remote not fetched) it says so instead.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path
from typing import Any

from durable_plans.domain.secrets import scrub_secrets

__all__ = ["MAX_DIFF_CHARS", "subtask_diff"]

MAX_DIFF_CHARS = 200_000
_WALK_LIMIT = 500
_HEX = re.compile(r"^[0-9a-f]{7,64}$")


async def _git(repository: Path, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        "git",
        "-C",
        str(repository),
        "-c",
        "core.quotepath=off",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"GIT_TERMINAL_PROMPT": "0", "PATH": _path(), "GIT_OPTIONAL_LOCKS": "0"},
    )
    out, err = await process.communicate()
    return (
        process.returncode or 0,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
    )


def _path() -> str:
    found = shutil.which("git")
    return str(Path(found).parent) if found else "/usr/bin:/bin"


def _own_subject(subtask: str) -> re.Pattern[str]:
    return re.compile(rf"^\S*/{re.escape(subtask)}(~\d+)?(/\S+)? turn \d+\.\d+: ")


async def subtask_diff(
    repository: Path, subtask: str, commit: str | None, *, remote: str | None = None
) -> dict[str, Any]:
    """``{"commit", "start", "stat", "diff"}``, or ``{"unavailable": why}``."""
    if commit is None:
        return {"unavailable": "this subtask made no workspace commit (no file changed)"}
    if not _HEX.match(commit):
        return {"unavailable": f"{commit!r} is not a commit id"}
    if shutil.which("git") is None:
        return {"unavailable": "git is not installed where dplan ui runs"}
    code, _, _ = await _git(repository, "rev-parse", "--git-dir")
    if code != 0:
        return {
            "unavailable": f"DPLAN_WORKSPACE {repository} is not a git repository this "
            "process can read (run dplan ui where the workers' workspace is, or with "
            "DPLAN_WORKSPACE pointing at a clone)"
        }
    code, _, _ = await _git(repository, "cat-file", "-e", f"{commit}^{{commit}}")
    if code != 0:
        where = f" (fetch refs/dplan/* from {remote} into it)" if remote else ""
        return {
            "unavailable": f"commit {commit[:12]} is not in {repository}{where}: it was made "
            "on another host"
        }
    code, log, err = await _git(
        repository, "log", "--first-parent", f"-n{_WALK_LIMIT}", "--format=%H %P%x09%s", commit
    )
    if code != 0:
        return {"unavailable": f"git log failed: {err.strip()[:200]}"}
    own = _own_subject(subtask)
    start: str | None = None
    for line in log.splitlines():
        ids, _, subject = line.partition("\t")
        parts = ids.split()
        if not own.match(subject):
            start = parts[0]
            break
        start = parts[1] if len(parts) > 1 else None  # a root commit: diff from nothing
    if start is None:
        start = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's empty tree
    if start == commit:
        return {
            "unavailable": f"no file changed: the subtask ends at {commit[:12]}, where it started"
        }
    _, stat, _ = await _git(repository, "diff", "--stat", start, commit)
    code, diff, err = await _git(repository, "diff", start, commit)
    if code != 0:
        return {"unavailable": f"git diff failed: {err.strip()[:200]}"}
    truncated = len(diff) > MAX_DIFF_CHARS
    return {
        "commit": commit,
        "start": start,
        "stat": scrub_secrets(stat),
        "diff": scrub_secrets(diff[:MAX_DIFF_CHARS]),
        "truncated": truncated,
    }
