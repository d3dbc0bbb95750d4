"""JSON Schemas of what crosses our public boundary: the plan file, the report, the inputs.

A service that starts plans without our SDK (another language, Temporal's HTTP API,
``temporal workflow start --input-file``) needs the shapes it sends and gets back in a
form its tools read. They are generated from the same pydantic models the loader and the
workflows validate against, never written by hand, and committed under ``schemas/``
(``dplan schemas`` rewrites them; a unit test fails when they are stale).

The plan file is validated field by field against :class:`~durable_plans.domain.models.Plan`
by :mod:`~durable_plans.domain.plan_loader`, which adds rules the model does not carry
(``id`` optional, id syntax, sizes). The plan schema is the model's, with those rules
written in, so a schema-valid file fails only on what no schema expresses (cycles,
unknown dependencies or agents, duplicate ids).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel

from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Plan, PlanReport
from durable_plans.domain.plan_loader import (
    ID_PATTERN,
    MAX_DEPENDENCIES,
    MAX_DESCRIPTION_CHARS,
    MAX_GOAL_CHARS,
    MAX_MODEL_CHARS,
    MAX_PARALLEL,
    MAX_SUBTASKS,
    MIN_PARALLEL,
)
from durable_plans.domain.session_contracts import SessionInput

__all__ = ["SCHEMAS", "SCHEMA_DIALECT", "render_schema", "schema_files", "write_schemas"]

SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
_ID_REGEX: Final = f"^{ID_PATTERN.pattern}$"


def _base(model: type[BaseModel], mode: str, title: str, description: str) -> dict[str, Any]:
    schema = model.model_json_schema(mode=mode)  # type: ignore[arg-type]
    return {
        "$schema": SCHEMA_DIALECT,
        "title": title,
        "description": description,
        **{k: v for k, v in schema.items() if k not in ("title", "description")},
    }


def _with_plan_rules(plan: dict[str, Any], subtask: dict[str, Any]) -> None:
    """Write the loader's rules into the Plan and Subtask schemas (in place)."""
    plan["required"] = [name for name in plan.get("required", []) if name != "id"]
    props = plan["properties"]
    # The loader reads a null id as an absent one.
    props["id"] = {
        "anyOf": [{"type": "string", "pattern": _ID_REGEX}, {"type": "null"}],
        "title": "Id",
        "description": "The plan's id; absent or null: the workflow id (or one derived from it).",
    }
    props["goal"]["maxLength"] = MAX_GOAL_CHARS
    props["max_parallel"].update(minimum=MIN_PARALLEL, maximum=MAX_PARALLEL)
    props["subtasks"].update(minItems=1, maxItems=MAX_SUBTASKS)
    sub = subtask["properties"]
    sub["id"].update(pattern=_ID_REGEX)
    sub["description"]["maxLength"] = MAX_DESCRIPTION_CHARS
    sub["agent"]["description"] = (
        "An agent name: a built-in (orchestrator, coder, architect, debug, ask) or one "
        "from the worker's agents file."
    )
    sub["depends_on"].update(maxItems=MAX_DEPENDENCIES, uniqueItems=True)
    sub["model"] = {
        "anyOf": [
            {"type": "string", "minLength": 1, "maxLength": MAX_MODEL_CHARS, "pattern": r"^\S+$"},
            {"type": "null"},
        ],
        "default": None,
        "title": "Model",
        "description": (
            "A litellm model name (e.g. openai/gpt-4o-mini) for this subtask alone; "
            "absent or null: its agent's model (the worker's DPLAN_MODEL if the agent "
            "names none)."
        ),
    }
    sub["depends_on"]["items"]["pattern"] = _ID_REGEX


def plan_schema() -> dict[str, Any]:
    """The plan file, as ``dplan run`` and ``temporal workflow start --input-file`` take it."""
    schema = _base(
        Plan,
        "validation",
        "durable-plans plan file",
        "A plan: subtasks with dependencies, each run by an agent. The input of the "
        "PlanWorkflow workflow, as is.",
    )
    defs = schema["$defs"]
    _with_plan_rules(schema, defs["Subtask"])
    return schema


def plan_input_schema() -> dict[str, Any]:
    """The wrapper ``dplan run`` sends: the plan plus the agent catalog and carried state."""
    schema = _base(
        PlanInput,
        "validation",
        "durable-plans PlanWorkflow input (wrapper)",
        "The alternative PlanWorkflow input: {'plan': <plan file>, 'agents': [...]}; the "
        "other fields are state carried across continue-as-new.",
    )
    defs = schema["$defs"]
    _with_plan_rules(defs["Plan"], defs["Subtask"])
    return schema


def plan_report_schema() -> dict[str, Any]:
    """What PlanWorkflow returns, ``dplan run --json`` prints and ``PlanFailed`` carries."""
    return _base(
        PlanReport,
        "serialization",
        "durable-plans plan report",
        "The result of PlanWorkflow (and the details of its PlanFailed failure): the "
        "status of the plan and of every subtask, with counts that add up, usage and "
        "duration.",
    )


def session_input_schema() -> dict[str, Any]:
    """The input of SessionWorkflow (a conversation outside plans)."""
    return _base(
        SessionInput,
        "validation",
        "durable-plans SessionWorkflow input",
        "Starts a conversation: its session id, first agent and budget; the other fields "
        "are state carried across continue-as-new.",
    )


# File name under schemas/ -> its generator, in the order they are documented.
SCHEMAS: Final[Mapping[str, Callable[[], dict[str, Any]]]] = {
    "plan.schema.json": plan_schema,
    "plan-input.schema.json": plan_input_schema,
    "plan-report.schema.json": plan_report_schema,
    "session-input.schema.json": session_input_schema,
}


def render_schema(schema: Mapping[str, Any]) -> str:
    """Stable text: the same models always give the same bytes (diffable, testable)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def schema_files() -> dict[str, str]:
    """Every committed schema file's name and its expected content."""
    return {name: render_schema(build()) for name, build in SCHEMAS.items()}


def write_schemas(directory: Path) -> list[Path]:
    """Write every schema into ``directory`` (created if needed); the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schema_files().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
