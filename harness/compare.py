"""Comparisons between runs: two runs record by record, N machines side by side, images in sequence on one machine.

Time regressions are decided from the stored samples, not from a bare percentage: a combination is slower when
a one-sided Mann-Whitney U test says so (p < alpha), the bootstrap 95% interval of the median ratio lies above 1,
and the median ratio reaches the user's threshold. Samples from one run share that run's clocks and
temperature, so the test alone would flag real but tiny differences between two sessions; the threshold is
what keeps the gate to differences a person would act on. Without samples (asv data without them, n < 3) the
fallback is the ratio threshold plus non-overlapping interquartile ranges, and the evidence says so.
numpy only: the two tests need a rank sum, a normal tail and resampling, not scipy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .records import OK

# Worse precision has a higher rank; tf32 and fp16 share 10-bit mantissas (accuracy.py).
PRECISION_RANK = {"fp32": 0, "tf32": 1, "fp16": 1, "bf16": 2, "broken": 3}
KINDS = ("time", "accuracy", "determinism", "availability", "search")


@dataclass
class Thresholds:
    time_ratio: float = 1.10  # head median / base median at or above which a significant slowdown counts
    alpha: float = 0.01  # one-sided Mann-Whitney U level
    error_growth: float = 4.0  # head max_norm_err / base max_norm_err at or above which accuracy regressed
    error_floor: float = 1e-9  # errors below this are treated as equal (both exact to the reference)
    bitwise: bool = False  # count "outputs no longer bitwise equal" as a regression, not only a change
    ignore: tuple[str, ...] = ()  # kinds that never fail the gate


@dataclass
class Finding:
    kind: str  # one of KINDS
    verdict: str  # regression, improvement, change
    key: str
    case: str
    backend: str
    direction: str
    algo: str
    math: str
    dtype: str
    layout: str
    settings: dict[str, Any]
    base: str  # the base value, in words
    head: str
    evidence: str  # why, with numbers
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    p: float | None = None
    base_run: str = ""
    head_run: str = ""
    machine: str = ""
    explanation: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- statistics ------------------------------------------------------------------------------------------------

def _norm_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_greater(base: np.ndarray, head: np.ndarray) -> tuple[float, float]:
    """(U of head, one-sided p that head values tend to be larger): normal approximation with tie and
    continuity corrections, adequate from about 7 samples a side (the timing policy's minimum)."""
    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(head, dtype=np.float64)
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return math.nan, math.nan
    allv = np.concatenate([a, b])
    order = np.argsort(allv, kind="mergesort")
    ranks = np.empty(len(allv))
    sorted_v = allv[order]
    # average ranks for ties
    uniq, first, counts = np.unique(sorted_v, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    u_head = float(ranks[n1:].sum() - n2 * (n2 + 1) / 2.0)
    n = n1 + n2
    mu = n1 * n2 / 2.0
    tie = float((counts**3 - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return u_head, 1.0 if u_head <= mu else 0.0
    z = (u_head - mu - 0.5) / math.sqrt(var)
    return u_head, _norm_sf(z)


def bootstrap_median_ratio(base: np.ndarray, head: np.ndarray, *, n_boot: int = 2000, conf: float = 0.95,
                           seed: int = 0) -> tuple[float, float, float]:
    """(median ratio head/base, low, high) with a percentile bootstrap interval (fixed seed: reproducible)."""
    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(head, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, len(a), (n_boot, len(a)))], axis=1)
    mb = np.median(b[rng.integers(0, len(b), (n_boot, len(b)))], axis=1)
    r = mb / ma
    lo, hi = np.quantile(r, [(1 - conf) / 2, 1 - (1 - conf) / 2])
    return float(np.median(b) / np.median(a)), float(lo), float(hi)


def time_verdict(base: dict[str, Any], head: dict[str, Any], th: Thresholds) -> tuple[str, str, dict[str, Any]] | None:
    """(verdict, evidence, numbers) for the timing of one combination, or None when nothing changed."""
    bm, hm = base.get("median_ms"), head.get("median_ms")
    if not bm or not hm:
        return None
    sa, sb = base.get("samples"), head.get("samples")
    ratio = hm / bm
    nums: dict[str, Any] = {"ratio": ratio}
    if sa is not None and sb is not None and len(sa) >= 3 and len(sb) >= 3:
        # The tests run only where the ratio alone could matter: a fleet has ~10^5 pairs per report.
        p_slower = mann_whitney_greater(sa, sb)[1] if ratio >= th.time_ratio else 1.0
        p_faster = mann_whitney_greater(sb, sa)[1] if ratio <= 1.0 / th.time_ratio else 1.0
        if ratio >= th.time_ratio and p_slower < th.alpha:
            r, lo, hi = bootstrap_median_ratio(sa, sb)
            nums.update(ci=(lo, hi), p=p_slower)
            if lo > 1.0:
                return "regression", (f"{ratio:.2f}x slower (95% CI {lo:.2f}-{hi:.2f}), Mann-Whitney p={p_slower:.1e},"
                                      f" n={len(sa)}/{len(sb)}"), nums
        if ratio <= 1.0 / th.time_ratio and p_faster < th.alpha:
            r, lo, hi = bootstrap_median_ratio(sa, sb)
            nums.update(ci=(lo, hi), p=p_faster)
            if hi < 1.0:
                return "improvement", (f"{1 / ratio:.2f}x faster (ratio 95% CI {lo:.2f}-{hi:.2f}), "
                                       f"Mann-Whitney p={p_faster:.1e}"), nums
        return None
    biqr, hiqr = base.get("iqr_ms") or 0.0, head.get("iqr_ms") or 0.0
    if ratio >= th.time_ratio and bm + biqr / 2 < hm - hiqr / 2:
        return "regression", f"{ratio:.2f}x slower; no samples stored, interquartile ranges do not overlap", nums
    if ratio <= 1 / th.time_ratio and hm + hiqr / 2 < bm - biqr / 2:
        return "improvement", f"{1 / ratio:.2f}x faster; no samples stored, interquartile ranges do not overlap", nums
    return None


# ---- two runs --------------------------------------------------------------------------------------------------

def _finding(kind: str, verdict: str, rec: dict[str, Any], base: str, head: str, evidence: str,
             **kw: Any) -> Finding:
    return Finding(kind=kind, verdict=verdict, key=rec["key"], case=rec["case_id"], backend=rec["backend"],
                   direction=rec["direction"], algo=rec["algo"], math=rec["math"], dtype=rec["dtype"],
                   layout=rec["layout"], settings=rec["settings"], base=base, head=head, evidence=evidence,
                   explanation=rec.get("explanation"), **kw)


def _clock_note(rb: dict[str, Any], rh: dict[str, Any]) -> str:
    """What the GPU's clock did while either side was timed, where it was slowed (a power cap, heat)."""
    notes = []
    for side, rec in (("base", rb), ("head", rh)):
        ck = (rec.get("extra") or {}).get("clock") or {}
        if ck.get("slowdowns"):
            notes.append(f"{side} timed while the GPU reported {'+'.join(ck['slowdowns'])} "
                         f"(SM clock {ck.get('sm_mhz_min')}-{ck.get('sm_mhz_max')} MHz)")
    return "; " + "; ".join(notes) if notes else ""


def _fmt_err(v: float | None) -> str:
    return "-" if v is None else f"{v:.2e}"


def compare_records(base: Iterable[dict[str, Any]], head: Iterable[dict[str, Any]],
                    th: Thresholds | None = None) -> list[Finding]:
    """Findings between two runs' records (dicts as ``Store.records`` returns), matched on the record key."""
    th = th or Thresholds()
    b = {r["key"]: r for r in base}
    h = {r["key"]: r for r in head}
    out: list[Finding] = []
    for key in sorted(b.keys() | h.keys()):
        rb, rh = b.get(key), h.get(key)
        if rb is None:
            out.append(_finding("availability", "change", rh, "not measured", rh["status"], "new combination"))
            continue
        if rh is None:
            out.append(_finding("availability", "change", rb, rb["status"], "not measured",
                                "combination not measured in head"))
            continue
        if rb["status"] == OK and rh["status"] != OK:
            out.append(_finding("availability", "regression", rh, OK, rh["status"],
                                f"was ok, now {rh['status']}: {rh.get('reason') or 'no reason given'}"))
            continue
        if rb["status"] != OK and rh["status"] == OK:
            out.append(_finding("availability", "improvement", rh, rb["status"], OK, "now runs"))
        if rb["status"] != OK or rh["status"] != OK:
            continue
        tv = time_verdict(rb, rh, th)
        if tv:
            verdict, evidence, nums = tv
            out.append(_finding("time", verdict, rh, f"{rb['median_ms']:.4g} ms", f"{rh['median_ms']:.4g} ms",
                                evidence + _clock_note(rb, rh), ratio=nums.get("ratio"), ci=nums.get("ci"),
                                p=nums.get("p")))
        out += _accuracy(rb, rh, th)
        out += _determinism(rb, rh, th)
        out += _search(rb, rh)
    return out


def _accuracy(rb: dict[str, Any], rh: dict[str, Any], th: Thresholds) -> list[Finding]:
    out = []
    cb, ch = rb.get("precision_class"), rh.get("precision_class")
    if cb and ch and cb != ch:
        worse = PRECISION_RANK.get(ch, 3) > PRECISION_RANK.get(cb, 3)
        better = PRECISION_RANK.get(ch, 3) < PRECISION_RANK.get(cb, 3)
        verdict = "regression" if worse else "improvement" if better else "change"
        out.append(_finding("accuracy", verdict, rh, cb, ch, f"precision class {cb} -> {ch} (max normalised error "
                            f"{_fmt_err(rb.get('max_norm_err'))} -> {_fmt_err(rh.get('max_norm_err'))})"))
        return out
    eb, eh = rb.get("max_norm_err"), rh.get("max_norm_err")
    if eb is not None and eh is not None and eh > th.error_floor:
        growth = eh / max(eb, th.error_floor)
        if growth >= th.error_growth:
            out.append(_finding("accuracy", "regression", rh, _fmt_err(eb), _fmt_err(eh),
                                f"max normalised error grew {growth:.1f}x within class {ch}", ratio=growth))
    return out


def _determinism(rb: dict[str, Any], rh: dict[str, Any], th: Thresholds) -> list[Finding]:
    out = []
    for name, words in (("repeat_equal", "in-place repeats"), ("fresh_handle_equal", "fresh handle/session")):
        if rb.get(name) == 1 and rh.get(name) == 0:
            out.append(_finding("determinism", "regression", rh, "bitwise equal", "differs",
                                f"{words} no longer bitwise equal"))
        elif rb.get(name) == 0 and rh.get(name) == 1:
            out.append(_finding("determinism", "improvement", rh, "differs", "bitwise equal",
                                f"{words} now bitwise equal"))
    # Only the step from one output to several is a finding: an algorithm already unstable gives a count that
    # varies from run to run (and its repeats stop once the instability is shown).
    db, dh = rb.get("distinct_outputs"), rh.get("distinct_outputs")
    if db == 1 and dh is not None and dh > 1:
        out.append(_finding("determinism", "regression", rh, str(db), str(dh), f"distinct outputs {db} -> {dh}"))
    hb, hh = rb.get("hash"), rh.get("hash")
    if hb and hh and hb != hh and rb.get("hash_algo") == rh.get("hash_algo"):
        out.append(_finding("determinism", "regression" if th.bitwise else "change", rh, hb[:12], hh[:12],
                            "output no longer bitwise equal to the base"))
    return out


def _search(rb: dict[str, Any], rh: dict[str, Any]) -> list[Finding]:
    if rh["backend"] != "ort" or "cudnn_conv_algo_search" not in (rh.get("settings") or {}):
        return []
    if rb.get("chosen_algo") != rh.get("chosen_algo") and (rb.get("chosen_algo") or rh.get("chosen_algo")):
        return [_finding("search", "change", rh, str(rb.get("chosen_algo")), str(rh.get("chosen_algo")),
                         f"{rh['settings']['cudnn_conv_algo_search']} search now picks another algorithm")]
    return []


def gate(findings: Iterable[Finding], th: Thresholds) -> list[Finding]:
    """The findings that fail a CI gate."""
    return [f for f in findings if f.verdict == "regression" and f.kind not in th.ignore]


# ---- many machines ---------------------------------------------------------------------------------------------

def machine_neutral_key(rec: dict[str, Any]) -> str:
    """The record key without the settings that only name where it ran (``device``), so that the same
    combination on a CPU host and a GPU host lines up."""
    settings = {k: v for k, v in (rec.get("settings") or {}).items() if k != "device"}
    s = ",".join(f"{k}={v}" for k, v in sorted(settings.items()))
    return "|".join((rec["case_id"], rec["backend"], rec["direction"], rec["algo"], rec["math"], rec["dtype"],
                     rec["layout"], s))


def cross_machine(runs: list[dict[str, Any]], records: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """Side by side, one run per machine (the first is the base): per combination the time ratio, error
    ratio, precision class and whether all outputs are bitwise identical."""
    machines = [r["machine"] for r in runs]
    per = [{machine_neutral_key(x): x for x in records[r["id"]]} for r in runs]
    keys = sorted(set().union(*[p.keys() for p in per])) if per else []
    rows = []
    for key in keys:
        cells = []
        base = per[0].get(key)
        hashes = set()
        explanations = []
        for m, p in zip(machines, per, strict=True):
            rec = p.get(key)
            if rec is None:
                cells.append(None)
                continue
            cell = {"status": rec["status"], "median_ms": rec["median_ms"], "max_norm_err": rec["max_norm_err"],
                    "precision_class": rec["precision_class"], "hash": rec["hash"], "time_ratio": None,
                    "error_ratio": None, "explanation": rec.get("explanation")}
            if base is not None and base is not rec and base["status"] == OK and rec["status"] == OK:
                if base["median_ms"] and rec["median_ms"]:
                    cell["time_ratio"] = rec["median_ms"] / base["median_ms"]
                if base["max_norm_err"] is not None and rec["max_norm_err"] is not None:
                    cell["error_ratio"] = (max(rec["max_norm_err"], 1e-12) / max(base["max_norm_err"], 1e-12))
            if rec["status"] == OK and rec["hash"]:
                hashes.add(rec["hash"])
            if rec.get("explanation"):
                explanations.append((m, rec["explanation"]))
            cells.append(cell)
        any_rec = next(p[key] for p in per if key in p)
        classes = {c["precision_class"] for c in cells if c and c["precision_class"]}
        rows.append({"key": key, "case": any_rec["case_id"], "backend": any_rec["backend"],
                     "direction": any_rec["direction"], "algo": any_rec["algo"], "math": any_rec["math"],
                     "dtype": any_rec["dtype"], "layout": any_rec["layout"], "settings": any_rec["settings"],
                     "cells": cells, "bitwise_identical": (len(hashes) == 1) if hashes else None,
                     "n_hashes": len(hashes), "class_differs": len(classes) > 1, "explanations": explanations})
    return {"machines": machines, "runs": runs, "rows": rows}
