#!/usr/bin/env python3
"""What the gate's kin rules cost and buy, on pairs of real runs of one machine: timechange.kin_level (a head at a
level the base's run measured the same kernel at under another label) and kin_both_levels (a change whose two
levels the head's run measured the same kernel at in two processes under another label). Per pair, the time
findings that fail the gate (regressions) and the improvements without the rules, with the base's kin, and with
both, and the software-injected power the same three ways (each head record alone made 1.05x slower for calls
>= 50 us, 1.10x for 20-50 us, as scripts/calibrate_gate.py --nightly-power does; its kin in both runs left as
measured, the case where one label's kernel changes and the others do not).

    python3 scripts/kin_levels.py BASE_RUN HEAD_RUN [BASE_RUN HEAD_RUN ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from calibrate_gate import scaled  # noqa: E402

from harness.analysis.compare import kernels, kin_of  # noqa: E402
from harness.analysis.thresholds import Thresholds  # noqa: E402
from harness.analysis.timechange import time_verdict  # noqa: E402
from harness.collect.discovery import Refused  # noqa: E402
from harness.collect.runread import read_run  # noqa: E402
from harness.core.records import OK  # noqa: E402

BANDS = (("+5 % on calls >= 50 us", 0.05, float("inf"), 1.05), ("+10 % on calls of 20-50 us", 0.02, 0.05, 1.10))


def timed(run: Path) -> dict[str, object]:
    return {r.identity_key(): r for r in read_run(run)[1]
            if r.kind == "measurement" and r.status == OK and r.time is not None}


def judge_pair(base: dict, head: dict, th: Thresholds) -> dict[str, list[int]]:
    """Counts for one pair: regressions and improvements without the rules, with the base's kin and with both
    runs' kin, and per band (injected, detected those three ways)."""
    kin, head_kin = kernels(base.values()), kernels(head.values())
    out = {"failing": [0, 0, 0], "improving": [0, 0, 0], **{name: [0, 0, 0, 0] for name, *_ in BANDS}}
    for key in base.keys() & head.keys():
        rb, rh = base[key], head[key]
        base_kin = kin_of(rb, kin)
        ways = ({}, {"kin": base_kin}, {"kin": base_kin, "head_kin": kin_of(rh, head_kin)})
        for i, kw in enumerate(ways):
            v = time_verdict(rb, rh, th, **kw)
            out["failing"][i] += bool(v and v[0] == "regression")
            out["improving"][i] += bool(v and v[0] == "improvement")
        for name, lo, hi, factor in BANDS:
            if lo <= rb.median_ms < hi:
                injected = scaled(rh, factor)
                out[name][0] += 1
                for i, kw in enumerate(ways):
                    v = time_verdict(rb, injected, th, **kw)
                    out[name][1 + i] += bool(v and v[0] == "regression")
    return out


def _ways(counts: list[int]) -> str:
    """Three counts as 'N without kin / N with the base's / N with both runs'."""
    return f"{counts[0]} without kin / {counts[1]} with the base's / {counts[2]} with both runs'"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or len(args) % 2:
        print("kin_levels: give runs in pairs: BASE_RUN HEAD_RUN [...]", file=sys.stderr)
        return 2
    th = Thresholds()
    totals: dict[str, list[int]] = {}
    for b, h in zip(args[::2], args[1::2], strict=True):
        try:
            res = judge_pair(timed(Path(b)), timed(Path(h)), th)
        except (OSError, ValueError, Refused) as exc:
            print(f"kin_levels: cannot read {b} or {h}: {exc}", file=sys.stderr)
            return 2
        print(f"{Path(b).name} -> {Path(h).name}: failing {_ways(res['failing'])}; "
              f"improvements {_ways(res['improving'])}")
        for name, *_ in BANDS:
            n, *ways = res[name]
            print(f"  {name}: {_ways(ways)} of {n} detected")
        for k, v in res.items():
            totals[k] = [a + c for a, c in zip(totals.get(k, [0] * len(v)), v, strict=True)]
    if len(args) > 2:
        print(f"all {len(args) // 2} pairs: failing {_ways(totals['failing'])}; improvements "
              f"{_ways(totals['improving'])}; " + "; ".join(
            f"{name} {_ways(totals[name][1:])} of {totals[name][0]}" for name, *_ in BANDS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
