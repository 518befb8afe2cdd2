"""The timer's stopping rule: a noise target, a sample cap and a device-time budget."""

from harness.measurement.timing import (
    FLOOR_SAMPLES,
    NOISE_FLOOR_US,
    TimingPolicy,
    _enough,
    median_rel_stderr,
    median_stderr,
    sample_flags,
)

POLICY = TimingPolicy()


def test_tight_samples_stop_at_the_floor():
    samples = [0.1000 + 0.00001 * (i % 5) for i in range(POLICY.min_samples)]
    assert median_rel_stderr(samples) < POLICY.noise_target
    assert _enough(samples, spent_ms=sum(samples), policy=POLICY)
    assert not _enough(samples[:-1], spent_ms=sum(samples), policy=POLICY)


def test_noise_above_the_target_keeps_sampling_until_cap_or_budget():
    # 10 % spread at 50 us: the median's standard error is about 1 % at 32 samples, above the 0.5 % target
    noisy = [0.05 * (1 + 0.10 * ((i * 7) % 11) / 10) for i in range(32)]
    assert median_rel_stderr(noisy) > POLICY.noise_target
    assert not _enough(noisy, spent_ms=sum(noisy), policy=POLICY)
    assert _enough(noisy, spent_ms=POLICY.budget_ms, policy=POLICY)
    capped = noisy * (POLICY.max_samples // len(noisy) + 1)
    assert _enough(capped[:POLICY.max_samples], spent_ms=1.0, policy=POLICY)


def test_budget_needs_the_floor_of_samples_unless_calls_are_very_long():
    # issue 13: the 30 ms budget stopped CPU calls at 3 samples and the rank test ran on them
    assert not _enough([5.0] * 7, spent_ms=35.0, policy=POLICY)
    assert _enough([5.0] * FLOOR_SAMPLES, spent_ms=40.0, policy=POLICY)
    assert not _enough([20.0, 20.0], spent_ms=40.0, policy=POLICY)
    assert not _enough([20.0, 20.0, 20.0], spent_ms=60.0, policy=POLICY)
    assert _enough([50.0, 50.0, 50.0], spent_ms=150.0, policy=POLICY)  # past 4x the budget: bounded cost


def test_sample_flags_name_what_makes_a_median_flip():
    device_bound = [0.0770 + 0.0001 * (i % 3) for i in range(32)]
    assert sample_flags(device_bound) == []
    # the pattern: within each batch of 8, samples 4-8 were 3.2-3.8x the first three (host-bound)
    two_modes = [0.0773 * (1.01 if i % 8 < 3 else 3.7) for i in range(32)]
    assert sample_flags(two_modes) == ["multimodal"]
    assert sample_flags([1.0, 1.0, 1.0]) == ["few_samples"]
    assert sample_flags(device_bound, host_bound=True) == ["host_bound"]
    wide = [0.05, 0.05, 0.05, 0.05, 0.12, 0.12, 0.12, 0.12]  # IQR/median 1.4 with median/min 1.7
    assert "multimodal" in sample_flags(wide)


def test_a_short_call_stops_once_its_median_is_finer_than_the_gate_can_use():
    # 10 us with 10 % spread: the median's relative error at 32 samples is above 0.5 % but its absolute error is
    # under an eighth of the gate's floor, so sampling stops; the same spread at 100 us keeps sampling.
    short = [0.010 * (1 + 0.10 * ((i * 7) % 11) / 10) for i in range(32)]
    assert median_rel_stderr(short) > POLICY.noise_target
    assert _enough(short, spent_ms=sum(short), policy=POLICY)
    longer = [10 * s for s in short]
    assert not _enough(longer, spent_ms=sum(longer), policy=POLICY)


def test_both_targets_are_an_eighth_of_what_the_gate_can_fail():
    from harness.analysis.thresholds import ABS_FLOOR_US, TIME_BANDS
    assert NOISE_FLOOR_US == ABS_FLOOR_US / 8
    assert POLICY.noise_target <= TIME_BANDS[-1][1] / 8


def test_a_shared_policy_loosens_the_floor_like_the_relative_target():
    half = POLICY.share(2)
    assert abs(half.noise_floor_us - POLICY.noise_floor_us * 2 ** 0.5) < 1e-12
    assert abs(median_stderr([1.0, 2.0, 3.0, 4.0, 5.0])[0] - 3.0) < 1e-12
