"""Workflow modules use no clock, randomness, I/O or shared mutable state, read from source.

The sandbox catches ``time.time()`` or ``random.random()`` only in a module it re-imports
for each run. The workflow helpers, and ``SubtaskWorkflow``'s own module (one new
sandbox per subtask made it the worker's largest single cost), are passed through
(``plugin.PASSTHROUGH_MODULES``), and a call in them would run unchecked. This test reads
every workflow module with ``ast`` instead, so a forbidden use fails here whether or not
a test happens to run the line, in a passed-through module or not:

* no import of a module that reads the clock, draws random numbers or does I/O, and none
  of our own modules that do (activities, the session store, the CLI, settings);
* no ``.now()`` / ``.utcnow()`` / ``.today()`` but ``workflow.now()``;
* no ``global`` statement, and no mutable value (list, dict, set, their comprehensions
  or constructors) bound at module level, where a passed-through module would share it
  between every run of the worker (``__all__`` aside).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import durable_plans.workflows as workflows_package
from tests.python_source import parse
from tests.unit.test_plugin import NEVER_PASSED

ROOT = Path(workflows_package.__file__).resolve().parent
FORBIDDEN_MODULES = frozenset(
    {
        "time", "random", "uuid", "os", "socket", "threading", "subprocess", "secrets",
        "sqlite3", "asyncpg", "aiohttp", "httpx", "requests", "litellm",
    }
)  # fmt: skip
FORBIDDEN_OURS = tuple(f"durable_plans.{name}" for name in NEVER_PASSED)
CLOCK_READS = frozenset({"now", "utcnow", "today"})
MUTABLE_CONSTRUCTORS = frozenset(
    {"list", "dict", "set", "bytearray", "defaultdict", "deque", "Counter", "OrderedDict"}
)


def _forbidden_module(name: str) -> bool:
    return name.split(".")[0] in FORBIDDEN_MODULES or name.startswith(FORBIDDEN_OURS)


def _is_mutable(value: ast.expr) -> bool:
    if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name in MUTABLE_CONSTRUCTORS
    return False


def problems(source: str, filename: str = "<source>") -> list[str]:
    """Every forbidden use in ``source``, as ``line: what``."""
    tree = parse(source, filename=filename)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if _forbidden_module(a.name)]
            found += [f"{node.lineno}: import {name}" for name in bad]
        elif isinstance(node, ast.ImportFrom) and node.module and _forbidden_module(node.module):
            found.append(f"{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Attribute) and node.attr in CLOCK_READS:
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id == "workflow"):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Global):
            found.append(f"{node.lineno}: global {', '.join(node.names)}")
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            targets = [ast.unparse(t) for t in stmt.targets]
            value: ast.expr | None = stmt.value
        elif isinstance(stmt, ast.AnnAssign):
            targets, value = [ast.unparse(stmt.target)], stmt.value
        else:
            continue
        if value is not None and targets != ["__all__"] and _is_mutable(value):
            found.append(f"{stmt.lineno}: module-level mutable {', '.join(targets)}")
    return found


def _workflow_modules() -> list[Path]:
    return sorted(ROOT.glob("*.py"))


def test_the_check_sees_every_kind_of_forbidden_use() -> None:
    bad = """
import time
from random import choice
import durable_plans.activities.llm
from datetime import datetime
from temporalio import workflow
CACHE = {}
SEEN: list[str] = []
BY_ID = dict()
__all__ = ["x"]
LIMITS = (1, 2)
def f():
    global CACHE
    workflow.now()
    return datetime.now(), datetime.utcnow()
"""
    assert sorted(problems(bad), key=lambda p: int(p.split(":")[0])) == [
        "2: import time",
        "3: from random import",
        "4: import durable_plans.activities.llm",
        "7: module-level mutable CACHE",
        "8: module-level mutable SEEN",
        "9: module-level mutable BY_ID",
        "13: global CACHE",
        "15: datetime.now",
        "15: datetime.utcnow",
    ]


def test_it_reads_every_workflow_module() -> None:
    names = {p.stem for p in _workflow_modules()}
    assert {"plan", "subtask", "session", "agent_loop", "approval_desk"} <= names


@pytest.mark.parametrize("path", _workflow_modules(), ids=lambda p: p.name)
def test_workflow_module_is_deterministic_by_construction(path: Path) -> None:
    assert problems(path.read_text(), filename=str(path)) == []
