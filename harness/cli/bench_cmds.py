"""``convbench bench``: the nightly job, the asv suite on this host with every class journaled into one run."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..core.cases import DEFAULT_SET, DIRECTIONS
from ..core.errors import UserError
from .helptext import command
from .jsonout import add_json, emit
from .measure_cmds import DEFAULT_RESULTS, check_results, comma_list, failed_backends, select_cases


def register(sub) -> None:
    p = command(sub, "bench", help="the nightly job: the asv suite here, all classes journaled into one run",
                description="Measure the sweeps the asv suite's classes read (one run journal), then `asv run` "
                            "on the parameter sets that have data, with asv's results saved for this commit. "
                            "Without a GPU the CPU backends run and the cuDNN combinations are recorded as skipped.",
                examples=["convbench bench --cases quick",
                          "convbench bench -b CudnnForward --processes 1",
                          "convbench bench --directions bwd_data,bwd_filter -b Backward",
                          "convbench bench --cases seed --json | jq .ok"])
    p.add_argument("--cases", default=DEFAULT_SET, help="case ids and/or sets (default: %(default)s)")
    p.add_argument("--directions", type=comma_list(DIRECTIONS, "direction"), default=None,
                   help="directions whose classes run, comma-separated, of " + ", ".join(DIRECTIONS)
                        + " (default: $CONVBENCH_DIRECTIONS, else fwd)")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="results root (default: %(default)s)")
    p.add_argument("-b", "--bench", action="append", default=[],
                   help="asv benchmark regex (repeatable; default: every class)")
    p.add_argument("--processes", type=int, choices=(1, 2), default=None,
                   help="processes each cuDNN / PyTorch combination is timed in (default: 2, on CUDA; 1 halves "
                        "the replica's cost and reads no process-level noise)")
    p.add_argument("--find", action=argparse.BooleanOptionalAction, default=None,
                   help="record Find's ranking beside Get_v7's (default: forward-only sweeps)")
    add_json(p)
    p.set_defaults(handler=bench)


def bench(args) -> int:
    """Flags to BenchOptions (cases and directions checked before torch is imported), then the night."""
    from ..run.nightly import BenchOptions
    from ..run.nightly import bench as night

    try:
        directions = args.directions or comma_list(DIRECTIONS, "direction")(os.environ.get("CONVBENCH_DIRECTIONS") or "fwd")
    except argparse.ArgumentTypeError as exc:
        raise UserError(f"CONVBENCH_DIRECTIONS: {exc}") from None
    names = args.cases or DEFAULT_SET
    cases = select_cases(names)  # a mistyped case is refused at once
    check_results(args.results)
    result = night(BenchOptions(cases=cases, case_names=names, directions=directions, results=args.results,
                                bench=tuple(args.bench), processes=args.processes, find=args.find),
                   say=sys.stderr if args.json else sys.stdout)  # with --json, stdout holds the document only
    summary = result.summary
    if args.json:
        emit({"run": str(result.run), **summary})
    else:
        print(f"run written to {result.run} ({summary['seconds']} s: sweep {summary['sweep_seconds']:.1f} s, asv "
              f"{summary['asv_seconds']:.1f} s; {summary['ok']} records ok, counts {summary['counts']}); asv exit "
              f"code {result.asv_returncode}")
    return failed_backends(summary) or (0 if result.asv_returncode == 0 else 1)
