"""durable-plans: a Temporal durable-workflow orchestrator for multi-agent LLM plans.

Every installed module lives under this one package, so the generic names of the
repository's folders (``workflows``, ``domain``, ``worker`` …) never collide with another
distribution's top-level packages or with files in the working directory.
"""

from __future__ import annotations

__version__ = "0.1.0"
