"""`dplan validate`: exit codes, output on stdout/stderr, and the --json shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from durable_plans.cli._common import Exit
from durable_plans.cli.main import main

REPO = Path(__file__).resolve().parents[2]
WEATHER = "examples/weather_app.json"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    # Output names the path as given; relative paths keep the expected lines short.
    monkeypatch.chdir(REPO)


def test_exit_codes_are_the_documented_ones() -> None:
    assert (Exit.OK, Exit.INVALID) == (0, 2)


def test_valid_plan_prints_one_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", WEATHER]) == 0
    out, err = capsys.readouterr()
    assert out == (
        "ok: examples/weather_app.json: plan 'weather-app', 7 subtasks, critical path 4\n"
    )
    assert err == ""


def test_invalid_plan_lists_problems_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    path = "examples/invalid/many_problems.json"
    assert main(["validate", path]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines[0] == f"invalid plan: {path}"
    assert len(lines) == 9
    assert all(line.startswith(f"{path}: ") for line in lines[1:])
    assert f"{path}: subtasks[2] (id 'ui'): unknown dependency 'api'" in lines


def test_malformed_file_is_invalid_with_its_position(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "examples/invalid/malformed.json"]) == 2
    err = capsys.readouterr().err
    assert "invalid JSON at line 3, column 3" in err


def test_missing_file_is_invalid(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "absent.json"
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"invalid plan: {path}",
        f"{path}: no such file",
    ]


def test_plan_without_id_says_it_is_generated(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "noid.yaml"
    path.write_text("subtasks:\n  - {id: a, description: one}\n  - {id: b, description: two}\n")
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert out == f"ok: {path}: plan (id generated at run time), 2 subtasks, critical path 1\n"


def test_json_output_for_a_valid_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", WEATHER, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "valid": True,
        "problems": [],
        "plan_id": "weather-app",
        "subtasks": 7,
    }


def test_json_output_for_an_invalid_plan(capsys: pytest.CaptureFixture[str]) -> None:
    path = "examples/invalid/cycle.json"
    assert main(["validate", "--json", path]) == 2
    out, err = capsys.readouterr()
    assert err == ""
    assert json.loads(out) == {
        "valid": False,
        "problems": [f"{path}: cycle: schema -> migrations -> schema"],
        "plan_id": "cyclic",
        "subtasks": 3,
    }


def test_json_output_when_the_file_cannot_be_parsed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--json", "examples/invalid/malformed.json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    assert report["plan_id"] is None
    assert report["subtasks"] == 0
    assert len(report["problems"]) == 1


@pytest.mark.parametrize(
    "argv", [[], ["validate"], ["frobnicate"], ["validate", WEATHER, "--bogus"]]
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "usage: dplan" in capsys.readouterr().err


def test_console_script_and_module_entry_point() -> None:
    dplan = Path(sys.executable).with_name("dplan")
    assert dplan.exists(), f"console script not installed next to {sys.executable}"
    ok = subprocess.run(
        [str(dplan), "validate", WEATHER], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert (ok.returncode, ok.stdout) == (
        0,
        "ok: examples/weather_app.json: plan 'weather-app', 7 subtasks, critical path 4\n",
    )
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_plans.cli",
            "validate",
            "examples/invalid/unknown_dependency.yaml",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        "invalid plan: examples/invalid/unknown_dependency.yaml",
        "examples/invalid/unknown_dependency.yaml: subtasks[0] (id 'settings'): "
        "unknown dependency 'theme'",
    ]


def test_agents_from_dplan_agents_are_known_as_in_a_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = "examples/orchestration_plan.json"  # its review step uses the file's reviewer
    monkeypatch.delenv("DPLAN_AGENTS", raising=False)
    assert main(["validate", plan]) == 2
    assert "unknown agent 'reviewer'" in capsys.readouterr().err
    monkeypatch.setenv("DPLAN_AGENTS", "examples/agents.toml")
    assert main(["validate", plan]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {plan}: ")


def test_a_bad_agents_file_is_reported_as_such(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text("[agents.reviewer]\ntools = ['list_dir']\n")  # a new agent, no prompt
    monkeypatch.setenv("DPLAN_AGENTS", str(agents))
    assert main(["validate", WEATHER]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"invalid agents file (DPLAN_AGENTS): {agents}"
    assert lines[1:] and all(line.startswith(f"{agents}") for line in lines[1:])
    assert main(["validate", "--json", WEATHER]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False and report["problems"] == lines[1:]
