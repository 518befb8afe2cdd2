"""Comparisons between runs: two runs record by record into findings (time, accuracy, determinism,
availability, search) and the gate over them; machines and stacks told apart; N machines side by side.

Whether a time changed is timechange.py's (samples, tests, intervals) and so is how much counts (its thresholds);
this module matches records on their key, applies the rules of the other kinds, and words each finding.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..core.explain import documented_nondeterminism
from ..core.records import OK, Record, RecordKind, record_key
from ..measurement import fingerprint
from .findings import BITS_CHANGED, EXPLAINED_BY_RECORD, KINDS, Finding, FindingKind, Verdict
from .thresholds import Thresholds
from .timechange import kernel_key, own_noise, time_verdict
from .why import time_cause

# Worse precision has a higher rank; tf32 and fp16 share 10-bit mantissas (accuracy.py).
PRECISION_RANK = {"fp32": 0, "tf32": 1, "fp16": 1, "bf16": 2, "broken": 3}
__all__ = ["BITS_CHANGED", "KINDS", "Finding", "FindingKind", "Verdict", "compare_runs", "gate"]


# ---- two runs --------------------------------------------------------------------------------------------------

def _finding(kind: FindingKind, verdict: Verdict, rec: Record, base: str, head: str, evidence: str,
             **kw: Any) -> Finding:
    return Finding(kind=kind, verdict=verdict, key=rec.identity_key(), case=rec.case, backend=rec.backend,
                   direction=rec.direction, algo=rec.algo, math=rec.math, dtype=rec.dtype,
                   layout=rec.layout, settings=rec.listed_settings, base=base, head=head, evidence=evidence,
                   **{"explanation": rec.explanation if kind in EXPLAINED_BY_RECORD else None, **kw})


def _clock_note(rb: Record, rh: Record) -> str:
    """What the GPU's clock did while either side was timed, where it was slowed (a power cap, heat)."""
    notes = []
    for side, rec in (("base", rb), ("head", rh)):
        ck = (rec.time.clock if rec.time else None) or {}
        if ck.get("slowdowns"):
            notes.append(f"{side} timed while the GPU reported {'+'.join(ck['slowdowns'])} "
                         f"(SM clock {ck.get('sm_mhz_min')}-{ck.get('sm_mhz_max')} MHz)")
    return "; " + "; ".join(notes) if notes else ""


def fmt_time(ms: float | None) -> str:
    """A time as a person reads it, the one format of the CLI and every page: 3 significant figures in µs below
    1 ms, else in ms (the µ sign: a terminal that prints these tables prints UTF-8)."""
    if ms is None or not math.isfinite(ms):
        return "-"
    return f"{ms * 1e3:.3g} µs" if ms < 1.0 else f"{ms:.3g} ms"


def _fmt_err(v: float | None) -> str:
    return "-" if v is None else f"{v:.2e}"


def compare_runs(base: Iterable[Record], head: Iterable[Record], th: Thresholds | None = None,
                 history: Iterable[Iterable[Record]] = ()) -> list[Finding]:
    """Findings between two runs' records (as ``Store.records`` returns them), matched on their combination's key
    (Record.identity_key): the one comparison of ``convbench compare``, the report's judging and the paired
    upgrade judgement. ``history``: records of earlier runs of the base's machine and stack, oldest first, whose
    isolated excursions widen a combination's time threshold (timechange.own_noise, HISTORY_FACTOR)."""
    th = th or Thresholds()
    b = {r.identity_key(): r for r in base}
    h = {r.identity_key(): r for r in head}
    past = [{r.identity_key(): r for r in run if r.status == OK} for run in history]
    kin, head_kin = kernels(b.values()), kernels(h.values())
    out: list[Finding] = []
    for key in sorted(b.keys() | h.keys()):
        rb, rh = b.get(key), h.get(key)
        if rb is None:
            out.append(_finding(FindingKind.AVAILABILITY, Verdict.CHANGE, rh, "not measured", rh.status, "new combination"))
            continue
        if rh is None:
            lost = rb.status == OK and th.lost_coverage_fails
            out.append(_finding(FindingKind.AVAILABILITY, Verdict.REGRESSION if lost else Verdict.CHANGE, rb, rb.status, "not measured",
                                "coverage lost: ok in base, not measured in head" if lost else
                                "combination not measured in head"))
            continue
        if rb.status == OK and rh.status != OK:
            out.append(_finding(FindingKind.AVAILABILITY, Verdict.REGRESSION, rh, OK, rh.status,
                                f"was ok, now {rh.status}: {rh.reason or 'no reason given'}"))
            continue
        if rb.status != OK and rh.status == OK:
            out.append(_finding(FindingKind.AVAILABILITY, Verdict.IMPROVEMENT, rh, rb.status, OK, "now runs"))
        if rb.status != OK or rh.status != OK:
            continue
        bm, hm = rb.median_ms, rh.median_ms
        noise = own_noise(key, bm, past, th.rel(bm, rb.time.timer)) if past and bm else 0.0
        tv = time_verdict(rb, rh, th, noise, [run[key] for run in past if key in run],
                          kin_of(rb, kin), kin_of(rh, head_kin))
        if tv:
            verdict, evidence, nums = tv
            out.append(_finding(FindingKind.TIME, Verdict(verdict), rh, fmt_time(bm), fmt_time(hm),
                                evidence + _clock_note(rb, rh), ratio=nums.get("ratio"), ci=nums.get("ci"),
                                p=nums.get("p"), delta_us=nums.get("delta_us"),
                                explanation=time_cause(rb, rh, nums.get("ratio")), base_ms=bm, head_ms=hm))
        out += _accuracy(rb, rh, th)
        out += _determinism(rb, rh, th)
        out += _search(rb, rh)
    return out


def kernels(recs: Iterable[Record]) -> dict[tuple, list[Record]]:
    """One run's timed records grouped by the kernel they ran (timechange.kernel_key)."""
    out: dict[tuple, list[Record]] = {}
    for r in recs:
        if r.status == OK and r.time is not None and (k := kernel_key(r)) is not None:
            out.setdefault(k, []).append(r)
    return out


def kin_of(rec: Record, kin: dict[tuple, list[Record]]) -> list[Record]:
    """The other records of ``rec``'s run that ran its kernel."""
    k = kernel_key(rec)
    return [r for r in kin.get(k, ()) if r is not rec] if k is not None else []


def _accuracy(rb: Record, rh: Record, th: Thresholds) -> list[Finding]:
    out = []
    cb, ch = rb.precision_class, rh.precision_class
    if cb and ch and cb != ch:
        worse = PRECISION_RANK.get(ch, 3) > PRECISION_RANK.get(cb, 3)
        better = PRECISION_RANK.get(ch, 3) < PRECISION_RANK.get(cb, 3)
        verdict = Verdict.REGRESSION if worse else Verdict.IMPROVEMENT if better else Verdict.CHANGE
        out.append(_finding(FindingKind.ACCURACY, verdict, rh, cb, ch, f"precision class {cb} -> {ch} (max normalised error "
                            f"{_fmt_err(rb.max_norm_err)} -> {_fmt_err(rh.max_norm_err)})"))
        return out
    eb, eh = rb.max_norm_err, rh.max_norm_err
    if eb is not None and eh is not None and eh > th.error_floor:
        growth = eh / max(eb, th.error_floor)
        if growth >= th.error_growth:
            out.append(_finding(FindingKind.ACCURACY, Verdict.REGRESSION, rh, _fmt_err(eb), _fmt_err(eh),
                                f"max normalised error grew {growth:.1f}x within class {ch}", ratio=growth))
    return out


# An autotuner record is a study of chance: which near-tied candidate a timed search picks varies between sessions
# (H200 x2: 15 of one stack's flagged case/math pairs per GPU, 9 of them on both GPUs; docs/history.md). Its flips
# between two nights are changes to read on the investigations page, never a regression of the stack.
AUTOTUNE_CHANCE = "a timed search picks among near-tied candidates by chance (an autotuner study)"


def expected_nondeterminism(rec: Record) -> str | None:
    """The documented cause of run-to-run differences of a stored record (explain.nondeterminism_cause), if any."""
    if rec.kind == RecordKind.AUTOTUNE:
        return AUTOTUNE_CHANCE
    return documented_nondeterminism(rec.backend, rec.direction, rec.listed_settings, rec.extra)


def _determinism(rb: Record, rh: Record, th: Thresholds) -> list[Finding]:
    out = []
    # An algorithm documented as non-deterministic (or PyTorch allowed to pick one) repeats bit for bit in one
    # run and not in the next by chance: on cuDNN 9.19 -> 9.27 (H200, docs/upgrade.md) 119 of 2,632 backward
    # combinations flipped so, every one of them such a record. Its flips are changes, never regressions.
    cause = expected_nondeterminism(rh)
    worse = Verdict.CHANGE if cause else Verdict.REGRESSION
    better = Verdict.CHANGE if cause else Verdict.IMPROVEMENT
    why = f" ({cause})" if cause else ""
    det_b, det_h = rb.determinism, rh.determinism
    if det_b is None or det_h is None:
        return out
    for name, words in (("repeat_equal", "repeats"), ("fresh_handle_equal", "fresh handle/session")):
        if getattr(det_b, name) == 1 and getattr(det_h, name) == 0:
            out.append(_finding(FindingKind.DETERMINISM, worse, rh, "bitwise equal", "differs",
                                f"{words} no longer bitwise equal{why}", expected=cause))
        elif getattr(det_b, name) == 0 and getattr(det_h, name) == 1:
            out.append(_finding(FindingKind.DETERMINISM, better, rh, "differs", "bitwise equal",
                                f"{words} now bitwise equal{why}", expected=cause))
    # Only the step from one output to several is a finding: an algorithm already unstable gives a count that
    # varies from run to run (and its repeats stop once the instability is shown).
    db, dh = det_b.distinct_outputs, det_h.distinct_outputs
    if db == 1 and dh is not None and dh > 1:
        out.append(_finding(FindingKind.DETERMINISM, worse, rh, str(db), str(dh), f"distinct outputs {db} -> {dh}{why}",
                            expected=cause))
    hb, hh = det_b.hash, det_h.hash
    if hb and hh and hb != hh and det_b.hash_algo == det_h.hash_algo:
        # Two runs of a documented non-deterministic algorithm differ by chance: in the A/A backward study on two
        # H200s (docs/performance.md) 159-160 such combinations a GPU, all of them documented ones. They stay changes,
        # also under --bitwise, and say so, so that "changed bits" counts what a stack changed.
        verdict = Verdict.REGRESSION if th.bitwise and not cause else Verdict.CHANGE
        out.append(_finding(FindingKind.DETERMINISM, verdict, rh, hb[:12], hh[:12],
                            BITS_CHANGED + (f", as expected{why}" if cause else ""), bits=True, expected=cause))
    return out


def _search(rb: Record, rh: Record) -> list[Finding]:
    if rh.backend != "ort" or "cudnn_conv_algo_search" not in rh.settings:
        return []
    if rb.chosen_algo != rh.chosen_algo and (rb.chosen_algo or rh.chosen_algo):
        return [_finding(FindingKind.SEARCH, Verdict.CHANGE, rh, str(rb.chosen_algo), str(rh.chosen_algo),
                         f"{rh.settings['cudnn_conv_algo_search']} search now picks another algorithm")]
    return []


def gate(findings: Iterable[Finding], th: Thresholds) -> list[Finding]:
    """The findings that fail a CI gate: regressions of a kind not ignored, on the same machine (a comparison
    across different hardware is reported, and gated only when the user asks)."""
    return [f for f in findings if f.verdict == Verdict.REGRESSION and f.kind not in th.ignore
            and (th.across_hardware or not f.extra.get("across_hardware"))]


# ---- which machine, which stack --------------------------------------------------------------------------------

# Fingerprint fields a reader needs to see when they differ between the two sides of a comparison (clocks,
# power and temperature always differ and are shown per time finding instead).
IDENTITY_FIELDS = (
    "node.name", "slot", "gpu.uuid", "gpu.name", "gpu.sm", "gpu.driver", "gpu.memory_total_bytes", "gpu.clock_sm_max_mhz",
    "gpu.power_limit_w", "gpu.ecc_enabled", "gpu.mig_enabled", "cpu", "cpu_count", "stack", "image", "image_id",
    "software.torch", "software.torch_cuda", "software.torch_cudnn", "software.onnxruntime", "software.numpy",
    "libraries.cudnn.version", "libraries.cudnn.path", "env",
)


def fingerprint_field(fp: dict[str, Any], dotted: str) -> Any:
    value: Any = fp
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def machine_identity(fp: dict[str, Any]) -> str:
    """A machine is its GPU on its node: the node as the scheduler or host names it (``fingerprint.node_name``;
    older runs: their hostname) and the GPU's UUID; a CPU run is its node's slot, else its node. Two GPUs under
    one machine name are two machines; one GPU in a new container, pod or image is still one."""
    host = fingerprint.node_name(fp)
    uuid = fingerprint_field(fp, "gpu.uuid")
    if uuid:
        return f"{host}/{uuid}"
    slot = fp.get("slot")
    return f"{host}/slot{slot}" if isinstance(slot, int) and not isinstance(slot, bool) else f"{host}/cpu"


def fingerprint_diff(base: dict[str, Any], head: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, base value, head value) for every identity field that differs, in IDENTITY_FIELDS order; the
    mapped libraries by file name when both sides recorded them (older runs did not)."""
    if base is head:  # one fingerprint object for equal texts (Store.run_jsons): a machine's nights mostly
        return []
    out = [(f, fingerprint_field(base, f), fingerprint_field(head, f)) for f in IDENTITY_FIELDS if fingerprint_field(base, f) != fingerprint_field(head, f)]
    mb, mh = base.get("mapped") or {}, head.get("mapped") or {}
    for name in sorted(set(mb) | set(mh)) if (mb and mh) else ():
        if mb.get(name) != mh.get(name):
            out.append((f"mapped.{name}", mb.get(name), mh.get(name)))
    return out


# ---- many machines ---------------------------------------------------------------------------------------------

def machine_neutral_key(rec: Record) -> str:
    """The record key without the settings that only name where it ran (``device``), so that the same
    combination on a CPU host and a GPU host lines up (a study's kind among the settings, as listed)."""
    settings = {k: v for k, v in rec.listed_settings.items() if k != "device"}
    return record_key(rec.case, rec.backend, rec.direction, rec.algo, rec.math, rec.dtype, rec.layout, settings)


def cross_machine(runs: list[dict[str, Any]], records: dict[int, list[Record]]) -> dict[str, Any]:
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
            cell = {"status": rec.status, "median_ms": rec.median_ms, "max_norm_err": rec.max_norm_err,
                    "precision_class": rec.precision_class, "hash": rec.hash, "time_ratio": None,
                    "error_ratio": None, "explanation": rec.explanation}
            if base is not None and base is not rec and base.status == OK and rec.status == OK:
                if base.median_ms and rec.median_ms:
                    cell["time_ratio"] = rec.median_ms / base.median_ms
                if base.max_norm_err is not None and rec.max_norm_err is not None:
                    cell["error_ratio"] = (max(rec.max_norm_err, 1e-12) / max(base.max_norm_err, 1e-12))
            if rec.status == OK and rec.hash:
                hashes.add(rec.hash)
            if rec.explanation:
                explanations.append((m, rec.explanation))
            cells.append(cell)
        any_rec = next(p[key] for p in per if key in p)
        classes = {c["precision_class"] for c in cells if c and c["precision_class"]}
        rows.append({"key": key, "case": any_rec.case, "backend": any_rec.backend,
                     "direction": any_rec.direction, "algo": any_rec.algo, "math": any_rec.math,
                     "dtype": any_rec.dtype, "layout": any_rec.layout, "settings": any_rec.listed_settings,
                     "cells": cells, "bitwise_identical": (len(hashes) == 1) if hashes else None,
                     "n_hashes": len(hashes), "class_differs": len(classes) > 1, "explanations": explanations})
    return {"machines": machines, "runs": runs, "rows": rows}
