"""Parsing Python source in tests, safe from CPython 3.11's AST recursion check.

On CPython 3.11 (3.11.7 here and in CI), ``ast.parse`` can fail with "SystemError: AST constructor
recursion depth mismatch" when a garbage collection during the parse runs a finalizer
that executes Python code (CI hit it: an unclosed aiohttp session's ``__del__`` logged
while ``test_workflow_imports`` parsed ``plan.py``). Collection is held off for the
parse, which allocates little; the finalizers run at the next collection instead.
"""

from __future__ import annotations

import ast
import gc

__all__ = ["parse"]


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename=filename)
    finally:
        if enabled:
            gc.enable()
