"""Calibrates the time gate's thresholds on real A/A runs: identical software, one GPU, several runs.

Every pair of the given runs (each a run directory or tarball of one; the earlier run as base, the runs before it
as history) is compared record by record with harness.analysis.timechange.time_verdict, for a few relative thresholds per
call-length band; prints, per band, the A/A deviation quantiles and, per candidate, the failing findings (slower
or faster, which a gate would act on), listing them for the defaults. A detection-power file from scripts/gpu/detection_power.py adds, per candidate, the share of the
injected slowdowns that the same thresholds would call slower, judged on the ratios it measured.

    python3 scripts/calibrate_gate.py RUN [RUN...] [--power detection-power.json[.xz]] [--nightly-power]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import lzma
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.analysis import thresholds  # noqa: E402
from harness.analysis.compare import machine_identity  # noqa: E402
from harness.analysis.thresholds import Thresholds  # noqa: E402
from harness.analysis.timechange import own_noise, time_verdict  # noqa: E402
from harness.collect.ingest import read_runs_into  # noqa: E402
from harness.collect.store import Store  # noqa: E402
from harness.core.records import Record  # noqa: E402

BANDS = ((0.0, 0.020), (0.020, 0.050), (0.050, float("inf")))
CANDIDATES = ((0.05, 0.03), (0.06, 0.04), (0.08, 0.04), (0.06, 0.05), (0.08, 0.06))  # (20-50 us, >=50 us)


def load(paths: list[str]) -> list[tuple[str, str, dict[str, Record]]]:
    """(run id, machine identity, {key: record}) for each run found under the paths."""
    store = Store(":memory:")
    read_runs_into(store, paths)
    out = []
    for run in store.runs():
        fp = store.run_json(run["id"])["fingerprint"]
        recs = {r.identity_key(): r for r in store.records(run["id"]) if r.status == "ok" and r.median_ms}
        out.append((run["run_id"], machine_identity(fp), recs))
    return out


def band_of(ms: float) -> int:
    return next(i for i, (lo, hi) in enumerate(BANDS) if lo <= ms < hi)


def judge_pairs(runs, th: Thresholds, same_machine: bool = True) -> tuple[list[int], int, list[tuple]]:
    """Failing findings by band, ambiguous ones, and the failing rows, over every ordered A/A pair (earlier run as
    base) of one machine (``same_machine``; else of two different machines, which the gate reports and does not
    gate by default), each with the runs before its base as history, as `convbench compare` on a store does."""
    failing, ambiguous, rows = [0, 0, 0], 0, []
    for i, j in itertools.combinations(range(len(runs)), 2):
        if (runs[i][1] == runs[j][1]) != same_machine:
            continue
        a, b = runs[i][2], runs[j][2]
        past = [runs[k][2] for k in range(i) if runs[k][1] == runs[i][1]]
        for key in a.keys() & b.keys():
            noise = own_noise(key, a[key].median_ms, past, th.rel(a[key].median_ms)) if past else 0.0
            v = time_verdict(a[key], b[key], th, noise, [p[key] for p in past if key in p])
            if v and v[0] in ("regression", "improvement"):
                failing[band_of(a[key].median_ms)] += 1
                rows.append((runs[i][0], runs[j][0], key, round(v[2]["ratio"], 3)))
            elif v:
                ambiguous += 1
    return failing, ambiguous, rows


def scaled(rec: Record, factor: float) -> Record:
    """``rec`` as if its call were ``factor`` times slower: samples, median, IQR, processes' and placements'
    medians."""
    extra = dict(rec.extra)
    for levels in ("process_medians_ms", "placement_medians_ms"):
        if extra.get(levels):
            extra[levels] = [x * factor for x in extra[levels]]
    t = rec.time
    time = dataclasses.replace(
        t, median_ms=t.median_ms * factor, iqr_ms=None if t.iqr_ms is None else t.iqr_ms * factor,
        samples_ms=None if t.samples_ms is None else np.asarray(t.samples_ms, dtype=np.float64) * factor)
    return dataclasses.replace(rec, time=time, extra=extra)


def nightly_power(runs, th: Thresholds) -> dict[str, tuple[int, int, int]]:
    """Night over night (each run against the one before, the runs before that as history, as the gate runs),
    the head's samples multiplied by 1.05 (calls >= 50 us) or 1.10 (20-50 us): per band, (injected, called
    slower with the history, called slower without it). Software injection on real samples: it shows what the
    history rules (own_noise, process levels, past_level) cost in power, not the device-side power."""
    out = {"plus5": [0, 0, 0], "plus10": [0, 0, 0]}
    for i in range(1, len(runs)):
        if runs[i][1] != runs[i - 1][1]:
            continue
        a, b = runs[i - 1][2], runs[i][2]
        past = [runs[k][2] for k in range(i - 1) if runs[k][1] == runs[i][1]]
        for key in a.keys() & b.keys():
            ms = a[key].median_ms
            name, factor = ("plus5", 1.05) if ms >= 0.05 else ("plus10", 1.10) if ms >= 0.02 else (None, 0)
            if name is None:
                continue
            head = scaled(b[key], factor)
            noise = own_noise(key, ms, past, th.rel(ms)) if past else 0.0
            with_h = time_verdict(a[key], head, th, noise, [p[key] for p in past if key in p])
            without = time_verdict(a[key], head, th)
            out[name][0] += 1
            out[name][1] += bool(with_h and with_h[0] == "regression")
            out[name][2] += bool(without and without[0] == "regression")
    return {k: tuple(v) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--power", type=Path)
    ap.add_argument("--nightly-power", action="store_true",
                    help="also inject +5 %%/+10 %% into each night's samples and count what the gate calls slower")
    args = ap.parse_args(argv)
    runs = sorted(load(args.runs))  # run ids start with their start time: oldest first
    pairs = [(a, b) for a, b in itertools.combinations(runs, 2) if a[1] == b[1]]
    print(f"{len(runs)} runs, {len(pairs)} A/A pairs on one machine")
    devs: list[list[float]] = [[] for _ in BANDS]
    for a, b in pairs:
        for key in a[2].keys() & b[2].keys():
            ra, rb = a[2][key], b[2][key]
            devs[band_of(ra.median_ms)].append(rb.median_ms / ra.median_ms - 1)
    for (lo, hi), d in zip(BANDS, devs, strict=True):
        q = np.quantile(np.abs(d), [0.5, 0.99, 0.999, 1.0]) if d else [np.nan] * 4
        print(f"band {lo * 1e3:.0f}-{hi * 1e3:.0f} us: {len(d)} pair-records, |A/A deviation| median {q[0]:.2%}, "
              f"p99 {q[1]:.2%}, p99.9 {q[2]:.2%}, max {q[3]:.2%}")
    power = None
    if args.power:
        opener = lzma.open if args.power.suffix == ".xz" else open
        power = json.load(opener(args.power))["rows"]
    default = thresholds.TIME_BANDS
    for mid, big in CANDIDATES:
        thresholds.TIME_BANDS = ((default[0][0], default[0][1]), (default[1][0], mid), (default[2][0], big))
        th = Thresholds()
        failing, ambiguous, rows = judge_pairs(runs, th)
        mark = " (the defaults)" if thresholds.TIME_BANDS == default else ""
        line = (f"20-50 us {mid:.0%}, >=50 us {big:.0%}, floor {th.abs_us:g} us{mark}: A/A failing findings "
                f"<20us {failing[0]}, 20-50us {failing[1]}, >=50us {failing[2]}; ambiguous {ambiguous}")
        if power:
            for name, lo, hi in (("plus5", 0.05, 1e9), ("plus10", 0.02, 0.05)):
                band = [r for r in power if lo <= r["base_ms"] < hi]
                hit = sum(r[name]["ratio"] >= 1 + th.rel(r["base_ms"])
                          and (r[name]["ratio"] - 1) * r["base_ms"] * 1e3 >= th.abs_us for r in band)
                got = float(np.median([r[name]["ratio"] for r in band])) if band else float("nan")
                line += f"; {name} (measured median x{got:.3f}) over the thresholds {hit}/{len(band)}"
        print(line)
        if mark:
            for row in rows:
                print("   failing:", *row)
            cross, cross_amb, _ = judge_pairs(runs, th, same_machine=False)
            if sum(cross) or cross_amb:
                print(f"   across machines (reported, not gated by default): beyond the thresholds <20us {cross[0]}, "
                      f"20-50us {cross[1]}, >=50us {cross[2]}; ambiguous {cross_amb}")
    thresholds.TIME_BANDS = default
    if args.nightly_power:
        for name, (n, with_h, without) in nightly_power(runs, Thresholds()).items():
            print(f"night over night, {name} injected into the head's samples: {n} calls; called slower "
                  f"{with_h} ({with_h / max(n, 1):.1%}) with the history, {without} ({without / max(n, 1):.1%}) "
                  "without it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
