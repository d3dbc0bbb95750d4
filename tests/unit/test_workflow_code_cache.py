"""Workflow modules are compiled once per process however often the sandbox imports them."""

from __future__ import annotations

import sys

import durable_plans.workflows as workflows_package
from durable_plans import workflow_code_cache
from durable_plans.workflow_code_cache import WorkflowCodeCache


def test_a_workflow_module_compiles_once() -> None:
    path = list(workflows_package.__path__)
    first = WorkflowCodeCache.find_spec("durable_plans.workflows.subtask", path)
    again = WorkflowCodeCache.find_spec("durable_plans.workflows.subtask", path)
    assert first is not None and again is not None
    assert first.loader is not again.loader  # a fresh spec and loader per import, as usual
    code = first.loader.get_code("durable_plans.workflows.subtask")  # type: ignore[union-attr]
    assert code is again.loader.get_code("durable_plans.workflows.subtask")  # type: ignore[union-attr]
    assert code.co_filename.endswith("subtask.py")


def test_only_our_workflow_modules_are_handled() -> None:
    assert WorkflowCodeCache.find_spec("json") is None
    assert WorkflowCodeCache.find_spec("durable_plans.domain.models") is None
    assert WorkflowCodeCache.find_spec("durable_plans.workflowsx") is None


def test_install_is_idempotent_and_first() -> None:
    workflow_code_cache.install()
    workflow_code_cache.install()
    assert sys.meta_path[0] is WorkflowCodeCache
    assert sys.meta_path.count(WorkflowCodeCache) == 1
