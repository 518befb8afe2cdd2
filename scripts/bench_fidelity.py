"""Timing fidelity, measured side by side in one run: the suite's median against triton's do_bench.

For every case of the default set, on the same bound cuDNN call (and on F.conv2d), three reruns each of
the suite's timer (hot, and cold with the L2 flushed as do_bench does) and of
triton.testing.do_bench(return_mode="median"). Prints each ratio, the spread of the suite's medians over
the reruns, the suite's hot median against do_bench_cudagraph (replays of a captured graph: device time
with no host dispatch), and a summary against the targets (within 3 % of do_bench for calls of 50 us or more; spread
of medians at most 1 %). Needs a CUDA GPU and triton.

    python3 scripts/bench_fidelity.py [--cases default] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import cases as catalogue  # noqa: E402
from harness.backends import SweepOptions  # noqa: E402
from harness.backends.cudnn import ConvSession, CudnnBackend, CudnnError, WorkspaceTooLarge  # noqa: E402
from harness.measure import CudaTimer, TimingPolicy  # noqa: E402

CALLS = (("cudnn", "IMPLICIT_PRECOMP_GEMM", "DEFAULT"), ("cudnn", "IMPLICIT_GEMM", "FMA"), ("torch", "auto", "-"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="default")
    ap.add_argument("--reruns", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench, do_bench_cudagraph

    cudnn = CudnnBackend().cudnn
    hot, cold = CudaTimer(TimingPolicy()), CudaTimer(TimingPolicy(cold=True))
    rows = []
    for case in catalogue.select(args.cases):
        session = ConvSession(cudnn, case, "fwd", "fp32", "NCHW", SweepOptions(), reference=False)
        for backend, algo, math in CALLS:
            if backend == "cudnn":
                try:
                    algo_id, ws, ws_bytes = session.bind(algo, math)
                except (CudnnError, WorkspaceTooLarge) as exc:
                    print(f"{case.id:36s} {backend:5s} {algo:22s} {math:8s} not run: {exc}")
                    continue

                def fn(algo_id=algo_id, ws=ws, ws_bytes=ws_bytes, session=session):
                    # follow torch's current stream, which graph capture switches to a side stream
                    session.cudnn.lib.cudnnSetStream(session.handle.ptr,
                                                     ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
                    session.conv.run(algo_id, ws, ws_bytes)
            else:
                x, w = session.ops["x"], session.ops["w"]

                def fn(x=x, w=w, case=case):
                    F.conv2d(x, w, stride=case.stride, padding=case.pad, dilation=case.dilation, groups=case.groups)
            suite_hot = [hot(fn).median_ms for _ in range(args.reruns)]
            suite_cold = [cold(fn).median_ms for _ in range(args.reruns)]
            triton = [do_bench(fn, return_mode="median") for _ in range(args.reruns)]
            try:  # replays of a captured graph: device time with no host dispatch at all
                graph = [do_bench_cudagraph(fn, return_mode="median") for _ in range(args.reruns)]
            except Exception as exc:  # a call that cannot be captured
                graph, graph_error = [], f"{type(exc).__name__}: {exc}"[:120]
            else:
                graph_error = None
            ref = statistics.median(triton)
            row = {"case": case.id, "backend": backend, "algo": algo, "math": math, "do_bench_ms": ref,
                   "suite_hot_ms": statistics.median(suite_hot), "suite_cold_ms": statistics.median(suite_cold),
                   "cold_ratio": statistics.median(suite_cold) / ref, "hot_ratio": statistics.median(suite_hot) / ref,
                   "cold_spread": (max(suite_cold) - min(suite_cold)) / statistics.median(suite_cold),
                   "hot_spread": (max(suite_hot) - min(suite_hot)) / statistics.median(suite_hot),
                   "do_bench_spread": (max(triton) - min(triton)) / ref,
                   "cudagraph_ms": statistics.median(graph) if graph else None, "cudagraph_error": graph_error,
                   "hot_vs_cudagraph": statistics.median(suite_hot) / statistics.median(graph) if graph else None}
            rows.append(row)
            print(f"{case.id:36s} {backend:5s} {algo:22s} {math:8s} do_bench {ref:8.4f} ms  cold/do_bench "
                  f"{row['cold_ratio']:.3f}  hot/do_bench {row['hot_ratio']:.3f}  spread cold {row['cold_spread']:.2%} "
                  f"hot {row['hot_spread']:.2%}  hot/cudagraph {row['hot_vs_cudagraph'] or float('nan'):.3f}", flush=True)
        session.close()
        torch.cuda.empty_cache()
    big = [r for r in rows if r["do_bench_ms"] >= 0.05]
    within = [r for r in big if abs(r["cold_ratio"] - 1) <= 0.03]
    summary = {"gpu": torch.cuda.get_device_name(), "calls": len(rows), "calls_ge_50us": len(big),
               "cold_within_3pct": len(within),
               "worst_cold_ratio": max((abs(r["cold_ratio"] - 1) for r in big), default=None),
               "median_cold_ratio": statistics.median(r["cold_ratio"] for r in big) if big else None,
               "median_hot_ratio": statistics.median(r["hot_ratio"] for r in big) if big else None,
               "worst_cold_spread": max((r["cold_spread"] for r in big), default=None),
               "worst_hot_spread": max((r["hot_spread"] for r in big), default=None),
               "median_cold_spread": statistics.median(r["cold_spread"] for r in big) if big else None,
               "hot_within_3pct_of_cudagraph": sum(1 for r in big if r["hot_vs_cudagraph"]
                                                   and abs(r["hot_vs_cudagraph"] - 1) <= 0.03),
               "calls_ge_50us_with_cudagraph": sum(1 for r in big if r["hot_vs_cudagraph"]),
               "worst_do_bench_spread": max((r["do_bench_spread"] for r in big), default=None)}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
