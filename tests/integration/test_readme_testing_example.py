"""The README's "Testing your own agents" example, run as written.

It is the one piece of documentation users copy into their own code, and it touches the
public surface other changes move (the plugin, ``build_worker``, ``durable_plans.testing``):
executing it here keeps it true.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Testing your own agents"


def example_source() -> str:
    text = README.read_text(encoding="utf-8")
    assert SECTION in text, f"README has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, f"expected one python example in {SECTION!r}, got {len(blocks)}"
    return cast(str, blocks[0])


async def test_the_readme_example_passes(tmp_path: Path) -> None:
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(example_source(), f"{README}:{SECTION}", "exec"), namespace)
    tests = {k: v for k, v in namespace.items() if k.startswith("test_") and callable(v)}
    assert len(tests) == 1, f"expected one test function in the example, got {sorted(tests)}"
    (test,) = tests.values()
    await cast(Callable[[Path], Awaitable[None]], test)(tmp_path)
