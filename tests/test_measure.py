"""The timer's warm-up and stopping rule: a noise target, a sample cap and a device-time budget."""

from harness.measurement.timing import (
    FLOOR_SAMPLES,
    TimingPolicy,
    _enough,
    median_rel_stderr,
    sample_flags,
    warm_up_next,
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


def _warm_up(placements: int, warmed: int, call_ms: float, policy: TimingPolicy = POLICY) -> list[int]:
    """The placements warmed, in order, for a call of ``call_ms`` whose calls take that long each."""
    order, warm = [], []
    while (k := warm_up_next(placements, warmed, warm, sum(warm), policy)) is not None:
        order.append(k)
        warm.append(call_ms)
    return order


def test_a_short_call_warms_every_placement_the_caller_did_not_run_then_the_first_for_a_millisecond():
    assert _warm_up(5, warmed=1, call_ms=0.125) == [1, 2, 3, 4] + [0] * 4
    assert _warm_up(5, warmed=0, call_ms=0.25) == [0, 1, 2, 3, 4]
    assert _warm_up(1, warmed=1, call_ms=0.4) == [0, 0, 0]  # nothing left to warm: the first, for 1 ms
    assert _warm_up(1, warmed=0, call_ms=5.0) == [0]


def test_a_long_call_warms_one_placement_and_samples_the_others_first_calls():
    assert _warm_up(5, warmed=1, call_ms=POLICY.long_call_ms) == [1]
    assert _warm_up(5, warmed=1, call_ms=POLICY.long_call_ms * 0.99) == [1, 2, 3, 4]
    assert _warm_up(3, warmed=0, call_ms=17.0) == [0]
    # the old schedule, where every placement was warmed whatever the call's length, is one setting away
    every = TimingPolicy(long_call_ms=float("inf"))
    assert _warm_up(5, warmed=1, call_ms=17.0, policy=every) == [1, 2, 3, 4]
