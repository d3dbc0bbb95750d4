"""The agent names a plan may use.

Plan validation needs only the *names* of the agents, and it runs inside workflow code,
so this stays a constant with no imports; the full agent configuration (prompts, tools,
turn limits) lives elsewhere and may grow without touching validation.
"""

from __future__ import annotations

from typing import Final

BUILTIN_AGENTS: Final[frozenset[str]] = frozenset(
    {"orchestrator", "architect", "coder", "debug", "ask"}
)
