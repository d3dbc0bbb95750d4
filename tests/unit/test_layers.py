"""The module graph has one direction, and the client's private modules stay private.

The layers, lowest first, as the code is (each may import its own layer and those below,
never one above):

0. base: ``_errors`` (every error class), ``domain/`` (pure rules and contracts),
   ``connection`` (Temporal's environment configuration), ``event_loop``,
   ``payload_codec``, ``core_log``;
1. ``workflows/`` (deterministic code) and ``session_store/`` (where conversations
   live), each on the base alone;
2. configuration: ``settings`` (which reads ``workflows/policies.py``'s defaults) and
   ``telemetry``;
3. ``activities/`` and what runs beside them on a worker's host: ``workspace_gc``,
   ``sandbox_runner``;
4. the worker side of Temporal: ``plugin``, ``namespace_setup`` (search attributes, which
   the plugin checks at start), ``temporal_client`` (``connect`` and Temporal Web links),
   ``worker``, ``embedded`` and ``dev_server`` (the dynamic config of the dev servers we
   start), ``codec_server``;
5. ``client/``: the one door;
6. front ends: ``cli/``, ``ui/`` (the page) and ``testing/``.

``durable_plans/__init__.py`` is the facade above them all: it names the public surface
and loads each name lazily from its home.

Both checks read the source with ``ast`` (every import, also the ones inside functions and
``TYPE_CHECKING`` blocks), so a lazy import cannot slip an arrow past them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "durable_plans"

LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "durable_plans._errors",
        "durable_plans._lazy",
        "durable_plans._version",
        "durable_plans.domain",
        "durable_plans.connection",
        "durable_plans.event_loop",
        "durable_plans.payload_codec",
        "durable_plans.core_log",
    ),
    ("durable_plans.workflows", "durable_plans.session_store"),
    ("durable_plans.settings", "durable_plans.telemetry", "durable_plans.worker_versioning"),
    (
        "durable_plans.activities",
        "durable_plans.workspace_gc",
        "durable_plans.sandbox_runner",
    ),
    (
        "durable_plans.plugin",
        "durable_plans.namespace_setup",
        "durable_plans.temporal_client",
        "durable_plans.worker",
        "durable_plans.embedded",
        "durable_plans.dev_server",
        "durable_plans.codec_server",
    ),
    ("durable_plans.client",),
    ("durable_plans.cli", "durable_plans.ui", "durable_plans.testing", "durable_plans.mcp_server"),
)
FACADE = "durable_plans"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    """The layer of ``module`` (a package's modules share its layer); fails for a module
    no layer names, so a new top-level module must be placed on purpose."""
    for rank, homes in enumerate(LAYERS):
        if any(module == home or module.startswith(f"{home}.") for home in homes):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")


def is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports_of(path: Path) -> Iterator[tuple[int, str]]:
    """Every ``durable_plans`` module ``path`` imports, with the line: ``from X import
    Y`` counts as importing ``X.Y`` when that is a module, else ``X``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == FACADE:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != FACADE:
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield node.lineno, sub if is_module(sub) else node.module


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_scan_sees_the_imports_it_judges() -> None:
    """The scanner itself: a ``from`` import of a submodule is resolved to it, and a
    lazy import inside a function is seen."""
    plugin = dict((name, line) for line, name in imports_of(PACKAGE / "plugin.py"))
    assert "durable_plans.sandbox_runner" in plugin  # from durable_plans import sandbox_runner
    assert "durable_plans.namespace_setup" in plugin  # imported inside run_worker
    assert layer_of("durable_plans.client._client") == layer_of("durable_plans.client")
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("durable_plans.somewhere_new")


def test_no_module_imports_a_private_module_of_the_client_from_outside_it() -> None:
    """The CLI, the page, ``durable_plans.testing``, the worker and the plugin use the
    client's public names (``durable_plans.client``) or a lower module, never
    ``durable_plans.client._*``: those may change with no notice."""
    client_dir = PACKAGE / "client"
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
        for path in sources()
        if client_dir not in path.parents
        for line, name in imports_of(path)
        if name.startswith("durable_plans.client._")
    ]
    assert found == []


def test_no_import_runs_up_the_layers() -> None:
    found = []
    for path in sources():
        here = module_name(path)
        if here == FACADE:
            continue
        rank = layer_of(here)
        for line, name in imports_of(path):
            if name == FACADE:
                found.append(f"{here}:{line} imports the facade {FACADE}")
            elif (up := layer_of(name)) > rank:
                found.append(f"{here} (layer {rank}):{line} imports {name} (layer {up})")
    assert found == []
