"""Timing: device events around the measured call, warm-up, adaptive repetition to a noise target.

Each repetition is bracketed by its own pair of CUDA events on the stream the call runs on, so the figure
is device time of that call alone. Repetitions are issued in batches behind a spacer kernel that keeps
the device busy until the host has enqueued the batch, and synchronised once per batch, so neither host
launch overhead nor host stalls enter the samples. Sampling stops when the median is known to the noise target, or the time budget or sample cap is
reached; the median, IQR and every sample are kept so later comparisons can be statistical. After each batch
NVML reads the SM clock and its slowdown reasons, so a time measured under a power cap says so.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from .clocks import DeviceClock, during
from .records import Timing


@dataclass(frozen=True)
class TimingPolicy:
    warmup_ms: float = 1.0  # at least one call always runs untimed first
    # At least four batches: with one batch of 8 the medians of 50-140 us calls moved by up to 4 % between reruns
    # on the H200; with 32 samples by at most 1.05 % (2026-11-29, docs/performance.md).
    min_samples: int = 32
    max_samples: int = 400
    budget_ms: float = 30.0  # device time spent sampling one combination, warm-up excluded
    # Stop once the median's relative standard error is below this. The range of three medians is about 1.7
    # standard errors on average and over 3 in the worst of fifty calls, so a 1 % rerun spread needs the error
    # well under 0.33 %. At 0.5 % it was above 0.33 % for 894 of 2,788 forward records on the H200, at 0.2 % for
    # 112; the sweeps took 11.5 s (forward) and 70 s (backward) longer, mostly calls under 50 us. The rerun spread
    # itself did not measurably improve: the GPU's own state dominates it (docs/performance.md, 2026-11-29).
    noise_target: float = 0.002
    batch: int = 8
    cold: bool = False  # flush L2 before each repetition (outside the timed region)
    keep_samples: int = 64  # samples stored in the record (evenly thinned); the summary uses all


def median_rel_stderr(samples: list[float]) -> float:
    """Relative standard error of the median, from a robust sigma (IQR / 1.349) and 1.2533 sigma/sqrt(n)."""
    if len(samples) < 4:
        return float("inf")
    q1, _, q3 = statistics.quantiles(samples, n=4)
    med = statistics.median(samples)
    if med <= 0:
        return float("inf")
    return 1.2533 * (q3 - q1) / 1.349 / len(samples) ** 0.5 / med


def summarize(samples: list[float], mode: str, timer: str, keep: int, clock: dict | None = None) -> Timing:
    med = statistics.median(samples)
    q1, _, q3 = statistics.quantiles(samples, n=4) if len(samples) >= 4 else (med, med, med)
    step = max(1, len(samples) // keep)
    return Timing(median_ms=med, iqr_ms=q3 - q1, n=len(samples), mode=mode, timer=timer,
                  min_ms=min(samples), samples_ms=[round(s, 6) for s in samples[::step][:keep]], clock=clock)


def _enough(samples: list[float], spent_ms: float, policy: TimingPolicy) -> bool:
    if len(samples) >= policy.max_samples or (spent_ms >= policy.budget_ms and len(samples) >= 3):
        return True
    return len(samples) >= policy.min_samples and median_rel_stderr(samples) <= policy.noise_target


SPACER_CLOCK_HZ = 2.0e9  # cycles per second assumed for the spacer; a slower clock only lengthens it


class CudaTimer:
    """Times a callable that enqueues work on torch's current CUDA stream."""

    def __init__(self, policy: TimingPolicy):
        import torch

        self.torch = torch
        self.policy = policy
        self.clock = DeviceClock.for_torch_device()
        self._flush = None
        if policy.cold:
            l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
            # Twice the L2, written with zeros before each repetition, evicts whatever the call left there.
            self._flush = torch.empty(max(2 * l2, 64 << 20), dtype=torch.uint8, device="cuda")

    def __call__(self, fn: Callable[[], object]) -> Timing:
        torch, policy = self.torch, self.policy
        stream = torch.cuda.current_stream()
        fn()
        stream.synchronize()
        t0 = time.perf_counter()
        host_s, warm = [], []
        while (time.perf_counter() - t0) * 1e3 < policy.warmup_ms or not host_s:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            h = time.perf_counter()
            start.record(stream)
            fn()
            end.record(stream)
            host_s.append(time.perf_counter() - h)
            end.synchronize()
            warm.append(start.elapsed_time(end))
        # A batch never outlasts a quarter of the budget: a 44 ms call is sampled 3 times, not 8 (one batch of
        # 8 was ten times the budget). The warm-up's event time bounds the call's device time from above.
        batch = max(1, min(policy.batch, int(policy.budget_ms / 4 / max(min(warm), 1e-3))))
        # A spacer kernel keeps the device busy while the host enqueues the whole batch, so each event pair
        # brackets device work only. Without it a call whose host side (e.g. cuDNN's legacy-API dispatch) is
        # slower than its kernel is timed with the host's overhead included: measured on the H200,
        # 2026-11-29, up to 3.2x do_bench's median for 35 us 1x1 convolutions.
        spacer_cycles = int(min(2e-3, 1.5 * batch * statistics.median(host_s) + 20e-6) * SPACER_CLOCK_HZ)
        samples: list[float] = []
        spent = 0.0
        reads = []
        while not _enough(samples, spent, policy):
            torch.cuda._sleep(spacer_cycles)
            pairs = []
            for _ in range(batch):
                if self._flush is not None:
                    self._flush.zero_()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                fn()
                end.record(stream)
                pairs.append((start, end))
            end.synchronize()
            if self.clock is not None:  # right after the batch: the clock it ran at, and any cap still in force
                reads.append(self.clock.read())
            times = [s.elapsed_time(e) for s, e in pairs]
            samples.extend(times)
            spent += sum(times)
        return summarize(samples, "cold" if policy.cold else "hot", "cuda_event", policy.keep_samples,
                         during(reads))


class HostTimer:
    """Times a synchronous (CPU) callable with the host's monotonic clock."""

    def __init__(self, policy: TimingPolicy):
        self.policy = policy

    def __call__(self, fn: Callable[[], object]) -> Timing:
        policy = self.policy
        fn()
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < policy.warmup_ms:
            fn()
        samples: list[float] = []
        spent = 0.0
        while not _enough(samples, spent, policy):
            s = time.perf_counter()
            fn()
            ms = (time.perf_counter() - s) * 1e3
            samples.append(ms)
            spent += ms
        return summarize(samples, "hot", "perf_counter", policy.keep_samples)
