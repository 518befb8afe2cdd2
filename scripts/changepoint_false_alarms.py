#!/usr/bin/env python3
"""False-alarm rate (and power) of the nightly change-point method on real repeated runs.

Give it runs of one or more machines where nothing was changed between runs (same image, same suite, same
settings): every step the method flags there is a false alarm. Three figures per set:
- in time order: share of series (machine x image x combination) with at least one flagged step; this counts
  real drift of the host too (clocks, load), which a person may or may not call a false alarm;
- permuted: the same values in random orders (any drift destroyed): the method's false-alarm rate on this
  host's real noise;
- power: a step of --inject (e.g. 1.10 = 10% slower) multiplied into the second half of each permuted series:
  the share found within +-2 runs of where it was put.

    python scripts/changepoint_false_alarms.py RUN_DIRS_OR_RESULTS_OR_TARBALLS... [--permutations 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.analysis import changepoint  # noqa: E402
from harness.analysis.compare import machine_identity  # noqa: E402
from harness.collect.ingest import read_runs_into  # noqa: E402
from harness.collect.store import Store  # noqa: E402


def series(store: Store, min_runs: int) -> list[tuple[str, str, str, np.ndarray]]:
    """(machine, hardware, image, nights x combinations medians) for every group with enough runs."""
    # A machine is a GPU on its host (compare.machine_identity), not a name: one name covered three H200s.
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in store.runs():
        groups[(machine_identity(store.run_json(r["id"])["fingerprint"]), r["image"])].append(r)
    out = []
    for (machine, image), runs in sorted(groups.items()):
        if len(runs) < min_runs:
            continue
        vec = store.vectors([r["id"] for r in runs])
        ids = np.unique(np.concatenate([vec[r["id"]]["combo"] for r in runs]))
        V = np.full((len(runs), len(ids)), np.nan)
        for i, r in enumerate(runs):
            v = vec[r["id"]]
            cols = np.searchsorted(ids, v["combo"])
            V[i, cols[v["ok"]]] = v["median"][v["ok"]]
        keep = np.isfinite(V).all(axis=0) & (V > 0).all(axis=0)
        hw = runs[-1]["gpu_model"] or runs[-1]["hardware"]
        out.append((machine, hw, image, V[:, keep]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sources", nargs="+")
    ap.add_argument("--min-runs", type=int, default=2 * changepoint.MIN_SIZE)
    ap.add_argument("--permutations", type=int, default=20)
    ap.add_argument("--inject", type=float, default=1.10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    store = Store(":memory:")
    summary = read_runs_into(store, args.sources)
    for line in summary.refused:
        print(f"refused: {line}", file=sys.stderr)
    print(f"changepoint false alarms: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.node()}; "
          f"{summary.added} runs read; method: penalty {changepoint.PENALTY_FACTOR} ln n, min segment "
          f"{changepoint.MIN_SIZE}, min shift {np.exp(changepoint.MIN_SHIFT) - 1:.0%}")
    rng = np.random.default_rng(args.seed)
    tot = {"series": 0, "ordered": 0, "perm": 0, "perm_n": 0, "hit": 0, "hit_n": 0}
    groups = series(store, args.min_runs)
    if not groups:
        print(f"no machine/image has {args.min_runs} runs or more: nothing to measure")
        return 1
    for machine, hw, image, V in groups:
        n, s = V.shape
        ordered = len(changepoint.detect_matrix(V))
        perm = hit = 0
        for _ in range(args.permutations):
            P = V[rng.permuted(np.tile(np.arange(n), (s, 1)), axis=1).T, np.arange(s)]
            perm += len(changepoint.detect_matrix(P))
            Q = P.copy()
            Q[n // 2:] *= args.inject
            found = changepoint.detect_matrix(Q)
            hit += sum(any(abs(c.index - n // 2) <= 2 for c in chs) for chs in found.values())
        print(f"{machine} [{hw}] image {image}: {n} runs x {s} combinations: flagged in time order "
              f"{ordered}/{s} = {ordered / s:.1%}; permuted {perm}/{s * args.permutations} = "
              f"{perm / (s * args.permutations):.2%}; power at x{args.inject}: "
              f"{hit / (s * args.permutations):.1%}")
        tot["series"] += s
        tot["ordered"] += ordered
        tot["perm"] += perm
        tot["perm_n"] += s * args.permutations
        tot["hit"] += hit
        tot["hit_n"] += s * args.permutations
    print(f"all: {tot['series']} series; false alarms in time order {tot['ordered'] / tot['series']:.1%}, "
          f"permuted {tot['perm'] / tot['perm_n']:.2%}; power at x{args.inject} {tot['hit'] / tot['hit_n']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
