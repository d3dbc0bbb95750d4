"""What a plan did to the workspace, for a person: one line in the report, and after a run
the git commands that show the result.

A plan's work is a branch (``dplan/<plan-id>``) in the workspace repository, or on the
remote every worker pushes to (``DPLAN_WORKSPACE_REMOTE``): the commands name the
repository this shell's settings point at, and the remote only by its variable (its URL
may carry a token).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from durable_plans.domain.models import PlanReport

__all__ = ["SHORT_COMMIT", "short_commit", "workspace_hints", "workspace_line"]

SHORT_COMMIT = 7  # git's own shortest abbreviation, as `git log --oneline` shows it
_DIFF_COMMIT = 12  # long enough to stay unambiguous in a large repository


def short_commit(commit: str | None) -> str:
    return commit[:SHORT_COMMIT] if commit else ""


def workspace_line(report: PlanReport) -> str | None:
    """``workspace: base B → result R on dplan/<plan-id>`` (or what is known so far);
    None for a plan that does not keep its workspace in git."""
    ws = report.workspace
    if ws is None:
        return None
    line = f"workspace: base {short_commit(ws.base)}"
    if ws.result is not None and ws.branch is not None:
        line += f" → result {short_commit(ws.result)} on {ws.branch}"
    elif report.finished:
        line += " · no result branch was published (see the worker's log)"
    else:
        line += " · the result branch is published when the plan ends"
    if ws.left_out:
        line += " · left out (their changes conflict with the rest): " + ", ".join(ws.left_out)
    return line


def workspace_hints(report: PlanReport, workspace: Path, *, remote: bool) -> list[str]:
    """How to look at the plan's result with git, once it has a branch; [] before."""
    ws = report.workspace
    if ws is None or ws.branch is None or ws.result is None:
        return []
    repo = shlex.quote(str(workspace.expanduser().resolve()))
    branch = shlex.quote(ws.branch)
    lines = ["to look at what the plan did:"]
    if remote:
        # Forced: the branch is the plan's own, and a plan run again moves it anywhere.
        refspec = shlex.quote(f"+refs/heads/{ws.branch}:refs/heads/{ws.branch}")
        lines.append(f'  git -C {repo} fetch "$DPLAN_WORKSPACE_REMOTE" {refspec}')
    lines += [
        f"  git -C {repo} log --graph --oneline {branch}",
        f"  git -C {repo} diff {ws.base[:_DIFF_COMMIT]}..{branch}",
    ]
    return lines
