"""Every error the package raises is a ``DurablePlansError`` defined in ``_errors.py``.

A caller embedding durable-plans catches one type; a reader finds every error in one file.
The few exception classes defined elsewhere are on ``ALLOWED`` below, each with the
reason it may stay: control flow that never leaves its module (or its layer, for the
workflows' and the activities' own signals), or the CLI's argument refusal.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path

import pytest

from durable_plans import _errors
from durable_plans._errors import DurablePlansError

PACKAGE = Path(__file__).resolve().parents[2] / "durable_plans"

ALLOWED: dict[str, str] = {
    "cli/_common.py:Usage": "the CLI's refusal of its own arguments (exit 2), caught by "
    "cli._common.reported; it never reaches a library caller",
    "activities/llm.py:_NextModel": "private: hands the request to the next model",
    "activities/git_workspace.py:_Conflict": "private: becomes a WorkspaceConflict",
    "activities/git_run.py:GitFailed": "a git command's exit, caught and explained by the "
    "workspace layer as a WorkspaceError",
    "activities/commit_files.py:NeedsTree": "asks git_workspace to answer from the "
    "checked-out tree instead; never leaves the activity",
    "activities/shared_limits.py:LimitWaitTooLong": "read by llm_errors as a retryable "
    "RateLimit; never leaves the LLM activity",
    "activities/sandbox.py:StartFailed": "private: becomes the command's failed outcome",
    "activities/file_jail.py:ToolRefused": "a refused tool call, given to the model as "
    "the tool's result",
    "workflows/agent_loop.py:LoopFailed": "workflow-internal: SubtaskWorkflow fails with "
    "its FailureType",
    "workflows/plan_workspace.py:WorkspaceStepFailed": "workflow-internal: SubtaskWorkflow "
    "fails with its FailureType",
    "workflows/chat_workspace.py:PublishFailed": "workflow-internal: the conversation "
    "notes why its branch lags and goes on",
}


def _exception_names() -> set[str]:
    names = {n for n, v in vars(builtins).items() if inspect.isclass(v)}
    return {n for n in names if issubclass(getattr(builtins, n), BaseException)}


def exception_classes() -> dict[str, ast.ClassDef]:
    """``path:Class`` of every class in the package that derives from an exception: a
    builtin one, one of ours, or a library's (a base named ``*Error``/``*Exception``)."""
    classes: list[tuple[str, ast.ClassDef]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        where = path.relative_to(PACKAGE).as_posix()
        classes += [(f"{where}:{n.name}", n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    known = _exception_names()
    found: dict[str, ast.ClassDef] = {}
    changed = True
    while changed:  # a class deriving from one found in another file, in any order
        changed = False
        for key, node in classes:
            if key in found:
                continue
            bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
            if any(b in known or b.endswith(("Error", "Exception")) for b in bases):
                found[key] = node
                known.add(node.name)
                changed = True
    return found


def test_the_scan_finds_the_classes_of_errors_py_and_no_other_kind_of_class() -> None:
    found = exception_classes()
    ours = {name for name, value in vars(_errors).items() if inspect.isclass(value)}
    ours = {n for n in ours if issubclass(getattr(_errors, n), BaseException)}
    assert {key.split(":")[1] for key in found if key.startswith("_errors.py:")} == ours
    assert "domain/models.py:Plan" not in found
    assert "activities/file_jail.py:ToolRefused" in found


def test_no_exception_class_lives_outside_errors_py_unless_allowed() -> None:
    outside = {key for key in exception_classes() if not key.startswith("_errors.py:")}
    assert sorted(outside - ALLOWED.keys()) == [], "define it in durable_plans/_errors.py"
    assert sorted(ALLOWED.keys() - outside) == [], "the allow-list names a class that is gone"


def test_every_class_of_errors_py_is_a_durable_plans_error_and_listed() -> None:
    classes = [
        value
        for value in vars(_errors).values()
        if inspect.isclass(value) and issubclass(value, BaseException)
    ]
    assert len(classes) > 30
    for cls in classes:
        assert issubclass(cls, DurablePlansError), cls
        assert cls.__name__ in _errors.__all__, cls


@pytest.mark.parametrize(
    ("error", "still"),
    [
        ("SettingsError", ValueError),
        ("PlanValidationError", ValueError),
        ("UnknownAgentError", KeyError),
        ("SessionNotFound", KeyError),
        ("EventLoopUnavailable", RuntimeError),
    ],
)
def test_a_moved_error_is_still_the_builtin_kind_it_was(error: str, still: type) -> None:
    """``except ValueError`` (or ``KeyError``) around a call keeps catching what it did."""
    assert issubclass(getattr(_errors, error), still)


def test_settings_error_is_public_and_a_durable_plans_error() -> None:
    """The README says every refusal is a ``DurablePlansError``; ``SettingsError`` is
    exported, and its old import path keeps working."""
    import durable_plans
    import durable_plans.settings

    old_path = getattr(durable_plans.settings, "SettingsError")  # noqa: B009
    assert durable_plans.SettingsError is old_path is _errors.SettingsError
    assert issubclass(old_path, DurablePlansError)
