"""No import cycle between workflow modules, lazy imports included.

The sandbox re-imports a workflow's modules for every run; a cycle makes the import
order (and so what is defined when) depend on which module happened to load first, and
hides a design knot (agent_loop and subtask used to import each other). The graph is
read from the source with ``ast``, so an import inside a function counts as much as one
at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import durable_plans.workflows as workflows_package
from tests.python_source import parse

PACKAGE = "durable_plans.workflows"
ROOT = Path(workflows_package.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    return {f"{PACKAGE}.{p.stem}": p for p in sorted(ROOT.glob("*.py")) if p.stem != "__init__"}


def _imports(path: Path, known: set[str]) -> set[str]:
    """Workflow modules ``path`` imports, anywhere in it.

    ``from durable_plans.workflows import versions`` is an edge to ``.versions``; the
    package's ``__init__`` is left out of the graph: it imports its workflows lazily, to
    list them, and is not what modules import each other for.
    """
    found: set[str] = set()
    for node in ast.walk(parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module in known:
                found.add(node.module)
            elif node.module == PACKAGE:
                found.update(f"{PACKAGE}.{a.name}" for a in node.names)
    return found & known


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, known) - {name} for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def test_the_graph_sees_the_workflow_modules() -> None:
    graph = import_graph()
    assert f"{PACKAGE}.agent_loop" in graph[f"{PACKAGE}.subtask"]
    assert f"{PACKAGE}.subtask" in graph[f"{PACKAGE}.plan"]


def test_workflow_modules_import_no_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle between workflow modules: " + " → ".join(cycle or [])


def test_find_cycle_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
