"""The workspace in the report a person reads: each subtask's commit, the base, the result
branch, and the git commands that show it."""

from __future__ import annotations

import shlex
from pathlib import Path

from durable_plans.cli.progress import render_report
from durable_plans.cli.workspace_lines import workspace_hints, workspace_line
from durable_plans.domain.models import ErrorInfo, PlanReport, SubtaskResult, SubtaskStatus
from durable_plans.domain.workspace_refs import WorkspaceSummary

BASE = "b" * 40
WRITE = "1234567" + "a" * 33
FAILED = "7654321" + "c" * 33
RESULT = "abcdef0" + "d" * 33


def _report(workspace: WorkspaceSummary | None, *, finished: bool = True) -> PlanReport:
    rows = [
        SubtaskResult(
            id="write", status=SubtaskStatus.COMPLETED, agent="coder", result="ok", commit=WRITE
        ),
        SubtaskResult(
            id="broken",
            status=SubtaskStatus.FAILED if finished else SubtaskStatus.RUNNING,
            agent="coder",
            error=ErrorInfo(type="BadRequest", message="no") if finished else None,
            commit=FAILED if finished else None,
        ),
    ]
    return PlanReport.build("p-1", rows, workspace=workspace)


def test_a_finished_plan_names_its_base_result_branch_and_each_subtask_commit() -> None:
    summary = WorkspaceSummary(base=BASE, result=RESULT, branch="dplan/p-1")
    text = render_report(_report(summary))

    header = next(line for line in text.splitlines() if "subtask" in line)
    assert "commit" in header
    write_row = next(line for line in text.splitlines() if " write " in line)
    broken_row = next(line for line in text.splitlines() if " broken " in line)
    assert "1234567" in write_row and "1234567a" not in write_row  # git's short form
    assert "7654321" in broken_row
    assert "workspace: base bbbbbbb → result abcdef0 on dplan/p-1" in text


def test_what_could_not_be_merged_is_named() -> None:
    summary = WorkspaceSummary(base=BASE, result=RESULT, branch="dplan/p-1", left_out=("x",))
    assert workspace_line(_report(summary)) == (
        "workspace: base bbbbbbb → result abcdef0 on dplan/p-1 · left out (their changes "
        "conflict with the rest): x"
    )


def test_before_the_end_only_the_base_is_known() -> None:
    line = workspace_line(_report(WorkspaceSummary(base=BASE), finished=False))
    assert line == "workspace: base bbbbbbb · the result branch is published when the plan ends"
    finished = workspace_line(_report(WorkspaceSummary(base=BASE)))
    assert finished == (
        "workspace: base bbbbbbb · no result branch was published (see the worker's log)"
    )
    assert workspace_hints(_report(WorkspaceSummary(base=BASE)), Path("/w"), remote=False) == []


def test_a_plan_without_a_git_workspace_renders_as_before() -> None:
    rows = [SubtaskResult(id="a", status=SubtaskStatus.COMPLETED, agent="coder", result="ok")]
    text = render_report(PlanReport.build("p-0", rows))
    assert "commit" not in text and "workspace:" not in text
    assert workspace_line(PlanReport.build("p-0", rows)) is None


def test_the_hints_show_the_branch_and_the_diff_from_the_base(tmp_path: Path) -> None:
    summary = WorkspaceSummary(base=BASE, result=RESULT, branch="dplan/p-1")
    repo = tmp_path / "my work"
    hints = workspace_hints(_report(summary), repo, remote=False)
    quoted = shlex.quote(str(repo.resolve()))
    assert hints == [
        "to look at what the plan did:",
        f"  git -C {quoted} log --graph --oneline dplan/p-1",
        f"  git -C {quoted} diff {BASE[:12]}..dplan/p-1",
    ]


def test_with_a_remote_the_branch_is_fetched_first_naming_the_variable_not_the_url() -> None:
    summary = WorkspaceSummary(base=BASE, result=RESULT, branch="dplan/p-1")
    hints = workspace_hints(_report(summary), Path("/w"), remote=True)
    assert hints[1] == (
        '  git -C /w fetch "$DPLAN_WORKSPACE_REMOTE" +refs/heads/dplan/p-1:refs/heads/dplan/p-1'
    )
    assert hints[2:] == [
        "  git -C /w log --graph --oneline dplan/p-1",
        f"  git -C /w diff {BASE[:12]}..dplan/p-1",
    ]
