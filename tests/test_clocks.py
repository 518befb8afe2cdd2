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


class FakeNvml:
    """The three NVML calls DeviceClock makes, answering from fixed values (NVML needs a GPU)."""

    NVML_CLOCK_SM = 1

    def __init__(self, max_mhz, read):
        self.max_mhz, self.current = max_mhz, read

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        if self.max_mhz is None:
            raise RuntimeError("not supported")
        return self.max_mhz

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return self.current[0]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.current[1]


def test_a_batch_is_throttled_only_when_a_slowdown_holds_the_clock_below_its_maximum():
    from harness.measurement.clocks import DeviceClock

    clock = DeviceClock(FakeNvml(1980, (1785, 0x4)), handle=None)
    assert clock.read() == (1785, 0x4) and clock.throttled(clock.read())
    assert not clock.throttled((1980, 0x4))  # the cap's bit at full clock: nothing slowed
    assert not clock.throttled((1755, 0x1))  # idle clocks down: not a slowdown
    assert clock.throttled((1965, 0x40 | 0x2)) and not clock.throttled(None)
    assert not DeviceClock(FakeNvml(None, (1785, 0x4)), handle=None).throttled((1785, 0x4))  # no maximum known


def test_pooled_processes_keep_their_discarded_batches_and_a_throttled_flag():
    from harness.measurement.timing import pooled, summarize

    a = summarize([1.0] * 16, "hot", "cuda_event", 64,
                  {"sm_mhz_min": 1980, "sm_mhz_max": 1980, "slowdowns": [], "throttled_batches": 3})
    b = summarize([1.01] * 16, "hot", "cuda_event", 64,
                  {"sm_mhz_min": 1785, "sm_mhz_max": 1980, "slowdowns": ["sw_power_cap"], "throttled_batches": 8},
                  throttled=True)
    assert b.flags == ["throttled"] and a.flags == []
    t = pooled([a, b], 64)
    assert t.n == 32 and t.flags == ["throttled"]
    assert t.clock == {"sm_mhz_min": 1785, "sm_mhz_max": 1980, "slowdowns": ["sw_power_cap"], "throttled_batches": 11}
