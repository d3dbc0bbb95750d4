"""The agent names a plan may use by default.

Plan validation needs only the *names* of the agents, and it runs inside workflow code;
the names come from the built-in specs in :mod:`domain.agents` so that adding or renaming
a built-in agent is one edit. A worker with an agents file validates plans against its
catalog's names instead (``AgentCatalog.names()``).
"""

from __future__ import annotations

from typing import Final

from durable_plans.domain.agents import BUILTIN_AGENT_NAMES

BUILTIN_AGENTS: Final[frozenset[str]] = frozenset(BUILTIN_AGENT_NAMES)
