"""A plan's work as a person finds it: the result branch in the workspace repository, its
history the plan's DAG, the checkout untouched, and `dplan status` saying where it is and
printing git commands that work as printed."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
from pathlib import Path

import pytest

from durable_plans.cli.main import main
from durable_plans.domain.models import Plan, PlanStatus, Subtask
from tests.integration.conftest import Harness
from tests.integration.plans import run_plan
from tests.integration.replay import assert_replays
from tests.integration.workspace_files import git, result_paths, result_text

pytestmark = pytest.mark.integration


def _write(path: str, content: str) -> str:
    return f"<<write_file {json.dumps({'path': path, 'content': content})}>>"


def _shell(line: str) -> str:
    """A printed command line, run as a person would paste it (no shell features used)."""
    return subprocess.run(shlex.split(line), capture_output=True, text=True, check=True).stdout


def _dplan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``dplan ARGS`` in this process against the harness's server."""
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().out


async def test_the_result_branch_is_the_plans_dag_and_status_says_how_to_look(
    harness: Harness, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = harness.settings.workspace
    plan = Plan(
        id=f"dag-{harness.task_queue[-8:]}",
        goal="a diamond of writers",
        subtasks=(
            Subtask(id="api", description="Write the API " + _write("api.txt", "api\n")),
            Subtask(id="cli", description="CLI " + _write("cli.txt", "cli\n"), depends_on=("api",)),
            Subtask(id="doc", description="Doc " + _write("doc.txt", "doc\n"), depends_on=("api",)),
            Subtask(
                id="release",
                description="Release " + _write("CHANGES.txt", "v2\n"),
                depends_on=("cli", "doc"),
            ),
        ),
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is None and report.status is PlanStatus.COMPLETED

    head = git(workspace, "rev-parse", "HEAD").stdout.strip()
    ws = report.workspace
    assert ws is not None and ws.base == head  # the repository's HEAD when the plan started
    assert ws.branch == f"dplan/{plan.id}" and ws.left_out == ()
    rows = {r.id: r for r in report.subtasks}
    assert ws.result == rows["release"].commit  # the join holds everything before it
    assert result_paths(workspace, plan.id) == [
        "CHANGES.txt",
        "README.md",
        "api.txt",
        "cli.txt",
        "doc.txt",
    ]
    assert result_text(workspace, plan.id, "doc.txt") == "doc\n"
    # The branch's history is the plan's DAG: api, then cli and doc side by side, merged
    # by release before its own write; every commit by the agent, on behalf of a subtask.
    log = git(workspace, "log", "--format=%H %P|%an <%ae>|%s", ws.branch).stdout.splitlines()
    by_commit = {line.split(" ", 1)[0]: line for line in log}
    merges = [line for line in log if len(line.split("|")[0].split()) == 3]
    assert len(merges) == 1 and merges[0].endswith("|release: merge doc")
    assert set(merges[0].split("|")[0].split()[1:]) == {rows["cli"].commit, rows["doc"].commit}
    assert {rows[s].commit for s in rows} <= set(by_commit)
    assert f"coder (dplan) <release@{plan.id}.dplan>" in by_commit[str(ws.result)]
    # The checkout, its index and HEAD are as they were: nothing of the plan's in them.
    assert git(workspace, "status", "--porcelain").stdout == ""
    assert not (workspace / "api.txt").exists()

    monkeypatch.setenv("TEMPORAL_ADDRESS", harness.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", harness.client.namespace)
    monkeypatch.setenv("DPLAN_WORKSPACE", str(workspace))
    monkeypatch.delenv("DPLAN_WORKSPACE_REMOTE", raising=False)
    code, out = await asyncio.to_thread(_dplan, capsys, "status", plan.id)
    assert code == 0, out
    assert f"workspace: base {ws.base[:7]} → result {str(ws.result)[:7]} on {ws.branch}" in out
    assert f" {str(rows['cli'].commit)[:7]} " in out  # each subtask's commit, in its row
    hints = out.split("to look at what the plan did:\n", 1)[1].splitlines()
    assert hints[0].strip().startswith("git -C ") and "log --graph --oneline" in hints[0]
    # The printed commands work as printed, and show the plan's work.
    graph, diff = [await asyncio.to_thread(_shell, line) for line in hints[:2]]
    assert "release: merge doc" in graph
    assert "+api" in diff and "+v2" in diff and "README" not in diff
    assert await assert_replays(harness.client, [plan.id]) == 1


def test_helpers_read_a_missing_file_as_none(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "f").write_text("x\n")
    git(repo, "add", "f")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "one")
    git(repo, "branch", "dplan/p")
    assert result_text(repo, "p", "f") == "x\n"
    assert result_text(repo, "p", "missing") is None
    assert result_paths(repo, "p") == ["f"]
