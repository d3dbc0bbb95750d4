"""docs/architecture.md's table of capabilities × layers names real files.

The table is where a newcomer looks for "where does X live, layer by layer"; a file moved
or renamed without the table following would send them to nothing. Every path in a cell
must exist under ``durable_plans/``, every row must have a cell per layer, and a cell that
names nothing says so with "—".
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "durable_plans"
LAYERS = ("Domain", "Workflows", "Activities", "Client", "CLI", "Page", "Around them")
HEADING = "## Capabilities and layers"
CODE = re.compile(r"`([^`]+)`")


def table_rows(text: str) -> list[list[str]]:
    """The rows of the first Markdown table after ``HEADING``, header included, as cells."""
    section = text.split(HEADING, 1)[1]
    rows: list[list[str]] = []
    for line in section.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows


def cell_paths(cell: str) -> list[str]:
    return [p for p in CODE.findall(cell) if p.endswith((".py", ".js", ".html", ".css"))]


def test_the_table_has_every_layer_and_a_cell_for_each() -> None:
    rows = table_rows(DOC.read_text(encoding="utf-8"))
    header, rule, *body = rows
    assert tuple(header[1:]) == LAYERS
    assert set("".join(rule)) <= {"-"}
    assert len(body) >= 25
    for row in body:
        assert len(row) == len(header), row[0]
        for cell in row[1:]:
            assert cell == "—" or cell_paths(cell), f"{row[0]}: {cell!r}"


def test_every_path_the_table_names_exists() -> None:
    rows = table_rows(DOC.read_text(encoding="utf-8"))[2:]
    named = [(row[0], p) for row in rows for cell in row[1:] for p in cell_paths(cell)]
    assert len(named) > 100
    missing = [f"{cap}: {path}" for cap, path in named if not (PACKAGE / path).is_file()]
    assert missing == []


def test_each_layer_column_names_only_its_own_folder() -> None:
    folders: dict[str, tuple[str, ...]] = {
        "Domain": ("domain/",),
        "Workflows": ("workflows/",),
        "Activities": ("activities/",),
        "Client": ("client/",),
        "CLI": ("cli/",),
        "Page": ("ui/",),
    }
    rows = table_rows(DOC.read_text(encoding="utf-8"))[2:]
    wrong = [
        f"{row[0]} / {layer}: {path}"
        for row in rows
        for layer, cell in zip(LAYERS, row[1:], strict=True)
        if layer in folders
        for path in cell_paths(cell)
        if not path.startswith(folders[layer])
    ]
    assert wrong == []


def test_the_check_fails_on_a_missing_file() -> None:
    text = (
        f"{HEADING}\n\n| Capability | {' | '.join(LAYERS)} |\n|---|---|---|---|---|---|---|---|\n"
        "| x | `domain/nope.py` | — | — | — | — | — | — |\n\nafter\n"
    )
    rows = table_rows(text)
    assert [p for row in rows[2:] for c in row[1:] for p in cell_paths(c)] == ["domain/nope.py"]
    assert not (PACKAGE / "domain/nope.py").exists()
