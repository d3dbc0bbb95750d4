"""The installed package is one tree of real files, ``durable_plans``; nothing reaches for
generic names.

The names promised at the top of the repository (``workflows/``, ``activities/``,
``starter/``, ``worker.py``) only point into the package. Three mistakes would quietly undo
that, and each passes every other test when run from the repository root:

- an import of a bare generic name (``from workflows.plan import …``): it works in the
  checkout and breaks in an installed wheel, or worse, imports another distribution's
  ``workflows`` package or a ``settings.py`` lying in the user's working directory;
- code at the top of the repository: importable from the root as a second copy of a
  package module (two ``PlanWorkflow`` classes), and missing from the wheel;
- a symlink inside the package: a checkout without symlink support (Git for Windows'
  default) turns it into a text file, and the wheel built there lacks the code.
"""

from __future__ import annotations

import ast
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.python_source import parse

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO_ROOT / "durable_plans"
GENERIC = frozenset(
    {"workflows", "activities", "domain", "starter", "session_store", "settings", "worker"}
)
# Top-level folders with Python code that are deliberately not part of the package.
NOT_INSTALLED = frozenset({"tests", "bench", "durable_plans", "examples"})
# The pointers: a top-level file or folder may hold Python only as a shim that runs the
# package's entry point (``python worker.py``, ``python -m starter``).
SHIMS = {
    "worker.py": "from durable_plans.worker import main",
    "starter/__main__.py": "from durable_plans.cli.main import console_main",
}
SKIP_DIRS = frozenset({".venv", "venv", "build", "dist", "node_modules", "__pycache__"})


def python_files() -> Iterator[Path]:
    """Every .py file of the repository once, under its real path."""
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
    found = [what for _, what in generic_imports(parse(source))]
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
        tree = parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, what in generic_imports(tree):
            problems.append(f"{path.relative_to(REPO_ROOT)}:{line}: {what} → use durable_plans.*")
    assert not problems, "\n".join(problems)


def test_the_package_holds_no_symlink() -> None:
    links = [p.relative_to(REPO_ROOT) for p in PACKAGE_DIR.rglob("*") if p.is_symlink()]
    assert not links, f"symlinks inside the package: {links}"


def _top_level_python() -> list[str]:
    found: list[str] = []
    for entry in sorted(REPO_ROOT.iterdir()):
        if entry.name.startswith(".") or entry.name in NOT_INSTALLED or entry.name in SKIP_DIRS:
            continue
        if entry.is_file() and entry.suffix == ".py":
            found.append(entry.name)
        elif entry.is_dir():
            found += [str(p.relative_to(REPO_ROOT)) for p in sorted(entry.rglob("*.py"))]
    return found


def test_the_top_level_names_only_point_into_the_package() -> None:
    """No module outside ``durable_plans/`` but the shims, and each shim imports its entry
    point from the package and defines nothing of its own."""
    found = _top_level_python()
    assert set(found) == set(SHIMS), f"Python code outside the package: {found}"
    for name, entry_import in SHIMS.items():
        tree = parse((REPO_ROOT / name).read_text(encoding="utf-8"))
        assert entry_import in ast.unparse(tree), name
        defined = [
            n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef | ast.Assign)
        ]
        assert not defined, f"{name} defines code of its own"
    for folder in ("workflows", "activities", "starter"):
        pointer = (REPO_ROOT / folder / "README.md").read_text(encoding="utf-8")
        assert "durable_plans/" in pointer, folder
        assert not (REPO_ROOT / folder / "__init__.py").exists(), folder


def test_the_promised_folders_are_real_package_folders() -> None:
    for name in ("workflows", "activities", "domain", "session_store", "cli", "client"):
        init = PACKAGE_DIR / name / "__init__.py"
        assert init.is_file() and not init.is_symlink(), name
    for name in ("settings.py", "worker.py", "plugin.py"):
        assert (PACKAGE_DIR / name).is_file(), name


def _imported_modules(path: Path) -> set[str]:
    tree = parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("name", ["settings.py", "worker.py", "plugin.py", "client"])
def test_the_core_imports_nothing_from_the_command_line(name: str) -> None:
    """The CLI is a layer over the client and the worker, never under them: a service that
    embeds durable-plans must not load (or depend on) the terminal front end."""
    target = PACKAGE_DIR / name
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    for path in files:
        cli = sorted(
            m
            for m in _imported_modules(path)
            if m == "durable_plans.cli" or m.startswith("durable_plans.cli.")
        )
        assert not cli, f"{path.relative_to(REPO_ROOT)} imports {cli}"
