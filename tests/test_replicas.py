"""A combination timed in two processes of one run (harness/run/replicas.py): the split of the budget, the pooled
record, a replica that fails, and the compare reading the processes' levels as noise."""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np

from harness.analysis.compare import compare_runs
from harness.analysis.timechange import Thresholds, placements_moved, time_verdict
from harness.backends import SweepOptions
from harness.backends.cudnn import PLACEMENTS, placements
from harness.core import cases
from harness.core.records import CRASHED, OK, Determinism, Record, Timing
from harness.measurement.timing import FLOOR_SAMPLES, TimingPolicy, _enough, pooled
from harness.run import replicas, runners, sweep
from harness.run.journal import JOURNAL_FILE, iter_journal
from harness.run.pool import WorkerPool


def test_each_process_samples_its_share_and_keeps_every_sample():
    p = TimingPolicy()
    half = p.share(2)
    assert half.budget_ms == p.budget_ms / 2 and half.min_samples == p.min_samples // 2
    assert half.max_samples == p.max_samples // 2 == half.keep_samples  # nothing thinned before the pooling
    assert abs(half.noise_target - p.noise_target * 2 ** 0.5) < 1e-12
    assert p.share(1) is p and TimingPolicy(min_samples=4).share(2).min_samples == FLOOR_SAMPLES // 2


def test_the_floor_and_the_placements_are_split_not_paid_per_process():
    """A long call whose budget is spent stops at half the floor in each process, so the two pool to one
    floor's worth; and the two processes time the run's placements between them (3 + 2), not 5 each."""
    half = TimingPolicy().share(2)
    assert half.floor_samples * 2 == FLOOR_SAMPLES
    assert _enough([3.0] * half.floor_samples, spent_ms=half.budget_ms, policy=half)
    assert not _enough([3.0] * (half.floor_samples - 1), spent_ms=half.budget_ms, policy=half)
    one = SweepOptions(processes=1)
    main, replica = SweepOptions(processes=2), SweepOptions(processes=2, timing_only=True)
    assert placements(one) == PLACEMENTS
    assert placements(main) + placements(replica) == PLACEMENTS and placements(main) > placements(replica) > 0
    assert placements(replicas.replica_options(main)) == placements(replica)


def _timing(samples, **kw) -> Timing:
    return Timing(median_ms=statistics.median(samples), iqr_ms=0.0, n=len(samples), mode="hot", timer="cuda_event",
                  min_ms=min(samples), samples_ms=list(samples), **kw)


def test_pooled_summarises_both_processes_samples_as_one():
    a = _timing([1.0] * 40, host_ms=0.03, clock={"sm_mhz_min": 1980, "sm_mhz_max": 1980, "slowdowns": []})
    b = _timing([1.1] * 40, host_ms=0.05, flags=["host_bound"],
                clock={"sm_mhz_min": 1755, "sm_mhz_max": 1980, "slowdowns": ["power_cap"]})
    t = pooled([a, b], keep=64)
    assert t.n == 80 and len(t.samples_ms) == 64  # all 80 summarised, 64 kept from both alike
    assert t.samples_ms.count(1.0) == t.samples_ms.count(1.1) == 32
    assert t.min_ms == 1.0 and 1.0 <= t.median_ms <= 1.1
    assert t.host_ms == 0.04 and "host_bound" in t.flags
    assert t.clock == {"sm_mhz_min": 1755, "sm_mhz_max": 1980, "slowdowns": ["power_cap"]}


def _rec(samples, hash_="h", status=OK) -> Record:
    rec = Record(case="quick.seed", backend="cudnn", direction="fwd", algo="GEMM", math="DEFAULT", dtype="fp16",
                 layout="NCHW", status=status, device="cuda")
    if status == OK:
        rec.time = _timing(samples)
        rec.determinism = Determinism(hash=hash_, hash_algo="x", repeats=2, repeat_equal=True,
                                      fresh_handle_equal=True)
        rec.extra["placement_medians_ms"] = [statistics.median(samples)]
    return rec


def test_merge_keeps_each_process_median_and_whether_they_computed_the_same_bits():
    rec = replicas.merge(_rec([0.415] * 40), _rec([0.445] * 40, hash_="other"), keep=64)
    assert rec.extra["process_medians_ms"] == [0.415, 0.445]
    assert rec.extra["placement_medians_ms"] == [0.415, 0.445]
    assert rec.extra["fresh_process_equal"] is False and rec.time.n == 80
    same = replicas.merge(_rec([0.4] * 40), _rec([0.4] * 40), keep=64)
    assert same.extra["fresh_process_equal"] is True
    failed = replicas.merge(_rec([0.4] * 40), replace(_rec([1.0]), status=CRASHED, time=None,
                                                      reason="the worker died of SIGSEGV"), keep=64)
    assert "process_medians_ms" not in failed.extra and failed.time.n == 40
    assert failed.extra["replica"] == "crashed: the worker died of SIGSEGV"


def _left_to_replica(hash_="h", repeat_equal=True, distinct=1) -> Record:
    rec = _rec([0.4] * 40, hash_=hash_)
    rec.determinism.fresh_handle_equal, rec.determinism.repeat_equal = None, repeat_equal
    rec.determinism.distinct_outputs = distinct
    return rec


def test_a_main_process_that_left_its_fresh_handle_to_the_replica_gets_the_replicas_answer():
    same = replicas.merge(_left_to_replica(), _rec([0.4] * 40), keep=64, fresh_handle_in_replica=True)
    assert same.determinism.fresh_handle_equal is True and same.determinism.distinct_outputs == 1
    other = replicas.merge(_left_to_replica(), _rec([0.4] * 40, hash_="other"), keep=64, fresh_handle_in_replica=True)
    assert other.determinism.fresh_handle_equal is False and other.determinism.distinct_outputs == 2
    # repeats that already differed: the replica's output may be one of theirs, so their count stands
    unstable = replicas.merge(_left_to_replica(repeat_equal=False, distinct=3), _rec([0.4] * 40, hash_="other"),
                              keep=64, fresh_handle_in_replica=True)
    assert unstable.determinism.fresh_handle_equal is False and unstable.determinism.distinct_outputs == 3
    # a backend that checks its own fresh handle (or none, as PyTorch's) keeps what it recorded
    torch_like = replicas.merge(_left_to_replica(), _rec([0.4] * 40, hash_="other"), keep=64)
    assert torch_like.determinism.fresh_handle_equal is None and torch_like.extra["fresh_process_equal"] is False
    # no replica timing: nothing to derive, and the record says the replica did not time it
    failed = replicas.merge(_left_to_replica(), replace(_rec([1.0]), status=CRASHED, time=None, reason="killed"),
                            keep=64, fresh_handle_in_replica=True)
    assert failed.determinism.fresh_handle_equal is None and failed.extra["replica"] == "crashed: killed"


def _stored(levels, rng, n=40) -> Record:
    """A record as the store returns it, timed in len(levels) processes at those levels (ms)."""
    samples = np.concatenate([lv * (1 + 0.001 * rng.standard_normal(n)) for lv in levels])
    return Record(case="quick.seed", backend="cudnn", direction="fwd", algo="GEMM", math="DEFAULT", dtype="bf16",
                  layout="NCHW", status=OK, time=Timing(float(np.median(samples)), 0.0, len(samples), "hot",
                                                        "cuda_event", samples_ms=samples),
                  extra={"process_medians_ms": list(levels)}, combo_key="k")


def test_a_change_within_the_levels_of_one_runs_processes_is_ambiguous_not_a_regression():
    rng = np.random.default_rng(1)
    th = Thresholds()
    # base: one process at each level (GEMM bf16 on the H200: 0.415 and 0.445 ms); head: both at the upper one
    v = time_verdict(_stored([0.400, 0.440], rng), _stored([0.440, 0.445], rng), th)
    assert v[0] == "ambiguous" and "between two processes of one run (400.0 and 440.0 µs)" in v[1]
    # the same ratio with both runs' processes agreeing is a regression
    assert time_verdict(_stored([0.420, 0.421], rng), _stored([0.442, 0.443], rng), th)[0] == "regression"
    # a level two processes of an earlier run showed counts too (compare's history)
    past = [[_stored([0.40, 0.44], rng)]]
    found = compare_runs([_stored([0.40, 0.401], rng)], [_stored([0.44, 0.441], rng)], th, history=past)
    assert [(f.kind, f.verdict) for f in found] == [("time", "ambiguous")]
    # a change larger than the levels is decided
    assert time_verdict(_stored([0.40, 0.41], rng), _stored([0.46, 0.461], rng), th)[0] == "regression"


def _pools(tmp_path):
    journal = sweep.new_journal(tmp_path, SweepOptions(device="cpu"), cases.select("quick.seed"), ["faulty"], {})
    lock = sweep.lock_run(journal.path)
    logs: list[str] = []
    main = WorkerPool(journal, keep_fds=(lock,), log=logs.append, timeout_s=30)
    replica = WorkerPool(journal, keep_fds=(lock,), log=logs.append, timeout_s=30)
    return journal, main, replica, logs


def test_a_slice_is_timed_in_two_worker_processes_and_journaled_once(tmp_path, faults):
    faults({})
    journal, main, replica, _ = _pools(tmp_path)
    case = cases.select("quick.seed")[0]
    backend = runners.resolve_backend("faulty")
    options = SweepOptions(device="cuda", processes=2)  # the test backend never touches a GPU
    with main, replica:
        made = list(replicas.measure_slice(main, replica, "faulty", backend, case, backend.combos(case, options),
                                           options))
    recs = [Record.from_dict(d) for d in iter_journal(journal.path / JOURNAL_FILE)]
    assert [r.key() for r in recs] == [r.key() for r in made] and len(recs) == 4  # the replica journals nothing
    for r in recs:
        assert r.status == OK and r.time.n == 16 and len(r.extra["process_medians_ms"]) == 2, r
    # the two processes computed the same bits, except where the test backend's output names its process
    assert {r.algo: r.extra["fresh_process_equal"] for r in recs} == {"ok0": True, "ok1": True, "ok3": True,
                                                                       "ok2": False}


def test_a_replica_that_crashes_costs_the_replica_only(tmp_path, faults):
    faults({"quick.seed": "segv"})
    journal, main, replica, logs = _pools(tmp_path)
    case = cases.select("quick.seed")[0]
    backend = runners.resolve_backend("faulty")
    options = SweepOptions(device="cuda", processes=2)
    with main, replica:
        list(replicas.measure_slice(main, replica, "faulty", backend, case, backend.combos(case, options), options))
    by = {r.algo: r for r in (Record.from_dict(d) for d in iter_journal(journal.path / JOURNAL_FILE))}
    assert by["segv"].status == CRASHED and "SIGSEGV" in by["segv"].reason  # the main process's own crash record
    assert all(by[a].status == OK and "process_medians_ms" not in by[a].extra for a in ("ok0", "ok1", "ok2"))
    assert replica.failures[0][0] == "faulty quick.seed (replica)" and "SIGSEGV" in replica.failures[0][2]
    assert any("timed in one process" in line for line in logs)


def test_a_driver_replicates_only_isolated_cuda_slices_of_a_backend_that_can_time_alone():
    cudnn_like = type("B", (), {"replicable": True})()
    asked = SweepOptions(device="cuda", processes=2)
    assert replicas.effective(asked, cudnn_like, True).processes == 2
    assert replicas.effective(asked, cudnn_like, False).processes == 1  # in this process: one
    assert replicas.effective(asked, object(), True).processes == 1  # onnxruntime: one
    assert replicas.effective(SweepOptions(device="cpu", processes=2), cudnn_like, True).processes == 1
    assert replicas.replica_options(asked).timing_only and not replicas.replica_options(asked).rankings


def test_a_torch_timing_pass_computes_the_same_bits_and_no_accuracy():
    from harness.backends.pytorch import TorchBackend

    case = cases.select("quick.seed")[0]
    backend = TorchBackend()
    full_opts = SweepOptions(device="cpu", dtypes=("fp32",), layouts=("NCHW",),
                             timing=TimingPolicy(budget_ms=2.0, min_samples=8))
    combos = backend.combos(case, full_opts)
    full = list(backend.run(case, combos, full_opts))
    timed = list(backend.run(case, combos, replicas.replica_options(full_opts)))
    assert [r.status for r in timed] == [OK] * len(full)
    for f, t in zip(full, timed, strict=True):
        assert t.accuracy is None and t.time.n >= 3 and t.time.median_ms > 0
        assert t.determinism.hash == f.determinism.hash  # same inputs, same kernel, same bits


def test_a_change_must_clear_half_the_spread_of_either_sides_placements():
    """The 17:23 UTC two-process backward A/A on the H200 (fixture h200-aa7-bwd): backward-data ALGO_1 fp32 NHWC
    of layer4.0.downsample ran 1.05x slower, every B placement above every A one, but only 0.8 us above where B's
    own five spread 2.8 us; the same samples with the placements apart by more than half that are decided."""
    rng = np.random.default_rng(2)
    th = Thresholds()
    a_places, b_places = [0.05136, 0.051568, 0.051472, 0.051104, 0.050464], [0.052352, 0.055104, 0.05376,
                                                                                0.054048, 0.05392]
    base, head = _stored([0.051456, 0.05088], rng), _stored([0.053648, 0.053984], rng)
    base.extra["placement_medians_ms"], head.extra["placement_medians_ms"] = a_places, b_places
    v = time_verdict(base, head, th)
    assert v[0] == "ambiguous" and "only 0.8 µs apart where one side's spread 2.8 µs" in v[1]
    head.extra["placement_medians_ms"] = [x + 0.0006 for x in b_places]  # 1.4 us apart, over 2.8 / 2
    assert time_verdict(base, head, th)[0] == "regression"


def test_every_placement_moved_past_the_threshold_is_a_change_though_the_placements_overlap():
    """The A/A finding above moved its placements 1.02-1.07x one by one: not each past the 4 % threshold, so the
    close veto still holds. The same base with every placement 5 % slower, which leaves the two sides'
    placements overlapping (as an injected +5 % on a GEMM call whose placements spread 4-5 % does), is decided."""
    rng = np.random.default_rng(2)
    th = Thresholds()
    places = [0.05136, 0.051568, 0.053472, 0.051104, 0.050464]  # 6 % between the fastest and the slowest
    base, head = _stored([0.051456, 0.05088], rng), _stored([0.053648, 0.053984], rng)
    base.extra["placement_medians_ms"] = places
    head.extra["placement_medians_ms"] = [x * 1.05 for x in places]
    assert min(head.extra["placement_medians_ms"]) <= max(places)  # they overlap
    assert placements_moved(base, head, True, th.rel(base.median_ms))
    assert time_verdict(base, head, th)[0] == "regression"
    head.extra["placement_medians_ms"] = [x * 1.05 for x in places[:3]] + places[3:]  # one process at its own level
    assert not placements_moved(base, head, True, th.rel(base.median_ms))
    assert time_verdict(base, head, th)[0] == "ambiguous"
