"""Every failure type comes from ``FailureType`` (``domain/failures.py``).

A failure type is a name persisted in histories and compared by clients; spelled as a
string literal somewhere else, it drifts from the registry without a test noticing. The
scan (with ``ast``) fails on a string literal equal to a registered type outside the
registry (docstrings, ``__all__`` lists and the dictionary keys naming third-party
exception classes in ``activities/llm_errors.py`` excepted), and on a CamelCase string
literal given as ``type=`` or in ``non_retryable_error_types``, registered or not.
"""

from __future__ import annotations

import ast
from pathlib import Path

from durable_plans.domain.failures import FailureType

PACKAGE = Path(__file__).resolve().parents[2] / "durable_plans"
REGISTRY = PACKAGE / "domain" / "failures.py"
NAMES = {member.value for member in FailureType}


def _excused(tree: ast.Module) -> set[int]:
    """Ids of the string nodes that are docstrings, ``__all__``/``_HOMES`` entries or
    dictionary keys: they name Python things, not failures."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in ("__all__", "_HOMES") for t in targets):
                skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
    return skip


def literal_failure_types(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    skip = _excused(tree)
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in NAMES
            and id(node) not in skip
        ):
            found.add((node.lineno, node.value))
        if isinstance(node, ast.keyword) and node.arg in ("type", "non_retryable_error_types"):
            for value in ast.walk(node.value):
                if (
                    isinstance(value, ast.Constant)
                    and isinstance(value.value, str)
                    and value.value[:1].isupper()
                ):
                    found.add((value.lineno, value.value))
    return sorted(found)


def test_the_scan_catches_a_literal_type_and_passes_the_enum() -> None:
    assert literal_failure_types('raise ApplicationError("x", type="McpConfig")') == [
        (1, "McpConfig")
    ]
    assert literal_failure_types('RetryPolicy(non_retryable_error_types=["NewThing"])') == [
        (1, "NewThing")
    ]
    assert literal_failure_types("ApplicationError('x', type=FailureType.MCP_CONFIG)") == []
    assert literal_failure_types('__all__ = ["InvalidPlan"]\nf(type="function")') == []


def test_no_failure_type_is_spelled_as_a_literal_outside_the_registry() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != REGISTRY
        for line, name in literal_failure_types(path.read_text())
    ]
    assert found == [], "use FailureType (domain/failures.py)"


def test_the_three_types_once_beside_the_registry_are_in_it() -> None:
    assert FailureType("PlanDataUnavailable") is FailureType.PLAN_DATA_UNAVAILABLE
    assert FailureType("McpToolsUnavailable") is FailureType.MCP_TOOLS_UNAVAILABLE
    assert FailureType("McpConfig") is FailureType.MCP_CONFIG
