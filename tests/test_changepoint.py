"""Change points: a lasting step is found where it is; noise, one wild night and slow wiggles are not steps."""

import numpy as np
import pytest

from harness.analysis import changepoint as cp


def _series(n=60, sigma=0.02, seed=0):
    return np.exp(np.random.default_rng(seed).normal(0, sigma, n))


def test_step_found_at_its_night():
    x = _series()
    x[35:] *= 1.12
    (c,) = cp.detect(x)
    assert abs(c.index - 35) <= 1 and c.ratio == pytest.approx(1.12, rel=0.03)


def test_two_steps_up_then_back():
    x = _series(90, seed=4)
    x[30:60] *= 1.2
    idx = [c.index for c in cp.detect(x)]
    assert len(idx) == 2 and abs(idx[0] - 30) <= 1 and abs(idx[1] - 60) <= 1


def test_noise_false_alarm_rate_is_low():
    flagged = sum(bool(cp.detect(_series(60, seed=s))) for s in range(500))
    assert flagged / 500 < 0.02


def test_single_outlier_night_and_wiggle_are_not_steps():
    x = _series(seed=2)
    x[30] *= 3.0
    assert cp.detect(x) == []
    t = np.arange(90)
    wiggle = np.exp(0.03 * np.sin(2 * np.pi * t / 20) + np.random.default_rng(1).normal(0, 0.01, 90))
    assert cp.detect(wiggle) == []


def test_small_significant_step_below_min_shift_is_ignored():
    x = _series(sigma=0.001, seed=3)
    x[30:] *= 1.02  # 20 sigma, but 2%
    assert cp.detect(x) == []
    assert cp.detect(x, min_shift=0.01)


def test_detect_matrix_agrees_with_detect_and_handles_gaps():
    rng = np.random.default_rng(9)
    V = np.exp(rng.normal(0, 0.02, (50, 300)))
    V[25:, :10] *= 1.3
    V[5, 11] = np.nan  # a missing night goes through the per-series path
    V[25:, 11] *= 1.3
    out = cp.detect_matrix(V)
    assert set(range(10)) | {11} <= set(out)
    for col in list(out)[:20]:
        assert [c.index for c in out[col]] == [c.index for c in cp.detect(V[:, col])]
    flagged_noise = len(set(out) - set(range(10)) - {11})
    assert flagged_noise <= 6  # 288 pure-noise series


def test_short_series_gives_nothing():
    assert cp.detect([1.0, 2.0, 3.0]) == []
    assert cp.detect_matrix(np.ones((4, 3))) == {}


def test_the_running_median_is_numpys_median_of_each_window():
    """_despike's median of five by min/max passes picks what np.median of each window picks: ties, steps, a
    single night and a NaN (np.median's answer) included."""
    from harness.analysis.changepoint import _despike

    rng = np.random.default_rng(7)
    series = [rng.normal(size=(365, 60)), rng.integers(0, 3, size=(40, 9)).astype(float),
              np.r_[np.zeros(10), np.ones(10)][:, None], rng.normal(size=(5, 1)),
              np.r_[rng.normal(size=8), np.nan, rng.normal(size=8)][:, None]]
    for x in series:
        padded = np.concatenate([x[:1], x[:1], x, x[-1:], x[-1:]], axis=0)
        median = np.median(np.lib.stride_tricks.sliding_window_view(padded, 5, axis=0), axis=-1)
        expected = np.clip(x, median - 5 * 0.1, median + 5 * 0.1)
        assert np.array_equal(_despike(x, 0.1), expected, equal_nan=True)
        assert np.array_equal(_despike(x[:, 0], 0.1), expected[:, 0], equal_nan=True)
