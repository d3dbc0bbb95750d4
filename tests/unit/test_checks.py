"""Checks (domain/checks.py): what the plan and agents files accept, one line per problem;
how a command line is split; what a report with a failed plan-level check says; and the
activity's runner and throwaway copy on a real process and a real repository."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from durable_plans._errors import AgentsFileError, PlanValidationError
from durable_plans.activities.checks import _run_one, throwaway_copy
from durable_plans.activities.conversation import model_written_checks
from durable_plans.activities.git_workspace import GitWorkspace
from durable_plans.cli.progress import render_report
from durable_plans.domain.agents_loader import parse_agents_data
from durable_plans.domain.checks import (
    CheckRun,
    feedback_message,
    normalize_checks,
)
from durable_plans.domain.models import (
    ErrorInfo,
    PlanReport,
    PlanStatus,
    Subtask,
    SubtaskResult,
    SubtaskStatus,
)
from durable_plans.domain.plan_loader import plan_from_data
from durable_plans.settings import Settings
from durable_plans.ui.views import report_json, result_json
from tests import gitrepos

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "plan.schema.json"


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(PlanValidationError) as err:
        plan_from_data(data)
    return list(err.value.problems)


def test_commands_are_argv_lists_or_lines_split_as_a_shell_would() -> None:
    assert normalize_checks(["python -m pytest -q 'tests/a b.py'", ["make", "test"]]) == (
        ("python", "-m", "pytest", "-q", "tests/a b.py"),
        ("make", "test"),
    )
    assert normalize_checks("ruff check .") == (("ruff", "check", "."),)
    # An argv list is taken as written: its elements are arguments, not shell syntax.
    assert normalize_checks([["python", "-c", "print('a|b')"]]) == (
        ("python", "-c", "print('a|b')"),
    )
    assert normalize_checks(None) is None


def test_a_plan_names_every_bad_check_on_a_line_of_its_own() -> None:
    problems = _problems(
        {
            "id": "p",
            "check": ["pytest | tee log", 5],
            "check_rounds": 0,
            "subtasks": [
                {"id": "a", "description": "d", "check": "make && make install"},
                {"id": "b", "description": "d", "check": ["x > out", ""], "check_rounds": "2"},
                {"id": "c", "description": "d", "check": ["echo 'unclosed"]},
            ],
        }
    )
    assert problems[0].startswith("check[0]: shell operator '|' in '|'")
    assert "not run by a shell" in problems[0]
    assert problems[1] == (
        "check[1]: must be a command line (a string) or an argv list of strings, got int"
    )
    assert problems[2] == "check_rounds: must be between 1 and 20, got 0"
    assert problems[3].startswith("subtasks[0] (id 'a'): check[0]: shell operator '&&'")
    assert problems[4].startswith("subtasks[1] (id 'b'): check[0]: shell operator '>'")
    assert problems[5] == "subtasks[1] (id 'b'): check[1]: is empty (name a program to run)"
    assert problems[6] == "subtasks[1] (id 'b'): check_rounds: must be a whole number, got str"
    assert problems[7].startswith("subtasks[2] (id 'c'): check[0]: cannot be split")
    assert len(problems) == 8


def test_a_valid_plan_keeps_its_checks_as_argv() -> None:
    data = {
        "id": "p",
        "check": ["python -m unittest"],
        "check_rounds": 2,
        "subtasks": [{"id": "a", "description": "d", "check": [["python", "-V"]]}],
    }
    plan = plan_from_data(data)
    assert plan.check == (("python", "-m", "unittest"),) and plan.check_rounds == 2
    assert plan.subtasks[0].check == (("python", "-V"),) and plan.subtasks[0].check_rounds is None
    assert Draft202012Validator(json.loads(SCHEMA.read_text())).is_valid(data)
    # Programs send models, not files: the model splits a line the same way.
    assert Subtask(id="a", description="d", check=["make test"]).check == (("make", "test"),)


def test_the_agents_file_takes_a_check_and_names_its_problems() -> None:
    catalog = parse_agents_data(
        {"agents": {"debug": {"check": ["python -m unittest"], "check_rounds": 5}}},
        source="agents.toml",
    )
    spec = catalog.get("debug")
    assert spec.check == (("python", "-m", "unittest"),) and spec.check_rounds == 5
    with pytest.raises(AgentsFileError) as err:
        parse_agents_data(
            {"agents": {"debug": {"check": ["a; b"], "check_rounds": 99}}}, source="agents.toml"
        )
    lines = list(err.value.problems)
    assert lines[0].startswith("agents.toml: agents.debug: check[0]: shell operator ';' in 'a;'")
    assert lines[1] == "agents.toml: agents.debug: check_rounds: must be between 1 and 20, got 99"
    assert len(lines) == 2


def test_a_failed_plan_level_check_fails_a_report_whose_subtasks_completed() -> None:
    row = SubtaskResult(id="a", status=SubtaskStatus.COMPLETED, agent="coder", result="ok")
    run = CheckRun(argv=("make", "test"), exit_code=2, output="boom", duration_s=0.1)
    error = ErrorInfo(type="CheckFailed", message="check `make test` exited with code 2")
    report = PlanReport.build("p", [row], checks=(run,), error=error)
    assert report.status is PlanStatus.FAILED and report.counts.completed == 1
    assert PlanReport.build("p", [row], checks=(run,)).status is PlanStatus.COMPLETED
    assert PlanReport.model_validate(report.model_dump(mode="json")) == report


def test_the_model_is_told_which_check_failed_its_code_and_output() -> None:
    run = CheckRun(argv=("python", "-m", "unittest"), exit_code=1, output="FAILED (failures=1)")
    text = feedback_message(run, rounds_left=2)
    assert "`python -m unittest` exited with code 1" in text
    assert "FAILED (failures=1)" in text and "2 more failing round(s)" in text


async def test_the_runner_gives_the_exit_code_and_the_output_tail(tmp_path: Path) -> None:
    settings = Settings()
    script = "import sys; print('x' * 20000); print('the end'); sys.exit(3)"
    out = await _run_one([Path(sys.executable).name, "-c", script], tmp_path, 30, settings)
    assert out.exit_code == 3 and not out.timed_out
    assert out.output.rstrip().endswith("the end") and len(out.output) < 5000
    slow = await _run_one(["sleep", "30"], tmp_path, 0.5, settings)
    assert slow.timed_out and slow.duration_s < 10
    missing = await _run_one(["no-such-program-here"], tmp_path, 5, settings)
    assert missing.exit_code == 127


def test_the_throwaway_copy_is_the_commit_and_is_removed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    gitrepos.git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    gitrepos.git(repo, "add", "a.txt")
    gitrepos.git(repo, "commit", "-qm", "a")
    commit = gitrepos.git(repo, "rev-parse", "HEAD").strip()
    (repo / "a.txt").write_text("dirty\n")  # the checkout's state is not the commit's
    git = GitWorkspace(repo, tmp_path / "state")
    with throwaway_copy(git, "p", commit) as tree:
        assert (tree / "a.txt").read_text() == "a\n"
        (tree / "made-by-a-check").write_text("x")
    assert not tree.exists()
    assert (repo / "a.txt").read_text() == "dirty\n"
    assert not (repo / "made-by-a-check").exists()


def test_the_report_shows_every_check_run_and_a_failed_plan_check() -> None:
    runs = (
        CheckRun(argv=("python", "-m", "unittest"), exit_code=1, output="x", duration_s=0.4),
        CheckRun(argv=("python", "-m", "unittest"), exit_code=0, round=2, duration_s=0.3),
    )
    row = SubtaskResult(
        id="fix", status=SubtaskStatus.COMPLETED, agent="debug", result="ok", checks=runs
    )
    error = ErrorInfo(type="CheckFailed", message="check `make test` exited with code 2")
    plan_run = CheckRun(argv=("make", "test"), exit_code=2)
    text = render_report(PlanReport.build("p", [row], checks=(plan_run,), error=error))
    assert "✗ fix check (round 1): python -m unittest → exit 1 in 0.4s" in text
    assert "✓ fix check (round 2): python -m unittest → exit 0 in 0.3s" in text
    assert "✗ plan check (round 1): make test → exit 2" in text
    assert "✗ plan failed: CheckFailed: check `make test` exited with code 2" in text


def test_a_plan_the_model_writes_cannot_name_checks() -> None:
    plan = plan_from_data(
        {
            "id": "p",
            "check": ["make test"],
            "subtasks": [
                {"id": "a", "description": "d", "check": ["rm -rf /"]},
                {"id": "b", "description": "d"},
            ],
        }
    )
    assert model_written_checks(plan) == [
        "check: a plan made by create_plan cannot name check commands (the agents file's apply)",
        "subtasks[0] (id 'a'): check: a plan made by create_plan cannot name check commands "
        "(the agents file's apply)",
    ]
    assert model_written_checks(plan.model_copy(update={"check": None, "subtasks": ()})) == []


def test_the_page_gets_each_check_run_with_its_output_scrubbed() -> None:
    key = "sk-" + "a1b2c3d4" * 6
    run = CheckRun(argv=("make", "test"), exit_code=2, output=f"leaked {key}", duration_s=0.2)
    row = SubtaskResult(
        id="a", status=SubtaskStatus.COMPLETED, agent="coder", result="ok", checks=(run,)
    )
    [shown] = result_json(row)["checks"]
    assert shown["argv"] == ["make", "test"] and shown["exit_code"] == 2
    assert key not in shown["output"] and shown["output"].startswith("leaked ")
    error = ErrorInfo(type="CheckFailed", message="check `make test` exited with code 2")
    page = report_json(PlanReport.build("p", [row], checks=(run,), error=error))
    assert page["error"]["type"] == "CheckFailed" and len(page["checks"]) == 1
