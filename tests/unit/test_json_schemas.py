"""The committed JSON Schemas (schemas/) are current and describe what we accept and emit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from durable_plans._errors import InvalidInput
from durable_plans.cli.main import main
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.inputs import plan_id_for_workflow, plan_input_from_value
from durable_plans.domain.json_schemas import SCHEMAS, schema_files
from durable_plans.domain.models import ErrorInfo, PlanReport, SubtaskResult, SubtaskStatus, Usage
from durable_plans.domain.plan_loader import load_plan_file

REPO = Path(__file__).resolve().parents[2]
SCHEMA_DIR = REPO / "schemas"
EXAMPLES = sorted((REPO / "examples").glob("*.json"))


def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMA_DIR / name).read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_committed_schemas_are_current() -> None:
    """Fails when a model changed and `dplan schemas` was not run (then commit schemas/)."""
    expected = schema_files()
    committed = {p.name: p.read_text(encoding="utf-8") for p in SCHEMA_DIR.glob("*.json")}
    assert sorted(committed) == sorted(expected)
    stale = [name for name, text in expected.items() if committed[name] != text]
    assert not stale, f"stale: {stale}; regenerate with `python -m durable_plans.cli schemas`"


def test_schemas_check_command_names_a_stale_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schemas", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(SCHEMAS)
    assert main(["schemas", "--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "plan.schema.json").write_text("{}\n")
    capsys.readouterr()
    assert main(["schemas", "--out", str(tmp_path), "--check"]) == 1
    assert "plan.schema.json: stale" in capsys.readouterr().out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_plans_validate_against_the_plan_schema(path: Path) -> None:
    assert EXAMPLES
    errors = list(validator("plan.schema.json").iter_errors(json.loads(path.read_text())))
    assert errors == []
    # The loader agrees (with the agents the example is written for).
    load_plan_file(path, known_agents={"orchestrator", "coder", "architect", "reviewer"})


@pytest.mark.parametrize(
    "plan",
    [
        {"subtasks": []},
        {"subtasks": [{"id": "a", "description": "d"}], "urgency": 1},
        {"subtasks": [{"id": "a", "description": 5}]},
        {"subtasks": [{"id": "a b", "description": "d"}]},
        {"subtasks": [{"id": "a", "description": "d"}], "max_parallel": 0},
        {"subtasks": [{"id": "a", "description": "d", "depends_on": ["b", "b"]}]},
        {"goal": "no subtasks"},
    ],
)
def test_the_plan_schema_rejects_what_the_loader_rejects(plan: dict[str, Any]) -> None:
    assert not validator("plan.schema.json").is_valid(plan)
    with pytest.raises(InvalidInput):
        plan_input_from_value(plan, workflow_id="wf")


def test_a_plan_without_id_validates_and_takes_the_workflow_id() -> None:
    plan = {"goal": "g", "subtasks": [{"id": "a", "description": "d"}]}
    assert validator("plan.schema.json").is_valid(plan)
    assert validator("plan.schema.json").is_valid({**plan, "id": None})
    assert plan_input_from_value(plan, workflow_id="wf-1").plan.id == "wf-1"
    # A workflow id that is no valid plan id gives a derived, stable one.
    derived = plan_id_for_workflow("team a/plan 7")
    assert derived == plan_id_for_workflow("team a/plan 7") and derived.startswith("plan-")
    assert plan_input_from_value(plan, workflow_id="team a/plan 7").plan.id == derived


def test_the_wrapper_dplan_run_sends_matches_its_schema_and_decodes_back() -> None:
    plan = load_plan_file(REPO / "examples" / "weather_app.json")
    wrapper = PlanInput(plan=plan).model_dump(mode="json")
    assert validator("plan-input.schema.json").is_valid(wrapper)
    assert plan_input_from_value(wrapper, workflow_id="other") == PlanInput(plan=plan)


def test_reports_validate_against_the_report_schema() -> None:
    report = PlanReport.build(
        "p",
        [
            SubtaskResult(
                id="a",
                status=SubtaskStatus.COMPLETED,
                agent="coder",
                result="done",
                llm_calls=2,
                usage=Usage(prompt_tokens=3, completion_tokens=4, cost_usd=0.5),
            ),
            SubtaskResult(
                id="b",
                status=SubtaskStatus.FAILED,
                agent="coder",
                error=ErrorInfo(type="BadRequest", message="no"),
            ),
            SubtaskResult(
                id="c",
                status=SubtaskStatus.SKIPPED,
                agent="ask",
                error=ErrorInfo(type="DependencyFailed", message="b failed"),
            ),
        ],
        duration_s=1.5,
    )
    check = validator("plan-report.schema.json")
    assert list(check.iter_errors(report.model_dump(mode="json"))) == []
    assert not check.is_valid({**report.model_dump(mode="json"), "status": "done"})
