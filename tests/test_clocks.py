"""NVML clock samples summarised: the slowdown reasons are named, idle and application-clock bits are not."""

from harness.clocks import summarize


def test_summary_names_only_slowdown_reasons():
    # (SM MHz, W, clock-event reasons): idle (0x1), then a software power cap (0x4), then hardware thermal (0x40)
    s = summarize([(1980, 120.0, 0x1), (1755, 690.5, 0x4), (1980, 400.0, 0x40 | 0x2)])
    assert (s["sm_mhz_min"], s["sm_mhz_median"], s["sm_mhz_max"]) == (1755, 1980, 1980)
    assert s["power_w_max"] == 690.5
    assert s["reasons"] == 0x47
    assert s["slowdowns"] == ["sw_power_cap", "hw_thermal"]


def test_no_samples():
    assert summarize([]) == {"n": 0}
