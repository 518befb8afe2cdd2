"""Where a replica's pass spends its time: the timing-only pass of a two-process sweep, in this process, profiled.

On the H200 (docs/performance.md) about 205 s of a 518 s two-process backward sweep lay outside the main
process's slices, mostly the replica's pass (run/replicas.py), whose records are handed back unjournaled and so
show no wall time in the run. This runs that pass (the replica's options: timing only, its share of placements,
budget and floor) for the given cases and backends, and prints each backend's wall time split by call length
(sampling vs everything else per record) and cProfile's top functions: the next change chosen from a profile.

    python3 scripts/gpu/replica_probe.py [--cases IDS] [--directions bwd_data,bwd_filter] [--backends cudnn,torch]
        [--profile OUT.prof]

Without CUDA it runs PyTorch's pass on the CPU (a check of this script, not a figure to keep).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.backends import SweepOptions  # noqa: E402
from harness.backends.cudnn import cuda_unavailable_reason  # noqa: E402
from harness.core import cases as catalogue  # noqa: E402
from harness.run.replicas import replica_options  # noqa: E402
from harness.run.runners import resolve_backend  # noqa: E402

BANDS_MS = (0.05, 1.0, 5.0)  # the median's band a record's wall time is counted in


def _band(median_ms: float) -> str:
    lower = [b for b in BANDS_MS if median_ms >= b]
    return f">= {lower[-1]:g} ms" if lower else f"< {BANDS_MS[0]:g} ms"


def probe(cases: list, backends: list[str], directions: tuple[str, ...], cuda: bool) -> dict:
    """{backend: {band: [records, wall s, sampled s]}} of the replica's pass over ``cases``."""
    options = replica_options(SweepOptions(directions=directions, device="cuda" if cuda else "cpu", processes=2))
    out: dict[str, dict[str, list[float]]] = {}
    for name in backends:
        backend = resolve_backend(name)
        why = backend.available()
        if why:
            raise SystemExit(f"replica_probe: backend {name} cannot run here: {why}")
        bands = out.setdefault(name, collections.defaultdict(lambda: [0, 0.0, 0.0]))
        for case in cases:
            last = time.perf_counter()
            for rec in backend.run(case, backend.combos(case, options), options):
                now = time.perf_counter()
                wall, last = now - last, now  # the record's share of the pass, sessions and operands included
                if getattr(rec, "time", None) is None:
                    continue
                row = bands[_band(rec.time.median_ms)]
                row[0] += 1
                row[1] += wall
                row[2] += rec.time.median_ms * rec.time.n / 1e3
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="seed.c64,resnet50.conv1.n32,resnet50.layer1.1.conv1.n32,"
                                       "resnet50.layer3.1.conv2.n32")
    ap.add_argument("--directions", default="bwd_data,bwd_filter")
    ap.add_argument("--backends", default=None, help="default: cudnn,torch with CUDA, torch without")
    ap.add_argument("--profile", type=Path, help="also write cProfile's stats here")
    args = ap.parse_args(argv)
    cuda = cuda_unavailable_reason() is None
    backends = (args.backends or ("cudnn,torch" if cuda else "torch")).split(",")
    try:
        cases = catalogue.select(args.cases)
    except catalogue.UnknownCase as exc:
        raise SystemExit(f"replica_probe: {exc}") from None
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    out = prof.runcall(probe, cases, backends, tuple(args.directions.split(",")), cuda)
    print(f"replica pass on {'CUDA' if cuda else 'the CPU'}: {time.perf_counter() - t0:.1f} s for "
          f"{len(cases)} cases, {','.join(backends)}")
    for name, bands in out.items():
        for band, (n, wall, sampled) in sorted(bands.items()):
            print(f"  {name:6s} {band:>10s}: {n:5d} records, {wall:7.1f} s wall, {sampled:6.1f} s of samples "
                  f"({wall - sampled:6.1f} s else, {1e3 * (wall - sampled) / max(n, 1):6.2f} ms a record)")
    if args.profile:
        prof.dump_stats(args.profile)
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
