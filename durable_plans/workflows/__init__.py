"""Deterministic workflow code only: PlanWorkflow, SubtaskWorkflow, SessionWorkflow.

Nothing here does I/O or imports litellm; domain modules are passed through the sandbox.

The package itself imports nothing: the sandbox re-imports a workflow's module for every
new workflow run, and a package ``__init__`` that imported all three workflows would make
every SubtaskWorkflow pay for loading the other two. ``ALL_WORKFLOWS`` is built on first
use instead.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ALL_WORKFLOWS"]


def __getattr__(name: str) -> Any:
    if name == "ALL_WORKFLOWS":
        from durable_plans.workflows.plan import PlanWorkflow
        from durable_plans.workflows.session import SessionWorkflow
        from durable_plans.workflows.subtask import SubtaskWorkflow

        return [PlanWorkflow, SubtaskWorkflow, SessionWorkflow]
    raise AttributeError(f"module 'workflows' has no attribute {name!r}")
