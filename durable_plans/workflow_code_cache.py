"""Compile our workflow modules once per process, not once per workflow run.

The workflow sandbox re-imports a workflow's module for every new run (PlanWorkflow's
and SessionWorkflow's still are; SubtaskWorkflow's is passed through, see
``plugin.PASSTHROUGH_MODULES``). Re-importing means finding, reading and, where no
bytecode cache is written (``PYTHONDONTWRITEBYTECODE``, an editable install), compiling
the source again, for every run: a cost paid per workflow run for the same unchanged
files (bench/RESULTS.md has the figures).

``install()`` puts a finder in front of ``sys.meta_path`` for ``durable_plans.workflows``
only: it finds modules exactly as the normal path finder does and hands them a loader
that keeps each compiled code object in memory, keyed by file, size and modification
time. The module is still executed afresh in each sandbox; only the compiling is shared.
A changed file is compiled again. Idempotent; installed by the plugin's workflow runner.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import CodeType, ModuleType

__all__ = ["PACKAGE", "WorkflowCodeCache", "install"]

PACKAGE = "durable_plans.workflows"

_codes: dict[tuple[str, int, int], CodeType] = {}
_lock = threading.Lock()


class _CachingLoader(importlib.machinery.SourceFileLoader):
    """A source loader whose ``get_code`` is compiled once per file version."""

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns)
        code = _codes.get(key)
        if code is None:
            compiled = super().get_code(fullname)
            if compiled is None:  # pragma: no cover - a source file always compiles to code
                raise ImportError(f"no code for {fullname}", name=fullname)
            with _lock:
                code = _codes.setdefault(key, compiled)
        return code


class WorkflowCodeCache:
    """A ``sys.meta_path`` finder for ``durable_plans.workflows`` and its modules."""

    @classmethod
    def find_spec(
        cls,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return None  # not a plain source file: the normal finders decide
        assert spec.origin is not None
        spec.loader = _CachingLoader(fullname, spec.origin)
        return spec


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once per process)."""
    if WorkflowCodeCache not in sys.meta_path:
        sys.meta_path.insert(0, WorkflowCodeCache)
