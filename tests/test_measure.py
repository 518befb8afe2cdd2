"""The timer's stopping rule: a noise target, a sample cap and a device-time budget."""

from harness.measure import TimingPolicy, _enough, median_rel_stderr

POLICY = TimingPolicy()


def test_tight_samples_stop_at_the_floor():
    samples = [0.1000 + 0.00001 * (i % 5) for i in range(POLICY.min_samples)]
    assert median_rel_stderr(samples) < POLICY.noise_target
    assert _enough(samples, spent_ms=sum(samples), policy=POLICY)
    assert not _enough(samples[:-1], spent_ms=sum(samples), policy=POLICY)


def test_noise_above_the_target_keeps_sampling_until_cap_or_budget():
    # 5 % spread at 50 us: the median's standard error is about 0.6 % at 32 samples, above the 0.2 % target
    noisy = [0.05 * (1 + 0.05 * ((i * 7) % 11) / 10) for i in range(32)]
    assert median_rel_stderr(noisy) > POLICY.noise_target
    assert not _enough(noisy, spent_ms=sum(noisy), policy=POLICY)
    assert _enough(noisy, spent_ms=POLICY.budget_ms, policy=POLICY)
    capped = noisy * (POLICY.max_samples // len(noisy) + 1)
    assert _enough(capped[:POLICY.max_samples], spent_ms=1.0, policy=POLICY)


def test_budget_needs_three_samples():
    assert not _enough([20.0, 20.0], spent_ms=40.0, policy=POLICY)
    assert _enough([20.0, 20.0, 20.0], spent_ms=60.0, policy=POLICY)
