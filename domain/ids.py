"""Deterministic identifiers.

Workflow code may not use random ids, and activity retries must write the same rows twice
without duplicating them; both needs are met by deriving every id from stable inputs.
"""

from __future__ import annotations

import hashlib


def stable_id(*parts: str | int, length: int = 24) -> str:
    """A short hex digest of ``parts``; equal inputs give equal ids on every machine."""
    h = hashlib.sha256()
    for p in parts:
        # surrogatepass: a lone surrogate (a model's half-escaped tool-call id) must not crash
        # history repair; every valid string encodes exactly as before, so ids are unchanged.
        h.update(str(p).encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.hexdigest()[:length]


def message_id(scope: str, step: int | str, index: int | str = 0) -> str:
    """Id of the ``index``-th message written at ``step`` of the workflow ``scope``."""
    return f"m-{stable_id(scope, step, index)}"


def snapshot_id(session_id: str, plan_id: str, subtask_id: str) -> str:
    """Snapshot ids follow the seed's convention so an operator can read them."""
    return f"{session_id}:{plan_id}:{subtask_id}"
