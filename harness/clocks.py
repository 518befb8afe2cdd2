"""The GPU's clocks while something is being timed, read through NVML.

The fingerprint reads clocks before and after a whole run; a median that moved between two runs can only be
matched to a lower SM clock or a clock-event reason (power cap, thermal slowdown) by reading them while each
combination is timed. On the H200 (2026-11-29) the software power cap lowered the SM clock from 1980 to 1860 MHz
during some convolutions, and their medians moved by up to 5 % between reruns.
"""

from __future__ import annotations

import statistics
import threading
import time

# Reasons that lower clocks on their own; "GPU idle" (0x1) and "applications clocks setting" (0x2) do not.
SLOWDOWN_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
                    0x80: "hw_power_brake"}


class DeviceClock:
    """SM clock and clock-event reasons of one GPU, read on demand (a few microseconds per read)."""

    def __init__(self, nv, handle):
        self.nv, self.handle = nv, handle

    @classmethod
    def for_torch_device(cls) -> DeviceClock | None:
        """The GPU torch uses as cuda:current, matched through NVML by UUID; None where NVML cannot say."""
        try:
            import pynvml as nv
            import torch

            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            nv.nvmlInit()
            return cls(nv, nv.nvmlDeviceGetHandleByUUID(f"GPU-{props.uuid}"))
        except Exception:  # no nvidia-ml-py, no NVML, a torch without uuid, a MIG slice: timing goes on without
            return None

    def read(self) -> tuple[int, int] | None:
        """(SM MHz, clock-event reason bits), or None when NVML fails this time."""
        try:
            return (self.nv.nvmlDeviceGetClockInfo(self.handle, self.nv.NVML_CLOCK_SM),
                    self.nv.nvmlDeviceGetCurrentClocksEventReasons(self.handle))
        except Exception:
            return None


def during(reads: list[tuple[int, int] | None]) -> dict | None:
    """What a timer's reads say about the clock while it sampled: lowest and highest SM clock, slowdowns seen."""
    seen = [r for r in reads if r is not None]
    if not seen:
        return None
    reasons = 0
    for _, bits in seen:
        reasons |= bits
    return {"sm_mhz_min": min(r[0] for r in seen), "sm_mhz_max": max(r[0] for r in seen),
            "slowdowns": slowdown_names(reasons)}


def slowdown_names(reasons: int) -> list[str]:
    return [name for bit, name in SLOWDOWN_REASONS.items() if reasons & bit]


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


def summarize(samples: list[tuple[int, float, int]]) -> dict:
    if not samples:
        return {"n": 0}
    sm = [s[0] for s in samples]
    reasons = 0
    for s in samples:
        reasons |= s[2]
    return {"n": len(sm), "sm_mhz_min": min(sm), "sm_mhz_median": statistics.median(sm), "sm_mhz_max": max(sm),
            "power_w_max": max(s[1] for s in samples), "reasons": reasons,
            "slowdowns": slowdown_names(reasons)}
