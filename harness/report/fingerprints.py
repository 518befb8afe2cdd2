"""Fingerprints side by side: every field of the runs a reader may want to compare as a readable table, and the
two of them the reader picks (``fingerprints.html?a=RUN&b=RUN``, a permalink) with what differs between them.

The runs offered are each machine's newest run and every run whose identity (compare.IDENTITY_FIELDS: host, GPU,
driver, stack, image, environment) differs from its machine's run before, plus the runs the morning comparisons
name, newest first and capped: a fleet of a year of nights changes its stack a few times, not every night.
"""

from __future__ import annotations

from typing import Any

from ..analysis.compare import IDENTITY_FIELDS, fingerprint_field
from ..analysis.pairing import stack_line
from .fmt import flatten, minute
from .model import Model

_NONE: dict[str, Any] = {}  # a run without a fingerprint (one object: offered() keys identities by object)
MAX_RUNS = 60  # columns besides the runs the morning comparisons name; the newest first


def offered(g: Model) -> list[dict[str, Any]]:
    """The runs the fingerprints page offers (newest first), computed once per report."""
    if g.fp_offered is not None:
        return g.fp_offered
    named: set[int] = set()
    for _m, comps in g.plan:  # the morning's comparisons, known before they are judged
        for c, _ in comps:
            named.add(c.base.runs[-1]["id"])
            named.add(c.head.runs[-1]["id"])
    keep: dict[int, dict[str, Any]] = {}
    idents: dict[int, tuple] = {}  # per fingerprint object: runs with equal fingerprints share one (run_jsons)
    for m in g.machines:
        before = None
        for r in m.runs:
            fp = g.info[r["id"]]["fingerprint"] or _NONE
            ident = idents.get(id(fp))
            if ident is None:
                ident = idents[id(fp)] = tuple(repr(fingerprint_field(fp, f)) for f in IDENTITY_FIELDS)
            if ident != before or r["id"] in named or r is m.runs[-1]:
                keep[r["id"]] = r
            before = ident
    # the runs the morning names always; then the newest of the rest
    first = [r for r in keep.values() if r["id"] in named]
    rest = sorted((r for r in keep.values() if r["id"] not in named), key=lambda r: r["started"], reverse=True)
    out = sorted(first + rest[:max(0, MAX_RUNS - len(first))], key=lambda r: r["started"], reverse=True)
    g.fp_offered = out
    return out


def fingerprints(g: Model) -> dict[str, Any]:
    runs = offered(g)
    flat = [dict(flatten(g.info[r["id"]]["fingerprint"] or {})) for r in runs]
    identity = set(IDENTITY_FIELDS)
    keys = sorted(set().union(*flat) if flat else set(),
                  key=lambda k: (not any(k == f or k.startswith(f + ".") for f in identity), k))
    rows = [{"field": k, "identity": any(k == f or k.startswith(f + ".") for f in identity),
             "cells": [f.get(k, "(not recorded)") for f in flat]} for k in keys]
    cols = [{"id": r["id"], "machine": r["machine"], "started": minute(r["started"]), "run_id": r["run_id"],
             "stack": stack_line(g.info[r["id"]]["fingerprint"] or {})} for r in runs]
    # without a pick: the first morning comparison across stacks (else any), else the two newest runs
    pairs = sorted(((c.comparison.what != "previous stack", c.comparison.base.runs[-1]["id"],
                     c.comparison.head.runs[-1]["id"]) for _m, comps in g.nightly for c in comps))
    a, b = (pairs[0][1], pairs[0][2]) if pairs else (
        cols[1]["id"] if len(cols) > 1 else (cols[0]["id"] if cols else None), cols[0]["id"] if cols else None)
    return {"cols": cols, "rows": rows, "left_out": len(g.runs) - len(runs), "a": a, "b": b}


def link(g: Model, a: int, b: int, root: str = "") -> str | None:
    """A permalink to runs ``a`` and ``b`` side by side on the fingerprints page (None if one is not offered)."""
    ids = {r["id"] for r in offered(g)}
    return f"{root}fingerprints.html?a={a}&b={b}" if a in ids and b in ids else None
