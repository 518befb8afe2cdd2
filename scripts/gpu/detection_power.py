"""Detection power and false alarms of the time gate, measured on the GPU with a known injected slowdown.

For a set of real cuDNN forward calls (default cases, several algorithms, math types, dtypes, layouts), four
passes, each timing every call once as a nightly run does (each process its share of the five placements,
``TimingPolicy().share(2)``), as four nightly runs would:
  1. base;  2. +5 %;  3. +10 %;  4. base again (the A/A pair with pass 1).
A run times each combination in two processes (harness/run/replicas.py), so the script runs its passes twice, in
two processes one after the other (``--part 1``, ``--part 2``), and ``--judge`` pools each call's two timings
per pass (harness.measurement.timing.pooled, with both processes' medians) before judging them with
harness.analysis.timechange.time_verdict at the default thresholds, as a compare of two runs does.
The slowdown is device-side: an extra spin kernel (torch.cuda._sleep) enqueued right after the call inside its
timed region, its length set from a fit of the spin kernel's own timed duration so that it adds the fraction of
the call's pass-1 median, then corrected once per call from a timed trial of call + spin (the fit
alone gave +4.75 % for +5 % and +7.8 % for +10 % on 20-50 us calls); the slowdown each call really got is
measured (pass k median / pass 1 median) and printed beside the verdicts.
Prints the share detected per call-length band and the false alarms of the A/A pair; writes every row to --json.
The passes keep no outputs; ``--hashes RUN`` takes each call's output hash from a run of the same catalogue on the
same stack (a deterministic call's bits do not change between runs), so that the gate's kin rules
(timechange.kin_level and kin_both_levels: each pass's other labels of the same kernel) are judged as a compare
would judge them.

    python3 scripts/gpu/detection_power.py --part 1 --json p1.json; ... --part 2 --json p2.json
    python3 scripts/gpu/detection_power.py --judge p1.json p2.json --json detection-power.json [--hashes RUN]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.analysis.compare import kernels, kin_of  # noqa: E402
from harness.analysis.timechange import Thresholds, time_verdict  # noqa: E402
from harness.backends import SweepOptions  # noqa: E402
from harness.backends.cudnn import ConvSession, CudnnBackend, CudnnError, WorkspaceTooLarge, placements  # noqa: E402
from harness.collect.discovery import Refused  # noqa: E402
from harness.core import cases as catalogue  # noqa: E402
from harness.core.records import Determinism, Record, Timing  # noqa: E402
from harness.measurement.timing import CudaTimer, TimingPolicy, pooled  # noqa: E402

CALLS = (("IMPLICIT_PRECOMP_GEMM", "DEFAULT"), ("IMPLICIT_PRECOMP_GEMM", "FMA"), ("IMPLICIT_GEMM", "FMA"),
         ("GEMM", "DEFAULT"))
BANDS = ((0.020, 0.050, 0.10, 0.90), (0.050, float("inf"), 0.05, 0.95))  # (lo ms, hi ms, slowdown, target)


def fit_spin(torch, timer) -> tuple[float, float]:
    """(ms at zero cycles, ms per cycle) of the spin kernel, timed as the suite times a call."""
    xs = [0, 20_000, 60_000, 120_000, 240_000]
    ys = [timer(lambda c=c: torch.cuda._sleep(c)).median_ms for c in xs]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


PASSES = (("base", 0.0), ("plus5", 0.05), ("plus10", 0.10), ("base2", 0.0))


def measure(cases: str, part: int) -> dict:
    """Every call's timing in each pass, in this process (one of a run's two: part 1 times as the main process
    does, part 2 as the replica, each on its share of the placements)."""
    import torch

    options = SweepOptions()
    n_placed = placements(SweepOptions(processes=2, timing_only=part == 2))
    cudnn = CudnnBackend().cudnn
    timer = CudaTimer(TimingPolicy().share(2))
    a0, per_cycle = fit_spin(torch, CudaTimer(TimingPolicy()))
    print(f"spin kernel: {a0 * 1e3:.2f} us + {per_cycle * 1e6:.3f} us per 1000 cycles")
    calls = []
    t0 = time.perf_counter()
    for case in catalogue.select(cases):
        for dtype in ("fp32", "fp16"):
            for layout in ("NCHW", "NHWC"):
                try:
                    session = ConvSession(cudnn, case, "fwd", dtype, layout, options, reference=False)
                except (CudnnError, RuntimeError) as exc:
                    print(f"skip {case.id} {dtype} {layout}: {exc}")
                    continue
                for algo, math in CALLS:
                    try:
                        session.call(algo, math)()
                    except (CudnnError, WorkspaceTooLarge):
                        continue
                    calls.append({"case": case.id, "dtype": dtype, "layout": layout, "algo": algo, "math": math,
                                  "session": session})
    passes: dict[str, list] = {}
    placed: dict[str, list] = {}
    for name, frac in PASSES:
        out, spots = [], []
        for i, c in enumerate(calls):
            # bound again right before timing: binding sets the session's math type and may grow (reallocate)
            # its workspace, which would leave an earlier bound call pointing at freed memory
            session = c["session"]
            fns = session.placed_calls(*session.bind(c["algo"], c["math"]), n_placed)
            if frac:
                base_ms = passes["base"][i].median_ms
                want = frac * base_ms
                cycles = max(0, int((want - a0) / per_cycle))
                got = timer([lambda f=f, cy=cycles: (f(), torch.cuda._sleep(cy)) for f in fns]).median_ms - base_ms
                cycles = max(0, cycles + int((want - got) / per_cycle))  # one correction from the trial
                fns = [lambda f=f, cy=cycles: (f(), torch.cuda._sleep(cy)) for f in fns]
            out.append(timer(fns))
            spots.append(timer.placement_medians_ms)
        passes[name], placed[name] = out, spots
        print(f"pass {name}: {len(out)} calls ({time.perf_counter() - t0:.0f} s so far)")
    return {"spin": [a0, per_cycle],
            "calls": [{k: c[k] for k in ("case", "dtype", "layout", "algo", "math")} for c in calls],
            "passes": {name: [asdict(t) for t in ts] for name, ts in passes.items()}, "placements": placed}


def as_record(timings: list, spots: list | None = None, call: dict | None = None,
              determinism: Determinism | None = None) -> Record:
    """The record compare reads, of one forward call's timings pooled over the processes that measured it (and,
    where the parts recorded them, the medians of every placement they timed, as replicas.merge keeps them);
    ``call``: its case, algo, math, dtype and layout (the time test reads none of them)."""
    call = call or {"case": "-", "algo": "-", "math": "-", "dtype": "fp32", "layout": "NCHW"}
    t = pooled(timings, TimingPolicy().keep_samples)
    extra = {"process_medians_ms": [x.median_ms for x in timings]}
    if spots and all(s is not None for s in spots):
        extra["placement_medians_ms"] = [x for s in spots for x in s]
    return Record(case=call["case"], backend="cudnn", direction="fwd", algo=call["algo"], math=call["math"],
                  dtype=call["dtype"], layout=call["layout"], time=t, extra=extra, determinism=determinism)


def run_hashes(run: Path) -> dict[tuple, Determinism]:
    """Each forward cuDNN call's determinism in a run (case, algo, math, dtype, layout) -> Determinism."""
    from harness.collect.runread import read_run

    return {(r.case, r.algo, r.math, r.dtype, r.layout): r.determinism for r in read_run(run)[1]
            if r.kind == "measurement" and r.backend == "cudnn" and r.direction == "fwd" and r.determinism}


def judge(parts: list[dict], hashes: dict[tuple, Determinism] | None = None, th: Thresholds | None = None) -> dict:
    """Each call's passes pooled over the parts (processes) and judged with the gate's settings ``th`` (default:
    the calibrated ones): base against +5 %, +10 % and base2, with each pass's records of the same kernel as kin
    where ``hashes`` (run_hashes) name the kernels."""
    th = th or Thresholds()
    hashes = hashes or {}
    calls = parts[0]["calls"]
    if any(p["calls"] != calls for p in parts):
        raise SystemExit("the parts did not time the same calls (another catalogue or GPU?)")
    timed = {name: [[Timing(**p["passes"][name][i]) for p in parts] for i in range(len(calls))]
             for name, _ in PASSES}
    spots = {name: [[(p.get("placements") or {}).get(name, [None] * len(calls))[i] for p in parts]
                    for i in range(len(calls))] for name, _ in PASSES}
    det = [hashes.get((c["case"], c["algo"], c["math"], c["dtype"], c["layout"])) for c in calls]
    bases = [as_record(timed["base"][i], spots["base"][i], c, det[i]) for i, c in enumerate(calls)]
    kin = kernels(bases)
    heads = {name: [as_record(timed[name][i], spots[name][i], c, det[i]) for i, c in enumerate(calls)]
             for name in ("plus5", "plus10", "base2")}
    head_kin = {name: kernels(recs) for name, recs in heads.items()}
    rows = []
    for i, c in enumerate(calls):
        base = bases[i]
        row = dict(c, base_ms=base.median_ms, flags=base.time.flags,
                   process_medians_ms=base.extra["process_medians_ms"])
        for name in ("plus5", "plus10", "base2"):
            head = heads[name][i]
            v = time_verdict(base, head, th, kin=kin_of(base, kin), head_kin=kin_of(head, head_kin[name]))
            row[name] = {"ratio": head.median_ms / base.median_ms, "verdict": v[0] if v else "same",
                         "flags": head.time.flags, "process_medians_ms": head.extra["process_medians_ms"]}
        rows.append(row)
    summary = {}
    for lo, hi, size, target in BANDS:
        key = "plus5" if size == 0.05 else "plus10"
        band = [r for r in rows if lo <= r["base_ms"] < hi]
        hit = sum(r[key]["verdict"] == "regression" for r in band)
        amb = sum(r[key]["verdict"] == "ambiguous" for r in band)
        got = [r[key]["ratio"] for r in band]
        summary[f"{lo * 1e3:.0f}-{hi * 1e3:.0f}us +{size:.0%}"] = {
            "calls": len(band), "detected": hit, "ambiguous": amb, "share": hit / len(band) if band else None,
            "target": target, "injected_ratio_median": statistics.median(got) if got else None,
            "missed": [{k: r[k] for k in ("case", "dtype", "layout", "algo", "math", "base_ms")}
                       | {"ratio": r[key]["ratio"], "verdict": r[key]["verdict"]}
                       for r in band if r[key]["verdict"] != "regression"]}
    aa = [r for r in rows if r["base2"]["verdict"] in ("regression", "improvement")]
    summary["aa_false_alarms"] = {"calls": len(rows), "regressions": sum(r["base2"]["verdict"] == "regression"
                                                                          for r in rows),
                                  "improvements": sum(r["base2"]["verdict"] == "improvement" for r in rows),
                                  "ambiguous": sum(r["base2"]["verdict"] == "ambiguous" for r in rows),
                                  "rows": [{k: r[k] for k in ("case", "dtype", "layout", "algo", "math", "base_ms")}
                                           | {"ratio": r["base2"]["ratio"]} for r in aa]}
    summary["flags_in_base"] = sum(bool(r["flags"]) for r in rows)
    return {"summary": summary, "spin": [p["spin"] for p in parts], "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="default")
    ap.add_argument("--part", type=int, help="measure one process's passes")
    ap.add_argument("--judge", nargs="+", type=Path, help="pool the parts' passes and judge them")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--hashes", type=Path, help="with --judge: a run of the same catalogue, for each call's bits")
    args = ap.parse_args(argv)
    if args.judge:
        try:
            hashes = run_hashes(args.hashes) if args.hashes else None
        except (OSError, Refused) as exc:  # not one readable run
            print(f"detection_power: --hashes {args.hashes}: {exc}", file=sys.stderr)
            return 2
        out = judge([json.loads(p.read_text()) for p in args.judge], hashes)
        for k, v in out["summary"].items():
            print(k, json.dumps(v)[:400])
    else:
        out = measure(args.cases, args.part)
    args.json.write_text(json.dumps(out, indent=1 if args.judge else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
