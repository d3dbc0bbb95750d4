"""The installed package is one root, ``durable_plans``; nothing reaches for generic names.

The repository keeps its folders at the top (``workflows/``, ``domain/`` …, the layout
users were promised) and ``durable_plans/`` links to them; only ``durable_plans`` is
installed. Two mistakes would quietly undo that, and both pass every other test when run
from the repository root, where the top-level folders happen to be importable:

- an import of a bare generic name (``from workflows.plan import …``): it works in the
  checkout and breaks in an installed wheel, or worse, imports another distribution's
  ``workflows`` package or a ``settings.py`` lying in the user's working directory;
- a new top-level package folder that ``durable_plans/`` does not link: it would be
  missing from the wheel altogether.
"""

from __future__ import annotations

import ast
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO_ROOT / "durable_plans"
GENERIC = frozenset(
    {"workflows", "activities", "domain", "starter", "session_store", "settings", "worker"}
)
# Top-level folders with an __init__.py that are deliberately not part of the package.
NOT_INSTALLED = frozenset({"tests", "bench", "durable_plans"})
# Top-level .py files that are repository tooling, not package modules.
NOT_INSTALLED_FILES = frozenset({"setup.py", "conftest.py", "noxfile.py"})
SKIP_DIRS = frozenset({".venv", "venv", "build", "dist", "node_modules", "__pycache__"})


def python_files() -> Iterator[Path]:
    """Every .py file of the repository once: symlinks (durable_plans/ → the top-level
    folders) are not followed, so each module is parsed under its real path."""
    for root, dirs, files in os.walk(REPO_ROOT):
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in SKIP_DIRS
            and not d.startswith(".")
            and not d.endswith(".egg-info")
            and not (Path(root) / d).is_symlink()
        )
        for name in sorted(files):
            path = Path(root) / name
            if name.endswith(".py") and not path.is_symlink():
                yield path


def _head(dotted: str) -> str:
    return dotted.split(".", 1)[0]


def generic_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, what) for every absolute import of a bare generic name, including the
    string forms that import at run time: ``importlib.import_module("workflows.x")``,
    ``__import__("settings")`` and ``[python, "-m", "starter", …]`` command lines."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _head(alias.name) in GENERIC:
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module and _head(node.module) in GENERIC:
                yield node.lineno, f"from {node.module} import ..."
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and node.args:
                first = node.args[0]
                literal = first.value if isinstance(first, ast.Constant) else None
                if isinstance(literal, str) and _head(literal) in GENERIC:
                    yield node.lineno, f"{name}({literal!r})"
        elif isinstance(node, ast.List | ast.Tuple):
            values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            for flag, module in itertools.pairwise(values):
                if flag == "-m" and isinstance(module, str) and _head(module) in GENERIC:
                    yield node.lineno, f"-m {module}"


def test_generic_imports_are_detected() -> None:
    """The checker itself: each form it must catch, and the forms it must let through."""
    source = """
import workflows
import domain.ids as ids
from settings import Settings
from starter.cli import main
import importlib
importlib.import_module("session_store.sqlite")
cmd = ["python", "-m", "worker"]
from . import workflows
from .domain import ids
from durable_plans.workflows import plan
import durable_plans.worker
import workflows_extra
cmd2 = ["python", "-m", "durable_plans.worker"]
"""
    found = [what for _, what in generic_imports(ast.parse(source))]
    assert found == [
        "import workflows",
        "import domain.ids",
        "from settings import ...",
        "from starter.cli import ...",
        "import_module('session_store.sqlite')",
        "-m worker",
    ]


def test_no_import_uses_a_bare_generic_top_level_name() -> None:
    problems: list[str] = []
    files = list(python_files())
    assert len(files) > 50, f"the walk found too few files ({len(files)}): is it broken?"
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, what in generic_imports(tree):
            problems.append(f"{path.relative_to(REPO_ROOT)}:{line}: {what} → use durable_plans.*")
    assert not problems, "\n".join(problems)


def package_parts() -> list[str]:
    """What the package is made of at the top of the repository: folders with an
    ``__init__.py`` and module files, minus tests, benchmarks and tooling."""
    parts: list[str] = []
    for entry in sorted(REPO_ROOT.iterdir()):
        if entry.name.startswith(".") or entry.is_symlink():
            continue
        if entry.is_dir() and entry.name not in NOT_INSTALLED:
            if (entry / "__init__.py").is_file():
                parts.append(entry.name)
        elif entry.suffix == ".py" and entry.name not in NOT_INSTALLED_FILES:
            parts.append(entry.name)
    return parts


def test_the_package_parts_are_the_expected_ones() -> None:
    """Guards ``package_parts`` against finding nothing (then the link test proves nothing)."""
    assert {f"{n}.py" if n in ("settings", "worker") else n for n in GENERIC} <= set(
        package_parts()
    )


@pytest.mark.parametrize("name", package_parts())
def test_every_top_level_part_is_linked_from_the_package(name: str) -> None:
    link = PACKAGE_DIR / name
    assert link.is_symlink(), f"durable_plans/{name} must be a symlink to ../{name}"
    assert link.resolve() == (REPO_ROOT / name).resolve(), (
        f"durable_plans/{name} → {link.resolve()}"
    )
    # Relative, so the link survives a move of the checkout and works inside an sdist.
    assert not Path(os.readlink(link)).is_absolute(), f"durable_plans/{name} is absolute"


def test_no_link_in_the_package_dangles() -> None:
    for entry in PACKAGE_DIR.iterdir():
        if entry.is_symlink():
            assert entry.resolve().exists(), f"durable_plans/{entry.name} points nowhere"
