"""The workspace as workflow state: commit ids the workflows carry, and the names of the
refs that hold them.

The files agents write are kept in git, and the workflows carry only commit ids: a
subtask's tree is always "commit X", so a replay, a retried activity or another host
rebuilds exactly the tree the history names. These are the pure parts both sides share:
what a workflow hands a tool call, what a plan reports, and where each commit is kept
(``refs/dplan/<plan>/...``, never the user's branches).

Pure and passed through the workflow sandbox.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "COMMIT_RE",
    "DEFAULT_BRANCH_PREFIX",
    "GitIdentity",
    "WorkspaceConflictDetails",
    "WorkspaceMergeInput",
    "WorkspaceMergeOutput",
    "WorkspaceOpenInput",
    "WorkspaceOpenOutput",
    "WorkspacePublishInput",
    "WorkspaceRef",
    "WorkspaceStart",
    "WorkspaceSummary",
    "attempt_ref",
    "resolution_ref",
    "result_branch",
    "tree_ref",
]

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
DEFAULT_BRANCH_PREFIX = "dplan/"
_REF_UNSAFE = re.compile(r"[^A-Za-z0-9._/@-]|\.\.|//|/\.|\.lock(?=/|$)|^[./]|[./]$")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _ref_part(text: str) -> str:
    """``text`` made safe as part of a git ref name (ids are already close to safe: the
    plan and subtask id rules allow letters, digits, ``._-``); what git forbids becomes
    ``_``."""
    cleaned = _REF_UNSAFE.sub("_", text)
    return cleaned or "_"


def tree_ref(plan_id: str, tree: str) -> str:
    """Where a subtask attempt's latest commit is kept (``tree``: its attempt key, e.g.
    ``write@1``, or a sub-agent's path below it).

    A sub-agent's ``/`` is written ``_``: its ref sits beside its parent's, because git
    cannot keep a ref ``trees/write@1`` and one inside it (``trees/write@1/agent-2-0``).
    """
    return f"refs/dplan/{_ref_part(plan_id)}/trees/{_ref_part(tree).replace('/', '_')}"


def attempt_ref(plan_id: str, tree: str) -> str:
    """The same ref, named for what it is to a person after a failure: the attempt."""
    return tree_ref(plan_id, tree)


def resolution_ref(plan_id: str, subtask: str) -> str:
    """Where an operator pushes the resolution of a subtask's merge conflict; the next
    attempt (``dplan resume``) starts from it when it contains every dependency's result."""
    return f"refs/dplan/{_ref_part(plan_id)}/resolve/{_ref_part(subtask)}"


def result_branch(plan_id: str, prefix: str = DEFAULT_BRANCH_PREFIX) -> str:
    """The branch a plan's result is published to (``dplan/<plan-id>``), short name."""
    return f"{prefix}{_ref_part(plan_id)}"


class GitIdentity(_Frozen):
    """Author and committer of a workspace commit; with the commit's time and parents it
    fixes the commit id, so a retried activity makes the same commit, not a second one."""

    name: str = Field(min_length=1, max_length=200)
    email: str = Field(min_length=1, max_length=200)


class WorkspaceRef(_Frozen):
    """A tree a workflow works on: which plan and attempt it belongs to, and the commit
    it is at. Tool calls take it and return the next commit when they changed files."""

    plan_id: str
    # The attempt's key (``subtask@retries``, or ``subtask@retries/agent-turn-index`` for
    # a sub-agent): names the tree's directory on a host and its ref.
    tree: str
    head: str = Field(pattern=COMMIT_RE.pattern)
    # Who the commits are by (the agent, on behalf of the subtask).
    identity: GitIdentity


class WorkspaceSummary(_Frozen):
    """What a plan did to the workspace, in its report: where it started, the merge of
    what its completed subtasks made, and the branch that names that merge."""

    base: str
    result: str | None = None
    branch: str | None = None
    # Completed subtasks whose commits could not be merged into the result (they changed
    # the same lines as another and no subtask joined them): named, never dropped silently.
    left_out: tuple[str, ...] = ()

    @field_validator("left_out", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        """The ``temporal`` CLI prints an empty list of a workflow's result as ``null``: a
        report read back from ``temporal workflow result -o json`` must still parse."""
        return () if value is None else value


class WorkspaceOpenInput(_Frozen):
    plan_id: str
    # A branch, tag or commit the plan starts from; None: the repository's HEAD.
    requested_base: str | None = None


class WorkspaceOpenOutput(_Frozen):
    base: str = Field(pattern=COMMIT_RE.pattern)


class WorkspaceStart(_Frozen):
    """Where a subtask's tree starts, as its plan hands it over: the plan's base, or the
    merge of its dependencies' results onto it (computed by the subtask's first activity,
    so a conflict fails, or pauses, that subtask like any other failure)."""

    plan_id: str
    tree: str
    base: str = Field(pattern=COMMIT_RE.pattern)
    # (dependency subtask id, its result commit), in the plan's order; empty: ``base``.
    parents: tuple[tuple[str, str], ...] = ()
    identity: GitIdentity


class WorkspaceMergeInput(_Frozen):
    """A subtask's starting tree: its dependencies' results merged onto ``base`` in the
    plan's order, or the operator's resolution when one was pushed after a conflict."""

    plan_id: str
    subtask: str
    base: str = Field(pattern=COMMIT_RE.pattern)
    parents: tuple[tuple[str, str], ...]
    at_s: float  # workflow time: the merge commit's date
    identity: GitIdentity


class WorkspaceMergeOutput(_Frozen):
    commit: str = Field(pattern=COMMIT_RE.pattern)


class WorkspaceConflictDetails(_Frozen):
    """Why a merge failed: the files both sides changed and which subtasks changed them;
    the details of a ``WorkspaceConflict`` failure."""

    files: tuple[str, ...]
    subtasks: tuple[str, ...]
    # Where an operator can push a resolution commit for ``dplan resume`` to start from.
    resolution_ref: str = ""


class WorkspacePublishInput(_Frozen):
    """The end of a plan: its completed subtasks' commits merged onto ``base`` and the
    result branch set to that merge (also for a plan that failed part-way)."""

    plan_id: str
    base: str = Field(pattern=COMMIT_RE.pattern)
    commits: tuple[tuple[str, str], ...]  # (subtask id, result commit), plan order
    at_s: float
    identity: GitIdentity
