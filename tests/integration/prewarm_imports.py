"""What the fork server of ``prewarmed.py`` imports once, so that each worker forked from
it starts polling at once: the worker with everything it loads, and litellm, imported the
way the worker itself does it. Importing this module is the point of it."""

from __future__ import annotations

from durable_plans import worker  # noqa: F401
from durable_plans.activities.llm import import_litellm
from tests.integration import chaos_support  # noqa: F401

import_litellm()
