"""Long tables spread over numbered pages of their own, so that every page stays small (300 KB, 0.5 s in
Chromium) and a count a page gives is what its pages list: a table is never cut with "query the store".

A page registers each table that may grow with the fleet (``Parts.table``): the page shows its first rows (or
none, only the count and the links), and every row is listed on ``<folder>/<table>-<k>.html``, rendered by
parts.html with the table's own row macro from _tables.html. The build writes those pages after the page itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

PART_ROWS = 250  # rows per continuation page: the widest of these tables (architecture's) is ~0.55 KB a row


class Parts:
    """The continuation pages of one report page (``folder``: their folder beside the page's own file ``page``,
    by default the folder's name with .html)."""

    def __init__(self, folder: str, title: str, page: str | None = None) -> None:
        self.folder = folder
        self.title = title
        self.page = page or folder + ".html"
        self.tables: list[tuple[dict[str, Any], list[Any]]] = []

    def table(self, tid: str, rows: list[Any], macro: str, what: str, *, inline: int = 25,
              per: int = PART_ROWS, **args: Any) -> dict[str, Any]:
        """The table ``tid`` as its page shows it: the first ``inline`` rows, and when there are more, the files
        (relative to the page) that list all ``len(rows)`` of them, ``per`` a page. ``macro``: the row macro of
        _tables.html, called with the rows and ``args``; ``what``: the rows in words ("records ...")."""
        n_files = -(-len(rows) // per) if len(rows) > inline else 0
        files = [f"{self.folder}/{tid}-{k}.html" for k in range(1, n_files + 1)]
        t = {"id": tid, "rows": rows[:inline] if files else rows, "n": len(rows), "files": files, "per": per,
             "macro": macro, "what": what, "args": args}
        if files:
            self.tables.append((t, rows))
        return t

    def pages(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(file relative to the report's root, parts.html context) of every continuation page."""
        for t, rows in self.tables:
            for k, file in enumerate(t["files"]):
                first = k * t["per"]
                yield file, {"t": t, "rows": rows[first:first + t["per"]], "page": k + 1, "first_row": first + 1,
                             "back": self.page, "back_title": self.title,
                             "files": [f.rsplit("/", 1)[1] for f in t["files"]]}
