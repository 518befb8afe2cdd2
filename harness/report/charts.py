"""Charts as numbers: SVG coordinates computed here from the data; the templates only place them (no script)."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from ..analysis import changepoint
from ..core.records import OK, Record, RecordKind
from .fmt import err_color, fmt_err, fmt_time

METRIC_NAMES = {"max_norm_err": "max normalised error", "rel_l2": "relative L2 error (asv records no other)",
                None: "error (not measured)"}


def _epoch(stamp: str) -> float:
    d = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (d if d.tzinfo else d.replace(tzinfo=dt.timezone.utc)).timestamp()


def line_chart(stamps: list[str], values: np.ndarray, changes: list[changepoint.Change], *,
               events: list[tuple[int, str]] = (), width: int = 620, height: int = 170,
               unit: str = "ms") -> dict[str, Any]:
    """One series on a time axis (x by when each run started, 5 evenly spaced date ticks): change points as red
    lines, segment levels dashed, ``events`` (index, label) such as a new stack as grey lines labelled below.
    ``unit`` "ms" labels the y axis in µs or ms."""
    pad_l, pad_r, pad_t, pad_b = 60, 10, 8, 36
    v = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(v)
    n = len(v)
    if not finite.any():
        return {"width": width, "height": height, "points": "", "changes": [], "ylabels": [], "xlabels": [],
                "events": []}
    lo, hi = float(np.nanmin(v[finite])), float(np.nanmax(v[finite]))
    if hi - lo < 1e-12 * max(abs(hi), 1):
        lo, hi = lo * 0.95, hi * 1.05 + 1e-12
    span = hi - lo
    lo, hi = lo - 0.05 * span, hi + 0.05 * span
    t = [_epoch(x) for x in stamps]
    t0, t1 = min(t), max(t)
    t1 = t1 if t1 > t0 else t0 + 86400.0

    def x(i: int) -> float:
        return pad_l + (width - pad_l - pad_r) * (t[i] - t0) / (t1 - t0)

    def y(val: float) -> float:
        return pad_t + (height - pad_t - pad_b) * (1 - (val - lo) / (hi - lo))

    def show(val: float) -> str:
        return fmt_time(val) if unit == "ms" else f"{val:.3g}"

    pts = " ".join(f"{x(i):.1f},{y(val):.1f}" for i, val in enumerate(v) if math.isfinite(val))
    dots = [{"x": round(x(i), 1), "y": round(y(val), 1), "title": f"{stamps[i][:16].replace('T', ' ')}: {show(val)}"}
            for i, val in enumerate(v) if math.isfinite(val)]
    marks = [{"x": round(x(c.index), 1), "night": stamps[c.index][:10],
              "label": f"step x{c.ratio:.2f} from {stamps[c.index][:10]}: {show(c.before)} -> {show(c.after)}"}
             for c in changes]
    bounds = [0, *[c.index for c in changes], n]
    levels = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        seg = v[a:b][np.isfinite(v[a:b])]
        if len(seg):
            lv = float(np.exp(np.mean(np.log(seg)))) if (seg > 0).all() else float(np.mean(seg))
            levels.append({"x1": round(x(a), 1), "x2": round(x(b - 1), 1), "y": round(y(lv), 1)})
    ylabels = [{"y": round(y(val), 1), "text": show(val)} for val in (lo, (lo + hi) / 2, hi)]
    short = t1 - t0 < 3 * 86400
    xlabels = []
    for k in range(5):
        when = dt.datetime.fromtimestamp(t0 + (t1 - t0) * k / 4, dt.timezone.utc)
        xlabels.append({"x": round(pad_l + (width - pad_l - pad_r) * k / 4, 1),
                        "text": when.strftime("%m-%d %H:%M" if short else "%Y-%m-%d"),
                        "anchor": "start" if k == 0 else ("end" if k == 4 else "middle")})
    ev = [{"x": round(x(i), 1), "label": f"{stamps[i][:10]}: {text}", "n": k + 1} for k, (i, text) in enumerate(events)]
    return {"width": width, "height": height, "points": pts, "dots": dots, "changes": marks, "levels": levels,
            "ylabels": ylabels, "xlabels": xlabels, "events": ev, "x0": pad_l, "x1": width - pad_r,
            "y1": height - pad_b}


def strip_plot(base: np.ndarray, head: np.ndarray, *, width: int = 300, height: int = 62) -> dict[str, Any] | None:
    """Both sides' timing samples (ms) on one axis labelled in µs or ms, medians as bars, ticks at both ends and
    the middle: base row above, head row below."""
    if base is None or head is None or not len(base) or not len(head):
        return None
    allv = np.concatenate([base, head]).astype(np.float64)
    lo, hi = float(allv.min()), float(allv.max())
    if hi <= lo:
        hi = lo + max(abs(lo) * 1e-3, 1e-9)
    pad = 12
    sx = (width - 2 * pad) / (hi - lo)

    def x(v: float) -> float:
        return round(pad + (float(v) - lo) * sx, 1)

    ticks = [{"x": x(v), "text": fmt_time(v)} for v in (lo, (lo + hi) / 2, hi)]
    return {"width": width, "height": height, "base": [x(v) for v in base[:100]], "head": [x(v) for v in head[:100]],
            "base_med": x(np.median(base)), "head_med": x(np.median(head)), "axis_y": 44, "ticks": ticks,
            "lo": fmt_time(lo), "hi": fmt_time(hi), "x0": pad, "x1": width - pad}


def _error(rec: Record, metric: str) -> float | None:
    """One error metric of a record (max_norm_err, rel_l2), None where it has no accuracy."""
    return getattr(rec.accuracy, metric) if rec.accuracy is not None else None


def heatmaps(recs: list[Record]) -> list[dict[str, Any]]:
    """Accuracy heatmaps: algo x math, one per (dtype, direction); cell = worst max_norm_err of the
    measurements (autotune, crosscheck and repro records have their own tables)."""
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in recs:
        if r.kind == RecordKind.MEASUREMENT:
            groups[(r.dtype, r.direction)].append(r)
    out = []
    for (dtype, direction), rs in sorted(groups.items()):
        # asv results carry the relative L2 error only; a map says which measure it shows
        metric = next((m for m in ("max_norm_err", "rel_l2") if any(_error(r, m) is not None for r in rs
                                                                      if r.status == OK)), None)
        algos = sorted({r.algo for r in rs})
        maths = sorted({r.math for r in rs})
        cell_w, cell_h, left, top = 92, 26, 230, 60
        cells = []
        notes: dict[str, int] = {}  # a record's explanation, told once below the map: a cell names its number
        for i, a in enumerate(algos):
            for j, mth in enumerate(maths):
                sel = [r for r in rs if r.algo == a and r.math == mth]
                if not sel:
                    continue
                ok = [r for r in sel if r.status == OK]
                errs = [_error(r, metric) for r in ok if metric and _error(r, metric) is not None]
                classes = Counter(r.precision_class for r in ok if r.precision_class)
                worst = max(errs) if errs else None
                statuses = Counter(r.status for r in sel)
                broken = classes.get("broken", 0)
                text = (("no error" if metric is None else fmt_err(worst)) if ok
                        else next(iter(statuses)).replace("CUDNN_STATUS_", "").replace("NOT_SUPPORTED",
                                                                                       "unsupported")[:13])
                expl = next((r.explanation for r in sel if r.explanation), None)
                note = notes.setdefault(expl, len(notes) + 1) if expl else None
                cells.append({"x": left + j * cell_w, "y": top + i * cell_h,
                              "fill": "#cfd8e3" if ok and metric is None else
                              err_color(None if broken else worst, bool(ok)), "text": text,
                              "dark": bool(ok) and (broken or (worst is not None and worst > 1e-4)),
                              "title": (f"{a} / {mth}: {len(sel)} records ("
                                        + ", ".join(f"{k} {n}" for k, n in statuses.items()) + ")"
                                        + "".join(f", {k} {n}" for k, n in classes.items())
                                        + (f"; worst {fmt_err(worst)}" if worst is not None else "")
                                        + (f"; note {note}" if note else ""))})
        out.append({"dtype": dtype, "direction": direction, "rows": algos, "cols": maths, "cells": cells,
                    "metric": METRIC_NAMES[metric], "notes": list(notes), "left_out": 0,
                    "width": left + cell_w * len(maths) + 10, "height": top + cell_h * len(algos) + 10,
                    "left": left, "top": top, "cell_w": cell_w, "cell_h": cell_h})
    return out


def time_color(ratio: float) -> str:
    """Heatmap colour for a time relative to the fastest in its row: green at 1x, through yellow to red at 10x."""
    t = min(1.0, max(0.0, math.log10(max(ratio, 1.0))))
    return f"hsl({120 * (1 - t):.0f},65%,{50 + 8 * (1 - t):.0f}%)"


def time_heatmaps(recs: list[Record], max_rows: int = 60) -> list[dict[str, Any]]:
    """Timing heatmaps: case x algorithm, one per (backend, dtype, direction); a cell is the best median over the
    math types, layouts and settings of that case and algorithm, coloured by how much slower it is than the
    fastest algorithm of its case."""
    groups: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in recs:
        if r.kind == RecordKind.MEASUREMENT and r.status == OK and r.median_ms:
            groups[(r.backend, r.dtype, r.direction)].append(r)
    out = []
    for (backend, dtype, direction), rs in sorted(groups.items()):
        best: dict[tuple[str, str], Record] = {}
        for r in rs:
            k = (r.case, r.algo)
            if k not in best or r.median_ms < best[k].median_ms:
                best[k] = r
        cases = sorted({c for c, _ in best})[:max_rows]
        algos = sorted({a for _, a in best})
        fastest = {c: min(v.median_ms for (cc, _), v in best.items() if cc == c) for c in cases}
        cell_w, cell_h, left, top = 92, 22, 230, 60
        cells = []
        for i, c in enumerate(cases):
            for j, a in enumerate(algos):
                r = best.get((c, a))
                if r is None:
                    continue
                ratio = r.median_ms / fastest[c]
                cells.append({"x": left + j * cell_w, "y": top + i * cell_h,
                              "fill": time_color(ratio), "text": fmt_time(r.median_ms), "dark": ratio > 4,
                              "title": f"{c} / {a}: {ratio:.3g}x the case's fastest ({r.math}, {r.layout})"})
        out.append({"backend": backend, "dtype": dtype, "direction": direction, "rows": cases, "cols": algos,
                    "cells": cells, "left_out": max(0, len({c for c, _ in best}) - max_rows), "notes": [],
                    "width": left + cell_w * len(algos) + 10, "height": top + cell_h * len(cases) + 10,
                    "left": left, "top": top, "cell_w": cell_w, "cell_h": cell_h})
    return out


VERDICT_COLOURS = {"slower": "#c53030", "faster": "#2f855a", "ambiguous": "#d69e2e"}


def ratio_scatter(base: dict[str, Record], head: dict[str, Record], findings: list[Any], *,
                  width: int = 620, height: int = 200) -> dict[str, Any] | None:
    """One comparison at a glance: every combination timed on both sides at (base time, head/base), log axes,
    coloured by its time verdict. The unchanged ones are one grey path (a dot a move: 2,000 of them in ~25 KB);
    ratios beyond 4x either way sit on the edge. Points are drawn in key order: a set's order changes from process
    to process, and a report is the same bytes for the same store."""
    verdict = {f.key: f.words for f in findings if f.kind == "time"}
    pts = [(head[k].median_ms / base[k].median_ms, base[k].median_ms, verdict.get(k, "unchanged"))
           for k in sorted(base.keys() & head.keys()) if base[k].status == OK and head[k].status == OK
           and base[k].median_ms and head[k].median_ms]
    if not pts:
        return None
    pad_l, pad_r, pad_t, pad_b = 46, 10, 8, 30
    xs = [math.log10(b) for _, b, _ in pts]
    x_lo, x_hi = math.floor(min(xs)), math.ceil(max(xs))
    x_hi += x_hi == x_lo
    y_lim = 2.0  # log2 ratio: 0.25x .. 4x

    def at(ratio: float, ms: float) -> tuple[float, float]:
        y = max(-y_lim, min(y_lim, math.log2(ratio)))
        return (round(pad_l + (math.log10(ms) - x_lo) / (x_hi - x_lo) * (width - pad_l - pad_r), 1),
                round(pad_t + (y_lim - y) / (2 * y_lim) * (height - pad_t - pad_b), 1))

    grey, dots = [], []
    for ratio, ms, words in sorted(pts, key=lambda p: p[2] != "unchanged"):
        x, y = at(ratio, ms)
        if words == "unchanged":
            grey.append(f"M{x} {y}h0")
        else:
            dots.append({"x": x, "y": y, "fill": VERDICT_COLOURS.get(words, "#555")})
    counts = Counter(p[2] for p in pts)
    return {"width": width, "height": height, "grey": "".join(grey), "dots": dots, "x0": pad_l,
            "x1": width - pad_r, "y0": pad_t, "y1": height - pad_b,
            "xticks": [{"x": at(1.0, 10.0 ** e)[0], "text": fmt_time(10.0 ** e)} for e in range(x_lo, x_hi + 1)],
            "yticks": [{"y": at(r, 10.0 ** x_lo)[1], "text": f"{r:g}x"} for r in (0.25, 0.5, 1.0, 2.0, 4.0)],
            "legend": [(w, VERDICT_COLOURS.get(w, "#999"), counts.get(w, 0))
                       for w in ("slower", "faster", "ambiguous", "unchanged")]}
