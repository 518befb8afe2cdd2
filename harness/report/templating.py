"""The jinja environment every page is rendered in: the templates' folder, autoescape, strict undefined names and
the report's filters; one per process that draws pages (the report's, and each of its pool's, drawing.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from ..analysis import workload
from .fmt import fmt_err, fmt_time, minute, settings_str

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


class _Environment(jinja2.Environment):
    """Pages render rows of dicts, and jinja tries ``row.x`` as an attribute first: on a dict that fails, and the
    exception it raises cost a tenth of a fleet report's main process (3.4 million of them, docs/harness.md). A dict's
    key is looked up first; anything else, and a key a dict lacks, as jinja looks them up (the templates call no
    dict method)."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if obj.__class__ is dict:
            try:
                return obj[attribute]
            except KeyError:
                pass
        return super().getattr(obj, attribute)


def environment() -> jinja2.Environment:
    env = _Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                       undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(impact_table=workload.table, ms=fmt_time, time=fmt_time, err=fmt_err, settings=settings_str, minute=minute,
                       micro=lambda text: str(text).replace(" us", " µs"),  # compare's values, with the µ sign
                       bit=lambda v: int(v) if isinstance(v, bool) else v)  # a record's verdict as the store keeps it
    return env
