"""``report``: the store rendered as a static site a fleet team reads in the morning, offline, from file://.

Pages: index (machines x images: what ran, failed, regressed), one page per machine (accuracy heatmaps, nightly
series with change points, every run's fingerprint), architecture comparison, determinism and autotuner
stability, onnxruntime search modes, regressions with evidence, change points, all runs. jinja2 with autoescape
on renders everything; charts are inline SVG drawn from numbers computed here; the only script is the inline
table sorter/filter. Every comparison names the hardware its numbers come from.

The index aggregates, so it stays small for a fleet of any size; anything per run or per combination lives on
the per-topic and per-machine pages, and long tables are capped with the count of rows left out.
"""

from __future__ import annotations

import datetime as dt
import gc
import hashlib
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from . import changepoint
from .compare import Finding, Thresholds, compare_records, cross_machine
from .records import OK
from .store import Store

TEMPLATES = Path(__file__).parent / "templates"
MAX_ROWS = 3000  # per table; more rows are counted, not shown
MAX_CHARTS = 24  # series charts per machine page
MAX_EVIDENCE_PLOTS = 300
METRIC_NAMES = {"max_norm_err": "max normalised error", "rel_l2": "relative L2 error (asv records no other)",
                None: "error (not measured)"}


# ---- small helpers ---------------------------------------------------------------------------------------------

def slug(name: str) -> str:
    """File-name-safe and collision-free (hash suffix) for any machine name."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:60] or "machine"
    return f"{base}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def fmt_ms(v: float | None) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.4g}"


def fmt_err(v: float | None) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.2e}"


def settings_str(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((settings or {}).items()) if k != "device")


def err_color(err: float | None, status_ok: bool = True) -> str:
    """Heatmap colour for a max normalised error: green (fp32-exact) through yellow to red (bf16 and worse)."""
    if not status_ok:
        return "#b8b8b8"
    if err is None or not math.isfinite(err):
        return "#5a0000"
    t = min(1.0, max(0.0, (math.log10(max(err, 1e-10)) + 9.0) / 8.0))  # 1e-9 -> 0, 1e-1 -> 1
    hue = 120 * (1 - t)
    return f"hsl({hue:.0f},70%,{45 + 10 * (1 - t):.0f}%)"


def hardware_label(run: dict[str, Any], fingerprint: dict[str, Any]) -> str:
    if run.get("gpu_model"):
        sm = f", sm {run['sm']}" if run.get("sm") else ""
        return f"GPU {run['gpu_model']}{sm}"
    if run["hardware"] == "cpu":
        cpu = fingerprint.get("cpu") or "?"
        return f"CPU only ({cpu}, {fingerprint.get('cpu_count') or '?'} cores)"
    return "hardware not recorded (asv results)"


# ---- charts (numbers to SVG coordinates; the templates only place them) ------------------------------------------

def line_chart(nights: list[str], values: np.ndarray, changes: list[changepoint.Change], *, width: int = 560,
               height: int = 150, unit: str = "ms") -> dict[str, Any]:
    pad_l, pad_r, pad_t, pad_b = 52, 8, 8, 22
    v = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(v)
    n = len(v)
    if not finite.any():
        return {"width": width, "height": height, "points": "", "changes": [], "ylabels": [], "xlabels": []}
    lo, hi = float(np.nanmin(v[finite])), float(np.nanmax(v[finite]))
    if hi - lo < 1e-12 * max(abs(hi), 1):
        lo, hi = lo * 0.95, hi * 1.05 + 1e-12
    span = hi - lo
    lo, hi = lo - 0.05 * span, hi + 0.05 * span

    def x(i: int) -> float:
        return pad_l + (width - pad_l - pad_r) * (i / max(n - 1, 1))

    def y(val: float) -> float:
        return pad_t + (height - pad_t - pad_b) * (1 - (val - lo) / (hi - lo))

    pts = " ".join(f"{x(i):.1f},{y(val):.1f}" for i, val in enumerate(v) if math.isfinite(val))
    step = (x(1) - x(0)) / 2 if n > 1 else 0.0
    marks = [{"x": round(x(c.index) - step, 1), "night": nights[c.index],
              "label": f"step x{c.ratio:.2f} from {nights[c.index]}: {c.before:.4g} -> {c.after:.4g} {unit}"}
             for c in changes]
    # segment levels as horizontal lines
    bounds = [0, *[c.index for c in changes], n]
    levels = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        seg = v[a:b][np.isfinite(v[a:b])]
        if len(seg):
            lv = float(np.exp(np.mean(np.log(seg)))) if (seg > 0).all() else float(np.mean(seg))
            levels.append({"x1": round(x(a), 1), "x2": round(x(b - 1), 1), "y": round(y(lv), 1)})
    ylabels = [{"y": round(y(val), 1), "text": f"{val:.3g}"} for val in (lo, (lo + hi) / 2, hi)]
    xlabels = [{"x": round(x(i), 1), "text": nights[i], "anchor": "start" if i == 0 else "end"}
               for i in sorted({0, n - 1})]
    return {"width": width, "height": height, "points": pts, "changes": marks, "levels": levels,
            "ylabels": ylabels, "xlabels": xlabels, "x0": pad_l, "x1": width - pad_r, "y1": height - pad_b}


def strip_plot(base: np.ndarray, head: np.ndarray, *, width: int = 260, height: int = 46) -> dict[str, Any] | None:
    if base is None or head is None or not len(base) or not len(head):
        return None
    allv = np.concatenate([base, head])
    lo, hi = float(allv.min()), float(allv.max())
    if hi <= lo:
        hi = lo + 1e-9
    sx = (width - 20) / (hi - lo)

    def xs(a):
        return [round(10 + (float(v) - lo) * sx, 1) for v in a[:200]]

    return {"width": width, "height": height, "base": xs(base), "head": xs(head),
            "base_med": round(10 + (float(np.median(base)) - lo) * sx, 1),
            "head_med": round(10 + (float(np.median(head)) - lo) * sx, 1), "lo": f"{lo:.4g}", "hi": f"{hi:.4g}"}


# ---- the model the templates render ------------------------------------------------------------------------------

@dataclass
class MachineInfo:
    name: str
    slug: str
    hardware: str
    label: str
    images: list[str]
    runs: list[dict[str, Any]]
    latest_fp: dict[str, Any]


@dataclass
class Series:
    """Nightly values of one (machine, image): rows are runs (oldest first), columns combination ids."""

    machine: str
    image: str
    runs: list[dict[str, Any]]
    combos: np.ndarray
    median: np.ndarray
    hashes: np.ndarray
    chosen: np.ndarray
    changes: dict[int, list[changepoint.Change]] = field(default_factory=dict)


def _series(store: Store, machine: str, image: str, runs: list[dict[str, Any]],
            vectors: dict[int, dict[str, np.ndarray]]) -> Series:
    ids = np.unique(np.concatenate([vectors[r["id"]]["combo"] for r in runs if r["id"] in vectors] or [[]]))
    ids = ids.astype(np.int64)
    T, S = len(runs), len(ids)
    med = np.full((T, S), np.nan)
    hashes = np.zeros((T, S), dtype=np.int64)
    chosen = np.full((T, S), -1, dtype=np.int32)
    for i, r in enumerate(runs):
        v = vectors.get(r["id"])
        if v is None or not len(v["combo"]):
            continue
        cols = np.searchsorted(ids, v["combo"])
        ok = v["ok"]
        med[i, cols[ok]] = v["median"][ok]
        hashes[i, cols[ok]] = v["hash"][ok]
        chosen[i, cols] = v["chosen"]
    return Series(machine, image, runs, ids, med, hashes, chosen)


def _distinct_per_column(M: np.ndarray, missing: int) -> np.ndarray:
    S = np.sort(M, axis=0)
    new = np.ones(S.shape, dtype=bool)
    new[1:] = S[1:] != S[:-1]
    return (new & (S != missing)).sum(axis=0)


def _combo_label(c: dict[str, Any]) -> dict[str, Any]:
    settings = json.loads(c["settings"]) if isinstance(c["settings"], str) else c["settings"]
    if c.get("kind", "measurement") != "measurement":
        settings = {"record": c["kind"], **settings}
    return {"case": c["case_id"], "backend": c["backend"], "direction": c["direction"], "algo": c["algo"],
            "math": c["math"], "dtype": c["dtype"], "layout": c["layout"], "settings": settings_str(settings),
            "raw_settings": settings}


def current_records(store: Store, runs: list[dict[str, Any]],
                    vectors: dict[int, dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """The newest record of every combination over the runs of one machine and image (oldest first).

    A nightly run covers everything, so only the newest run is read; runs that each cover part of a sweep
    (a forward run, then autotune, then backward, one after another) are read in turn for what no newer run
    measured. Each record says which run it came from."""
    seen: set[int] = set()
    out: list[dict[str, Any]] = []
    for r in reversed(runs):
        v = vectors.get(r["id"])
        if v is None or not len(v["combo"]):
            continue
        new = set(v["combo"].tolist()) - seen
        if not new:
            continue
        for x in store.records(r["id"]):  # with samples: image comparisons test times on them
            if x["combo"] in new:
                x["run"] = r
                out.append(x)
        seen |= new
    return out


def gather(store: Store, title: str) -> dict[str, Any]:
    runs = store.runs()
    combos = store.combos()
    names = store.names()
    fps: dict[int, dict[str, Any]] = {}
    by_machine: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by_machine[r["machine"]].append(r)
    images_order: list[str] = []
    for r in runs:
        if r["image"] not in images_order:
            images_order.append(r["image"])
    machines: list[MachineInfo] = []
    for m in sorted(by_machine):
        rs = by_machine[m]
        known = [r for r in rs if r["hardware"] != "unknown"] or rs  # asv results record no hardware
        fp = store.run_json(known[-1]["id"])["fingerprint"]
        fps[known[-1]["id"]] = fp
        imgs = list(dict.fromkeys(r["image"] for r in rs))
        machines.append(MachineInfo(m, slug(m), known[-1]["hardware"], hardware_label(known[-1], fp), imgs, rs,
                                    fp))
    minfo = {m.name: m for m in machines}
    latest = {(r["machine"], r["image"]): r for r in runs}  # runs are oldest first: the last one wins

    # nightly series and change points, per (machine, image)
    all_vectors = store.vectors([r["id"] for r in runs])
    runs_of: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        runs_of[(r["machine"], r["image"])].append(r)
    current = {key: current_records(store, runs_of[key], all_vectors) for key in latest}
    series: list[Series] = []
    for m in machines:
        for img in m.images:
            rs = [r for r in m.runs if r["image"] == img]
            s = _series(store, m.name, img, rs, all_vectors)
            s.changes = changepoint.detect_matrix(s.median) if len(rs) >= 2 * changepoint.MIN_SIZE else {}
            series.append(s)
    del all_vectors

    # image transitions on each machine: latest run of an image vs latest run of the image that followed it
    th = Thresholds()
    transitions = []
    pairs = []
    for m in machines:
        # asv results and the suite's own journals are two views, not two images: each is compared with its kind
        for source in ("journal", "asv"):
            imgs = [i for i in m.images if latest[(m.name, i)]["source"] == source]
            pairs.extend((m, a, b) for a, b in zip(imgs[:-1], imgs[1:], strict=True))
    for m, a, b in pairs:
        rb, rh = latest[(m.name, a)], latest[(m.name, b)]
        findings = compare_records(current[(m.name, a)], current[(m.name, b)], th)
        for f in findings:
            f.machine, f.base_run, f.head_run = m.name, rb["run_id"], rh["run_id"]
        transitions.append({"machine": m.name, "slug": m.slug, "label": m.label, "base": rb, "head": rh,
                            "findings": findings})

    # per-(machine, image) regression counts for the overview
    regressed: Counter = Counter()
    for t in transitions:
        regressed[(t["machine"], t["head"]["image"])] += sum(f.verdict == "regression" for f in t["findings"])
    steps_up: Counter = Counter()
    for s in series:
        for _col, chs in s.changes.items():
            steps_up[(s.machine, s.image)] += sum(c.ratio > 1 for c in chs)

    return {"title": title, "runs": runs, "combos": combos, "names": names, "machines": machines, "minfo": minfo,
            "images": images_order, "latest": latest, "series": series, "transitions": transitions,
            "regressed": regressed, "steps_up": steps_up, "store": store, "current": current}


# ---- page contexts -----------------------------------------------------------------------------------------------

def overview(g: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for m in g["machines"]:
        cells = []
        for img in g["images"]:
            rs = [r for r in m.runs if r["image"] == img]
            if not rs:
                cells.append(None)
                continue
            last = rs[-1]
            cur = g["current"].get((m.name, img), [])
            statuses = Counter(x["status"] for x in cur)
            failed = {k: v for k, v in statuses.items() if k != OK}
            cells.append({"runs": len(rs), "last_night": last["night"], "records": len(cur),
                          "ok": statuses.get(OK, 0), "failed": sum(failed.values()), "failed_by": failed,
                          "asv": last["source"] == "asv",
                          "from_runs": len({x["run"]["id"] for x in cur}),
                          "incomplete": sum(1 for r in rs if not r["complete"]),
                          "regressions": g["regressed"].get((m.name, img), 0),
                          "steps": g["steps_up"].get((m.name, img), 0)})
        rows.append({"machine": m, "cells": cells})
    total_records = sum(r["n_records"] for r in g["runs"])
    hw = Counter(m.label for m in g["machines"])
    return {"rows": rows, "n_runs": len(g["runs"]), "n_records": total_records, "hardware": sorted(hw.items()),
            "n_regressions": sum(g["regressed"].values()), "n_steps": sum(g["steps_up"].values())}


def heatmaps(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Accuracy heatmaps: algo x math, one per (dtype, direction); cell = worst max_norm_err of the
    measurements (autotune, crosscheck and repro records have their own tables)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        if r["kind"] == "measurement":
            groups[(r["dtype"], r["direction"])].append(r)
    out = []
    for (dtype, direction), rs in sorted(groups.items()):
        # asv results carry the relative L2 error only; a map says which measure it shows
        metric = next((m for m in ("max_norm_err", "rel_l2") if any(r[m] is not None for r in rs
                                                                      if r["status"] == OK)), None)
        algos = sorted({r["algo"] for r in rs})
        maths = sorted({r["math"] for r in rs})
        cell_w, cell_h, left, top = 92, 26, 230, 60
        cells = []
        for i, a in enumerate(algos):
            for j, mth in enumerate(maths):
                sel = [r for r in rs if r["algo"] == a and r["math"] == mth]
                if not sel:
                    continue
                ok = [r for r in sel if r["status"] == OK]
                errs = [r[metric] for r in ok if metric and r[metric] is not None]
                classes = Counter(r["precision_class"] for r in ok if r["precision_class"])
                worst = max(errs) if errs else None
                statuses = Counter(r["status"] for r in sel)
                broken = classes.get("broken", 0)
                text = (("no error" if metric is None else fmt_err(worst)) if ok
                        else next(iter(statuses)).replace("CUDNN_STATUS_", "").replace("NOT_SUPPORTED",
                                                                                       "unsupported")[:13])
                expl = next((r["explanation"] for r in sel if r.get("explanation")), None)
                cells.append({"x": left + j * cell_w, "y": top + i * cell_h, "w": cell_w - 2, "h": cell_h - 2,
                              "fill": "#cfd8e3" if ok and metric is None else
                              err_color(None if broken else worst, bool(ok)), "text": text,
                              "dark": bool(ok) and (broken or (worst is not None and worst > 1e-4)),
                              "title": (f"{a} / {mth} / {dtype} / {direction}: {len(sel)} records, "
                                        f"{dict(statuses)}; classes {dict(classes)}; worst {METRIC_NAMES[metric]} "
                                        f"{fmt_err(worst)}" + (f". {expl}" if expl else ""))})
        out.append({"dtype": dtype, "direction": direction, "algos": algos, "maths": maths, "cells": cells,
                    "metric": METRIC_NAMES[metric],
                    "width": left + cell_w * len(maths) + 10, "height": top + cell_h * len(algos) + 10,
                    "left": left, "top": top, "cell_w": cell_w, "cell_h": cell_h})
    return out


def machine_page(g: dict[str, Any], m: MachineInfo) -> dict[str, Any]:
    store: Store = g["store"]
    maps = []
    for img in m.images:
        recs = g["current"][(m.name, img)]
        from_runs = list(dict.fromkeys(x["run"]["run_id"] for x in recs))
        maps.append({"image": img, "run": g["latest"][(m.name, img)], "from_runs": from_runs,
                     "maps": heatmaps(recs)})
    charts = []
    overview_charts = []
    for s in g["series"]:
        if s.machine != m.name:
            continue
        nights = [r["started"][:16].replace("T", " ") for r in s.runs]
        if len(s.runs) >= 2:
            # the run-level index: geometric mean over combinations of time relative to the first night
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = np.log(s.median / s.median[0:1, :])
            rel[~np.isfinite(rel)] = np.nan
            have = np.isfinite(rel).any(axis=1)
            idx = np.full(len(s.runs), np.nan)
            if have.sum() >= 2:  # runs that each cover another part of a sweep share nothing to compare
                idx[have] = np.exp(np.nanmean(rel[have], axis=1))
            else:
                continue
            ch = changepoint.detect(idx)
            overview_charts.append({"image": s.image, "chart": line_chart(nights, idx, ch, unit="x first night"),
                                    "changes": ch, "n": len(s.runs)})
        ranked = sorted(s.changes.items(), key=lambda kv: -max(abs(math.log(c.ratio)) for c in kv[1]))
        for col, chs in ranked[:MAX_CHARTS]:
            c = _combo_label(g["combos"][int(s.combos[col])])
            charts.append({"image": s.image, "combo": c, "chart": line_chart(nights, s.median[:, col], chs),
                           "changes": [{"night": nights[x.index], "ratio": x.ratio, "before": x.before,
                                        "after": x.after} for x in chs]})
    runs = []
    for r in m.runs[-MAX_ROWS:]:
        info = store.run_json(r["id"])
        runs.append({"run": r, "fingerprint": json.dumps(info["fingerprint"], indent=1, sort_keys=True),
                     "options": json.dumps(info["options"], indent=1, sort_keys=True),
                     "end": json.dumps(info["end"], indent=1, sort_keys=True) if info["end"] else None})
    return {"m": m, "maps": maps, "charts": charts, "overview_charts": overview_charts, "runs": runs,
            "runs_left_out": max(0, len(m.runs) - MAX_ROWS)}


def architecture(g: dict[str, Any]) -> dict[str, Any]:
    """Cross-machine sections: per image, one representative machine per hardware label (its newest run)."""
    sections = []
    by_image: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (machine, img), r in g["latest"].items():
        label = g["minfo"][machine].label
        cur = by_image[img].get(label)
        if cur is None or r["started"] > cur["started"]:
            by_image[img][label] = r
    compared = [(img, list(reps.values())) for img, reps in by_image.items() if len(reps) >= 2]
    note = None
    if not compared and len(g["machines"]) >= 2:
        # no image ran on two kinds of hardware: compare each machine's newest run and say so
        newest = {}
        for m in g["machines"]:
            newest.setdefault(m.label, m.runs[-1])
        compared = [(None, list(newest.values()))]
        note = ("No image ran on two kinds of hardware, so these columns compare each machine's newest run: "
                "the differences mix hardware with software (" + ", ".join(
                    f"{r['machine']}: image {r['image']}" for r in newest.values()) + ").")
    for img, reps in compared:
        reps = sorted(reps, key=lambda r: (r["hardware"] != "gpu", r["machine"]))
        records = {r["id"]: g["current"][(r["machine"], r["image"])] for r in reps}
        cm = cross_machine(reps, records)
        rows = cm["rows"]
        both = [x for x in rows if sum(c is not None for c in x["cells"]) >= 2]
        disjoint = None
        if not both:  # say why there is nothing side by side: usually different case sets
            sets = {r["machine"]: sorted({x["case_id"].split(".")[0] for x in records[r["id"]]}) for r in reps}
            disjoint = "; ".join(f"{m} ran case groups {', '.join(v)}" for m, v in sets.items())
        sections.append({"image": img, "runs": reps, "labels": [g["minfo"][r["machine"]].label for r in reps],
                         "rows": both[:MAX_ROWS], "left_out": max(0, len(both) - MAX_ROWS),
                         "only_one": len(rows) - len(both), "disjoint": disjoint,
                         "n_identical": sum(1 for x in both if x["bitwise_identical"]),
                         "n_class_differs": sum(1 for x in both if x["class_differs"])})
    return {"sections": sections, "note": note}


def _sm_family(sm: str | None) -> str | None:
    try:
        major = int(str(sm).split(".")[0])
    except ValueError:
        return None
    return {6: "Pascal", 7: "Volta/Turing", 8: "Ampere/Ada", 9: "Hopper", 10: "Blackwell", 12: "Blackwell"}.get(
        major, f"sm {major}.x")


def coverage(g: dict[str, Any]) -> dict[str, Any]:
    """Which GPU generations the store holds, so that every answer can say which side it has no data for."""
    gpus = sorted({(r["gpu_model"], r["sm"]) for r in g["runs"] if r["gpu_model"]}, key=str)
    families = {_sm_family(sm) for _, sm in gpus}
    return {"gpus": [f"{name} (sm {sm}, {_sm_family(sm)})" for name, sm in gpus],
            "has_pre_tf32": any(f in ("Pascal", "Volta/Turing") for f in families),
            "has_ampere": "Ampere/Ada" in families, "cpu_machines": [m.name for m in g["machines"]
                                                                    if m.hardware == "cpu"]}


def _autotune_row(machine: str, label: str, image: str, x: dict[str, Any]) -> dict[str, Any]:
    extra = x["extra"] or {}
    winners = extra.get("winners") or {}
    near = extra.get("near_ties") or []
    spread = extra.get("max_abs_spread")
    distinct = x["distinct_outputs"] or 1
    if len(winners) > 1 and distinct > 1:
        verdict, rank = "different algorithms, different bits", 0
    elif distinct > 1:
        verdict, rank = "different bits", 1
    elif len(winners) > 1:
        verdict, rank = "different algorithms, same bits", 2
    elif near:
        verdict, rank = "near tie", 3
    else:
        verdict, rank = "stable", 4
    return {"machine": machine, "label": label, "image": image, "rec": x, "run": x["run"], "verdict": verdict,
            "rank": rank, "winners": ", ".join(f"{k} x{n}" for k, n in sorted(winners.items(), key=lambda kv: -kv[1])),
            "trials": sum(winners.values()) if winners else (x["repeats"] or 0), "spread": spread,
            "near": "; ".join(f"{t.get('winner')} leads {t.get('runner_up')} by {100 * t.get('gap', 0):.1f} %, "
                              f"max |delta| {t.get('max_abs_delta', 0):.3g}" for t in near),
            "settings": settings_str({k: v for k, v in x["settings"].items() if k != "record"})}


def findings(g: dict[str, Any]) -> dict[str, Any]:
    """The records that answer the suite's seed questions: F.conv2d against direct cuDNN with FMA math
    (crosscheck records) and whether cuDNN's autotuner picks the same algorithm every session (autotune)."""
    cross, tune = [], []
    for (machine, img), recs in sorted(g["current"].items()):
        label = g["minfo"][machine].label
        for x in recs:
            if x["kind"] == "crosscheck":
                e = x["extra"] or {}
                cross.append({"machine": machine, "label": label, "image": img, "rec": x, "run": x["run"],
                              "delta": e.get("max_abs_delta"), "torch_class": e.get("torch_class"),
                              "fma_class": e.get("cudnn_fma_class"), "fma_err": e.get("cudnn_fma_max_abs"),
                              "sm": e.get("sm"), "settings": settings_str({k: v for k, v in x["settings"].items()
                                                                           if k != "record"})})
            elif x["kind"] == "autotune":
                tune.append(_autotune_row(machine, label, img, x))
    cross.sort(key=lambda c: (c["machine"], c["rec"]["case_id"], c["rec"]["dtype"]))
    # the seed cases first: they are the ones the suite's questions were asked about
    tune.sort(key=lambda t: (t["rank"], not t["rec"]["case_id"].startswith("seed."), -(t["spread"] or 0),
                             t["machine"], t["rec"]["case_id"]))
    return {"cross": cross, "autotune": tune, "coverage": coverage(g),
            "n_unstable": sum(1 for t in tune if t["rank"] <= 1),
            "n_same_bits": sum(1 for t in tune if t["rank"] == 2),
            "n_near": sum(1 for t in tune if t["rank"] == 3)}


def determinism(g: dict[str, Any]) -> dict[str, Any]:
    within = []  # newest record of each combination per (machine, image) whose repeats / fresh handles differ
    summary = []
    repro_diff = []
    for (machine, img), cur in sorted(g["current"].items()):
        recs = [x for x in cur if x["status"] == OK and x["kind"] == "measurement"]
        nd = [x for x in recs if x["repeat_equal"] == 0 or x["fresh_handle_equal"] == 0
              or (x["distinct_outputs"] or 1) > 1]
        checked = [x for x in recs if x["repeat_equal"] is not None]
        repro = [x for x in cur if x["kind"] == "repro"]
        fpe = Counter((x["extra"] or {}).get("fresh_process_equal") for x in repro)
        summary.append({"machine": machine, "label": g["minfo"][machine].label, "image": img,
                        "runs": list(dict.fromkeys(x["run"]["run_id"] for x in cur)),
                        "ok": len(recs), "checked": len(checked), "nondeterministic": len(nd),
                        "repro": len(repro), "repro_equal": fpe.get(True, 0), "repro_differs": fpe.get(False, 0),
                        "repro_unknown": len(repro) - fpe.get(True, 0) - fpe.get(False, 0)})
        for x in nd:
            within.append({"machine": machine, "image": img, "rec": x, "settings": settings_str(x["settings"])})
        for x in repro:
            if (x["extra"] or {}).get("fresh_process_equal") is False:
                repro_diff.append({"machine": machine, "image": img, "rec": x,
                                   "settings": settings_str(x["settings"])})
    across = []
    autotune = []
    n_series = 0
    for s in g["series"]:
        if len(s.runs) < 2:
            continue
        n_series += 1
        distinct = _distinct_per_column(s.hashes, 0)
        for col in np.flatnonzero(distinct > 1):
            c = _combo_label(g["combos"][int(s.combos[col])])
            counts = Counter(int(h) for h in s.hashes[:, col] if h)
            across.append({"machine": s.machine, "image": s.image, "combo": c, "distinct": int(distinct[col]),
                           "nights": int((s.hashes[:, col] != 0).sum()),
                           "top_share": counts.most_common(1)[0][1] / max(1, sum(counts.values()))})
        has = (s.chosen >= 0).any(axis=0)
        dch = _distinct_per_column(s.chosen, -1)
        for col in np.flatnonzero(has):
            counts = Counter(int(v) for v in s.chosen[:, col] if v >= 0)
            if sum(counts.values()) < 2:  # one night says nothing about stability across nights
                continue
            c = _combo_label(g["combos"][int(s.combos[col])])
            top, top_n = counts.most_common(1)[0]
            autotune.append({"machine": s.machine, "image": s.image, "combo": c, "distinct": int(dch[col]),
                             "nights": sum(counts.values()), "top": g["names"].get(top, "?"),
                             "top_share": top_n / sum(counts.values()),
                             "all": ", ".join(f"{g['names'].get(k, '?')} x{n}" for k, n in counts.most_common())})
    autotune.sort(key=lambda a: (a["top_share"], a["machine"]))
    across.sort(key=lambda a: (-a["distinct"], a["machine"]))
    return {"summary": summary, "within": within[:MAX_ROWS], "within_left_out": max(0, len(within) - MAX_ROWS),
            "across": across[:MAX_ROWS], "across_left_out": max(0, len(across) - MAX_ROWS),
            "autotune": autotune[:MAX_ROWS], "autotune_left_out": max(0, len(autotune) - MAX_ROWS),
            "n_autotune_unstable": sum(1 for a in autotune if a["distinct"] > 1), "n_series": n_series,
            "repro_diff": repro_diff[:MAX_ROWS], "repro_diff_left_out": max(0, len(repro_diff) - MAX_ROWS),
            "sessions": findings(g)}


ORT_MODES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")


def ort(g: dict[str, Any]) -> dict[str, Any]:
    rows = []
    pivot: dict[tuple, dict[str, Any]] = {}
    for (machine, img), cur in sorted(g["current"].items()):
        for x in cur:
            # asv's copies of the grid (one value per track function) say less than the journaled records
            # beside them; the page reads the records
            if x["backend"] != "ort" or "asv_benchmark" in (x["settings"] or {}):
                continue
            mode = (x["settings"] or {}).get("cudnn_conv_algo_search")
            others = {k: v for k, v in x["settings"].items() if k != "cudnn_conv_algo_search"}
            rows.append({"machine": machine, "label": g["minfo"][machine].label, "image": img, "rec": x,
                         "mode": mode if mode is not None else "-", "settings": settings_str(others)})
            key = (machine, img, x["case_id"], x["dtype"], settings_str(others))
            p = pivot.setdefault(key, {"machine": machine, "label": g["minfo"][machine].label, "image": img,
                                       "case": x["case_id"], "dtype": x["dtype"], "settings": key[-1],
                                       "modes": {}, "run": x["run"]})
            p["modes"][str(mode)] = x
    modes = list(ORT_MODES) + sorted({m for p in pivot.values() for m in p["modes"]} - set(ORT_MODES))
    table = []
    for p in pivot.values():
        ms = {m: p["modes"][m]["median_ms"] for m in ORT_MODES if m in p["modes"]
              and p["modes"][m]["median_ms"] is not None}
        hashes = {p["modes"][m]["hash"] for m in p["modes"] if p["modes"][m]["hash"]}
        several = len(p["modes"]) >= 2
        table.append({**p, "ms": ms, "fastest": min(ms, key=ms.get) if len(ms) >= 2 else None,
                      "same_bits": (len(hashes) == 1) if several and hashes else None,
                      "cells": [p["modes"].get(m) for m in modes]})
    table.sort(key=lambda p: (p["machine"], p["image"], p["case"], p["dtype"], p["settings"]))
    rows.sort(key=lambda r: (r["machine"], r["image"], r["rec"]["case_id"], r["rec"]["dtype"], r["mode"]))
    runs = {id(None)}
    ort_runs = []
    for r in rows:
        if r["rec"]["run"]["id"] not in runs:
            runs.add(r["rec"]["run"]["id"])
            ort_runs.append(r["rec"]["run"])
    notes = sorted({r["rec"]["explanation"] for r in rows if r["rec"]["explanation"]})
    return {"rows": rows[:MAX_ROWS], "left_out": max(0, len(rows) - MAX_ROWS), "modes": modes,
            "pivot": table[:MAX_ROWS], "pivot_left_out": max(0, len(table) - MAX_ROWS), "runs": ort_runs,
            "notes": notes[:20]}


def regressions(g: dict[str, Any]) -> dict[str, Any]:
    items = []
    plots = 0
    for t in g["transitions"]:
        regs = [f for f in t["findings"] if f.verdict == "regression"]
        changes = Counter(f"{f.kind} {f.verdict}" for f in t["findings"] if f.verdict != "regression")
        rows = []
        base_recs: dict[str, dict[str, Any]] | None = None
        head_recs: dict[str, dict[str, Any]] = {}
        for f in regs[:MAX_ROWS]:
            plot = None
            if f.kind == "time" and plots < MAX_EVIDENCE_PLOTS:
                if base_recs is None:
                    base_recs = {x["key"]: x for x in g["current"][(t["machine"], t["base"]["image"])]}
                    head_recs = {x["key"]: x for x in g["current"][(t["machine"], t["head"]["image"])]}
                b, h = base_recs.get(f.key), head_recs.get(f.key)
                if b is not None and h is not None:
                    plot = strip_plot(b["samples"], h["samples"])
                    plots += 1
            rows.append({"f": f, "settings": settings_str(f.settings), "plot": plot})
        items.append({"t": t, "rows": rows, "left_out": max(0, len(regs) - MAX_ROWS), "other": sorted(
            changes.items())})
    steps = []
    for s in g["series"]:
        nights = [r["night"] for r in s.runs]
        for col, chs in s.changes.items():
            c = _combo_label(g["combos"][int(s.combos[col])])
            for ch in chs:
                steps.append({"machine": s.machine, "slug": g["minfo"][s.machine].slug,
                              "label": g["minfo"][s.machine].label, "image": s.image, "combo": c,
                              "night": nights[ch.index], "ratio": ch.ratio, "before": ch.before, "after": ch.after,
                              "score": ch.score, "n": len(s.runs)})
    steps.sort(key=lambda x: -abs(math.log(x["ratio"])))
    return {"pairs": items, "steps": steps[:MAX_ROWS], "steps_left_out": max(0, len(steps) - MAX_ROWS),
            "n_steps": len(steps), "thresholds": Thresholds()}


# ---- rendering ---------------------------------------------------------------------------------------------------

def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(ms=fmt_ms, err=fmt_err, settings=settings_str)
    return env


def build(store: Store, out: Path, *, title: str = "convbench fleet report") -> list[Path]:
    """Render every page into ``out``; returns the paths written."""
    # gather holds millions of long-lived objects that the default thresholds traverse again and again: 29% of
    # a 10^7-record report's CPU time went to the cyclic collector (measured 2026-11-29: 9.9 -> 7.7 s, same RSS)
    thresholds = gc.get_threshold()
    gc.set_threshold(50_000, 20, 100)
    try:
        return _build(store, out, title)
    finally:
        gc.set_threshold(*thresholds)


def _build(store: Store, out: Path, title: str) -> list[Path]:
    out = Path(out)
    (out / "machines").mkdir(parents=True, exist_ok=True)
    g = gather(store, title)
    env = environment()
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    common = {"title": title, "generated": generated, "machines": g["machines"], "images": g["images"],
              "store_path": store.path}
    written: list[Path] = []

    def page(template: str, path: Path, root: str, **ctx: Any) -> None:
        html = env.get_template(template).render(**common, root=root, **ctx)
        path.write_text(html, encoding="utf-8")
        written.append(path)

    page("index.html", out / "index.html", "", page_id="index", ov=overview(g), fd=findings(g))
    page("architecture.html", out / "architecture.html", "", page_id="architecture", arch=architecture(g))
    page("determinism.html", out / "determinism.html", "", page_id="determinism", det=determinism(g))
    page("ort.html", out / "ort.html", "", page_id="ort", o=ort(g))
    page("regressions.html", out / "regressions.html", "", page_id="regressions", reg=regressions(g))
    page("runs.html", out / "runs.html", "", page_id="runs", runs=g["runs"][-20 * MAX_ROWS:],
         left_out=max(0, len(g["runs"]) - 20 * MAX_ROWS), minfo=g["minfo"])
    keep = set()
    for m in g["machines"]:
        path = out / "machines" / f"{m.slug}.html"
        keep.add(path.name)
        page("machine.html", path, "../", page_id="machine", mp=machine_page(g, m))
    for old in (out / "machines").glob("*.html"):  # pages of machines no longer in the store
        if old.name not in keep:
            old.unlink()
    return written


__all__ = ["build", "gather", "slug", "Finding"]
