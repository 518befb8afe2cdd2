"""Whether one combination's time changed between two runs, decided from the stored samples.

A combination is slower when the median ratio reaches a relative threshold AND the absolute difference reaches
a floor (Thresholds), a one-sided Mann-Whitney U test says so (p < alpha) and the bootstrap 95% interval of
the median ratio lies above 1. Samples from one run share that run's clocks and temperature, so the test alone
would flag real but tiny differences between two sessions; the thresholds keep the gate to differences a person
would act on. A change beyond the thresholds on a record whose samples cannot be trusted (host-bound,
multi-modal, too few: timing.sample_flags) is **ambiguous**, with the evidence, never slower or faster (samples
that are only ``wide`` are judged on their placements instead, where two processes a side timed them:
placements_apart); so is a
change within the gap between two processes of one run (run/replicas.py: the level a fresh process lands on), one
whose two sides' placements overlap (draws_overlap: where the operands sit moves the call as much) or lie close
(placements_close), unless every placement moved past the threshold, placement by placement (placements_moved),
a head back at a level an earlier run of the same machine and stack measured (past_level), a head at a level the
base's run measured the same kernel at under another label (kin_level), and a change whose two levels the head's
run measured the same kernel at in two processes under another label (kin_both_levels).
Without samples (asv data) the fallback is the thresholds plus non-overlapping interquartile ranges.
numpy only: the two tests need a rank sum, a normal tail and resampling, not scipy.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..core.records import Record
from ..measurement.timing import FLOOR_SAMPLES, sample_flags
from .thresholds import Thresholds

# --- The decision ---


def _norm_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_greater(base: np.ndarray, head: np.ndarray) -> tuple[float, float]:
    """(U of head, one-sided p that head values tend to be larger): normal approximation with tie and
    continuity corrections, adequate from about 7 samples a side (the timing policy's minimum)."""
    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(head, dtype=np.float64)
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return math.nan, math.nan
    allv = np.concatenate([a, b])
    order = np.argsort(allv, kind="mergesort")
    ranks = np.empty(len(allv))
    sorted_v = allv[order]
    # average ranks for ties
    uniq, first, counts = np.unique(sorted_v, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    u_head = float(ranks[n1:].sum() - n2 * (n2 + 1) / 2.0)
    n = n1 + n2
    mu = n1 * n2 / 2.0
    tie = float((counts**3 - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return u_head, 1.0 if u_head <= mu else 0.0
    z = (u_head - mu - 0.5) / math.sqrt(var)
    return u_head, _norm_sf(z)


def row_medians(x: np.ndarray) -> np.ndarray:
    """np.median(x, axis=1), the same numbers, from one sort: 2.4x faster on the report's bootstrap calls
    (0.58 -> 0.25 ms a call, 4,719 calls of a mid-size fleet, 0 differences; docs/history.md), where the bootstrap
    was 60 % of the report's CPU."""
    s = np.sort(x, axis=1)
    k = s.shape[1] // 2
    return s[:, k] if s.shape[1] % 2 else (s[:, k - 1] + s[:, k]) / 2


@functools.lru_cache(maxsize=32)
def _resamples(seed: int, n_boot: int, n_base: int, n_head: int) -> tuple[np.ndarray, np.ndarray]:
    """bootstrap_median_ratio's resampling indices, drawn as it draws them. With its fixed seed they depend on
    the sizes alone, and a fleet report's ~26,000 calls have a few sizes (8 samples a side): drawing them once
    took a quarter of each call (0.14 of 0.50 ms; docs/history.md). Read-only: every call shares them."""
    rng = np.random.default_rng(seed)
    ia, ib = rng.integers(0, n_base, (n_boot, n_base)), rng.integers(0, n_head, (n_boot, n_head))
    ia.flags.writeable = ib.flags.writeable = False
    return ia, ib


def bootstrap_median_ratio(base: np.ndarray, head: np.ndarray, *, n_boot: int = 2000, conf: float = 0.95,
                           seed: int = 0) -> tuple[float, float, float]:
    """(median ratio head/base, low, high) with a percentile bootstrap interval (fixed seed: reproducible)."""
    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(head, dtype=np.float64)
    ia, ib = _resamples(seed, n_boot, len(a), len(b))
    ma = row_medians(a[ia])
    mb = row_medians(b[ib])
    r = mb / ma
    lo, hi = np.quantile(r, [(1 - conf) / 2, 1 - (1 - conf) / 2])
    return float(np.median(b) / np.median(a)), float(lo), float(hi)


def untrusted(rec: Record) -> list[str]:
    """Why one side's samples cannot decide a change: the timer's own flags, or the samples' shape."""
    t = rec.time
    flags = list(t.flags or ()) if t is not None else []
    samples = rec.samples
    if samples is not None and len(samples):
        flags += [f for f in sample_flags([float(x) for x in samples]) if f not in flags]
        if (t.n or len(samples)) >= FLOOR_SAMPLES and "few_samples" in flags:
            flags.remove("few_samples")  # the store keeps a thinned subset; the timer took enough
    return flags


# A combination's own run-to-run spread widens its threshold to this many times the largest excursion seen in
# the earlier runs of the same machine and stack: some calls switch level with where their buffers sit in device
# memory (H200, docs/performance.md: resnet50.layer4.0.conv2 IMPLICIT_GEMM fp32 at 539.5 us in 11 placements of 12 and
# 597.5 us in one), so a level once seen is not a regression the next time.
HISTORY_FACTOR = 2.0


def own_noise(key: str, base_ms: float, history: list[dict[str, Record]], rel: float) -> float:
    """The largest isolated excursion of ``key``'s median in earlier runs (oldest first), relative to
    ``base_ms``: a run that left the base's level (by more than ``rel``) between two runs at it. A level the
    series left for good is a past change, not noise, and does not count; 0 without such an excursion."""
    xs = [h[key].median_ms for h in history if key in h and h[key].median_ms] + [base_ms]
    at_base = [abs(x / base_ms - 1) <= rel for x in xs]
    return max((abs(xs[i] / base_ms - 1) for i in range(1, len(xs) - 1)
                if not at_base[i] and at_base[i - 1] and at_base[i + 1]), default=0.0)


def process_levels(rec: Record) -> list[float]:
    """The medians of the processes a record was timed in (run/replicas.py), when there were several."""
    pm = [x for x in rec.extra.get("process_medians_ms") or () if x]
    return pm if len(pm) >= 2 else []


def process_spread(recs: list[Record]) -> tuple[float, list[float]]:
    """The largest gap between the processes of one run among ``recs`` (max/min - 1) and those processes'
    medians; (0, []) without replicas."""
    return max(((max(pm) / min(pm) - 1, pm) for pm in map(process_levels, recs) if pm), default=(0.0, []))


def placement_levels(rec: Record) -> list[float]:
    """The medians of each placement of a record's operands in each process (run/replicas.py keeps them all)."""
    return [x for x in rec.extra.get("placement_medians_ms") or () if x]


def draws(rec: Record) -> list[float]:
    """The medians of a record's independent level draws: each placement of its operands in each process,
    else each process; [] with fewer than two."""
    placed = placement_levels(rec)
    return placed if len(placed) >= 2 else process_levels(rec)


def draws_overlap(base: Record, head: Record, slower: bool) -> tuple[list[float], list[float]] | None:
    """(base draws, head draws) when both sides have them and they overlap against the direction of the change
    (a slower head with a draw at or below the base's slowest, or the reverse); else None. Samples within one
    draw are not independent of each other: a placement or process sets a level they share, so the draws are
    the unit a change must clear, as a rank test's samples are not."""
    b, h = draws(base), draws(head)
    if not b or not h:
        return None
    return (b, h) if (min(h) <= max(b) if slower else max(h) >= min(b)) else None


# The fewest placements a side needs before its placement medians, not its samples, may decide a change.
MIN_PLACEMENTS = 3


def placement_gap(b: list[float], h: list[float], slower: bool) -> tuple[float, float]:
    """(gap, spread) of two sides' placement medians: how far every head placement lies beyond every base one in
    the change's direction (negative where they overlap), and the larger of the two sides' spreads."""
    return (min(h) - max(b) if slower else min(b) - max(h)), max(max(b) - min(b), max(h) - min(h))


def placement_sides(base: Record, head: Record) -> tuple[list[float], list[float]] | None:
    """Both sides' placement medians where each has MIN_PLACEMENTS or more (enough to judge on them), else None."""
    b, h = placement_levels(base), placement_levels(head)
    return (b, h) if len(b) >= MIN_PLACEMENTS and len(h) >= MIN_PLACEMENTS else None


def placements_apart(base: Record, head: Record, slower: bool,
                     alpha: float) -> tuple[float, float, float] | None:
    """(gap, spread, p) where both sides were timed in two processes or more, on MIN_PLACEMENTS placements or
    more, and every head placement lies beyond every base placement (in the change's direction) by more than
    the placements of either side spread, with p, the exact one-sided rank-sum p of two such separated sets of
    placement medians (1 / C(m + n, m)), under ``alpha``: gap and spread in ms. Else None.
    Why: samples a few % wide (IQR over 5 % of the median, timing.sample_flags) come from calls whose
    repetitions jitter, not only from calls whose level moves; a placement's median pools 8-80 of them, so
    where each side's placements agree the call's level is known although its samples are wide (H200:
    +10 % on 20-50 us calls, placements within 1 % on each side, vetoed as wide). One process a
    side is not enough: its placements share that process's level (a one-process backward A/A, 17 us at 1.11x,
    separated by 1.6x their spread), which only a second process's placements show. In two processes a side,
    no only-wide record pair of the committed A/A runs (3,313) had its placements apart by their spread."""
    sides = placement_sides(base, head)
    if sides is None or not (process_levels(base) and process_levels(head)):
        return None
    b, h = sides
    gap, spread = placement_gap(b, h, slower)
    p = 1 / math.comb(len(b) + len(h), len(b))
    return (gap, spread, p) if gap > spread and p < alpha else None


# A change whose two sides' placements are apart by no more than this share of one side's placement spread is
# ambiguous (placements_close). Chosen on the committed H200 data (scripts/gate_rules.py; docs/performance.md):
# at 0.5 no A/A pair timed in two processes a side fails, device-injected +5 % on >= 50 us is detected in 307 of
# 316 and 306 of 315 calls, software-injected nightly +5 % in 88.8 % (91.9 % without the veto); at 1.0 the same
# A/A pairs pass and those figures fall to 304, 306 and 85.7 %; at 2.0 to 286 and 76.4 %.
CLOSE_SHARE = 0.5


def placements_close(base: Record, head: Record, slower: bool,
                     share: float = CLOSE_SHARE) -> tuple[float, float] | None:
    """(gap, spread) where both sides have MIN_PLACEMENTS placement medians or more, apart in the change's
    direction (draws_overlap has found them so) by no more than ``share`` of the larger of the two sides'
    placement spreads; else None. The draws are the unit a change must clear (draws_overlap), by their spread,
    not only by not touching: in the two-process backward A/A pairs on the H200
    (docs/performance.md) the only failing findings had placements 0.8 us apart where one side's spread
    2.8 us (a 52 us backward-data
    ALGO_1, 1.05x) and 18.6 us apart where one side's spread 111 us (seed.c4's FFT_TILING, 1.04x)."""
    sides = placement_sides(base, head)
    if sides is None:
        return None
    gap, spread = placement_gap(*sides, slower)
    return (gap, spread) if gap <= share * spread else None


def placements_moved(base: Record, head: Record, slower: bool, rel: float) -> bool:
    """Whether each of the same MIN_PLACEMENTS+ placements (two processes a side) moved by ``rel`` or more in the
    change's direction, placement by placement. Placement i is made alike in every run (backends/cudnn.py), and the
    placements of two H100 runs correlated at a median r of 0.87 where they spread (docs/performance.md): where
    they spread as much as the change (draws_overlap, placements_close), each one past the threshold is the change
    itself; a process that drew another level moves its own placements only, and the pairs then disagree."""
    b, h = placement_levels(base), placement_levels(head)
    if len(b) != len(h) or len(b) < MIN_PLACEMENTS or not (process_levels(base) and process_levels(head)):
        return False
    return all((y >= x * (1 + rel)) if slower else (y * (1 + rel) <= x) for x, y in zip(b, h, strict=True))


# A head within this of a level an earlier run of the same machine and stack measured (its median or one of its
# processes') is back at a known level. Some kernels settle per process on one of a few levels: on the H200 (8
# forward runs, 16 processes; docs/performance.md) resnet50.layer3.0.conv2 GEMM fp16/bf16 NCHW at 412-416, 427-437 or
# 441-446 us, each level repeating within 0.5 %; a run whose two processes both drew the low one failed the gate
# against 5 of the 7 runs after it (1.05x slower) although every one of them was back at the usual level.
LEVEL_MATCH = 0.01


def past_level(head_ms: float, past: list[Record]) -> float | None:
    """The level among ``past`` records (medians and their processes' medians) within LEVEL_MATCH of
    ``head_ms``, or None."""
    for rec in past:
        for x in [rec.median_ms, *process_levels(rec)]:
            if x and abs(x / head_ms - 1) <= LEVEL_MATCH:
                return x
    return None


def kernel_key(rec: Record) -> tuple | None:
    """What marks two records of one run as the same call under two labels: one case, backend, direction,
    algorithm, dtype and layout, and the same output bits, each record bitwise stable (math types and settings
    that leave the kernel as it was, e.g. cuDNN's DEFAULT and FMA math on fp16 operands). None for a record with
    no single output (documented atomics): its bits name no kernel."""
    det = rec.determinism
    if det is None or not det.hash or det.distinct_outputs != 1 or det.repeat_equal is False or \
            rec.extra.get("fresh_process_equal") is False:
        return None
    return rec.case, rec.backend, rec.direction, rec.algo, rec.dtype, rec.layout, det.hash


def kin_level(kin: list[Record], head_ms: float, slower: bool) -> tuple[Record, float] | None:
    """(the kin record, its level) where ``head_ms`` is a level the base's run already ran the same kernel at under
    another label (``kin``: the base run's other records of its kernel_key): the head no slower than one of their
    processes, for a slowdown (no faster, for a speed-up), within LEVEL_MATCH. Such kernels settle per process on
    one of a few levels, and two labels of one run draw them independently: on an H100 (docs/performance.md)
    `layer4.0.conv3` ALGO_1 fp16 NHWC backward-data ran 443 us in both processes under DEFAULT and 486 / 444 us
    under FMA in one run, and 473 us in the next run's; a two-run gate called that 443 -> 473 us a regression.
    Only the base's run is asked: a head kin record still at the base's level is what a change of one label's
    kernel looks like too."""
    for rec in kin:
        for x in process_levels(rec) or [rec.median_ms]:
            if x and (head_ms <= x * (1 + LEVEL_MATCH) if slower else head_ms >= x / (1 + LEVEL_MATCH)):
                return rec, x
    return None


def kin_both_levels(kin: list[Record], base_ms: float, head_ms: float) -> tuple[Record, float, float] | None:
    """(the kin record, its process at the base's side, its process at the head's side) where the head's run
    itself ran the same kernel under another label in one process at the base's level or beyond it and in another
    at the head's (``kin``: the head run's other records of its kernel_key), each within LEVEL_MATCH. kin_level asks
    the base's run only; this asks the head's for the one thing a label's own change cannot show: the head's stack
    still reaching the base's level in one of its processes. On an H200 (docs/performance.md) `layer2.0.conv3`
    backward-filter ALGO_1 fp16 NCHW ran 671 us in both of one run's processes under DEFAULT and 776 us in both of
    the next run's, whose FMA record of the same kernel ran one process at 672 us and one at 775 us."""
    lo, hi = min(base_ms, head_ms), max(base_ms, head_ms)
    for rec in kin:
        pm = process_levels(rec)
        low = [x for x in pm if x <= lo * (1 + LEVEL_MATCH)]
        high = [x for x in pm if x >= hi / (1 + LEVEL_MATCH)]
        if low and high:
            at_base, at_head = (min(low), max(high)) if head_ms >= base_ms else (max(high), min(low))
            return rec, at_base, at_head
    return None


def _label(rec: Record) -> str:
    return " ".join([rec.math or ""] + [f"{k}={v}" for k, v in sorted((rec.settings or {}).items())]).strip()


def ci_words(lo: float, hi: float, slower: bool) -> str:
    """The bootstrap interval of head/base in the headline's direction: '1.08-1.12x' for a slowdown, the inverted
    '14.0-14.3x' for a speed-up quoted as '14.15x faster' (never its head/base '0.07-0.07')."""
    a, b = (lo, hi) if slower else (1 / hi, 1 / lo)
    digits = 2 if b < 10 else 1
    while digits < 4 and f"{a:.{digits}f}" == f"{b:.{digits}f}":  # a narrow interval keeps its width visible
        digits += 1
    return f"{a:.{digits}f}-{b:.{digits}f}x"


def time_verdict(base: Record, head: Record, th: Thresholds, noise: float = 0.0,
                 past: list[Record] = (), kin: list[Record] = (),
                 head_kin: list[Record] = ()) -> tuple[str, str, dict[str, Any]] | None:
    """(verdict, evidence, numbers) for the timing of one combination, or None when it is the same.
    ``noise``: the combination's own run-to-run deviation in earlier runs (own_noise); ``past``: its records in
    those runs, whose processes' levels count with the two sides' own (a change within them is ambiguous), and
    whose levels make a head that returns to one of them ambiguous (past_level); ``kin``: the base run's records of
    the same kernel under other labels, whose levels do the same (kin_level); ``head_kin``: the head run's records of
    that kernel, one of which may have run both levels in two of its processes (kin_both_levels)."""
    bm, hm = base.median_ms, head.median_ms
    if not bm or not hm:
        return None
    ratio = hm / bm
    delta_us = (hm - bm) * 1e3
    timer = head.time.timer or base.time.timer
    rel, floor = max(th.rel(bm, timer), HISTORY_FACTOR * noise), th.floor_us(timer)
    slower = ratio >= 1 + rel and delta_us >= floor
    faster = ratio <= 1 / (1 + rel) and -delta_us >= floor
    if not (slower or faster):
        return None
    nums: dict[str, Any] = {"ratio": ratio, "delta_us": delta_us}
    size = (f"{ratio:.2f}x slower" if slower else f"{1 / ratio:.2f}x faster") + f" ({delta_us:+.1f} µs)"
    spread, levels = process_spread([base, head, *past])
    if max(ratio, 1 / ratio) <= 1 + spread:
        return "ambiguous", (f"{size}, within the {spread:.1%} between two processes of one run "
                             f"({' and '.join(f'{x * 1e3:.1f}' for x in levels)} µs): which level a fresh "
                             "process lands on, not a change"), nums
    moved = placements_moved(base, head, slower, rel)
    overlap = None if moved else draws_overlap(base, head, slower)
    if overlap is not None:
        b, h = overlap
        return "ambiguous", (f"{size}, but the two runs' placements overlap (base {min(b) * 1e3:.1f}-"
                             f"{max(b) * 1e3:.1f} µs, head {min(h) * 1e3:.1f}-{max(h) * 1e3:.1f} µs): where the "
                             "operands sit moves this call as much"), nums
    close = None if moved else placements_close(base, head, slower)
    if close is not None:
        gap, spread = close
        return "ambiguous", (f"{size}, but the two runs' placements are only {gap * 1e3:.1f} µs apart where one "
                             f"side's spread {spread * 1e3:.1f} µs: where the operands sit moves this call almost "
                             "as much"), nums
    seen = past_level(hm, past)
    if seen is not None:
        return "ambiguous", (f"{size}, but {hm * 1e3:.1f} µs is a level this machine and stack already ran it at "
                             f"({seen * 1e3:.1f} µs in an earlier run): the base is the excursion, not the head"), nums
    same = kin_level(kin, hm, slower)
    if same is not None:
        rec, x = same
        return "ambiguous", (f"{size}, but the base run ran the same kernel (the same output bits) at "
                             f"{x * 1e3:.1f} µs under {_label(rec)}: a level that kernel draws, not a change"), nums
    both = kin_both_levels(head_kin, bm, hm)
    if both is not None:
        rec, at_base, at_head = both
        return "ambiguous", (f"{size}, but the head run ran the same kernel (the same output bits) under "
                             f"{_label(rec)} in one process at {at_base * 1e3:.1f} µs and in another at "
                             f"{at_head * 1e3:.1f} µs: the level a process draws, not a change"), nums
    flags = {"base": untrusted(base), "head": untrusted(head)}
    doubts = [f"{side} {'+'.join(fl)}" for side, fl in flags.items() if fl]
    apart = placements_apart(base, head, slower, th.alpha) if {f for fl in flags.values() for f in fl} == {"wide"} else None
    if apart is not None:
        gap, spread, p = apart
        nums.update(p=p)
        return ("regression" if slower else "improvement"), (
            f"{size}; samples are {', '.join(doubts)}, decided on the placements: every head placement is "
            f"{gap * 1e3:.1f} µs or more {'above' if slower else 'below'} every base placement, beyond the "
            f"{spread * 1e3:.1f} µs either side's placements spread ({len(placement_levels(base))}/"
            f"{len(placement_levels(head))} placements, rank p={p:.3f})"), nums
    if doubts:
        return "ambiguous", (f"{size}, but not decided: samples are {', '.join(doubts)} "
                             f"(thresholds {rel:.0%} and {floor:g} µs)"), nums
    sa, sb = base.samples, head.samples
    if sa is not None and sb is not None and len(sa) >= 3 and len(sb) >= 3:
        p = mann_whitney_greater(sa, sb)[1] if slower else mann_whitney_greater(sb, sa)[1]
        r, lo, hi = bootstrap_median_ratio(sa, sb)
        nums.update(ci=(lo, hi), p=p)
        evidence = f"{size}, 95% CI {ci_words(lo, hi, slower)}, Mann-Whitney p={p:.1e}, n={len(sa)}/{len(sb)}"
        if p < th.alpha and (lo > 1.0 if slower else hi < 1.0):
            return ("regression" if slower else "improvement"), evidence, nums
        return "ambiguous", f"{evidence}: beyond the thresholds but not significant", nums
    biqr, hiqr = base.time.iqr_ms or 0.0, head.time.iqr_ms or 0.0
    apart = bm + biqr / 2 < hm - hiqr / 2 if slower else hm + hiqr / 2 < bm - biqr / 2
    if apart:
        return ("regression" if slower else "improvement"), f"{size}; no samples stored, interquartile ranges do not overlap", nums
    return "ambiguous", f"{size}; no samples stored and the interquartile ranges overlap", nums

