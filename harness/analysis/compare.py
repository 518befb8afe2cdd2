"""Comparisons between runs: two runs record by record, N machines side by side, images in sequence on one machine.

Time findings are decided from the stored samples, not from a bare percentage. A combination is slower when
the median ratio reaches a relative threshold AND the absolute difference reaches a floor (both from the noise
measured between real runs of identical software on one GPU: TIME_BANDS, ABS_FLOOR_US), a one-sided
Mann-Whitney U test says so (p < alpha) and the bootstrap 95% interval of the median ratio lies above 1.
Samples from one run share that run's clocks and temperature, so the test alone would flag real but tiny
differences between two sessions; the thresholds keep the gate to differences a person would act on. A change
beyond the thresholds on a record whose samples cannot be trusted (host-bound, multi-modal, too few: measure.
sample_flags) is **ambiguous**, with the evidence, never slower or faster. Without samples (asv data) the
fallback is the thresholds plus non-overlapping interquartile ranges, and the evidence says so.
numpy only: the two tests need a rank sum, a normal tail and resampling, not scipy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..core.explain import nondeterminism_cause
from ..core.records import OK
from ..measurement.timing import FLOOR_SAMPLES, sample_flags

# Worse precision has a higher rank; tf32 and fp16 share 10-bit mantissas (accuracy.py).
PRECISION_RANK = {"fp32": 0, "tf32": 1, "fp16": 1, "bf16": 2, "broken": 3}
KINDS = ("time", "accuracy", "determinism", "availability", "search")


# Relative time thresholds by the base call's median (upper edge in ms, threshold), chosen on the H200's A/A runs
# and injected slowdowns of 2026-11-30 (scripts/calibrate_gate.py; docs/performance.md, "2026-11-30"): at 6 %
# and 4 % no A/A pair-record under 50 us failed and 91 % of +5 % (>= 50 us) and +10 % (20-50 us) were over them;
# 98 of 11,728 A/A pair-records of 50 us or more still failed, buffer-placement levels that no threshold under
# 11 % separates from a real +5 %.
TIME_BANDS: tuple[tuple[float, float], ...] = ((0.020, 0.10), (0.050, 0.06), (math.inf, 0.04))
# Host-timed records (the CPU backends, timer perf_counter) share their cores with everything else on the host:
# one relative threshold and a floor of their own.
HOST_TIMER_REL, HOST_TIMER_ABS_US = 0.25, 20.0
# Absolute floor in microseconds: a change smaller than this is noise whatever its ratio (a 5 us call moving
# by 0.5 us is 10 %); measured between hosts the per-call offset was 1.4 us (issue 13), on one GPU far less.
ABS_FLOOR_US = 1.0
VERDICT_WORDS = {"time": {"regression": "slower", "improvement": "faster"}}


@dataclass
class Thresholds:
    time_ratio: float | None = None  # one relative threshold for every call (head/base); None: TIME_BANDS
    abs_us: float = ABS_FLOOR_US  # absolute floor of a time finding
    alpha: float = 0.01  # one-sided Mann-Whitney U level
    error_growth: float = 4.0  # head max_norm_err / base max_norm_err at or above which accuracy regressed
    # normalised errors below one fp32 unit roundoff (2^-24) are treated as equal: both are exact to the reference
    # as far as any stored format can tell, so an error from 0 to 1e-8 is not a regression (issue 19)
    error_floor: float = 2.0 ** -24
    bitwise: bool = False  # count "outputs no longer bitwise equal" as a regression, not only a change
    ignore: tuple[str, ...] = ()  # kinds that never fail the gate
    across_hardware: bool = False  # gate a comparison of two different machines (default: report only)

    def rel(self, base_ms: float, timer: str | None = None) -> float:
        """The relative threshold for a call of this median: the user's, or the calibrated band's."""
        if self.time_ratio is not None:
            return self.time_ratio - 1.0
        if timer == "perf_counter":
            return HOST_TIMER_REL
        return next(t for edge, t in TIME_BANDS if base_ms < edge)

    def floor_us(self, timer: str | None = None) -> float:
        return max(self.abs_us, HOST_TIMER_ABS_US) if timer == "perf_counter" else self.abs_us


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
    delta_us: float | None = None  # head - base median, for time findings: the absolute size beside the ratio

    @property
    def words(self) -> str:
        """The verdict in a reader's words: slower / faster for time, else the verdict itself."""
        return VERDICT_WORDS.get(self.kind, {}).get(self.verdict, self.verdict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "words": self.words}


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


def untrusted(rec: dict[str, Any]) -> list[str]:
    """Why one side's samples cannot decide a change: the timer's own flags, or the samples' shape."""
    flags = list((rec.get("extra") or {}).get("flags") or ())
    samples = rec.get("samples")
    if samples is not None and len(samples):
        flags += [f for f in sample_flags([float(x) for x in samples]) if f not in flags]
        if (rec.get("n") or len(samples)) >= FLOOR_SAMPLES and "few_samples" in flags:
            flags.remove("few_samples")  # the store keeps a thinned subset; the timer took enough
    return flags


# A combination's own run-to-run spread widens its threshold to this many times the largest excursion seen in
# the earlier runs of the same machine and stack: some calls switch level with where their buffers sit in device
# memory (H200, 2026-11-30: resnet50.layer4.0.conv2 IMPLICIT_GEMM fp32 at 539.5 us in 11 placements of 12 and
# 597.5 us in one), so a level once seen is not a regression the next time.
HISTORY_FACTOR = 2.0


def own_noise(key: str, base_ms: float, history: list[dict[str, dict[str, Any]]], rel: float) -> float:
    """The largest isolated excursion of ``key``'s median in earlier runs (oldest first), relative to
    ``base_ms``: a run that left the base's level (by more than ``rel``) between two runs at it. A level the
    series left for good is a past change, not noise, and does not count; 0 without such an excursion."""
    xs = [h[key]["median_ms"] for h in history if key in h and h[key].get("median_ms")] + [base_ms]
    at_base = [abs(x / base_ms - 1) <= rel for x in xs]
    return max((abs(xs[i] / base_ms - 1) for i in range(1, len(xs) - 1)
                if not at_base[i] and at_base[i - 1] and at_base[i + 1]), default=0.0)


def time_verdict(base: dict[str, Any], head: dict[str, Any], th: Thresholds,
                 noise: float = 0.0) -> tuple[str, str, dict[str, Any]] | None:
    """(verdict, evidence, numbers) for the timing of one combination, or None when it is the same.
    ``noise``: the combination's own run-to-run deviation in earlier runs (own_noise)."""
    bm, hm = base.get("median_ms"), head.get("median_ms")
    if not bm or not hm:
        return None
    ratio = hm / bm
    delta_us = (hm - bm) * 1e3
    timer = head.get("timer") or base.get("timer")
    rel, floor = max(th.rel(bm, timer), HISTORY_FACTOR * noise), th.floor_us(timer)
    slower = ratio >= 1 + rel and delta_us >= floor
    faster = ratio <= 1 / (1 + rel) and -delta_us >= floor
    if not (slower or faster):
        return None
    nums: dict[str, Any] = {"ratio": ratio, "delta_us": delta_us}
    size = (f"{ratio:.2f}x slower" if slower else f"{1 / ratio:.2f}x faster") + f" ({delta_us:+.1f} us)"
    doubts = [f"{side} {'+'.join(fl)}" for side, fl in (("base", untrusted(base)), ("head", untrusted(head))) if fl]
    if doubts:
        return "ambiguous", (f"{size}, but not decided: samples are {', '.join(doubts)} "
                             f"(thresholds {rel:.0%} and {floor:g} us)"), nums
    sa, sb = base.get("samples"), head.get("samples")
    if sa is not None and sb is not None and len(sa) >= 3 and len(sb) >= 3:
        p = mann_whitney_greater(sa, sb)[1] if slower else mann_whitney_greater(sb, sa)[1]
        r, lo, hi = bootstrap_median_ratio(sa, sb)
        nums.update(ci=(lo, hi), p=p)
        evidence = f"{size}, 95% CI {lo:.2f}-{hi:.2f}, Mann-Whitney p={p:.1e}, n={len(sa)}/{len(sb)}"
        if p < th.alpha and (lo > 1.0 if slower else hi < 1.0):
            return ("regression" if slower else "improvement"), evidence, nums
        return "ambiguous", f"{evidence}: beyond the thresholds but not significant", nums
    biqr, hiqr = base.get("iqr_ms") or 0.0, head.get("iqr_ms") or 0.0
    apart = bm + biqr / 2 < hm - hiqr / 2 if slower else hm + hiqr / 2 < bm - biqr / 2
    if apart:
        return ("regression" if slower else "improvement"), f"{size}; no samples stored, interquartile ranges do not overlap", nums
    return "ambiguous", f"{size}; no samples stored and the interquartile ranges overlap", nums


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


def fmt_time(ms: float | None) -> str:
    """A time as a person reads it: 3 significant figures in us below 1 ms, else in ms."""
    if ms is None:
        return "-"
    return f"{ms * 1e3:.3g} us" if ms < 1.0 else f"{ms:.3g} ms"


def _fmt_err(v: float | None) -> str:
    return "-" if v is None else f"{v:.2e}"


def compare_records(base: Iterable[dict[str, Any]], head: Iterable[dict[str, Any]],
                    th: Thresholds | None = None,
                    history: Iterable[Iterable[dict[str, Any]]] = ()) -> list[Finding]:
    """Findings between two runs' records (dicts as ``Store.records`` returns), matched on the record key.
    ``history``: records of earlier runs of the base's machine and stack, oldest first, whose isolated
    excursions widen a combination's time threshold (own_noise, HISTORY_FACTOR)."""
    th = th or Thresholds()
    b = {r["key"]: r for r in base}
    h = {r["key"]: r for r in head}
    past = [{r["key"]: r for r in run if r.get("status") == OK} for run in history]
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
        noise = own_noise(key, rb["median_ms"], past, th.rel(rb["median_ms"], rb.get("timer"))) \
            if past and rb["median_ms"] else 0.0
        tv = time_verdict(rb, rh, th, noise)
        if tv:
            verdict, evidence, nums = tv
            out.append(_finding("time", verdict, rh, fmt_time(rb["median_ms"]), fmt_time(rh["median_ms"]),
                                evidence + _clock_note(rb, rh), ratio=nums.get("ratio"), ci=nums.get("ci"),
                                p=nums.get("p"), delta_us=nums.get("delta_us")))
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


# An autotuner record is a study of chance: which near-tied candidate a timed search picks varies between sessions
# (H200 x2, 2026-11-30: 15 of one stack's flagged case/math pairs per GPU, 9 of them on both GPUs). Its flips
# between two nights are changes to read on the investigations page, never a regression of the stack.
AUTOTUNE_CHANCE = "a timed search picks among near-tied candidates by chance (an autotuner study)"


def expected_nondeterminism(rec: dict[str, Any]) -> str | None:
    """The documented cause of run-to-run differences of a stored record (explain.nondeterminism_cause), if any."""
    if rec.get("kind") == "autotune":
        return AUTOTUNE_CHANCE
    view = SimpleNamespace(extra=rec.get("extra") or {}, backend=rec.get("backend"), direction=rec.get("direction"),
                           settings=rec.get("settings") or {})
    return nondeterminism_cause(view)  # type: ignore[arg-type]


def _determinism(rb: dict[str, Any], rh: dict[str, Any], th: Thresholds) -> list[Finding]:
    out = []
    # An algorithm documented as non-deterministic (or PyTorch allowed to pick one) repeats bit for bit in one
    # run and not in the next by chance: on cuDNN 9.19 -> 9.27 (H200, 2026-11-30) 119 of 2,632 backward
    # combinations flipped so, every one of them such a record. Its flips are changes, never regressions.
    cause = expected_nondeterminism(rh)
    worse = "change" if cause else "regression"
    better = "change" if cause else "improvement"
    why = f" ({cause})" if cause else ""
    for name, words in (("repeat_equal", "in-place repeats"), ("fresh_handle_equal", "fresh handle/session")):
        if rb.get(name) == 1 and rh.get(name) == 0:
            out.append(_finding("determinism", worse, rh, "bitwise equal", "differs",
                                f"{words} no longer bitwise equal{why}"))
        elif rb.get(name) == 0 and rh.get(name) == 1:
            out.append(_finding("determinism", better, rh, "differs", "bitwise equal",
                                f"{words} now bitwise equal{why}"))
    # Only the step from one output to several is a finding: an algorithm already unstable gives a count that
    # varies from run to run (and its repeats stop once the instability is shown).
    db, dh = rb.get("distinct_outputs"), rh.get("distinct_outputs")
    if db == 1 and dh is not None and dh > 1:
        out.append(_finding("determinism", worse, rh, str(db), str(dh), f"distinct outputs {db} -> {dh}{why}"))
    hb, hh = rb.get("hash"), rh.get("hash")
    if hb and hh and hb != hh and rb.get("hash_algo") == rh.get("hash_algo"):
        # Two runs of a documented non-deterministic algorithm differ by chance: in the A/A backward study on two
        # H200s (2026-11-30) 159-160 such combinations a GPU, all of them documented ones. They stay changes,
        # also under --bitwise, and say so, so that "changed bits" counts what a stack changed.
        verdict = "regression" if th.bitwise and not cause else "change"
        out.append(_finding("determinism", verdict, rh, hb[:12], hh[:12],
                            "output no longer bitwise equal to the base" + (f", as expected{why}" if cause else "")))
    return out


def _search(rb: dict[str, Any], rh: dict[str, Any]) -> list[Finding]:
    if rh["backend"] != "ort" or "cudnn_conv_algo_search" not in (rh.get("settings") or {}):
        return []
    if rb.get("chosen_algo") != rh.get("chosen_algo") and (rb.get("chosen_algo") or rh.get("chosen_algo")):
        return [_finding("search", "change", rh, str(rb.get("chosen_algo")), str(rh.get("chosen_algo")),
                         f"{rh['settings']['cudnn_conv_algo_search']} search now picks another algorithm")]
    return []


def gate(findings: Iterable[Finding], th: Thresholds) -> list[Finding]:
    """The findings that fail a CI gate: regressions of a kind not ignored, on the same machine (a comparison
    across different hardware is reported, and gated only when the user asks)."""
    return [f for f in findings if f.verdict == "regression" and f.kind not in th.ignore
            and (th.across_hardware or not f.extra.get("across_hardware"))]


# ---- which machine, which stack --------------------------------------------------------------------------------

# Fingerprint fields a reader needs to see when they differ between the two sides of a comparison (clocks,
# power and temperature always differ and are shown per time finding instead).
IDENTITY_FIELDS = (
    "hostname", "gpu.uuid", "gpu.name", "gpu.sm", "gpu.driver", "gpu.memory_total_bytes", "gpu.clock_sm_max_mhz",
    "gpu.power_limit_w", "gpu.ecc_enabled", "gpu.mig_enabled", "cpu", "cpu_count", "stack", "image", "image_id",
    "software.torch", "software.torch_cuda", "software.torch_cudnn", "software.onnxruntime", "software.numpy",
    "libraries.cudnn.version", "libraries.cudnn.path", "env",
)


def _field(fp: dict[str, Any], dotted: str) -> Any:
    value: Any = fp
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def machine_identity(fp: dict[str, Any]) -> str:
    """A machine is its GPU on its host: hostname and GPU UUID (a CPU run: hostname alone). Two GPUs under one
    machine name are two machines; one GPU renamed is still one."""
    host = fp.get("hostname") or "?"
    uuid = _field(fp, "gpu.uuid")
    return f"{host}/{uuid}" if uuid else f"{host}/cpu"


def fingerprint_diff(base: dict[str, Any], head: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, base value, head value) for every identity field that differs, in IDENTITY_FIELDS order; the
    mapped libraries by file name when both sides recorded them (runs before 2026-11-30 did not)."""
    out = [(f, _field(base, f), _field(head, f)) for f in IDENTITY_FIELDS if _field(base, f) != _field(head, f)]
    mb, mh = base.get("mapped") or {}, head.get("mapped") or {}
    for name in sorted(set(mb) | set(mh)) if (mb and mh) else ():
        if mb.get(name) != mh.get(name):
            out.append((f"mapped.{name}", mb.get(name), mh.get(name)))
    return out


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
