"""The front door holds: the README stays short (issue 41: at most 150 lines) and every relative link in it and
in docs/ leads to a file that exists (and to a heading there, for a #fragment)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _anchors(md: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces as hyphens."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", md.read_text(), re.M)}


def test_the_readme_is_at_most_150_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_every_relative_link_of_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    checked = 0
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path, _, fragment = target.partition("#")
            dest = (page.parent / path).resolve()
            assert dest.exists(), (page.name, target)
            if fragment and dest.suffix == ".md":
                assert fragment in _anchors(dest), (page.name, target)
            checked += 1
    assert checked > 30
