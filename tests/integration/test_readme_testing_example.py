"""The README's "Testing your own agents" example, run as written.

It is the one piece of documentation users copy into their own tests, and it touches the
public surface other changes move (``durable_plans.testing``, the client): executing it
here keeps it true.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

import pytest

from tests.integration.readme_examples import example_source, imported_modules, run_example

pytestmark = pytest.mark.integration

SECTION = "## Testing your own agents"


def test_the_example_imports_only_the_public_surface() -> None:
    assert imported_modules(example_source(SECTION)) <= {"durable_plans", "durable_plans.testing"}


async def test_the_readme_example_passes() -> None:
    namespace = run_example(SECTION)
    tests = {k: v for k, v in namespace.items() if k.startswith("test_") and callable(v)}
    assert len(tests) == 1, f"expected one test function in the example, got {sorted(tests)}"
    (test,) = tests.values()
    await cast(Callable[[], Awaitable[None]], test)()
