"""On a CUDA GPU: the ctypes cuDNN binding, the sweep, and the seed cross-check (skipped without CUDA)."""

from dataclasses import replace

import pytest
from _fleet_data import journal_lines

from harness.backends import SweepOptions
from harness.core import cases
from harness.core.records import OK
from harness.measurement.timing import TimingPolicy

pytestmark = pytest.mark.gpu
FAST = TimingPolicy(budget_ms=2.0, min_samples=3, max_samples=16)


def test_binds_the_cudnn_torch_loaded():
    import torch

    from harness.backends.cudnn import CudnnBackend

    lib = CudnnBackend().cudnn
    assert lib.version_int == torch.backends.cudnn.version()
    assert "libcudnn" in lib.path


def test_forward_combos_are_all_records_and_fma_is_fp32_class():
    from harness.backends.cudnn import CudnnBackend

    case = cases.get("quick.seed")
    opts = SweepOptions(dtypes=("fp32",), layouts=("NCHW",), timing=FAST, rankings=True)
    backend = CudnnBackend()
    out = list(backend.run(case, backend.combos(case, opts), opts))
    recs = [r for r in out if r.kind == "measurement"]
    assert len(recs) == 8 * 4
    ok = [r for r in recs if r.status == OK]
    assert ok and all(r.time.timer == "cuda_event" and r.time.median_ms > 0 for r in ok)
    assert all(r.status.startswith("CUDNN_STATUS") for r in recs if r.status != OK)
    fma = [r for r in ok if r.math == "FMA"]
    assert fma and all(r.accuracy.precision_class == "fp32" for r in fma)
    assert all(r.accuracy.unwritten == 0 for r in ok)
    assert {r.source for r in out if r.kind == "ranking"} == {"find", "get_v7"}


def test_seed_crosscheck_names_tf32_on_ampere_and_newer():
    import torch

    from harness.run.autotune import crosscheck

    rec = crosscheck(cases.get("seed.c8"))
    assert rec.extra["cudnn_fma_class"] == "fp32"
    if torch.cuda.get_device_capability() >= (8, 0) and rec.extra["torch_class"] == "tf32":
        assert "TF32" in rec.explanation and rec.extra["max_abs_delta"] > 0


def test_the_autotune_study_runs_every_stage_in_the_worker_pool(tmp_path):
    """`convbench autotune` without the command line: the crosscheck, the cudnnFind searches and K fresh
    cudnn.benchmark processes, each through the pool; resuming a finished study measures nothing again."""
    from harness.run import autotune_study

    seen = []
    journal, summary = autotune_study.run([cases.get("seed.c8")], 2, ("NCHW",), tmp_path, on_record=seen.append,
                                          log=lambda msg: None)
    assert sorted((r.kind, r.backend) for r in seen) == [("autotune", "cudnn")] * 2 + [("autotune", "torch")] * 2 + [
        ("crosscheck", "torch-vs-cudnn")]
    assert all(r.status == OK for r in seen) and summary["k"] == 2 and "worker_failures" not in summary
    assert all(len(r.extra["trials"]) == 2 for r in seen if r.kind == "autotune")
    _, again = autotune_study.run([], 2, ("NCHW",), tmp_path, resume=journal.path, on_record=seen.append)
    assert len(seen) == 5 and len(journal_lines(journal.path)) == 5


class CappedClock:
    """NVML as seen under a software power cap until the timer has judged ``capped`` batches by it (a batch the
    spacer check rejects reads the clock too, so the count is of judgements, not reads), then at full clock."""

    max_sm_mhz = 1980

    def __init__(self, capped):
        self.capped = capped

    def read(self):
        return (1785, 0x4) if self.capped > 0 else (1980, 0)

    def throttled(self, read):
        from harness.measurement.clocks import DeviceClock

        self.capped -= 1
        return DeviceClock.throttled(self, read)


@pytest.mark.parametrize("capped, discarded, flags", [(3, 3, []), (100, 8, ["throttled"])])
def test_batches_timed_under_a_clock_cap_are_discarded_then_flagged(capped, discarded, flags):
    """The real timer on a real call: batches the (scripted) NVML says ran capped are dropped and retaken after
    a pause; a cap that never lifts costs THROTTLE_MAX_DISCARDS batches, then the record says "throttled"."""
    import torch

    from harness.measurement.timing import FLOOR_SAMPLES, THROTTLE_MAX_DISCARDS, CudaTimer

    x = torch.randn(1 << 20, device="cuda")
    # at least the floor's samples: FAST's minimum of 3 lets a tight call stop below it, flagged few_samples
    timer = CudaTimer(replace(FAST, min_samples=FLOOR_SAMPLES))
    timer.clock = CappedClock(capped)
    t = timer(lambda: x.mul_(1.0))
    assert THROTTLE_MAX_DISCARDS == 8
    assert t.clock["throttled_batches"] == discarded and t.flags == flags
    assert t.clock["slowdowns"] == (["sw_power_cap"] if flags else []) and t.n >= FLOOR_SAMPLES


@pytest.mark.parametrize("direction", ["bwd_data", "bwd_filter"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_the_timed_backward_is_autograds_gradient_on_the_gpu(direction, layout):
    """On cuDNN with deterministic algorithms (both calls then pick the same one), bit for bit."""
    import torch
    from test_accuracy import _timed_backward_against_autograd

    from harness.measurement import accuracy

    saved = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True
    try:
        got, want = _timed_backward_against_autograd("cuda", "fp16", layout, "resnet50.layer2.0.conv2.n32",
                                                     direction)
    finally:
        torch.backends.cudnn.deterministic = saved
    assert got.shape == want.shape and accuracy.bitwise_equal(got.contiguous(), want.contiguous())


def test_cudnn_answers_asked_ahead_are_the_ones_the_slice_would_have_asked():
    """The next case's workspaces and rankings asked while the other process measures (CudnnBackend.ahead): the
    slice takes every one of them, and its records and rankings are those of a slice that asked them itself."""
    from dataclasses import replace

    from harness.backends import cudnn_queries
    from harness.backends.cudnn import CudnnBackend

    case = cases.get("quick.seed")
    opts = SweepOptions(directions=("fwd", "bwd_data", "bwd_filter"), dtypes=("fp16",), layouts=("NHWC",),
                        timing=FAST, repeats=1)
    backend = CudnnBackend()
    combos = backend.combos(case, opts)

    def slice_() -> tuple[dict, list]:
        made = list(backend.run(case, combos, opts))
        recs = {r.key(): (r.status, r.reason, r.workspace_bytes) for r in made if r.kind == "measurement"}
        ranks = [r for r in made if r.kind == "ranking" and r.source == "get_v7"]
        return recs, [(r.direction, r.dtype, r.math, r.rank, r.algo, r.status, r.memory_bytes, r.determinism,
                       r.math_reported) for r in ranks]

    cudnn_queries._answers.clear()
    asked_now = slice_()
    list(backend.ahead(case, len(combos), replace(opts, timing_only=True)))
    asked = set(cudnn_queries._answers)
    assert asked and all(k[6] == cudnn_queries.WORKSPACE for k in asked)  # a timing-only replica ranks nothing
    list(backend.ahead(case, len(combos), opts))
    assert {k[6] for k in cudnn_queries._answers} == {cudnn_queries.WORKSPACE, cudnn_queries.GET_V7}
    asked_ahead = slice_()
    assert cudnn_queries._answers == {}  # every answer was taken
    assert asked_ahead == asked_now and asked_now[1]


def test_a_slice_that_takes_refusals_asked_ahead_gives_its_device_memory_back():
    """A cuDNN slice frees its sessions' device buffers as it ends, refusals asked ahead included, without
    the garbage collector: a kept refusal raised again held its sessions in a cycle, a process held 44 GiB
    between its slices and the other one ran out of device memory (cudnn_queries.Refused)."""
    import gc

    import torch

    from harness.backends.cudnn import CudnnBackend

    case = cases.get("quick.seed")
    opts = SweepOptions(directions=("bwd_data",), dtypes=("fp32",), layouts=("NCHW",), timing=FAST, repeats=1)
    backend = CudnnBackend()
    combos = backend.combos(case, opts)
    list(backend.run(case, combos, opts))  # what stays for good (hash multipliers, handles) is made once
    before = torch.cuda.memory_allocated()
    list(backend.ahead(case, len(combos), opts))
    gc.disable()
    try:
        recs = [r for r in backend.run(case, combos, opts) if r.kind == "measurement"]
        assert any(r.status == OK for r in recs) and any(r.status.startswith("CUDNN_STATUS") for r in recs)
        assert torch.cuda.memory_allocated() == before
    finally:
        gc.enable()


def test_the_determinism_check_takes_the_fresh_handles_made_ahead():
    """A process that checks determinism makes the next slice's fresh handles while it waits (CudnnBackend.ahead);
    each checked combination takes one, and a handle made ahead gives the bits a new one gives."""
    from dataclasses import replace

    from harness.backends import cudnn_lib as cudnn
    from harness.backends.cudnn import CudnnBackend

    case = cases.get("quick.seed")
    opts = SweepOptions(dtypes=("fp32",), layouts=("NCHW",), timing=FAST)
    backend = CudnnBackend()
    combos = backend.combos(case, opts)
    cudnn._fresh_handles.clear()
    list(backend.ahead(case, len(combos), replace(opts, timing_only=True)))
    assert cudnn._fresh_handles == []  # a timing-only replica checks no determinism
    list(backend.ahead(case, len(combos), opts))
    made = list(cudnn._fresh_handles)
    assert len(made) == len(combos)
    recs = [r for r in backend.run(case, combos, opts) if r.kind == "measurement"]
    checked = [r for r in recs if r.status == OK]
    assert checked and len(cudnn._fresh_handles) == len(made) - len(checked)
    assert all(h.ptr for h in cudnn._fresh_handles)  # the ones left are open, not closed by a check
    stable = [r for r in checked if not r.extra.get("documented_nondeterministic")]
    assert stable and all(r.determinism.fresh_handle_equal is True for r in stable)


def test_a_run_of_two_processes_checks_the_fresh_handle_in_the_replica():
    """Timed in two processes, the main process runs no fresh handle (cudnn_determinism) and makes none ahead;
    the replica's checked run, in its own handle, answers fresh_handle_equal once merged (run/replicas.py)."""
    from harness.backends import cudnn_lib as cudnn
    from harness.backends.cudnn import CudnnBackend
    from harness.run import replicas

    case = cases.get("quick.seed")
    opts = SweepOptions(dtypes=("fp32",), layouts=("NCHW",), timing=FAST.share(2), processes=2)
    backend = CudnnBackend()
    combos = backend.combos(case, opts)
    cudnn._fresh_handles.clear()
    list(backend.ahead(case, len(combos), opts))
    assert cudnn._fresh_handles == []
    main = {r.key(): r for r in backend.run(case, combos, opts) if r.kind == "measurement" and r.status == OK}
    assert main and all(r.determinism.fresh_handle_equal is None for r in main.values())
    replica = {r.key(): r for r in backend.run(case, combos, replicas.replica_options(opts)) if r.kind == "measurement"}
    merged = [replicas.merge(rec, replica.get(key), 64, fresh_handle_in_replica=backend.fresh_handle_in_replica)
              for key, rec in main.items()]
    stable = [r for r in merged if not r.extra.get("documented_nondeterministic")]
    assert stable and all(r.determinism.fresh_handle_equal is True and r.determinism.distinct_outputs == 1
                          for r in stable)
    assert all(r.determinism.fresh_handle_equal == r.extra["fresh_process_equal"] for r in merged)


def test_the_repeats_warm_every_placement_the_process_times():
    """The determinism repeats go round this process's placements (cudnn.ConvSession.measure): the timer is
    handed every placement as warmed, with the repeats' timings, and runs no warm-up call of its own on them;
    a deterministic algorithm gives the first output's bits on every placement."""
    from harness.backends.cudnn import CudnnBackend, placements
    from harness.measurement.timing import CudaTimer

    case = cases.get("quick.seed")
    opts = SweepOptions(dtypes=("fp32",), layouts=("NCHW",), timing=FAST, processes=2)
    handed = []
    timer_call = CudaTimer.__call__

    def spy(self, fn, warmed=0, seen=()):
        handed.append((len(fn), warmed, list(seen)))
        return timer_call(self, fn, warmed=warmed, seen=seen)

    CudaTimer.__call__ = spy
    try:
        backend = CudnnBackend()
        recs = [r for r in backend.run(case, backend.combos(case, opts), opts) if r.kind == "measurement"]
    finally:
        CudaTimer.__call__ = timer_call
    checked = [r for r in recs if r.status == OK]
    assert checked and len(handed) == len(checked)
    for rec, (n, warmed, seen) in zip(checked, handed, strict=True):
        assert n == placements(opts) == 3
        assert warmed == min(n, 1 + rec.determinism.repeats) and len(seen) == rec.determinism.repeats
        assert all(host > 0 and device > 0 for host, device in seen)
    stable = [r for r in checked if not r.extra.get("documented_nondeterministic")]
    assert stable and all(r.determinism.repeat_equal is True and r.determinism.distinct_outputs == 1 for r in stable)
