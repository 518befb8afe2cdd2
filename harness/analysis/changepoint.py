"""Change points in nightly series: flag a step (a lasting shift of the level), not every night-to-night wiggle.

Method: penalised binary segmentation for a change in mean (Scott & Knott 1974; the ``BinSeg`` of R's
changepoint package) on log-times, with three guards that separate steps from wiggles:
- the noise scale is estimated robustly from first differences (MAD / 0.6745 / sqrt 2), which a step barely
  moves, and for the search each night is clipped to +-5 of it around a running median of 5 nights (which
  keeps steps and removes spikes), so one wild night cannot make a segment; sizes come from the raw values;
- a split must reduce the standardised squared error by more than ``penalty`` (default 3 ln n, stricter than
  the SIC's 2 ln n) and leave at least ``min_size`` nights (default 3) on both sides;
- the shift must be at least ``min_shift`` (default ln 1.05, a 5% step) to be worth a person's morning.
After the search, every change is re-checked against its neighbouring segments and dropped if it no longer
passes; that removes splits that only made sense before a later split was found.

Why not PELT: it is exact but costs O(n) numpy passes per series; a fleet has ~10^5 series, so the
vectorised single-split screen (``first_split_gain``) plus binary segmentation on the few series that pass
it keeps the nightly report within seconds. The false-alarm rate of these defaults is measured by
scripts/changepoint_false_alarms.py on real repeated runs (docs/harness.md has the figures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_SIZE = 3
MIN_SHIFT = math.log(1.05)
PENALTY_FACTOR = 3.0
SIGMA_FLOOR = 1e-3  # in log units (0.1%): timers cannot resolve less, and a zero scale would flag anything


@dataclass
class Change:
    index: int  # first point after the step
    before: float  # level (geometric mean for log series) of the segment before
    after: float
    ratio: float  # after / before
    score: float  # standardised cost reduction of this split; compare with the penalty


def default_penalty(n: int) -> float:
    return PENALTY_FACTOR * math.log(max(n, 2))


def noise_scale(x: np.ndarray) -> float:
    """Robust noise scale from first differences: a few steps change only a few differences."""
    if len(x) < 3:
        return SIGMA_FLOOR
    d = np.diff(x)
    mad = float(np.median(np.abs(d - np.median(d))))
    sigma = mad / 0.6745 / math.sqrt(2.0)
    return max(sigma, SIGMA_FLOOR)


def _despike(x: np.ndarray, sig) -> np.ndarray:
    """Clip each value to +-5 sigma around the running median of 5 (along axis 0): spikes go, steps stay."""
    n = x.shape[0]
    if n < 5:
        return x
    padded = np.concatenate([x[:1], x[:1], x, x[-1:], x[-1:]], axis=0)
    if np.isnan(padded).any():  # np.median's NaN (the network below would pick around it)
        rm = np.median(np.lib.stride_tricks.sliding_window_view(padded, 5, axis=0), axis=-1)
    else:
        rm = _median5(*(padded[i:i + n] for i in range(5)))
    return np.clip(x, rm - 5 * sig, rm + 5 * sig)


def _median5(a, b, c, d, e):
    """Element-wise median of five arrays, exactly np.median's for values without NaN, in seven min/max passes
    (np.median of a fleet's sliding windows sorted 2.7 million windows of five: a tenth of a report's CPU). The
    lowest and the highest of a..d are below and above the median: it is the median of e and the other two."""
    f = np.maximum(np.minimum(a, b), np.minimum(c, d))
    g = np.minimum(np.maximum(a, b), np.maximum(c, d))
    return np.maximum(np.minimum(f, g), np.minimum(np.maximum(f, g), e))


def _gains(cs: np.ndarray, lo: int, hi: int, min_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Cost reduction of splitting x[lo:hi] at each k (sum of squares, from the cumulative sum ``cs``)."""
    k = np.arange(lo + min_size, hi - min_size + 1)
    if len(k) == 0:
        return k, np.empty(0)
    n1, n2 = k - lo, hi - k
    s1, s2 = cs[k] - cs[lo], cs[hi] - cs[k]
    diff = s1 / n1 - s2 / n2
    return k, diff * diff * n1 * n2 / (hi - lo)


def _segment_means(x: np.ndarray, cps: list[int]) -> list[float]:
    bounds = [0, *cps, len(x)]
    return [float(np.mean(x[a:b])) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def binseg(x: np.ndarray, *, penalty: float | None = None, min_size: int = MIN_SIZE,
           min_shift: float = MIN_SHIFT, sigma: float | None = None) -> list[int]:
    """Change indices of ``x`` (already on the scale where a step is additive, e.g. log-times)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n < 2 * min_size:
        return []
    pen = default_penalty(n) if penalty is None else penalty
    sig = noise_scale(x) if sigma is None else max(sigma, SIGMA_FLOOR)
    cs = np.concatenate(([0.0], np.cumsum(_despike(x, sig))))
    raw = np.concatenate(([0.0], np.cumsum(x)))
    found: list[int] = []
    stack = [(0, n)]
    while stack:
        lo, hi = stack.pop()
        k, g = _gains(cs, lo, hi, min_size)
        if len(k) == 0:
            continue
        i = int(np.argmax(g))
        kk = int(k[i])
        shift = abs((raw[kk] - raw[lo]) / (kk - lo) - (raw[hi] - raw[kk]) / (hi - kk))
        if g[i] / sig**2 > pen and shift >= min_shift:
            found.append(kk)
            stack += [(lo, kk), (kk, hi)]
    found.sort()
    # Re-check each change against its final neighbours; drop the weakest failing one until all pass.
    while found:
        bounds = [0, *found, n]
        scores = []
        for j in range(1, len(bounds) - 1):
            lo, kk, hi = bounds[j - 1], bounds[j], bounds[j + 1]
            m1 = (cs[kk] - cs[lo]) / (kk - lo)
            m2 = (cs[hi] - cs[kk]) / (hi - kk)
            gain = (m1 - m2) ** 2 * (kk - lo) * (hi - kk) / (hi - lo) / sig**2
            shift = (raw[kk] - raw[lo]) / (kk - lo) - (raw[hi] - raw[kk]) / (hi - kk)
            scores.append(gain if abs(shift) >= min_shift else -1.0)
        worst = int(np.argmin(scores))
        if scores[worst] > pen:
            break
        del found[worst]
    return found


def detect(values, *, log: bool = True, penalty: float | None = None, min_size: int = MIN_SIZE,
           min_shift: float = MIN_SHIFT) -> list[Change]:
    """Steps in a series of positive values (times: ``log=True``); NaNs are skipped, indices refer to ``values``."""
    v = np.asarray(values, dtype=np.float64)
    keep = np.flatnonzero(np.isfinite(v) & ((v > 0) if log else True))
    if len(keep) < 2 * min_size:
        return []
    x = np.log(v[keep]) if log else v[keep]
    sig = noise_scale(x)
    cps = binseg(x, penalty=penalty, min_size=min_size, min_shift=min_shift, sigma=sig)
    means = _segment_means(x, cps)
    out = []
    bounds = [0, *cps, len(x)]
    for j, cp in enumerate(cps):
        lo, hi = bounds[j], bounds[j + 2]
        m1, m2 = means[j], means[j + 1]
        score = (m1 - m2) ** 2 * (cp - lo) * (hi - cp) / (hi - lo) / sig**2
        before, after = (math.exp(m1), math.exp(m2)) if log else (m1, m2)
        out.append(Change(int(keep[cp]), before, after, after / before if before else math.inf, float(score)))
    return out


def first_split_gain(X: np.ndarray, min_size: int = MIN_SIZE) -> np.ndarray:
    """Best single-split standardised gain of every column of ``X`` (nights x series, no NaN), vectorised.

    Binary segmentation accepts nothing in a column whose best first split is below the penalty, so this
    screen decides most of a fleet's series in one pass.
    """
    n, _ = X.shape
    if n < 2 * min_size:
        return np.zeros(X.shape[1])
    d = np.diff(X, axis=0)
    mad = np.median(np.abs(d - np.median(d, axis=0)), axis=0)
    sig = np.maximum(mad / 0.6745 / math.sqrt(2.0), SIGMA_FLOOR)
    Xc = _despike(X, sig)
    cs = np.vstack([np.zeros((1, X.shape[1])), np.cumsum(Xc, axis=0)])
    k = np.arange(min_size, n - min_size + 1)[:, None]
    s1, s2 = cs[k[:, 0]], cs[n] - cs[k[:, 0]]
    diff = s1 / k - s2 / (n - k)
    gain = diff * diff * k * (n - k) / n
    return gain.max(axis=0) / sig**2


def detect_matrix(V: np.ndarray, *, log: bool = True, penalty: float | None = None, min_size: int = MIN_SIZE,
                  min_shift: float = MIN_SHIFT) -> dict[int, list[Change]]:
    """Steps in every column of ``V`` (nights x series); returns {column: changes} for columns with any."""
    out: dict[int, list[Change]] = {}
    if V.size == 0:
        return out
    finite = np.isfinite(V) & ((V > 0) if log else True)
    full = finite.all(axis=0)
    candidates = np.flatnonzero(~full)  # columns with holes take the exact per-series path
    if full.any():
        cols = np.flatnonzero(full)
        X = np.log(V[:, cols]) if log else V[:, cols]
        pen = default_penalty(V.shape[0]) if penalty is None else penalty
        gains = first_split_gain(X, min_size)
        candidates = np.concatenate([candidates, cols[gains > pen]])
    for c in candidates:
        changes = detect(V[:, c], log=log, penalty=penalty, min_size=min_size, min_shift=min_shift)
        if changes:
            out[int(c)] = changes
    return out
