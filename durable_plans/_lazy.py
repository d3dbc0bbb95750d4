"""Public names that a package loads on first use (PEP 562's module ``__getattr__``).

Two packages name more than most importers need: ``durable_plans`` (the workflow sandbox
imports it for every new workflow run; it must not bring the client, the worker and
litellm along) and ``durable_plans.testing`` (the fake provider's own process imports it;
it must not bring the Temporal client and the local stack along). Each keeps a table of
where its names live; these two functions make that table its ``__getattr__`` and
``__dir__``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

__all__ = ["homes", "lister", "loader"]


def homes(by_module: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Name -> the module it lives in, from module -> the names it gives."""
    return {name: module for module, names in by_module.items() for name in names}


def loader(
    package: str, namespace: dict[str, Any], table: Mapping[str, str]
) -> Callable[[str], Any]:
    """The package's ``__getattr__``: imports a name's home when the name is first asked
    for and keeps the value in the package's ``namespace`` (later lookups never come back
    here); an unknown name is an ``AttributeError`` naming it, as for any module."""

    def load(name: str) -> Any:
        home = table.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    return load


def lister(namespace: dict[str, Any], public: Collection[str]) -> Callable[[], list[str]]:
    """The package's ``__dir__``: what is loaded and what can be."""

    def names() -> list[str]:
        return sorted({*namespace, *public})

    return names
