"""The shell blocks of the docs, as the tests that execute them read them: what a reader copies is what runs."""

from __future__ import annotations

from pathlib import Path


def blocks(path: Path) -> list[tuple[str, str]]:
    """(the heading above it, the text) of every fenced block of a Markdown file, in order."""
    out, heading, inside, lines = [], "", False, []
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            if inside:
                out.append((heading, "\n".join(lines) + "\n"))
            inside, lines = not inside, []
        elif inside:
            lines.append(line)
        elif line.startswith("#"):
            heading = line
    return out


def block_after(path: Path, heading: str) -> str:
    """The first fenced block under the heading that starts with ``heading``."""
    for head, text in blocks(path):
        if head.startswith(heading):
            return text
    raise AssertionError(f"{path}: no fenced block under a heading {heading!r}")
