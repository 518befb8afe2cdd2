#!/usr/bin/env python3
"""Performance of the onnxruntime part, measured side by side in one run.

1. Latency agreement: for each model and search mode, one session with onnxruntime's own profiler on;
   our timer (perf_counter around run_with_iobinding, as the backend times it) and the profiler's
   "model_run" durations cover the very same runs. Prints both medians and their ratio; the target is
   agreement within 5 %.
2. Grid time: the default grid (`convbench ort-grid`) end to end, wall clock, against the
   5-minute target of the issue (asv runs the same grid in setup_cache).

   Then where the grid's time went, per model, from the records' extra.cost_s (reference, timing worker,
   drift phase with its worker-seconds and longest worker, log parsing).

Usage: python3 scripts/bench_ort.py [--device cuda|cpu] [--models resnet50,mobilenetv2] [--skip-grid]
                                    [--skip-agreement]
Exit code 1 when a ratio misses its target, so the lead sees it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.backends.ort import (  # noqa: E402
    CPU_EP,
    CUDA_EP,
    OrtBackend,
    WorkerRun,
    architectures,
    imagenet,
    models,  # noqa: E402
)
from harness.backends.ort.options import provider_options  # noqa: E402
from harness.run.journal import iter_journal  # noqa: E402
from harness.run.pool import FreshProcesses  # noqa: E402

AGREEMENT = 0.05
GRID_BUDGET_S = 300.0


def agreement(model: str, provider: str, search: str | None, workdir: Path) -> dict:
    built = models.build(model)
    x = imagenet.model_inputs(model)["image"]
    xp = workdir / f"{model}-x.npy"
    import numpy as np

    np.save(xp, x)
    po = {} if provider == CPU_EP else provider_options(search, 1, 1)
    w = WorkerRun({"model": str(built.path), "provider": provider,
                   "inputs": {"image": str(xp)}, "timing_policy": {"min_samples": 20, "max_samples": 200},
                   "configs": [{"key": "k", "provider_options": po, "sessions": 1}]},
                  name=f"agree-{model}-{search or 'cpu'}", function="harness.backends.ort.session_process:profile_agreement")
    w.prepare(workdir)
    FreshProcesses()([w], 1, 600)
    if w.failure:
        return {"error": f"{w.failure[0]}: {w.failure[1]}"}
    return w.result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None)
    ap.add_argument("--models", default=",".join(architectures.MODELS))
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--skip-agreement", action="store_true")
    ap.add_argument("--api-log", choices=("setting", "mode"), default="setting", help="passed to the grid")
    args = ap.parse_args()
    backend = OrtBackend()
    device = args.device or ("cuda" if backend.cuda_reason() is None else "cpu")
    provider = CUDA_EP if device == "cuda" else CPU_EP
    searches = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT") if device == "cuda" else (None,)
    import onnxruntime

    print(f"onnxruntime {onnxruntime.__version__}, {provider}, {time.strftime('%Y-%m-%d %H:%M:%S')}")
    failed = False
    if not args.skip_agreement:
        failed |= agreement_table(args.models, provider, searches)
    if not args.skip_grid:
        failed |= grid_time(args.models, device, args.api_log)
    return 1 if failed else 0


def agreement_table(model_list: str, provider: str, searches) -> bool:
    failed = False
    print("\n1. latency agreement with onnxruntime's profiler (same session, same runs, I/O binding)")
    print(f"   {'model':12} {'search':10} {'ours ms':>9} {'profiler ms':>12} {'ratio':>7}  target |1-ratio| <= 5%")
    with tempfile.TemporaryDirectory(prefix="bench-ort-") as tmp:
        for model in model_list.split(","):
            for search in searches:
                r = agreement(model, provider, search, Path(tmp))
                if "error" in r or not r.get("profiler"):
                    print(f"   {model:12} {search or 'n/a':10} failed: {r.get('error', 'no profiler runs')}")
                    failed = True
                    continue
                ours, theirs = r["ours"]["median_ms"], r["profiler"]["median_ms"]
                ratio = ours / theirs
                ok = abs(1 - ratio) <= AGREEMENT
                failed |= not ok
                print(f"   {model:12} {search or 'n/a':10} {ours:9.4f} {theirs:12.4f} {ratio:7.3f}  "
                      f"{'ok' if ok else 'MISSED'} (n={r['timed_runs']}, profiled {r['profiled_runs']})")
    return failed


def grid_time(model_list: str, device: str, api_log: str = "setting") -> bool:
    print("\n2. default grid, wall clock")
    with tempfile.TemporaryDirectory(prefix="bench-ort-grid-") as out:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "ort-grid", "--out", out, "--device", device,
                               "--models", model_list, "--api-log", api_log], cwd=ROOT, env=dict(os.environ),
                              capture_output=True, text=True)
        wall = time.monotonic() - t0
        tail = proc.stdout.strip().splitlines()[-3:]
        ok = proc.returncode == 0 and wall <= GRID_BUDGET_S
        print(f"   {wall:.0f} s for the grid (--api-log {api_log}); budget {GRID_BUDGET_S:.0f} s; ratio {wall / GRID_BUDGET_S:.2f} "
              f"{'ok' if ok else 'MISSED'} (exit {proc.returncode})")
        for line in tail:
            print("   " + line)
        for line in cost_lines(Path(out)):
            print("   " + line)
        if proc.returncode:
            print(json.dumps(proc.stderr[-2000:]))
    return not ok


def cost_lines(out: Path) -> list[str]:
    """Per model: the phases the backend measured, and the drift workers' seconds (sum, longest)."""
    lines = []
    for run in sorted(out.glob("*/*/run.json")):
        journal = run.with_name("records.jsonl")  # read from records.jsonl.gz once the run is finished
        seen = {}
        for rec in iter_journal(journal):
            cost = (rec.get("extra") or {}).get("cost_s")
            if not cost:
                continue
            m = seen.setdefault(rec["case"], {"phases": cost["model_phases"], "workers": {}, "parse": {}})
            key = json.dumps({k: v for k, v in rec["settings"].items() if k != "io"}, sort_keys=True)
            m["workers"][key] = [w for w in cost["drift_workers_s"] if w is not None]
            m["parse"][key] = [p for p in cost["log_parse_s"] if p is not None]
        for case, m in seen.items():
            ws = [w for v in m["workers"].values() for w in v]
            ps = [p for v in m["parse"].values() for p in v]
            lines.append(f"{case}: {m['phases']}; drift worker-seconds {sum(ws):.0f} over {len(ws)} workers "
                         f"(longest {max(ws, default=0):.1f} s); log parsing {sum(ps):.1f} s in all")
    return lines


if __name__ == "__main__":
    sys.exit(main())
