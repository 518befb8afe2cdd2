"""Timing: device events around the measured call, warm-up, adaptive repetition to a noise target.

Each repetition is bracketed by its own pair of CUDA events on the stream the call runs on, so the figure
is device time of that call alone. Repetitions are issued in batches behind a spacer kernel that keeps
the device busy until the host has enqueued the batch's first call, and synchronised once per batch, so neither
host launch overhead nor host stalls enter the samples. That is checked, not assumed (nvbench's blocking kernel
does the same job with a host-released flag): once the host has enqueued a call, the event before it (behind the
spacer, or the previous call's end) must still be pending, so the device had not reached the call while the host
was still enqueuing it; a batch where one was not may hold host time, so it is discarded and the spacer doubled.
The host's own dispatch time per call is kept as a figure of its own. Sampling stops when the median is known to
the noise target, or the time budget or sample cap is reached; the median, IQR and every sample are
kept so later comparisons can be statistical, with flags where the samples say the median cannot be trusted.
After each batch NVML reads the SM clock and its slowdown reasons: a batch run under a power cap or thermal
slowdown is discarded and retaken after a pause (THROTTLE_RECOVERY_S), as nvbench does, and a time measured under
a cap that never lifted says so.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..core.records import Timing
from .clocks import DeviceClock, during

# Below this many samples a rank test is not worth running (the normal approximation of Mann-Whitney's U
# needs about 7 a side): the budget never stops sampling before it, and compare calls such records ambiguous.
FLOOR_SAMPLES = 8
# A median known to an eighth of the gate's absolute floor (analysis/thresholds.py ABS_FLOOR_US, 1.5 us) is known
# finer than any verdict needs: the gate cannot fail a change below the floor. Under 37.5 us this stops sampling
# before the relative target would; above, 0.5 % is already the finer of the two.
NOISE_FLOOR_US = 1.5 / 8


@dataclass(frozen=True)
class TimingPolicy:
    warmup_ms: float = 1.0  # every placement runs once untimed first, the first one for at least this long
    # At least four batches: with one batch of 8 the medians of 50-140 us calls moved by up to 4 % between reruns
    # on the H200; with 32 samples by at most 1.05 % (docs/performance.md).
    min_samples: int = 32
    max_samples: int = 400
    budget_ms: float = 30.0  # device time spent sampling one combination, warm-up excluded
    # Stop once the median's relative standard error is below this. Tighter is not better here: going from 0.5 %
    # to 0.2 % made the median's own error small (above 0.33 % for 112 of 2,788 forward records instead of 894) and
    # did not lower the rerun spread, which the GPU's own state dominates (docs/performance.md, fidelity), while
    # calls under 50 us took four to six times the samples, each costing a spacer of 1.5 host dispatches. Side by
    # side on one H200 the forward job took 159.8 s at 0.2 % and 123.9 s at 0.5 %, at the same device medians.
    noise_target: float = 0.005
    noise_floor_us: float = NOISE_FLOOR_US  # ... or the median's absolute standard error is below this
    batch: int = 8
    cold: bool = False  # flush L2 before each repetition (outside the timed region)
    keep_samples: int = 64  # samples stored in the record (evenly thinned); the summary uses all
    floor_samples: int = FLOOR_SAMPLES  # a spent budget stops this process's sampling only past this many

    def share(self, k: int) -> TimingPolicy:
        """This policy's sampling split over ``k`` processes (run/replicas.py): each takes 1/k of the budget, of
        the samples and of the floor, to a noise target sqrt(k) looser, and keeps every sample, so that ``pooled``
        summarises the k processes' samples together as one policy's worth. The floor is shared too: with a
        floor of its own each process took 8 samples of a long call where one process takes 8 in all."""
        if k <= 1:
            return self
        floor = -(-self.floor_samples // k)
        most = max(floor, self.max_samples // k)
        return replace(self, budget_ms=self.budget_ms / k, min_samples=max(floor, -(-self.min_samples // k)),
                       max_samples=most, noise_target=self.noise_target * math.sqrt(k),
                       noise_floor_us=self.noise_floor_us * math.sqrt(k), keep_samples=most, floor_samples=floor)


def median_stderr(samples: list[float]) -> tuple[float, float]:
    """The median and its standard error, from a robust sigma (IQR / 1.349) and 1.2533 sigma/sqrt(n), in one
    pass of the quartiles (the middle one is the median); an infinite error under 4 samples."""
    if len(samples) < 4:
        return (statistics.median(samples) if samples else math.nan), math.inf
    q1, med, q3 = statistics.quantiles(samples, n=4)
    return med, 1.2533 * (q3 - q1) / 1.349 / len(samples) ** 0.5


def median_rel_stderr(samples: list[float]) -> float:
    """Relative standard error of the median (median_stderr over the median)."""
    med, err = median_stderr(samples)
    return err / med if med > 0 else math.inf


def summarize(samples: list[float], mode: str, timer: str, keep: int, clock: dict | None = None,
              host_ms: float | None = None, host_bound: bool = False, throttled: bool = False) -> Timing:
    med = statistics.median(samples)
    q1, _, q3 = statistics.quantiles(samples, n=4) if len(samples) >= 4 else (med, med, med)
    n = len(samples)
    # evenly spread over the whole series (a pooled one is one process's samples after another's)
    kept = samples if n <= keep else [samples[i * n // keep] for i in range(keep)]
    return Timing(median_ms=med, iqr_ms=q3 - q1, n=n, mode=mode, timer=timer,
                  min_ms=min(samples), samples_ms=[round(s, 6) for s in kept], clock=clock,
                  host_ms=None if host_ms is None else round(host_ms, 6),
                  flags=sample_flags(samples, host_bound) + (["throttled"] if throttled else []))


def pooled(timings: Sequence[Timing], keep: int) -> Timing:
    """One combination's timings from several processes as one: every sample pooled and summarised again
    (each must have kept all its samples: TimingPolicy.share), the host's dispatch time as their median, the
    clock range over all of them, a host-bound batch in any of them flagged."""
    samples = [s for t in timings for s in t.samples_ms]
    clocks = [t.clock for t in timings if t.clock]
    clock = None
    if clocks:
        lows = [c["sm_mhz_min"] for c in clocks if c.get("sm_mhz_min") is not None]
        highs = [c["sm_mhz_max"] for c in clocks if c.get("sm_mhz_max") is not None]
        clock = {"sm_mhz_min": min(lows, default=None), "sm_mhz_max": max(highs, default=None),
                 "slowdowns": sorted({r for c in clocks for r in c.get("slowdowns") or ()})}
        discarded = sum(c.get("throttled_batches") or 0 for c in clocks)
        if discarded:
            clock["throttled_batches"] = discarded
    hosts = [t.host_ms for t in timings if t.host_ms is not None]
    first = timings[0]
    return summarize(samples, first.mode, first.timer, keep, clock,
                     host_ms=statistics.median(hosts) if hosts else None,
                     host_bound=any("host_bound" in t.flags for t in timings),
                     throttled=any("throttled" in t.flags for t in timings))


# The shapes of sample sets whose median flips between runs (H200 forward runs, docs/history.md: 31-43
# records a run past either edge, e.g. 77.3, 724.4 and 79.6 us for one call): median/min and IQR/median.
MULTIMODAL_MEDIAN_OVER_MIN = 1.5
MULTIMODAL_IQR_OVER_MEDIAN = 0.5
# Wider than this, a median is not a figure to gate on: on the H200 (4 forward runs of one stack, docs/performance.md)
# 1.4 % of records of 20 us or more were past it, and they made most of the A/A pairs' large deviations
# (resnet50.layer4.0.downsample IMPLICIT_GEMM fp32 NHWC: IQR/median 0.15-0.36, medians 35 % apart).
WIDE_IQR_OVER_MEDIAN = 0.05


def sample_flags(samples: list[float] | tuple[float, ...], host_bound: bool = False) -> list[str]:
    """Why a median should not be trusted, from the samples alone (also applied to stored samples)."""
    flags = ["host_bound"] if host_bound else []
    if len(samples) < FLOOR_SAMPLES:
        flags.append("few_samples")
    if len(samples) >= 4:
        med, lo = statistics.median(samples), min(samples)
        q1, _, q3 = statistics.quantiles(samples, n=4)
        if lo > 0 and (med / lo > MULTIMODAL_MEDIAN_OVER_MIN or (q3 - q1) / med > MULTIMODAL_IQR_OVER_MEDIAN):
            flags.append("multimodal")
        elif med > 0 and (q3 - q1) / med > WIDE_IQR_OVER_MEDIAN:
            flags.append("wide")
    return flags


def _enough(samples: list[float], spent_ms: float, policy: TimingPolicy) -> bool:
    n = len(samples)
    if n >= policy.max_samples:
        return True
    if spent_ms >= policy.budget_ms and n >= policy.floor_samples:
        return True
    if spent_ms >= 4 * policy.budget_ms and n >= 3:  # very long calls: a bounded cost, flagged few_samples
        return True
    if n < policy.min_samples:
        return False
    med, err = median_stderr(samples)
    return med > 0 and err <= max(policy.noise_target * med, policy.noise_floor_us / 1e3)


# A batch after which NVML reports the SM clock held below its maximum by a slowdown reason (clocks.throttled)
# is discarded and the GPU left idle this long before the next; nvbench does the same by default (its
# --throttle-recovery-delay 0.05 s; its threshold, 75 % of the clock, is lower than the caps seen here). On the
# H200 (bench_fidelity, docs/performance.md) the software power cap held the SM clock at 1710-1965 MHz for some
# batches of calls timed back to back with do_bench, and three of the four calls whose reruns spread > 1 % were
# those; the default sweeps read no cap in 10 runs. After this many discards a combination is timed as the GPU is and
# flagged "throttled" (compare: ambiguous), so a GPU capped for good costs at most 0.4 s a combination.
THROTTLE_RECOVERY_S = 0.05
THROTTLE_MAX_DISCARDS = 8
SPACER_CLOCK_HZ = 2.0e9  # cycles per second assumed for the spacer; a slower clock only lengthens it
SPACER_MAX_S = 0.1  # the spacer doubles up to this after a batch the host did not stay ahead of


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

    def __call__(self, fn: Callable[[], object] | Sequence[Callable[[], object]], warmed: int = 0,
                 seen: Sequence[tuple[float, float]] = ()) -> Timing:
        """Time ``fn``; given several callables (the same call on buffers placed elsewhere in device memory),
        accepted batches rotate through them, at least one batch each, and the samples are pooled: one unlucky
        placement then moves the median by a quantile of the others, not by its own level (see PLACEMENTS).
        The first ``warmed`` callables have already run (the caller's checked run and repeats of the same call);
        ``seen`` holds the (host seconds, device ms) of those of the caller's calls it timed, which stand for
        warm-up calls of this timer."""
        torch, policy = self.torch, self.policy
        fns = list(fn) if isinstance(fn, Sequence) else [fn]
        stream = torch.cuda.current_stream()
        # Warm-up: every placement once (its first call is never a sample; a placement the caller already ran
        # is not run again for it: one call of up to 44 ms saved a record), then the first placement until
        # warmup_ms have passed, the caller's timed calls counted. Each warm-up call is timed, for the batch size
        # and the spacer below.
        unwarmed = fns[min(warmed, len(fns)):]
        t0 = time.perf_counter()
        host_s, warm = [h for h, _ in seen], [d for _, d in seen]
        seen_ms = sum(warm)
        need = len(unwarmed) if seen else max(len(unwarmed), 1)  # without seen calls, one timed call at least
        made = 0
        while made < need or (time.perf_counter() - t0) * 1e3 + seen_ms < policy.warmup_ms:
            f = unwarmed[made] if made < len(unwarmed) else fns[0]
            made += 1
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            h = time.perf_counter()
            start.record(stream)
            f()
            end.record(stream)
            host_s.append(time.perf_counter() - h)
            end.synchronize()
            warm.append(start.elapsed_time(end))
        # A batch never outlasts a quarter of the budget: a 44 ms call is sampled 3 times, not 8 (one batch of
        # 8 was ten times the budget). The warm-up's event time bounds the call's device time from above.
        # Nor does it take a process past its minimum only because each placement needs a batch of its own: three
        # placements with a minimum of 16 samples take batches of 6, not 8 (24 samples).
        per_placement_min = -(-policy.min_samples // len(fns))
        batch = max(1, min(policy.batch, per_placement_min, int(policy.budget_ms / 4 / max(min(warm), 1e-3))))
        # A spacer kernel keeps the device busy while the host enqueues the batch's first call, so each event pair
        # brackets device work only. Without it a call whose host side (e.g. cuDNN's legacy-API dispatch) is
        # slower than its kernel is timed with the host's overhead included: measured on the H200
        # (docs/performance.md), up to 3.2x do_bench's median for 35 us 1x1 convolutions. The spacer covers what the
        # host falls behind the device over the batch: one dispatch, and for a call shorter than its dispatch what
        # each further call loses (1.5 dispatches against the call's shortest device time). A call longer than its
        # dispatch keeps the device ahead by itself, and a spacer of the whole batch's dispatch was idle device
        # time: 27 % of a batch of the backward night's 0.2-1 ms cuDNN calls (94 us dispatches, H100). A warm-up
        # call's events bracket its dispatch too (the device waited for it), so its event time less its dispatch
        # bounds the call's device time from below. A spacer sized from the warm-up alone was too short for some
        # (samples 4-8 of a batch 3.2-3.8x the first three), so each batch proves it, call by call (below).
        host = 1.5 * statistics.median(host_s)
        device = min(max(0.0, ms / 1e3 - h) for h, ms in zip(host_s, warm, strict=True))
        spacer_s = min(SPACER_MAX_S, host + (batch - 1) * max(0.0, host - device) + 20e-6)
        samples: list[float] = []
        dispatch: list[float] = []
        spent = 0.0
        reads = []
        host_bound = throttled = False
        discarded = 0
        per_placement: list[list[float]] = [[] for _ in fns]
        accepted = 0
        # one set of event pairs for every batch: a batch reads its times before the next records them again
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(batch)]
        while accepted < len(fns) or not _enough(samples, spent, policy):
            fn = fns[accepted % len(fns)]
            torch.cuda._sleep(int(spacer_s * SPACER_CLOCK_HZ))
            gate = torch.cuda.Event()
            gate.record(stream)
            before, ahead = gate, True
            for start, end in pairs:
                if self._flush is not None:
                    self._flush.zero_()
                start.record(stream)
                h = time.perf_counter()
                fn()
                dispatch.append(time.perf_counter() - h)
                # the device had not reached this call when the host finished enqueuing it
                ahead = ahead and not before.query()
                end.record(stream)
                before = end
            end.synchronize()
            # right after the batch: the clock it ran at, and any cap still in force
            read = self.clock.read() if self.clock is not None else None
            times = [s.elapsed_time(e) for s, e in pairs]
            if not ahead and spacer_s < SPACER_MAX_S:
                spent += sum(times)
                spacer_s = min(SPACER_MAX_S, 2 * spacer_s)
                continue
            if self.clock is not None and self.clock.throttled(read):
                # nvbench's way: drop the batch, let the GPU recover; the budget is for kept samples
                if discarded < THROTTLE_MAX_DISCARDS:
                    discarded += 1
                    time.sleep(THROTTLE_RECOVERY_S)
                    continue
                throttled = True  # capped all along: kept, and flagged so no verdict rests on it
            spent += sum(times)
            reads.append(read)
            host_bound = host_bound or not ahead  # even the longest spacer did not keep the host ahead
            samples.extend(times)
            per_placement[accepted % len(fns)].extend(times)
            accepted += 1
        clock = during(reads)
        if clock is not None and discarded:
            clock["throttled_batches"] = discarded
        timing = summarize(samples, "cold" if policy.cold else "hot", "cuda_event", policy.keep_samples,
                           clock, host_ms=1e3 * statistics.median(dispatch), host_bound=host_bound,
                           throttled=throttled)
        self.placement_medians_ms = [round(statistics.median(p), 6) for p in per_placement]
        return timing


class HostTimer:
    """Times a synchronous (CPU) callable with the host's monotonic clock."""

    def __init__(self, policy: TimingPolicy):
        self.policy = policy

    def __call__(self, fn: Callable[[], object], warmed: int = 0) -> Timing:
        policy = self.policy
        if not warmed:
            fn()
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < policy.warmup_ms:
            fn()
        samples: list[float] = []
        spent = 0.0
        while not _enough(samples, spent, policy):  # the host is the device here: no dispatch of its own
            s = time.perf_counter()
            fn()
            ms = (time.perf_counter() - s) * 1e3
            samples.append(ms)
            spent += ms
        timing = summarize(samples, "hot", "perf_counter", policy.keep_samples)
        if host_loaded():
            timing.flags.append("host_loaded")
        return timing


def host_loaded() -> bool:
    """More runnable processes than CPUs over the last minute: a host-timed call then shares its cores, and
    on the dev VM five identical CPU sweeps moved by up to 104x under other jobs' load (docs/history.md)."""
    try:
        return os.getloadavg()[0] > (os.cpu_count() or 1)
    except OSError:
        return False
