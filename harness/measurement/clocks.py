"""The GPU's clocks while something is being timed, read through NVML.

The fingerprint reads clocks before and after a whole run; a median that moved between two runs can only be
matched to a lower SM clock or a clock-event reason (power cap, thermal slowdown) by reading them while each
combination is timed. On the H200 (docs/history.md) the software power cap lowered the SM clock from 1980 to 1860 MHz
during some convolutions, and their medians moved by up to 5 % between reruns.
"""

from __future__ import annotations

import statistics
import threading
import time

# Reasons that lower clocks on their own; "GPU idle" (0x1) and "applications clocks setting" (0x2) do not.
SLOWDOWN_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
                    0x80: "hw_power_brake"}


SLOWDOWN_MASK = sum(SLOWDOWN_REASONS)


class DeviceClock:
    """SM clock and clock-event reasons of one GPU, read on demand (a few microseconds per read)."""

    def __init__(self, nv, handle):
        self.nv, self.handle = nv, handle
        try:
            self.max_sm_mhz: int | None = nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)
        except Exception:
            self.max_sm_mhz = None

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

    def throttled(self, read: tuple[int, int] | None) -> bool:
        """Whether a read shows the SM clock held below its maximum by a slowdown (power cap, thermal, ...)."""
        return (read is not None and self.max_sm_mhz is not None and bool(read[1] & SLOWDOWN_MASK)
                and read[0] < self.max_sm_mhz)

    def power(self) -> float | None:
        """Board power draw in watts, or None when NVML cannot say."""
        try:
            return self.nv.nvmlDeviceGetPowerUsage(self.handle) / 1e3
        except Exception:
            return None


def during(reads: list[tuple[int, int] | None]) -> dict | None:
    """What reads taken while something ran say about the clock: lowest and highest SM clock, slowdowns seen."""
    seen = [r for r in reads if r is not None]
    if not seen:
        return None
    reasons = 0
    for _, bits in seen:
        reasons |= bits
    return {"sm_mhz_min": min(r[0] for r in seen), "sm_mhz_max": max(r[0] for r in seen),
            "slowdowns": [name for bit, name in SLOWDOWN_REASONS.items() if reasons & bit]}


class ClockSampler:
    """Reads ``clock`` and the board power every ``period_s`` on a thread while the ``with`` block lasts."""

    def __init__(self, clock: DeviceClock, period_s: float = 0.002):
        self.clock, self.period = clock, period_s
        self.reads: list[tuple[int, int] | None] = []
        self.power_w: list[float] = []

    def __enter__(self) -> ClockSampler:
        self.reads, self.power_w, self._stop = [], [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.reads.append(self.clock.read())
            watts = self.clock.power()
            if watts is not None:
                self.power_w.append(watts)
            time.sleep(self.period)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        """``during`` of the reads, with their count, the median SM clock and the peak power."""
        sm = [r[0] for r in self.reads if r is not None]
        return {"n": len(sm), **(during(self.reads) or {}),
                "sm_mhz_median": statistics.median(sm) if sm else None,
                "power_w_max": max(self.power_w, default=None)}
