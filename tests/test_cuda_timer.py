"""CudaTimer's warm-up, batch and spacer rules, on a stand-in for torch.cuda whose calls take a set device time.

The stand-in's host and device keep clocks of their own (ms): the host spends each call's dispatch before the
call's kernel is enqueued, the device runs each enqueued item from when it is both enqueued and reached, events
read the device's clock at the point of the stream where they were recorded, and waiting on one moves the host's
clock to it. A device that catches up with the host idles, and an event pair around a call then holds host time,
as on a GPU. Calls of no dispatch keep the host ahead, so every batch is accepted and the rules under test alone
decide how many calls run.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.measurement.timing import CudaTimer, TimingPolicy


class _Machine:
    def __init__(self, device_ms: float = 0.0, dispatch_ms=lambda i: 0.0) -> None:
        self.host = self.free = 0.0
        self.device_ms, self.dispatch_ms = device_ms, dispatch_ms  # dispatch_ms: the call's number -> its ms
        self.calls = 0
        self.spacers: list[float] = []

    def enqueue(self, ms: float) -> None:
        self.free = max(self.host, self.free) + ms

    def call(self) -> None:
        self.host += self.dispatch_ms(self.calls)
        self.calls += 1
        self.enqueue(self.device_ms)

    def sleep(self, cycles: int) -> None:
        self.spacers.append(cycles / 2e6)
        self.enqueue(cycles / 2e6)


class _TimedEvent:
    def __init__(self, machine: _Machine):
        self.machine, self.done = machine, None

    def record(self, stream=None) -> None:
        self.done = max(self.machine.host, self.machine.free)  # reached once everything before it has run

    def query(self) -> bool:
        return self.done <= self.machine.host

    def synchronize(self) -> None:
        self.machine.host = max(self.machine.host, self.done)

    def elapsed_time(self, end: _TimedEvent) -> float:
        return end.done - self.done


def _timer(monkeypatch, machine: _Machine, policy: TimingPolicy) -> CudaTimer:
    from harness.measurement import timing

    cuda = SimpleNamespace(Event=lambda enable_timing=False: _TimedEvent(machine), current_stream=lambda: None,
                           _sleep=machine.sleep)
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: machine.host / 1e3,
                                                        sleep=lambda s: None))
    timer = CudaTimer.__new__(CudaTimer)
    timer.torch, timer.policy, timer.clock, timer._flush = SimpleNamespace(cuda=cuda), policy, None, None
    return timer


def _placements(machine: _Machine, ms: float, k: int) -> tuple[list, list[int]]:
    """k placements of a call of ``ms`` device time and no dispatch, and how many times each ran."""
    calls = [0] * k

    def call(i: int) -> None:
        calls[i] += 1
        machine.enqueue(ms)

    return [lambda i=i: call(i) for i in range(k)], calls


MAIN = TimingPolicy().share(2)  # the main process of a run timed in two (run/replicas.py)


def test_placements_the_caller_warmed_and_timed_run_no_warm_up_call(monkeypatch):
    """A long call's repeats that ran on every placement stand for the timer's warm-up: each placement then runs
    only its samples. Without the repeats' timings the timer still runs the first placement once to size its
    batch and spacer."""
    machine = _Machine()
    timer = _timer(monkeypatch, machine, MAIN)
    fns, calls = _placements(machine, 20.0, 3)
    t = timer(fns, warmed=3, seen=[(30e-6, 20.0), (30e-6, 20.0)])
    assert calls == [len(p) for p in timer_samples(timer, t, 3)] and sum(calls) == t.n

    machine = _Machine()
    timer = _timer(monkeypatch, machine, MAIN)
    fns, calls = _placements(machine, 20.0, 3)
    t = timer(fns, warmed=3)
    assert sum(calls) == t.n + 1 and calls[0] == t.n - sum(calls[1:]) + 1


def timer_samples(timer: CudaTimer, timing, k: int) -> list[list[float]]:
    """The samples each placement gave, from the timer's per-placement medians and the batch rotation."""
    per = [[] for _ in range(k)]
    for j, s in enumerate(timing.samples_ms):  # batches of one sample each for a 20 ms call
        per[j % k].append(s)
    assert [round(sum(p) / len(p), 6) for p in per] == timer.placement_medians_ms
    return per


def test_unwarmed_placements_still_run_once_before_their_samples(monkeypatch):
    machine = _Machine()
    timer = _timer(monkeypatch, machine, MAIN)
    fns, calls = _placements(machine, 20.0, 3)
    t = timer(fns, warmed=1)
    # placements 1 and 2 ran one untimed call each before sampling; placement 0 had run (the checked run)
    assert sum(calls) == t.n + 2


@pytest.mark.parametrize("k, batch", [(3, 6), (2, 8), (1, 8)])
def test_a_process_is_not_taken_past_its_minimum_by_its_placements(monkeypatch, k, batch):
    """Each placement needs a batch of its own: the batch shrinks so that the placements together reach the
    process's minimum (16 samples in a run of two processes), not k batches of 8."""
    machine = _Machine()
    timer = _timer(monkeypatch, machine, MAIN)
    fns, _ = _placements(machine, 0.1, k)
    t = timer(fns, warmed=1)
    assert MAIN.min_samples == 16
    assert t.n == batch * max(k, -(-MAIN.min_samples // batch))



def test_a_call_longer_than_its_dispatch_is_timed_behind_a_spacer_of_one_dispatch(monkeypatch):
    """A 0.5 ms call with a 0.1 ms dispatch keeps the device ahead by itself: the spacer covers the first call's
    dispatch only (a spacer of the batch's 6 dispatches left the device idle 27 % of a batch), and every batch is
    kept with the call's device time alone in its samples."""
    machine = _Machine(0.5, lambda i: 0.1)
    timer = _timer(monkeypatch, machine, MAIN)
    t = timer([machine.call] * 3, warmed=0)
    batches = -(-t.n // 6)
    assert len(machine.spacers) == batches  # no batch discarded
    assert max(machine.spacers) <= 1.5 * 0.1 + 0.02 + 1e-6
    assert all(abs(s - 0.5) < 1e-9 for s in t.samples_ms)


@pytest.mark.parametrize("device_ms, dispatch_ms", [(0.035, 0.06), (0.06, 0.06), (0.02, 0.2)])
def test_a_call_shorter_than_its_dispatch_gets_a_spacer_for_what_the_host_loses(monkeypatch, device_ms, dispatch_ms):
    """Where the host falls behind the device call by call, the spacer holds the device until the batch is
    enqueued, from the first batch on: no sample holds host time, and no batch is dropped."""
    machine = _Machine(device_ms, lambda i: dispatch_ms)
    timer = _timer(monkeypatch, machine, MAIN)
    t = timer([machine.call] * 3, warmed=0)
    assert all(abs(s - device_ms) < 1e-9 for s in t.samples_ms)
    assert len(machine.spacers) * 6 == t.n
    assert "host_bound" not in t.flags


def test_a_host_stall_inside_a_batch_discards_the_batch_never_a_sample_with_host_time(monkeypatch):
    """A dispatch that stalls (every 7th call takes 3 ms) lets the device reach a call the host is still
    enqueuing: the timer sees it call by call, drops the batch and doubles the spacer; no kept sample holds the
    stall."""
    machine = _Machine(0.2, lambda i: 3.0 if i % 7 == 6 else 0.05)
    timer = _timer(monkeypatch, machine, MAIN)
    t = timer([machine.call] * 3, warmed=0)
    assert all(abs(s - 0.2) < 1e-9 for s in t.samples_ms)
    assert len(machine.spacers) > -(-t.n // 6)  # some batches were dropped
