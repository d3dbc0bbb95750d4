"""What plans left in a workspace repository, read with git: tests look at the plan's
result branch (``dplan/<plan-id>``) and at every commit the plan made, never at the
checkout, which plans do not touch."""

from __future__ import annotations

import subprocess
from pathlib import Path

from durable_plans.domain.workspace_refs import DEFAULT_BRANCH_PREFIX, result_branch

__all__ = ["commit_files", "git", "plan_paths", "result_paths", "result_text"]


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``git -C repo ARGS``, output as text; raises with git's own words on failure."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} in {repo} failed: {done.stderr.strip()}")
    return done


def _branch(plan_id: str, prefix: str) -> str:
    return f"refs/heads/{result_branch(plan_id, prefix)}"


def result_text(
    repo: Path, plan_id: str, path: str, *, prefix: str = DEFAULT_BRANCH_PREFIX
) -> str | None:
    """``path`` as the plan's result has it; None when the result has no such file."""
    shown = git(repo, "show", f"{_branch(plan_id, prefix)}:{path}", check=False)
    if shown.returncode != 0:
        if "does not exist" in shown.stderr or "exists on disk, but not in" in shown.stderr:
            return None
        raise AssertionError(f"git show {plan_id}:{path} failed: {shown.stderr.strip()}")
    return shown.stdout


def result_paths(repo: Path, plan_id: str, *, prefix: str = DEFAULT_BRANCH_PREFIX) -> list[str]:
    """Every file in the plan's result, sorted."""
    listed = git(repo, "ls-tree", "-r", "--name-only", _branch(plan_id, prefix))
    return sorted(listed.stdout.splitlines())


def commit_files(repo: Path, commit: str) -> list[str]:
    """Every file in ``commit``'s tree, sorted."""
    return sorted(git(repo, "ls-tree", "-r", "--name-only", commit).stdout.splitlines())


def plan_paths(repo: Path, plan_id: str, *, prefix: str = DEFAULT_BRANCH_PREFIX) -> set[str]:
    """Every file in any commit the plan made so far: its trees' refs (failed attempts
    included) and its result branch, if published. Empty before its first commit."""
    refs = git(
        repo,
        "for-each-ref",
        "--format=%(refname)",
        f"refs/dplan/{plan_id}/",
        _branch(plan_id, prefix),
    ).stdout.split()
    paths: set[str] = set()
    for ref in refs:
        paths.update(commit_files(repo, ref))
    return paths
