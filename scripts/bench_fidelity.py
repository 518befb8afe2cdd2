"""Timing fidelity, measured side by side in one run: the suite's median against triton's do_bench.

For every case of the default set, on the same bound cuDNN call (and on F.conv2d), three rounds, each of which
times the call once with each of:
  - the suite's timer, hot, and cold (the L2 flushed before each repetition, as do_bench does);
  - triton.testing.do_bench(return_mode="median") as it is;
  - the same do_bench with a device-side wait after its L2 flush (outside its timed region), as long as the
    call's host dispatch: stock do_bench times host dispatch instead of the device when the call's host side
    outlasts its flush;
  - do_bench_cudagraph: replays of a captured graph, device time with no host dispatch.
The rounds are interleaved so that a drift of the GPU's state touches every timer alike, and each starts after the
GPU idled SETTLE_MS, so that every round follows the same history; NVML samples the SM clock and clock-event
reasons during each round. The suite's samples of each round are kept, so that a call whose rounds
spread can be told apart as spread by its sample counts or by rounds that moved (sampling_p). Prints each call and
a summary against the targets (suite cold within 3 % of do_bench for calls of 50 us or more; spread of the suite's
medians over the reruns at most 1 %).
Needs a CUDA GPU, triton and nvidia-ml-py.

    python3 scripts/bench_fidelity.py [--cases default] [--reruns 3] [--settle-ms 1000] [--json OUT.json]
    python3 scripts/bench_fidelity.py --against BASE.json NEW.json   # two runs' JSON (or .json.xz) side by side

Two timers' spread is only comparable on one GPU in one job (a host's state moves it more than a timer does):
`scripts/gpu/side_by_side.sh fidelity` runs a baseline tree's benchmark and this tree's back to back, then this.
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.backends import SweepOptions  # noqa: E402
from harness.backends.cudnn import ConvSession, CudnnBackend, CudnnError, WorkspaceTooLarge  # noqa: E402
from harness.core import cases as catalogue  # noqa: E402
from harness.measurement.clocks import ClockSampler, DeviceClock  # noqa: E402
from harness.measurement.timing import SPACER_CLOCK_HZ, CudaTimer, TimingPolicy  # noqa: E402

CALLS = (("cudnn", "IMPLICIT_PRECOMP_GEMM", "DEFAULT"), ("cudnn", "IMPLICIT_GEMM", "FMA"), ("torch", "auto", "-"))
BIG_MS = 0.05  # the targets hold for calls of 50 us or more
# Each round starts after the GPU idled this long, so that it starts in the state a nightly sweep times in. Without
# it round 0 followed the host dispatch probe (a near-idle GPU) and rounds 1-2 the previous round's do_bench and
# graph replays (about 0.3 s of load, which held H100s under their software power cap): on one H100 in one job the
# suite's cold reruns were within 1 % on 29 of 59 calls without it and 48 of 59 after 200 ms, still under the cap
# (18-105 capped batches discarded on the two H100s). After 1 s a third H100 saw no cap in any round (56 of 59), as
# the sweeps never did (no batch discarded or kept under a cap in the 183,380 timed records with a clock read of
# the 101 committed runs). docs/performance.md.
SETTLE_MS = 1000.0


def host_dispatch_ms(torch, fn, n: int = 20) -> float:
    """Median host time to enqueue one call, the device idle before each."""
    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def spaced_do_bench(torch, do_bench, fn, wait_ms: float) -> float:
    """do_bench with ``wait_ms`` of device-side sleep after each of its L2 flushes, before its start event."""
    from triton import runtime

    drv = runtime.driver.active
    flush = drv.clear_cache
    waits = [0]

    def flush_then_wait(cache):
        flush(cache)
        torch.cuda._sleep(int(wait_ms * 1e-3 * SPACER_CLOCK_HZ))
        waits[0] += 1

    drv.clear_cache = flush_then_wait
    try:
        ms = do_bench(fn, return_mode="median")
    finally:
        drv.clear_cache = flush
    if not waits[0]:
        raise RuntimeError("this triton's do_bench does not flush through runtime.driver.active.clear_cache")
    return ms


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def sampling_p(rounds: list[list[float]], counts: list[int] | None = None, draws: int = 4000,
               seed: int = 0) -> float | None:
    """How often the medians of samples drawn again from the rounds' samples pooled (so with no shift between the
    rounds), each round as many as it took (``counts``: the timer's n, which the kept samples may thin; default
    their number), spread at least as much as the rounds' own medians did. Near 0: the rounds moved apart (the
    GPU's state, or what a round set up again); not small: the spread is what the rounds' sample counts leave, and
    more samples a round would narrow it. None without samples in every round."""
    import numpy as np

    if len(rounds) < 2 or not all(rounds):
        return None
    counts = counts or [len(r) for r in rounds]
    pooled = np.asarray([x for r in rounds for x in r], dtype=np.float64)
    rng = np.random.default_rng(seed)
    meds = np.stack([np.median(pooled[rng.integers(0, len(pooled), size=(draws, n))], axis=1) for n in counts])
    drawn = (meds.max(axis=0) - meds.min(axis=0)) / np.median(meds, axis=0)
    return float(np.mean(drawn >= spread([statistics.median(r) for r in rounds]) - 1e-12))


def measure_call(torch, fn, args, timers, do_bench, do_bench_cudagraph, sampler) -> dict:
    host_ms = host_dispatch_ms(torch, fn)
    wait_ms = min(5.0, 1.5 * host_ms + 0.02)
    runs: dict[str, list] = {k: [] for k in (*timers, "do_bench", "do_bench_spaced", "cudagraph")}
    samples: dict[str, list] = {k: [] for k in timers}
    samples_ms: dict[str, list] = {k: [] for k in timers}  # each round's samples, for sampling_p
    timer_clocks: dict[str, list] = {k: [] for k in timers}
    clocks, graph_error = [], None
    for _ in range(args.reruns):
        if args.settle_ms:  # every round after the same idle GPU, not round 0 alone (see --settle-ms)
            torch.cuda.synchronize()
            time.sleep(args.settle_ms / 1e3)
        with sampler:
            for mode, timer in timers.items():
                t = timer(fn)
                runs[mode].append(t.median_ms)
                samples[mode].append(t.n)
                samples_ms[mode].append(list(t.samples_ms))
                timer_clocks[mode].append(t.clock)
            runs["do_bench"].append(do_bench(fn, return_mode="median"))
            runs["do_bench_spaced"].append(spaced_do_bench(torch, do_bench, fn, wait_ms))
            if graph_error is None:
                try:  # a call that cannot be captured leaves this column empty
                    runs["cudagraph"].append(do_bench_cudagraph(fn, return_mode="median"))
                except Exception as exc:
                    graph_error = f"{type(exc).__name__}: {exc}"[:120]
        clocks.append(sampler.summary())
    med = {k: statistics.median(v) if v else None for k, v in runs.items()}
    return {"host_dispatch_ms": host_ms, "wait_ms": wait_ms, "medians_ms": runs, "samples": samples,
            "samples_ms": samples_ms, "sampling_p": {k: sampling_p(v, samples[k]) for k, v in samples_ms.items()},
            "clocks": clocks, "timer_clocks": timer_clocks, "cudagraph_error": graph_error,
            "spreads": {k: spread(v) for k, v in runs.items() if v},
            "do_bench_ms": med["do_bench"], "do_bench_spaced_ms": med["do_bench_spaced"],
            "suite_hot_ms": med["hot"], "suite_cold_ms": med["cold"], "cudagraph_ms": med["cudagraph"],
            "cold_ratio": med["cold"] / med["do_bench"], "cold_ratio_spaced": med["cold"] / med["do_bench_spaced"],
            "hot_ratio": med["hot"] / med["do_bench"],
            "do_bench_host_bound": med["do_bench"] / med["do_bench_spaced"] > 1.03,
            "hot_vs_cudagraph": med["hot"] / med["cudagraph"] if med["cudagraph"] else None}


def spread_cause(row: dict) -> str:
    """Why a call's cold reruns spread: the clock caps its timer kept or discarded, or those NVML saw during its
    rounds (while do_bench ran too), or no cause found."""
    timer = [c for c in row["timer_clocks"]["cold"] if c]
    kept = sorted({s for c in timer for s in c.get("slowdowns") or ()})
    dropped = sum(c.get("throttled_batches") or 0 for c in timer)
    rounds = sorted({s for c in row["clocks"] for s in c.get("slowdowns") or ()})
    low = min((c["sm_mhz_min"] for c in row["clocks"] if c.get("sm_mhz_min")), default=None)
    if kept:
        return f"timed under {'+'.join(kept)} (SM {min(c['sm_mhz_min'] for c in timer)} MHz)"
    if rounds:
        return (f"{'+'.join(rounds)} during its rounds (SM min {low} MHz)"
                + (f", {dropped} capped batches discarded by the timer" if dropped else ""))
    return "no cause found (no clock cap read)"


def summarize(rows: list[dict], gpu: str) -> dict:
    big = [r for r in rows if r["do_bench_spaced_ms"] >= BIG_MS]  # device time: stock do_bench may time the host
    device_bound = [r for r in big if not r["do_bench_host_bound"]]

    def count(pred, among):
        return sum(1 for r in among if pred(r))

    return {"gpu": gpu, "calls": len(rows), "calls_ge_50us": len(big),
            "cold_within_3pct_of_do_bench": count(lambda r: abs(r["cold_ratio"] - 1) <= 0.03, big),
            "cold_within_3pct_of_spaced_do_bench": count(lambda r: abs(r["cold_ratio_spaced"] - 1) <= 0.03, big),
            "do_bench_host_bound": [f"{r['case']} {r['backend']} {r['math']}" for r in big if r["do_bench_host_bound"]],
            "cold_within_3pct_where_do_bench_device_bound": count(lambda r: abs(r["cold_ratio"] - 1) <= 0.03,
                                                                  device_bound),
            "calls_where_do_bench_device_bound": len(device_bound),
            "median_cold_ratio": statistics.median(r["cold_ratio"] for r in big) if big else None,
            "worst_cold_ratio_spaced": max((abs(r["cold_ratio_spaced"] - 1) for r in big), default=None),
            "spread_le_1pct": {k: count(lambda r, k=k: r["spreads"].get(k, 1) <= 0.01, big)
                               for k in big[0]["spreads"]} if big else {},
            "worst_spread": {k: max(r["spreads"][k] for r in big if k in r["spreads"])
                             for k in big[0]["spreads"]} if big else {},
            "median_cold_spread": statistics.median(r["spreads"]["cold"] for r in big) if big else None,
            "cold_spread_over_1pct": [{"call": f"{r['case']} {r['backend']} {r['math']}",
                                       "spread": r["spreads"]["cold"], "cause": spread_cause(r),
                                       "sampling_p": (r.get("sampling_p") or {}).get("cold")}
                                      for r in big if r["spreads"]["cold"] > 0.01],
            # of those: spread no wider than the rounds' sample counts leave (p >= 0.05), or wider (the rounds moved)
            "cold_misses_by_sampling": _by_sampling(big),
            "throttled_batches_discarded": sum(c.get("throttled_batches") or 0 for r in rows
                                               for cs in r["timer_clocks"].values() for c in cs if c),
            "sm_mhz_min": min((c["sm_mhz_min"] for r in rows for c in r["clocks"] if "sm_mhz_min" in c), default=None),
            "slowdowns_seen": sorted({s for r in rows for c in r["clocks"] for s in c.get("slowdowns", [])})}


def _by_sampling(big: list[dict]) -> dict | None:
    """The cold misses (spread over 1 %) by sampling_p: within what the sample counts leave, or beyond it; None for
    a run whose JSON kept no samples (before they were kept)."""
    ps = [(r.get("sampling_p") or {}).get("cold") for r in big if r["spreads"]["cold"] > 0.01]
    if any(p is None for p in ps):
        return None
    return {"within_sampling": sum(p >= 0.05 for p in ps), "beyond_sampling": sum(p < 0.05 for p in ps)}


BANDS_MS = ((0.05, 0.1), (0.1, 0.2), (0.2, float("inf")))  # the spread misses gather in the shortest band


def against_lines(base: dict, new: dict) -> list[str]:
    """Two runs' figures side by side: the targets' counts, the spread by timer and by call length."""
    def big(run):
        return [r for r in run["rows"] if r["do_bench_spaced_ms"] >= BIG_MS]

    sides = [(summarize(run["rows"], run["summary"]["gpu"]), big(run)) for run in (base, new)]
    lines = [f"{'':44s} {'base':>12s} {'new':>12s}",
             f"{'GPU':44s} {sides[0][0]['gpu']:>12.12s} {sides[1][0]['gpu']:>12.12s}"]

    def row(label, values):
        lines.append(f"{label:44s} " + " ".join(f"{v:>12s}" for v in values))

    row("GPU idle before each round (ms)", [f"{run.get('settle_ms', 0):g}" for run in (base, new)])
    row("calls of 50 us or more", [str(len(b)) for _, b in sides])
    row("cold within 3 % of do_bench (device-bound)", [
        f"{s['cold_within_3pct_where_do_bench_device_bound']} of {s['calls_where_do_bench_device_bound']}"
        for s, _ in sides])
    for timer in sides[1][0]["spread_le_1pct"]:
        row(f"spread <= 1 %: {timer}", [f"{s['spread_le_1pct'].get(timer, '-')} of {len(b)}" for s, b in sides])
    for lo, hi in BANDS_MS:
        label = f"spread <= 1 %: cold, {lo * 1e3:.0f}-{hi * 1e3:.0f} us" if hi != float("inf") else \
            f"spread <= 1 %: cold, {lo * 1e3:.0f} us or more"
        row(label, [f"{sum(r['spreads']['cold'] <= 0.01 for r in b if lo <= r['do_bench_spaced_ms'] < hi)} of "
                    f"{sum(lo <= r['do_bench_spaced_ms'] < hi for r in b)}" for _, b in sides])
    row("median cold spread", [f"{s['median_cold_spread']:.2%}" for s, _ in sides])
    row("cold misses: sampling / rounds moved", [
        f"{m['within_sampling']} / {m['beyond_sampling']}" if (m := s["cold_misses_by_sampling"]) else "-"
        for s, _ in sides])
    row("capped batches discarded", [str(s["throttled_batches_discarded"]) for s, _ in sides])
    row("lowest SM clock (MHz)", [str(s["sm_mhz_min"]) for s, _ in sides])
    return lines


def read_run(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(lzma.decompress(data) if path.suffix == ".xz" else data)


def _milliseconds(text: str) -> float:
    """--settle-ms: a time to idle, so not negative (time.sleep refuses one mid-run, after the first call)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time of 0 ms or more")
    return value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="default")
    ap.add_argument("--reruns", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--settle-ms", type=_milliseconds, default=SETTLE_MS,
                    help=f"idle the GPU this long before each round (default {SETTLE_MS:g}; 0: round 0 follows "
                         "the call's host dispatch probe, a near-idle GPU, and rounds 1-2 the timers' own load)")
    ap.add_argument("--against", nargs=2, type=Path, metavar=("BASE", "NEW"),
                    help="print two runs' JSON side by side (no GPU needed)")
    args = ap.parse_args()
    if args.against:
        try:
            base, new = (read_run(p) for p in args.against)
            print("\n".join(against_lines(base, new)))
        except (OSError, ValueError, KeyError, TypeError, lzma.LZMAError) as exc:
            print(f"bench_fidelity: cannot read {' and '.join(map(str, args.against))}: {exc}", file=sys.stderr)
            return 2
        return 0
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench, do_bench_cudagraph

    cudnn = CudnnBackend().cudnn
    timers = {"hot": CudaTimer(TimingPolicy()), "cold": CudaTimer(TimingPolicy(cold=True))}
    clock = DeviceClock.for_torch_device()
    if clock is None:
        print("bench_fidelity: NVML cannot read this GPU's clocks (nvidia-ml-py missing, or no NVML)", file=sys.stderr)
        return 2
    sampler = ClockSampler(clock)
    rows = []
    for case in catalogue.select(args.cases):
        session = ConvSession(cudnn, case, "fwd", "fp32", "NCHW", SweepOptions(), reference=False)
        for backend, algo, math in CALLS:
            if backend == "cudnn":
                try:
                    fn = session.call(algo, math)
                except (CudnnError, WorkspaceTooLarge) as exc:
                    print(f"{case.id:36s} {backend:5s} {algo:22s} {math:8s} not run: {exc}")
                    continue
            else:
                x, w = session.ops["x"], session.ops["w"]

                def fn(x=x, w=w, case=case):
                    F.conv2d(x, w, stride=case.stride, padding=case.pad, dilation=case.dilation, groups=case.groups)
            row = {"case": case.id, "backend": backend, "algo": algo, "math": math,
                   **measure_call(torch, fn, args, timers, do_bench, do_bench_cudagraph, sampler)}
            rows.append(row)
            sm = sorted({c.get("sm_mhz_min") for c in row["clocks"]})
            caps = sorted({s for cs in row["timer_clocks"].values() for c in cs if c for s in c["slowdowns"]})
            print(f"{case.id:34s} {backend:5s} {math:7s} do_bench {row['do_bench_ms'] * 1e3:7.1f} us "
                  f"(spaced {row['do_bench_spaced_ms'] * 1e3:7.1f}, host {row['host_dispatch_ms'] * 1e3:5.1f})  "
                  f"cold/db {row['cold_ratio']:.3f} cold/spaced {row['cold_ratio_spaced']:.3f}  "
                  f"spread cold {row['spreads']['cold']:.2%} hot {row['spreads']['hot']:.2%}  "
                  f"n {row['samples']['cold']}  SM min MHz {sm} {' '.join(caps)}", flush=True)
        session.close()
        torch.cuda.empty_cache()
    summary = summarize(rows, torch.cuda.get_device_name())
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "settle_ms": args.settle_ms, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
