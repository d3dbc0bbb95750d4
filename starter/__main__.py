"""``python -m durable_plans.starter``: the same command line as the ``dplan`` console script."""

from __future__ import annotations

from durable_plans.starter.cli import console_main

console_main()
