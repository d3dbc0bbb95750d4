"""Every relative link in the README and docs/ leads somewhere.

The README is short and points into docs/ for everything else; a renamed file or heading
would leave a reader at a dead end that no other test notices. Links to a heading
(``file.md#anchor``) must name a heading that file has, spelled as GitHub spells anchors.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", flags=re.MULTILINE)


def _prose(text: str) -> str:
    """The text a reader sees as prose: fenced blocks, indented code blocks and inline
    code spans hold examples, not links."""
    text = _FENCE.sub("", text)
    lines = [line for line in text.splitlines() if not line.startswith("    ")]
    return _INLINE_CODE.sub("", "\n".join(lines))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {anchor(h) for h in _HEADING.findall(_FENCE.sub("", path.read_text("utf-8")))}


def relative_links(path: Path) -> list[str]:
    found = _LINK.findall(_prose(path.read_text("utf-8")))
    return [t for t in found if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_the_anchor_rule_matches_githubs() -> None:
    assert anchor("Finding plans: search attributes and `dplan list`") == (
        "finding-plans-search-attributes-and-dplan-list"
    )
    assert anchor("`run_command`") == "run_command"
    assert anchor("Or pause instead of failing") == "or-pause-instead-of-failing"


def test_links_in_code_are_not_links() -> None:
    text = "see [a](a.md)\n\n    [b](b.md)\n\n```\n[c](c.md)\n```\n`[d](d.md)`\n"
    assert _LINK.findall(_prose(text)) == ["a.md"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(document: Path) -> None:
    dead: list[str] = []
    for target in relative_links(document):
        file_part, _, fragment = target.partition("#")
        resolved = (document.parent / file_part).resolve() if file_part else document
        if not resolved.exists():
            dead.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            dead.append(f"{target}: {resolved.name} has no heading '#{fragment}'")
    assert dead == [], f"{document.relative_to(REPO)} links nowhere: {dead}"


def test_the_readme_reaches_every_document_in_docs() -> None:
    linked = {(REPO / t.partition("#")[0]).resolve() for t in relative_links(REPO / "README.md")}
    missing = [p.name for p in DOCUMENTS[1:] if p.resolve() not in linked]
    assert missing == [], f"README.md does not link to docs/{missing}"


def test_the_readme_stays_an_opening_not_a_manual() -> None:
    """The README opens the project for a newcomer; detail belongs in docs/."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md is {len(lines)} lines: move detail to docs/"
    assert lines[2].split()[:2] == ["make", "demo"] and lines[3].split()[:2] == ["make", "test"]
