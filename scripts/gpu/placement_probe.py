"""Does a call's time depend on where its buffers sit in device memory? A probe of the A/A level switches.

In the H200's A/A runs (docs/performance.md) some calls, tight within every run (IQR/median under 1 %), sat ~10 %
higher in one run of four (resnet50.layer4.0.conv2 IMPLICIT_GEMM fp32 NCHW: 1.09-1.10x under all four math types
of that one run). A fresh process allocates its operands elsewhere. This probe times the same calls on N
sessions in one process, each with fresh buffers shifted by a spacer allocation of a different size, and prints
the medians per placement: two levels here mean the level follows the placement, not the process or the clock.

    python3 scripts/gpu/placement_probe.py [--placements 12] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.backends import SweepOptions  # noqa: E402
from harness.backends.cudnn import ConvSession, CudnnBackend  # noqa: E402
from harness.core import cases as catalogue  # noqa: E402

CALLS = (("resnet50.layer4.0.conv2.n32", "IMPLICIT_GEMM", "FMA", "fp32", "NCHW"),
         ("resnet50.layer3.1.conv1.n32", "IMPLICIT_GEMM", "DEFAULT", "fp32", "NCHW"),
         ("resnet50.layer3.1.conv2.n32", "GEMM", "DEFAULT", "fp32", "NCHW"),
         ("resnet50.layer2.1.conv2.n32", "IMPLICIT_PRECOMP_GEMM", "FMA", "fp32", "NCHW"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--placements", type=int, default=12)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    import torch

    cudnn = CudnnBackend().cudnn
    options = SweepOptions()
    keep = []
    rows = []
    for p in range(args.placements):
        keep.append(torch.empty((p * 37 + 1) << 20, dtype=torch.uint8, device="cuda"))  # shifts what follows
        for case_id, algo, math, dtype, layout in CALLS:
            (case,) = catalogue.select(case_id)
            s = ConvSession(cudnn, case, "fwd", dtype, layout, options, reference=False)
            fn = s.call(algo, math)
            t = s.timer(fn)
            rows.append({"placement": p, "call": f"{case_id} {algo} {math} {dtype} {layout}",
                         "x_ptr": hex(s.ops["x"].data_ptr()), "median_us": t.median_ms * 1e3,
                         "iqr_over_median": t.iqr_ms / t.median_ms, "n": t.n})
            keep.append(s)
    for call in dict.fromkeys(r["call"] for r in rows):
        meds = [r["median_us"] for r in rows if r["call"] == call]
        print(f"{call}: medians over {len(meds)} placements {min(meds):.1f}-{max(meds):.1f} us "
              f"(max/min {max(meds) / min(meds):.3f}): " + " ".join(f"{m:.0f}" for m in meds))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
