"""The workflows' pure workspace decisions: which commits a plan's result merges, where a
subtask's tree starts, who its commits are by."""

from __future__ import annotations

from durable_plans.domain.models import ErrorInfo, Plan, Subtask, SubtaskResult, SubtaskStatus
from durable_plans.domain.workspace_refs import GitIdentity, WorkspaceRef, WorkspaceSummary
from durable_plans.workflows.plan_workspace import (
    completed_commits,
    moved_to,
    result_commits,
    subagent_start,
    subtask_identity,
    subtask_tree,
)

DIAMOND = Plan(
    id="p",
    goal="g",
    subtasks=(
        Subtask(id="a", description="a"),
        Subtask(id="b", description="b", depends_on=("a",)),
        Subtask(id="c", description="c", depends_on=("a",)),
        Subtask(id="d", description="d", depends_on=("c", "b")),
    ),
)


def _done(sid: str, commit: str | None = None) -> SubtaskResult:
    return SubtaskResult(
        id=sid, status=SubtaskStatus.COMPLETED, agent="coder", result="ok", commit=commit
    )


def _failed(sid: str, commit: str) -> SubtaskResult:
    error = ErrorInfo(type="BadRequest", message="no")
    return SubtaskResult(
        id=sid, status=SubtaskStatus.FAILED, agent="coder", error=error, commit=commit
    )


def test_the_result_merges_only_what_no_completed_dependent_holds() -> None:
    all_done = {s: _done(s, s * 40) for s in "abcd"}
    assert result_commits(DIAMOND, all_done) == (("d", "d" * 40),)
    # The join failed: the two sides are the result, in the plan's order.
    joined_failed = {**all_done, "d": _failed("d", "e" * 40)}
    assert result_commits(DIAMOND, joined_failed) == (("b", "b" * 40), ("c", "c" * 40))
    # A dependent that completed without a commit (before the workspace was in git) holds
    # nothing: its dependency's commit is merged itself.
    no_commit = {"a": _done("a", "a" * 40), "b": _done("b"), "c": _failed("c", "e" * 40)}
    assert result_commits(DIAMOND, no_commit) == (("a", "a" * 40),)


def test_a_join_gets_its_completed_dependencies_in_the_plans_order() -> None:
    results = {s: _done(s, s * 40) for s in "abc"}
    deps = frozenset(DIAMOND.subtask("d").depends_on)
    assert completed_commits(DIAMOND, results, deps) == (("b", "b" * 40), ("c", "c" * 40))


def test_trees_are_named_per_plan_execution_and_attempt() -> None:
    assert subtask_tree("p.3fa9c01d2e", "write", 0) == "3fa9c01d2e/write"
    assert subtask_tree("my.plan.3fa9c01d2e", "write", 2) == "3fa9c01d2e/write~2"


def test_identities_stay_valid_whatever_the_ids_lengths() -> None:
    assert subtask_identity("coder", "w", "p") == GitIdentity(
        name="coder (dplan)", email="w@p.dplan"
    )
    long = subtask_identity("coder", "s" * 128, "p" * 128)
    assert len(long.email) <= 200
    parent = WorkspaceRef(plan_id="p", tree="k/w", head="1" * 40, identity=long)
    child = subagent_start(parent, "coder-1-0", "debug")
    assert child.tree == "k/w/coder-1-0" and child.base == "1" * 40 and child.parents == ()
    assert child.identity.name == "debug (dplan)" and len(child.identity.email) <= 200


def test_a_call_moves_the_head_only_when_it_made_a_commit() -> None:
    who = GitIdentity(name="n", email="e")
    ref = WorkspaceRef(plan_id="p", tree="k/w", head="1" * 40, identity=who)
    assert moved_to(ref, None) is ref
    assert moved_to(ref, "2" * 40) == ref.model_copy(update={"head": "2" * 40})
    assert moved_to(None, "2" * 40) is None


def test_a_summary_read_back_from_the_temporal_cli_parses() -> None:
    """`temporal workflow result -o json` prints an empty left_out as null."""
    read = WorkspaceSummary.model_validate({"base": "b" * 40, "left_out": None})
    assert read.left_out == ()
