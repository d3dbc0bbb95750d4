"""Deterministic workflow code only: PlanWorkflow, SubtaskWorkflow, SessionWorkflow.

Nothing here does I/O or imports litellm; domain modules are passed through the sandbox.
"""

from __future__ import annotations

from workflows.plan import PlanWorkflow
from workflows.session import SessionWorkflow
from workflows.subtask import SubtaskWorkflow

ALL_WORKFLOWS: list[type] = [PlanWorkflow, SubtaskWorkflow, SessionWorkflow]

__all__ = ["ALL_WORKFLOWS", "PlanWorkflow", "SessionWorkflow", "SubtaskWorkflow"]
