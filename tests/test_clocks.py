"""What the clock reads taken while a call was timed say: the SM clock's range and the slowdown reasons by name."""

import time

from harness.measurement.clocks import ClockSampler, during


def test_during_names_only_slowdown_reasons():
    # (SM MHz, clock-event reasons): idle (0x1), a software power cap (0x4), hardware thermal (0x40) with the
    # applications-clocks bit (0x2); a failed read (None) is skipped
    reads = [(1980, 0x1), (1755, 0x4), None, (1980, 0x40 | 0x2)]
    assert during(reads) == {"sm_mhz_min": 1755, "sm_mhz_max": 1980, "slowdowns": ["sw_power_cap", "hw_thermal"]}


def test_no_reads_say_nothing():
    assert during([]) is None and during([None, None]) is None


class ScriptedClock:
    """A clock whose reads come from a list (NVML needs a GPU); power fails every other read."""

    def __init__(self, reads):
        self.reads, self.calls = list(reads), 0

    def read(self):
        return self.reads.pop(0) if self.reads else (1980, 0)

    def power(self):
        self.calls += 1
        return None if self.calls % 2 else 400.0 + self.calls


def test_sampler_summarises_the_reads_it_took_on_its_thread():
    clock = ScriptedClock([(1860, 0x4), (1935, 0x4)])
    with ClockSampler(clock, period_s=0.001) as sampler:
        deadline = time.monotonic() + 10
        while len(sampler.reads) < 3 and time.monotonic() < deadline:  # a loaded machine may run the thread late
            time.sleep(0.005)
    s = sampler.summary()
    assert s["n"] == len(sampler.reads) >= 3
    assert (s["sm_mhz_min"], s["sm_mhz_max"], s["slowdowns"]) == (1860, 1980, ["sw_power_cap"])
    assert s["power_w_max"] == 400.0 + max(c for c in range(1, clock.calls + 1) if c % 2 == 0)
