"""``python -m starter`` from a checkout: the ``dplan`` command line, which lives in
``durable_plans.cli``. Nothing else is here, so nothing can be imported twice."""

from durable_plans.cli.main import console_main

console_main()
