"""The custom search attributes plans and subtasks carry, defined once.

Temporal's visibility store indexes these, so ``temporal workflow list --query
'DplanStatus="failed"'``, Temporal Web's filters and ``dplan list`` find plans by status,
tenant, goal, progress, tokens or cost. Every name is prefixed ``Dplan`` so that it cannot clash
with another application's attributes in a shared namespace.

An attribute must be registered on the namespace before a workflow may set it (an upsert
of an unknown one fails the workflow task). The embedded dev server, the tests' dev server
and ``dplan setup`` register ``ALL``; the worker checks which are there and tells its
workflows (``workflows.visibility``), which skip their upserts when any is missing.

Pure and passed through the workflow sandbox: workflows import the keys from here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey

__all__ = [
    "AGENT",
    "ALL",
    "COMPLETED",
    "COST_USD",
    "FAILED",
    "GOAL",
    "PAUSED_MEMO",
    "PLAN_ATTRIBUTES",
    "PLAN_ID",
    "STATUS",
    "SUBTASK_ATTRIBUTES",
    "TENANT",
    "TOKENS",
    "VisibilityStatus",
    "dev_server_args",
    "missing_from",
]

PLAN_ID = SearchAttributeKey.for_keyword("DplanPlanId")
"""The plan's id, on the PlanWorkflow and on every SubtaskWorkflow it starts."""

STATUS = SearchAttributeKey.for_keyword("DplanStatus")
"""A ``VisibilityStatus`` value; exact match, e.g. ``DplanStatus="failed"``."""

GOAL = SearchAttributeKey.for_text("DplanGoal")
"""The goal, scrubbed of secrets and shortened; full-text, e.g. ``DplanGoal="weather"``."""

COMPLETED = SearchAttributeKey.for_int("DplanCompleted")
FAILED = SearchAttributeKey.for_int("DplanFailed")
TOKENS = SearchAttributeKey.for_int("DplanTokens")
COST_USD = SearchAttributeKey.for_float("DplanCostUsd")

TENANT = SearchAttributeKey.for_keyword("DplanTenant")
"""The plan's ``tenant`` (also its fairness key); set only on plans that have one, e.g.
``DplanTenant="team-a"``."""

AGENT = SearchAttributeKey.for_keyword("DplanAgent")
"""The agent running a SubtaskWorkflow."""

PLAN_ATTRIBUTES: tuple[SearchAttributeKey[Any], ...] = (
    PLAN_ID,
    STATUS,
    GOAL,
    COMPLETED,
    FAILED,
    TOKENS,
    COST_USD,
    TENANT,
)
SUBTASK_ATTRIBUTES: tuple[SearchAttributeKey[Any], ...] = (PLAN_ID, AGENT)

# Every attribute, each once, in a stable order (registration, messages, tests).
ALL: tuple[SearchAttributeKey[Any], ...] = (*PLAN_ATTRIBUTES, AGENT)

# The type names ``temporal server start-dev --search-attribute Name=Type`` takes.
_CLI_TYPE_NAMES = {
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}


# Not an attribute: the memo key under which a plan says which subtasks are paused and
# why ({subtask id: "Type: message"}); only a plan that pauses writes it.
PAUSED_MEMO = "paused"


class VisibilityStatus(enum.StrEnum):
    """Values of ``DplanStatus``. ``paused`` is reserved for plans held on a failed
    subtask (``dplan resume|skip``)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PAUSED = "paused"


def dev_server_args() -> list[str]:
    """``--search-attribute Name=Type`` arguments for ``temporal server start-dev``."""
    args: list[str] = []
    for key in ALL:
        args += ["--search-attribute", f"{key.name}={_CLI_TYPE_NAMES[key.indexed_value_type]}"]
    return args


def missing_from(registered: Mapping[str, int]) -> tuple[SearchAttributeKey[Any], ...]:
    """The attributes of ``ALL`` that ``registered`` (name → ``IndexedValueType`` number,
    as the server lists them) lacks or holds with another type: either way, setting them
    would fail."""
    return tuple(key for key in ALL if registered.get(key.name) != int(key.indexed_value_type))
