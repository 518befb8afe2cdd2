"""The GPU's clocks while something is being timed, sampled by NVML on a thread.

The fingerprint reads clocks before and after a whole run; a median that moved between two reruns can only be
matched to a lower SM clock or a clock-event reason (power cap, thermal slowdown) by sampling during each rerun.
Used by the timing-fidelity benchmark; NVML (nvidia-ml-py) is needed.
"""

from __future__ import annotations

import statistics
import threading
import time


class ClockSampler:
    """SM clock (MHz), power (W) and clock-event reasons, every ``period_s`` while the ``with`` block lasts."""

    def __init__(self, index: int = 0, period_s: float = 0.002):
        import pynvml as nv

        nv.nvmlInit()
        self.nv, self.handle, self.period = nv, nv.nvmlDeviceGetHandleByIndex(index), period_s
        self.samples: list[tuple[int, float, int]] = []

    def __enter__(self) -> ClockSampler:
        self.samples, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        nv, h = self.nv, self.handle
        while not self._stop.is_set():
            self.samples.append((nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                                 nv.nvmlDeviceGetPowerUsage(h) / 1e3,
                                 nv.nvmlDeviceGetCurrentClocksEventReasons(h)))
            time.sleep(self.period)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        """Range and median of the SM clock, peak power, and every clock-event reason seen (OR of the bits)."""
        return summarize(self.samples)


# Reasons that lower clocks on their own; "GPU idle" (0x1) and "applications clocks setting" (0x2) do not.
SLOWDOWN_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
                    0x80: "hw_power_brake"}


def summarize(samples: list[tuple[int, float, int]]) -> dict:
    if not samples:
        return {"n": 0}
    sm = [s[0] for s in samples]
    reasons = 0
    for s in samples:
        reasons |= s[2]
    return {"n": len(sm), "sm_mhz_min": min(sm), "sm_mhz_median": statistics.median(sm), "sm_mhz_max": max(sm),
            "power_w_max": max(s[1] for s in samples), "reasons": reasons,
            "slowdowns": [name for bit, name in SLOWDOWN_REASONS.items() if reasons & bit]}
