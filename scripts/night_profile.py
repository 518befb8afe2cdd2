"""Where a night's worker seconds went, from the cProfile files its workers left (CONVBENCH_PROFILE_DIR):

    python3 scripts/night_profile.py PROFILE_DIR [--top N]

Prints each phase of measuring a combination (cumulative seconds over all workers, the replica's timing-only
workers included) and the functions that spent the most time themselves. Phases nest (timing holds the NVML
reads and the waits for the device), so their seconds do not add up to the total.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pstats
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (label, module, qualified name): the cumulative time of that function is the phase's.
PHASES = [
    ("worker: slices in all", "harness.run.poolchild", "_run_slice"),
    ("cuDNN session set-up (operands, float64 reference, descriptors)", "harness.backends.cudnn", "ConvSession.__init__"),
    ("  operands drawn on the host", "harness.measurement.accuracy", "host_inputs"),
    ("  float64 reference", "harness.measurement.accuracy", "reference"),
    ("PyTorch prepare (operands, reference)", "harness.backends.pytorch", "TorchBackend.prepare"),
    ("cuDNN measure (one combination, every phase)", "harness.backends.cudnn", "ConvSession.measure"),
    ("  bind (math type, workspace size)", "harness.backends.cudnn", "ConvSession.bind"),
    ("  checked runs (poison + call)", "harness.backends.cudnn", "ConvSession._run_checked"),
    ("  accuracy against the reference", "harness.measurement.accuracy", "measure"),
    ("  output hashes", "harness.measurement.accuracy", "output_hash"),
    ("  bitwise compares (determinism)", "harness.measurement.accuracy", "bitwise_equal"),
    ("  cuDNN handles created (fresh-handle check)", "harness.backends.cudnn_lib", "Handle.__init__"),
    ("  determinism (repeats round the placements, fresh handle)", "harness.backends.cudnn_determinism", "check"),
    ("  placements (operand copies, workspaces)", "harness.backends.cudnn", "ConvSession.placed"),
    ("PyTorch measure", "harness.backends.pytorch", "TorchBackend._measure"),
    ("timer: warm-up, batches, spacer, waits", "harness.measurement.timing", "CudaTimer.__call__"),
    ("  NVML clock reads", "harness.measurement.clocks", "DeviceClock.read"),
    ("  stop rule (median's standard error)", "harness.measurement.timing", "_enough"),
    ("cuDNN rankings (Get_v7, Find)", "harness.backends.cudnn", "ConvSession.rankings"),
    ("records finalized", "harness.run.finalize", "finalize"),
]


def code_key(module: str, qualname: str) -> tuple[str, int, str]:
    """(file suffix under the repository, first line, name): how pstats names a function."""
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    code = inspect.unwrap(obj).__code__
    return str(Path(code.co_filename).relative_to(ROOT)), code.co_firstlineno, code.co_name


def load(folder: Path) -> pstats.Stats:
    files = sorted(folder.glob("worker-*.prof"))
    if not files:
        raise SystemExit(f"night_profile: no worker-*.prof files in {folder}")
    stats = pstats.Stats(str(files[0]))
    for f in files[1:]:
        stats.add(str(f))
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    stats = load(args.folder)
    n = len(list(args.folder.glob("worker-*.prof")))
    print(f"{n} worker profiles, {stats.total_tt:.1f} s of worker time in all")
    keys = [(label, code_key(module, qualname)) for label, module, qualname in PHASES]
    cum = {key: 0.0 for _label, key in keys}
    for (file, line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
        for key in cum:
            if (line, func) == key[1:] and file.endswith(key[0]):
                cum[key] += ct
    for label, key in keys:
        print(f"{cum[key]:9.1f} s  {label}")
    print(f"\nfunctions by their own time (top {args.top}):")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:args.top]
    for (file, line, func), (_cc, nc, tt, ct, _callers) in rows:
        print(f"{tt:9.2f} s own {ct:9.2f} s cum {nc:9d} calls  {Path(file).name}:{line} {func}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
