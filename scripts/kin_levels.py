#!/usr/bin/env python3
"""What the gate's kin rule (timechange.kin_level: a head at a level the base's run measured the same kernel at
under another label) costs and buys, on pairs of real runs of one machine: per pair, the time findings that fail
the gate (regressions) and the improvements, with and without the rule, and the software-injected power with and without it (each head record alone made
1.05x slower for calls >= 50 us, 1.10x for 20-50 us, as scripts/calibrate_gate.py --nightly-power does; its kin
in the base run left as measured, the case where one label's kernel changes and the others do not).

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
    """Counts for one pair: regressions and improvements without/with kin, and per band (injected, detected
    without, with kin)."""
    kin = kernels(base.values())
    out = {"failing": [0, 0], "improving": [0, 0], **{name: [0, 0, 0] for name, *_ in BANDS}}
    for key in base.keys() & head.keys():
        rb, rh = base[key], head[key]
        k = kin_of(rb, kin)
        for i, v in enumerate((time_verdict(rb, rh, th), time_verdict(rb, rh, th, kin=k))):
            out["failing"][i] += bool(v and v[0] == "regression")
            out["improving"][i] += bool(v and v[0] == "improvement")
        for name, lo, hi, factor in BANDS:
            if lo <= rb.median_ms < hi:
                injected = scaled(rh, factor)
                out[name][0] += 1
                for i, kw in enumerate(({}, {"kin": k})):
                    v = time_verdict(rb, injected, th, **kw)
                    out[name][1 + i] += bool(v and v[0] == "regression")
    return out


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
        print(f"{Path(b).name} -> {Path(h).name}: failing {res['failing'][0]} without kin, {res['failing'][1]} with; "
              f"improvements {res['improving'][0]} and {res['improving'][1]}")
        for name, *_ in BANDS:
            n, without, with_kin = res[name]
            print(f"  {name}: {without} of {n} detected without kin, {with_kin} with")
        for k, v in res.items():
            totals[k] = [a + c for a, c in zip(totals.get(k, [0] * len(v)), v, strict=True)]
    if len(args) > 2:
        print(f"all {len(args) // 2} pairs: failing {totals['failing'][0]} without kin, {totals['failing'][1]} with; "
              f"improvements {totals['improving'][0]} and {totals['improving'][1]}; " + "; ".join(
            f"{name} {totals[name][1]} / {totals[name][2]} of {totals[name][0]}" for name, *_ in BANDS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
