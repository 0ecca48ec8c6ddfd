"""The documentation's links lead somewhere, and the README's "Docs" section lists every page.

The README is a front page that links to one page per topic under ``docs/``; pages link to each
other. A page renamed or a section retitled must not leave a dead link behind, and a new page
must be findable from the front page.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(path: Path) -> str:
    """The page without its fenced code blocks (code may hold brackets that are not links)."""
    return re.sub(r"(?ms)^\s*```.*?^\s*```", "", path.read_text())


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_anchor(m.group(1)) for m in re.finditer(r"(?m)^#+\s+(.*)$", _prose(path))}


def _local_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(_prose(path)) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page):
    dead = []
    for target in _local_links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            dead.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            dead.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not dead, f"{page.relative_to(ROOT)} has dead links:\n" + "\n".join(dead)


def test_the_readme_docs_section_lists_every_page():
    readme = (ROOT / "README.md").read_text()
    assert "\n## Docs\n" in readme, "README.md has a '## Docs' section listing the docs/ pages"
    docs_section = readme.split("\n## Docs\n", 1)[1].split("\n## ", 1)[0]
    listed = {Path(t).name for t in LINK.findall(docs_section) if t.startswith("docs/")}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages <= listed, f"README's Docs section lacks: {sorted(pages - listed)}"


def test_the_readme_stays_a_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 400, \
        "README.md is the front page (at most 400 lines): move the detail to a docs/ page and link it"
