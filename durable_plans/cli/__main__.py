"""``python -m durable_plans.cli``: the same command line as the ``dplan`` console script."""

from __future__ import annotations

from durable_plans.cli.main import console_main

console_main()
