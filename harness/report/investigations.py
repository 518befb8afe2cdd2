"""Investigations, each on its own page: F.conv2d against direct cuDNN (crosscheck records), the autotuner's
choices over fresh sessions (autotune records), onnxruntime's search modes and cuDNN's own rankings. Not nightly
news: linked from the index, not on it."""

from __future__ import annotations

from typing import Any

from ..analysis.rankings import NOTICEABLE, compare_rankings, summarise
from ..core.cases import SEARCH_MODES as ORT_MODES
from ..core.records import OK, Record, RecordKind  # noqa: F401  (OK kept for page modules that filter by status)
from .fmt import settings_str
from .model import Model
from .paging import Parts


def _sm_family(sm: str | None) -> str | None:
    try:
        major = int(str(sm).split(".")[0])
    except ValueError:
        return None
    return {6: "Pascal", 7: "Volta/Turing", 8: "Ampere/Ada", 9: "Hopper", 10: "Blackwell", 12: "Blackwell"}.get(
        major, f"sm {major}.x")


def coverage(g: Model) -> dict[str, Any]:
    """Which GPU generations the store holds, so that every answer can say which side it has no data for."""
    gpus = sorted({(r["gpu_model"], r["sm"]) for r in g.runs if r["gpu_model"]}, key=str)
    families = {_sm_family(sm) for _, sm in gpus}
    return {"gpus": [f"{name} (sm {sm}, {_sm_family(sm)})" for name, sm in gpus],
            "has_pre_tf32": any(f in ("Pascal", "Volta/Turing") for f in families),
            "has_ampere": "Ampere/Ada" in families, "cpu_machines": [m.name for m in g.machines
                                                                    if m.hardware == "cpu"]}


def _autotune_row(machine: str, label: str, image: str, x: Record) -> dict[str, Any]:
    extra = x.extra
    winners = extra.get("winners") or {}
    near = extra.get("near_ties") or []
    spread = extra.get("max_abs_spread")
    det = x.determinism
    distinct = (det and det.distinct_outputs) or 1
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
    return {"machine": machine, "label": label, "image": image, "rec": x, "run": x.run, "verdict": verdict,
            "rank": rank, "winners": ", ".join(f"{k} x{n}" for k, n in sorted(winners.items(), key=lambda kv: -kv[1])),
            "trials": sum(winners.values()) if winners else ((det and det.repeats) or 0), "spread": spread,
            "near": "; ".join(f"{t.get('winner')} leads {t.get('runner_up')} by {100 * (t.get('gap') or 0):.1f} %, "
                              f"max |delta| {t.get('max_abs_delta') or 0:.3g}" for t in near),
            "settings": settings_str({k: v for k, v in x.listed_settings.items() if k != "record"})}


def findings(g: Model) -> dict[str, Any]:
    """The records that answer the suite's seed questions: F.conv2d against direct cuDNN with FMA math
    (crosscheck records) and whether cuDNN's autotuner picks the same algorithm every session (autotune)."""
    cross, tune = [], []
    for (machine, img), recs in sorted(g.current.items()):
        label = g.minfo[machine].label
        for x in recs:
            if x.kind == RecordKind.CROSSCHECK:
                e = x.extra
                cross.append({"machine": machine, "label": label, "image": img, "rec": x, "run": x.run,
                              "delta": e.get("max_abs_delta"), "torch_class": e.get("torch_class"),
                              "fma_class": e.get("cudnn_fma_class"), "fma_err": e.get("cudnn_fma_max_abs"),
                              "sm": e.get("sm"), "settings": settings_str({k: v for k, v in x.listed_settings.items()
                                                                           if k != "record"})})
            elif x.kind == RecordKind.AUTOTUNE:
                tune.append(_autotune_row(machine, label, img, x))
    cross.sort(key=lambda c: (c["machine"], c["rec"].case, c["rec"].dtype))
    # the seed cases first: they are the ones the suite's questions were asked about
    tune.sort(key=lambda t: (t["rank"], not t["rec"].case.startswith("seed."), -(t["spread"] or 0),
                             t["machine"], t["rec"].case))
    return {"cross": cross, "autotune": tune, "coverage": coverage(g),
            "n_unstable": sum(1 for t in tune if t["rank"] <= 1),
            "n_same_bits": sum(1 for t in tune if t["rank"] == 2),
            "n_near": sum(1 for t in tune if t["rank"] == 3)}


ORT_INLINE = 400  # rows of each onnxruntime table on the page; all on pages of their own


def ort(g: Model, parts: Parts | None = None) -> dict[str, Any]:
    """The page's context; its two tables are registered with ``parts`` (the build writes their pages)."""
    parts = parts or Parts("ort", "onnxruntime search")
    rows = []
    pivot: dict[tuple, dict[str, Any]] = {}
    for (machine, img), cur in sorted(g.current.items()):
        for x in cur:
            # asv's copies of the grid (one value per track function) say less than the journaled records
            # beside them; the page reads the records
            if x.backend != "ort" or "asv_benchmark" in x.settings:
                continue
            mode = x.settings.get("cudnn_conv_algo_search")
            others = {k: v for k, v in x.listed_settings.items() if k != "cudnn_conv_algo_search"}
            rows.append({"machine": machine, "label": g.minfo[machine].label, "image": img, "rec": x,
                         "mode": mode if mode is not None else "-", "settings": settings_str(others)})
            key = (machine, img, x.case, x.dtype, settings_str(others))
            p = pivot.setdefault(key, {"machine": machine, "label": g.minfo[machine].label, "image": img,
                                       "case": x.case, "dtype": x.dtype, "settings": key[-1],
                                       "modes": {}, "run": x.run})
            p["modes"][str(mode)] = x
    modes = list(ORT_MODES) + sorted({m for p in pivot.values() for m in p["modes"]} - set(ORT_MODES))
    table = []
    for p in pivot.values():
        ms = {m: p["modes"][m].median_ms for m in ORT_MODES if m in p["modes"]
              and p["modes"][m].median_ms is not None}
        hashes = {p["modes"][m].hash for m in p["modes"] if p["modes"][m].hash}
        several = len(p["modes"]) >= 2
        table.append({**p, "ms": ms, "fastest": min(ms, key=ms.get) if len(ms) >= 2 else None,
                      "same_bits": (len(hashes) == 1) if several and hashes else None,
                      "cells": [p["modes"].get(m) for m in modes]})
    table.sort(key=lambda p: (p["machine"], p["image"], p["case"], p["dtype"], p["settings"]))
    rows.sort(key=lambda r: (r["machine"], r["image"], r["rec"].case, r["rec"].dtype, r["mode"]))
    runs = {id(None)}
    ort_runs = []
    for r in rows:
        if r["rec"].run["id"] not in runs:
            runs.add(r["rec"].run["id"])
            ort_runs.append(r["rec"].run)
    notes = sorted({r["rec"].explanation for r in rows if r["rec"].explanation})
    return {"rows": parts.table("ort", rows, "ort_records", "onnxruntime records", inline=ORT_INLINE),
            "modes": modes, "runs": ort_runs,
            "pivot": parts.table("ortmodes", table, "ort_modes", "model/dtype/settings rows, the search modes side "
                                 "by side", inline=ORT_INLINE, modes=modes),
            "notes": notes[:20]}


# --- cuDNN's own rankings ---
# cuDNN's own rankings page: what cuDNN's heuristic (Get_v7) and timed search (Find) would have chosen for each
# problem, against the algorithm convbench measured fastest in the same run (analysis/rankings.py).
#
# The sweeps store both rankings beside every measurement; this page is where a user deciding between
# ``cudnn.benchmark`` on and off, or checking a new cuDNN's heuristics on their GPU, reads them. One section per
# machine and image: the records the other pages show (the newest of each combination, model.current_records) held
# against the rankings of the runs they came from, so that a ranking is only ever compared with a measurement of
# its own run; the summary; and the problems where a choice cost most.

SHOWN = 25  # problems per section on the page, worst heuristic cost first; all on the section's own pages


def rankings(g: Model, parts: Parts | None = None) -> dict[str, Any]:
    """The page's context: a section per machine and image; each section's problems are registered with ``parts``
    (the build writes their pages)."""
    parts = parts or Parts("rankings", "cuDNN's choices")
    sections = []
    store = g.store
    for (machine, image), current in sorted(g.current.items()):
        by_run: dict[int, list[Record]] = {}
        for x in current:
            if x.run.get("n_rankings") and x.backend == "cudnn":
                by_run.setdefault(x.run["id"], []).append(x)
        runs = sorted({x.run["id"]: x.run for xs in by_run.values() for x in xs}.values(),
                      key=lambda r: r["started"])
        problems: dict[tuple, dict[str, Any]] = {}
        for run in reversed(runs):  # a problem ranked by two runs: the newer run's
            for row in compare_rankings(store.rankings(run["id"]), by_run[run["id"]]):
                problems.setdefault(tuple(row[k] for k in ("case", "direction", "dtype", "layout", "math")), row)
        rows = list(problems.values())
        if not rows:
            continue
        rows.sort(key=lambda x: (-(x["heuristic_cost"] or 0), -(x["find_cost"] or 0), x["case"]))
        sections.append({"machine": machine, "label": g.minfo[machine].label if machine in g.minfo else machine,
                         "image": image, "runs": [r["run_id"] for r in runs],
                         "summary": summarise(rows),
                         "t": parts.table(f"rankings-table-{len(sections) + 1}", rows, "rankings",
                                          f"problems of {machine}, image {image}, the heuristic's worst first",
                                          inline=SHOWN, noticeable=NOTICEABLE)})
    return {"sections": sections, "noticeable": NOTICEABLE}
