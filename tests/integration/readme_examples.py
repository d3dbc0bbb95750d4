"""The README's Python examples, read as a user copies them: one block per section."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"


def example_source(section: str) -> str:
    """The one ```python block under the README heading ``section``."""
    text = README.read_text(encoding="utf-8")
    assert f"\n{section}\n" in text, f"README has no {section!r} section"
    body = text.split(f"\n{section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", body, flags=re.DOTALL)
    assert len(blocks) == 1, f"expected one python example in {section!r}, got {len(blocks)}"
    return str(blocks[0])


def run_example(section: str) -> dict[str, Any]:
    """The example executed as a module that is not ``__main__``: what it defines."""
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(example_source(section), f"{README}:{section}", "exec"), namespace)
    return namespace


def imported_modules(source: str) -> set[str]:
    """The modules an example imports from (``import x`` and ``from x import ...``)."""
    found = re.findall(r"^(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", source, re.MULTILINE)
    return {a or b for a, b in found}
