"""Drill-down, one page per machine: every finding of its latest night, each with a permalink, the two records
side by side, their timing samples on one axis, both fingerprints and what differs between them, and the record's
explanation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from ..analysis import rollup
from ..analysis.compare import fingerprint_diff, gate
from ..analysis.thresholds import Thresholds
from ..core.records import Record
from . import morning
from .charts import ratio_scatter, strip_plot
from .fmt import flatten, fmt_err, fmt_time, history_key, minute
from .judging import NightlyComparison
from .model import MAX_EVIDENCE_PLOTS
from .morning import TOP, anchor, label, listed, page_file, variants_str

MAX_DETAILED = 100  # rows of a comparison that carry their two record tables and samples (the rest: one line each)
# of those, the first gate failures are shown open, as many as the index names (TOP): a page of a hundred open
# findings took 0.32-0.44 s to load in Chromium, 0.15-0.18 s of it layout, against 0.12-0.17 s folded (a fleet's
# changes page, docs/harness.md); a permalink opens the finding it names
OPEN = TOP

def _samples_kept(rec: Record) -> int | None:
    """How many samples a record keeps (the report reads them all: a record without a time keeps none)."""
    if rec.samples is not None:
        return len(rec.samples)
    return rec.time.n if rec.time is not None else 0


def _verdict(v: bool) -> str:
    return str(int(v))  # as the store keeps it: 1 or 0


# (label, what of a record, formatter) of a record as the drill-down shows it
RECORD_FIELDS: tuple[tuple[str, Callable[[Record], Any], Callable[[Any], str]], ...] = (
    ("status", lambda r: r.status, str), ("reason", lambda r: r.reason, str),
    ("median", lambda r: r.median_ms, fmt_time), ("interquartile range", lambda r: r.time and r.time.iqr_ms, fmt_time),
    ("samples", _samples_kept, str), ("timer", lambda r: r.time and r.time.timer, str),
    ("precision class", lambda r: r.precision_class, str), ("max normalised error", lambda r: r.max_norm_err, fmt_err),
    ("output hash", lambda r: r.hash, str),
    ("repeats equal", lambda r: r.determinism and r.determinism.repeat_equal, _verdict),
    ("fresh handle equal", lambda r: r.determinism and r.determinism.fresh_handle_equal, _verdict),
    ("distinct outputs", lambda r: r.determinism and r.determinism.distinct_outputs, str),
    ("chosen algorithm", lambda r: r.chosen_algo, str),
)


def record_rows(rec: Record | None) -> list[tuple[str, str]]:
    if rec is None:
        return [("status", "not measured")]
    out = []
    for name, value, show in RECORD_FIELDS:
        v = value(rec)
        if v is not None:
            out.append((name, show(v)))
    return out


def _samples(rec: Record | None) -> np.ndarray | None:
    s = None if rec is None else rec.samples
    return None if s is None else np.asarray(s, dtype=np.float64)


def comparison(c: NightlyComparison, index: int, th: Thresholds) -> dict[str, Any]:
    failing = {id(f) for f in gate(c.findings, th)}
    # combinations only one side measured are counted by backend and direction, not listed one by one
    one_side = Counter((f.head == "not measured", f.backend, f.direction) for f in c.findings
                       if f.kind == "availability" and f.verdict == "change")
    shown = listed(c, failing)
    rows, plots, opened = [], 0, 0
    for k, (f, vs) in enumerate(shown):
        b, h = c.base_records.get(f.key), c.head_records.get(f.key)
        also = [anchor(v) for v in vs if v is not f]  # a permalink to a collapsed variant lands on its row
        if k >= MAX_DETAILED:
            rows.append({"f": f, "label": label(f), "gated": id(f) in failing, "anchor": anchor(f), "also": also,
                         "hist": history_key(f),
                         "settings": variants_str(vs), "detailed": False})
            continue
        plot = None
        if f.kind == "time" and plots < MAX_EVIDENCE_PLOTS:
            plot = strip_plot(_samples(b), _samples(h))
            plots += plot is not None
        gated = id(f) in failing
        is_open = gated and f.kind != "availability" and opened < OPEN
        opened += is_open
        rows.append({"f": f, "label": label(f), "gated": gated, "open": is_open, "anchor": anchor(f), "detailed": True,
                     "settings": variants_str(vs), "also": also, "hist": history_key(f), "base_rec": record_rows(b), "head_rec": record_rows(h),
                     "base_run": b and b.run, "head_run": h and h.run, "plot": plot})
    return {"index": index, "what": c.comparison.what, "base": c.comparison.base, "head": c.comparison.head,
            "base_started": minute(c.comparison.base.runs[-1]["started"]),
            "head_started": minute(c.comparison.head.runs[-1]["started"]),
            "diff": [(k, "-" if a is None else str(a), "-" if b is None else str(b))
                     for k, a, b in fingerprint_diff(c.base_fp, c.head_fp)],
            "base_fp": flatten(c.base_fp), "head_fp": flatten(c.head_fp), "method": c.method, "rows": rows,
            "n_failing": len(failing),
            "n_findings": sum(len(vs) for _, vs in shown), "groups": rollup.groups(c.findings),
            "scatter": ratio_scatter(c.base_records, c.head_records, c.findings),
            "net_line": rollup.net_line(rollup.net(c.findings, c.base_records, c.head_records, len(failing))),
            "one_side": [{"n": n, "side": "base only" if gone else "head only", "where": f"{backend} {direction}"}
                         for (gone, backend, direction), n in sorted(one_side.items())]}


def changes_pages(block: dict[str, Any], comps: list[NightlyComparison], th: Thresholds) -> list[dict[str, Any]]:
    """A machine's changes pages: every finding listed, morning.PAGE_ROWS rows of each comparison a page (the
    first page with the fingerprints and the roll-up), so that a count the index links to is what the pages list."""
    per = morning.PAGE_ROWS
    full = [{**comparison(c, i, th), "impact": block["comparisons"][i]["impact"]} for i, c in enumerate(comps)]
    n = max(1, *(-(-len(c["rows"]) // per) for c in full))
    files = [page_file(block["slug"], k) for k in range(1, n + 1)]
    out = []
    for k in range(n):
        cs = [{**c, "rows": c["rows"][k * per:(k + 1) * per], "first_row": k * per + 1,
               "n_rows": len(c["rows"])} for c in full]
        out.append({"block": block, "comparisons": cs, "page": k + 1, "files": files, "file": files[k]})
    return out
