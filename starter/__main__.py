"""``python -m starter``: the same command line as the ``dplan`` console script."""

from __future__ import annotations

from starter.cli import console_main

console_main()
