"""The gate's thresholds: how large a change in time, error or output must be before a comparison reports it.

Every default sits beside the measurement that justified it (scripts/calibrate_gate.py, docs/performance.md):
a threshold tighter than the noise between identical runs fails the gate on nothing, a looser one misses real
regressions. ``Thresholds`` carries the user's overrides (``convbench compare --time-ratio`` ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Relative time thresholds by the base call's median (upper edge in ms, threshold), chosen on the H200's A/A runs
# and injected slowdowns (scripts/calibrate_gate.py; docs/performance.md). 2026-12-01, every combination timed in
# two processes: 97 % of +5 % slowdowns on calls >= 50 us and 91 % of +10 % on 20-50 us detected; A/A pairs failed
# on 0, 0, 1 and 2 findings (one PyTorch search, one kernel at 4.4 %); 5 % for >= 50 us would fail on none of them
# and detect 180 of 315 +5 %.
TIME_BANDS: tuple[tuple[float, float], ...] = ((0.020, 0.10), (0.050, 0.06), (math.inf, 0.04))
# Host-timed records (the CPU backends, timer perf_counter) share their cores with everything else on the host:
# one relative threshold and a floor of their own.
HOST_TIMER_REL, HOST_TIMER_ABS_US = 0.25, 20.0
# Absolute floor in microseconds: a change smaller than this is noise whatever its ratio (a 5 us call moving
# by 0.5 us is 10 %); measured between hosts the per-call offset was 1.4 us (issue 13), on one GPU far less.
ABS_FLOOR_US = 1.0


@dataclass
class Thresholds:
    time_ratio: float | None = None  # one relative threshold for every call (head/base); None: TIME_BANDS
    abs_us: float = ABS_FLOOR_US  # absolute floor of a time finding
    alpha: float = 0.01  # one-sided Mann-Whitney U level
    error_growth: float = 4.0  # head max_norm_err / base max_norm_err at or above which accuracy regressed
    # normalised errors below one fp32 unit roundoff (2^-24) are treated as equal: both are exact to the reference
    # as far as any stored format can tell, so an error from 0 to 1e-8 is not a regression (issue 19)
    error_floor: float = 2.0 ** -24
    bitwise: bool = False  # count "outputs no longer bitwise equal" as a regression, not only a change
    ignore: tuple[str, ...] = ()  # kinds that never fail the gate
    across_hardware: bool = False  # gate a comparison of two different machines (default: report only)

    def rel(self, base_ms: float, timer: str | None = None) -> float:
        """The relative threshold for a call of this median: the user's, or the calibrated band's."""
        if self.time_ratio is not None:
            return self.time_ratio - 1.0
        if timer == "perf_counter":
            return HOST_TIMER_REL
        return next(t for edge, t in TIME_BANDS if base_ms < edge)

    def floor_us(self, timer: str | None = None) -> float:
        return max(self.abs_us, HOST_TIMER_ABS_US) if timer == "perf_counter" else self.abs_us
