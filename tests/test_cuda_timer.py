"""CudaTimer's warm-up and batch rules, on a stand-in for torch.cuda whose calls take a set device time.

The stand-in's device runs each enqueued call for its duration; events read the device's clock at the point
of the stream where they were recorded, and waiting on one waits (in wall time) for the work enqueued so far.
The host always stays ahead of the device (the spacer did its work), so every batch is accepted and the rules
under test alone decide how many calls run.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from harness.measurement.timing import CudaTimer, TimingPolicy


class _Device:
    def __init__(self):
        self.clock_ms = self.waited_ms = 0.0

    def run(self, ms: float) -> None:
        self.clock_ms += ms

    def wait(self) -> None:
        time.sleep((self.clock_ms - self.waited_ms) / 1e3)
        self.waited_ms = self.clock_ms


class _Event:
    def __init__(self, device: _Device):
        self.device, self.at = device, None

    def record(self, stream=None) -> None:
        self.at = self.device.clock_ms

    def synchronize(self) -> None:
        self.device.wait()

    def query(self) -> bool:
        return False  # the host finished enqueuing before the device reached the batch

    def elapsed_time(self, end: _Event) -> float:
        return end.at - self.at


def _timer(policy: TimingPolicy) -> tuple[CudaTimer, _Device]:
    device = _Device()
    cuda = SimpleNamespace(Event=lambda enable_timing=False: _Event(device), current_stream=lambda: None,
                           _sleep=lambda cycles: device.run(cycles / 2e6))
    timer = CudaTimer.__new__(CudaTimer)
    timer.torch, timer.policy, timer.clock, timer._flush = SimpleNamespace(cuda=cuda), policy, None, None
    return timer, device


def _placements(device: _Device, ms: float, k: int) -> tuple[list, list[int]]:
    calls = [0] * k

    def call(i: int) -> None:
        calls[i] += 1
        device.run(ms)

    return [lambda i=i: call(i) for i in range(k)], calls


MAIN = TimingPolicy().share(2)  # the main process of a run timed in two (run/replicas.py)


def test_placements_the_caller_warmed_and_timed_run_no_warm_up_call():
    """A long call's repeats that ran on every placement stand for the timer's warm-up: each placement then runs
    only its samples. Without the repeats' timings the timer still runs the first placement once to size its
    batch and spacer."""
    timer, device = _timer(MAIN)
    fns, calls = _placements(device, 20.0, 3)
    t = timer(fns, warmed=3, seen=[(30e-6, 20.0), (30e-6, 20.0)])
    assert calls == [len(p) for p in timer_samples(timer, t, 3)] and sum(calls) == t.n

    timer, device = _timer(MAIN)
    fns, calls = _placements(device, 20.0, 3)
    t = timer(fns, warmed=3)
    assert sum(calls) == t.n + 1 and calls[0] == t.n - sum(calls[1:]) + 1


def timer_samples(timer: CudaTimer, timing, k: int) -> list[list[float]]:
    """The samples each placement gave, from the timer's per-placement medians and the batch rotation."""
    per = [[] for _ in range(k)]
    for j, s in enumerate(timing.samples_ms):  # batches of one sample each for a 20 ms call
        per[j % k].append(s)
    assert [round(sum(p) / len(p), 6) for p in per] == timer.placement_medians_ms
    return per


def test_unwarmed_placements_still_run_once_before_their_samples():
    timer, device = _timer(MAIN)
    fns, calls = _placements(device, 20.0, 3)
    t = timer(fns, warmed=1)
    # placements 1 and 2 ran one untimed call each before sampling; placement 0 had run (the checked run)
    assert sum(calls) == t.n + 2


@pytest.mark.parametrize("k, batch", [(3, 6), (2, 8), (1, 8)])
def test_a_process_is_not_taken_past_its_minimum_by_its_placements(k, batch):
    """Each placement needs a batch of its own: the batch shrinks so that the placements together reach the
    process's minimum (16 samples in a run of two processes), not k batches of 8."""
    timer, device = _timer(MAIN)
    fns, _ = _placements(device, 0.1, k)
    t = timer(fns, warmed=1)
    assert MAIN.min_samples == 16
    assert t.n == batch * max(k, -(-MAIN.min_samples // batch))
