"""The gate's settings as flags, the same on ``compare``, ``report`` and ``upgrade``: each maps to one key of a
gate file (analysis/thresholds.py, which checks and loads them); a flag given wins over the file."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..analysis.findings import FindingKind
from ..analysis.thresholds import Thresholds, load


def add_gate_arguments(p: argparse.ArgumentParser) -> None:
    """The gate's flags, one per key of a gate file."""
    p.add_argument("--gate-file", type=Path, metavar="TOML",
                   help="gate settings (keys as these flags, or a [tool.convbench.gate] table; default: "
                        "./pyproject.toml's [tool.convbench.gate] where there is one)")
    p.add_argument("--time-threshold", type=float, default=None,
                   help="one median ratio for every call at or above which a significant slowdown fails "
                        "(default: the calibrated thresholds by call length, harness/analysis/thresholds.py TIME_BANDS)")
    p.add_argument("--abs-us", type=float, default=None,
                   help="absolute floor of a time finding in microseconds (default: calibrated ABS_FLOOR_US)")
    p.add_argument("--across-hardware", action="store_true", default=None,
                   help="also fail on regressions between two different machines (default: report them only)")
    p.add_argument("--alpha", type=float, default=None, help="Mann-Whitney U level (default 0.01)")
    p.add_argument("--error-growth", type=float, default=None,
                   help="growth of max normalised error that fails (default 4)")
    p.add_argument("--bitwise", action="store_true", default=None, help="fail when outputs are no longer bitwise equal")
    p.add_argument("--ignore", action="append", default=None, choices=FindingKind.values(),
                   help="a kind of finding that never fails the gate (repeatable)")
    p.add_argument("--allow-lost-coverage", action="store_true", default=None,
                   help="pass combinations ok in the base night and not measured in the head (default: each fails "
                        "the gate)")


def thresholds(args: argparse.Namespace) -> Thresholds:
    """The settings the flags and the gate file give, checked (a UserError, exit 2, where one is meaningless)."""
    return load(args.gate_file, time_threshold=args.time_threshold,
                abs_us=args.abs_us, alpha=args.alpha, error_growth=args.error_growth, bitwise=args.bitwise,
                ignore=args.ignore, across_hardware=args.across_hardware,
                allow_lost_coverage=args.allow_lost_coverage)
