"""What the asv runs on the H200 of 2026-11-29 recorded (tests/fixtures/README.md says how).

h200-fwd-asv (19:32 UTC, suite b716a3a): `convbench bench` of the forward classes; h200-bwd-asv (19:23 UTC, suite
b716a3a): the backward classes, complete, and `convbench repro` of every ok record in a fresh process;
h200-ort-asv (16:45 UTC, suite d5f972a): the onnxruntime grid through asv. Every expectation is derived from the
records, the catalogue or the suite's rules.
"""

from __future__ import annotations

import collections

import pytest
from _fleet_data import records_of, run_tarball, worded_today

from harness.backends.cudnn_determinism import (
    NONDETERMINISTIC_BUDGET_S,
    NONDETERMINISTIC_LONG_MIN_REPEATS,
    NONDETERMINISTIC_MIN_REPEATS,
    NONDETERMINISTIC_REPEATS,
)
from harness.backends.cudnn_lib import ALGOS, DOCUMENTED_NONDETERMINISTIC, MATH
from harness.core import cases
from harness.core.explain import TORCH_NONDETERMINISTIC, explain, nondeterminism_cause
from harness.core.records import OK
from harness.measurement.clocks import SLOWDOWN_REASONS

CUDA = "CUDAExecutionProvider"
CONV_NODES = {"model.resnet50": 53, "model.mobilenetv2": 52}  # torchvision's Conv layers (test_models checks)

@pytest.fixture(scope="module")
def bwd():
    return run_tarball("h200-bwd-asv")


def test_forward_asv_run_is_complete_and_every_combination_a_record():
    meta, end, recs = run_tarball("h200-fwd-asv")
    assert meta["fingerprint"]["gpu"]["name"] == "NVIDIA H200" and meta["suite_revision"] == "b716a3a"
    assert end["asv_returncode"] == 0 and end["sweep_seconds"] + end["asv_seconds"] == pytest.approx(end["seconds"], abs=0.2)
    assert end["ok"] == sum(1 for r in recs if r["kind"] == "measurement" and r["status"] == OK)
    cudnn = records_of(recs, backend="cudnn")
    want = {(c.id, a, m, d, lay) for c in cases.select("default") for a in ALGOS["fwd"] for m in MATH
            for d in ("fp32", "fp16", "bf16") for lay in ("NCHW", "NHWC")}
    assert {(r.case, r.algo, r.math, r.dtype, r.layout) for r in cudnn} == want
    assert all("wall_ms" in r.extra for r in cudnn)


def test_backward_every_combination_of_the_default_set_is_a_record(bwd):
    meta, end, recs = bwd
    assert meta["suite_revision"] == "b716a3a" and end["asv_returncode"] == 0
    cudnn = records_of(recs, backend="cudnn")
    want = {(c.id, dr, a, m, d, lay) for c in cases.select("default") for dr in ("bwd_data", "bwd_filter")
            for a in ALGOS[dr] for m in MATH for d in ("fp32", "fp16", "bf16") for lay in ("NCHW", "NHWC")}
    assert {(r.case, r.direction, r.algo, r.math, r.dtype, r.layout) for r in cudnn} == want
    assert all(r.status == OK or r.status.startswith("CUDNN_STATUS") for r in cudnn)
    ranked = {(r["case"], r["direction"], r["dtype"], r["layout"], r["math"], r["source"])
              for r in recs if r["kind"] == "ranking"}
    assert len(ranked) == len(cases.select("default")) * 2 * 3 * 2 * 4 * 2
    torch = records_of(recs, backend="torch")  # PyTorch's grid too, this time: 4 precisions x 2 layouts x 4 settings
    assert len({r.key() for r in torch}) == len(torch) == len(cases.select("default")) * 2 * 4 * 2 * 4
    assert end["ok"] == sum(1 for r in cudnn + torch if r.status == OK)


def test_documented_nondeterministic_algorithms_are_shown_and_no_others(bwd):
    _, _, recs = bwd
    ok = [r for r in records_of(recs, backend="cudnn") if r.status == OK]
    unstable = [r for r in ok if not (r.determinism.repeat_equal and r.determinism.fresh_handle_equal)]
    assert unstable and {(r.direction, r.algo) for r in unstable} <= DOCUMENTED_NONDETERMINISTIC
    for r in ok:
        documented = (r.direction, r.algo) in DOCUMENTED_NONDETERMINISTIC
        assert bool(r.extra.get("documented_nondeterministic")) == documented
        if documented:
            assert NONDETERMINISTIC_LONG_MIN_REPEATS <= r.determinism.repeats <= NONDETERMINISTIC_REPEATS
    # an unstable one stops once it has shown it (past the floor); a stable one runs all its repeats unless
    # they would cost more than the budget: fewer than the floor only where the floor itself would
    assert all(r.determinism.repeats < NONDETERMINISTIC_REPEATS for r in unstable)
    stable = [r for r in ok if r.extra.get("documented_nondeterministic") and r not in unstable]
    assert any(r.determinism.repeats < NONDETERMINISTIC_REPEATS for r in stable)
    budget_ms = NONDETERMINISTIC_BUDGET_S * 1e3
    for r in stable:
        if r.determinism.repeats < NONDETERMINISTIC_REPEATS:  # the budget stopped it (its device time, roughly)
            assert r.time.median_ms * (r.determinism.repeats + 1) > 0.5 * budget_ms
        if r.determinism.repeats < NONDETERMINISTIC_MIN_REPEATS:
            assert r.time.median_ms * NONDETERMINISTIC_MIN_REPEATS > budget_ms
    assert all("documented as non-deterministic" in r.explanation for r in unstable)
    assert all(worded_today(r.explanation) == explain(r) for r in ok)


def test_a_fresh_process_differs_only_where_the_sweep_already_saw_nondeterminism(bwd):
    _, _, recs = bwd
    sweep = {r.key(): r for r in records_of(recs) if r.status == OK}
    repro = records_of(recs, kind="repro")
    assert {r.key() for r in repro} == set(sweep)  # every ok record of both backends, replayed
    outcome = collections.Counter()
    for r in repro:
        m = sweep[r.key()]
        stable = m.determinism.repeat_equal and m.determinism.fresh_handle_equal is not False
        equal = r.extra["fresh_process_equal"]
        outcome[(stable, equal)] += 1
        if not equal:
            assert nondeterminism_cause(m), r.key()  # a documented cause, for cuDNN and PyTorch alike
        elif stable:
            assert r.determinism.hash == m.determinism.hash
    # never stable in the sweep yet different in another process; an unstable one may repeat the bits by chance
    assert outcome[(True, False)] == 0 and outcome[(True, True)] and outcome[(False, False)]


def test_torch_backward_is_reproducible_whenever_deterministic_is_set(bwd):
    _, _, recs = bwd
    torch = [r for r in records_of(recs, backend="torch") if r.status == OK]
    assert {r.direction for r in torch} == {"bwd_data", "bwd_filter"}
    unstable = [r for r in torch if not (r.determinism.repeat_equal and r.determinism.fresh_handle_equal is not False)]
    assert unstable and all(r.settings["deterministic"] is False for r in unstable)
    assert any(r.settings["deterministic"] is True for r in torch)
    # the suite names the cause, in the journal as in today's rules
    assert all(worded_today(r.explanation) == explain(r) and r.explanation.startswith(TORCH_NONDETERMINISTIC) for r in unstable)


def test_every_gpu_timing_says_what_clock_it_ran_at(bwd):
    for meta, _, recs in (run_tarball("h200-fwd-asv"), bwd):
        top = meta["fingerprint"]["gpu"]["clock_sm_max_mhz"]
        timed = [r for r in records_of(recs) if r.status == OK]
        assert timed and all(r.time.timer == "cuda_event" for r in timed)
        for r in timed:
            ck = r.time.clock
            assert 0 < ck["sm_mhz_min"] <= ck["sm_mhz_max"] <= top, r.key()
            assert set(ck["slowdowns"]) <= set(SLOWDOWN_REASONS.values())


@pytest.fixture(scope="module")
def ort():
    return run_tarball("h200-ort-asv")


def test_ort_grid_through_asv_is_complete(ort):
    meta, end, recs = ort
    assert meta["fingerprint"]["software"]["onnxruntime"] == "1.31.1" and end["asv_returncode"] == 0
    records = records_of(recs, backend="ort")
    keys = {(r.case, r.settings["provider"], r.settings.get("cudnn_conv_algo_search"), r.settings.get("use_tf32"),
             r.settings.get("cudnn_conv_use_max_workspace"), r.settings["io"]) for r in records}
    want = {(m, CUDA, s, t, w, io) for m in CONV_NODES for s in ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
            for t in (0, 1) for w in (0, 1) for io in ("iobinding", "numpy")}
    assert {k for k in keys if k[1] == CUDA} == want
    assert len(keys - want) == 2 * len(CONV_NODES)  # the CPU EP beside it, both io paths
    assert {r.status for r in records} == {OK} and end["ok"] == len(records)


def test_ort_every_conv_node_is_mapped_to_the_engine_it_ran(ort):
    _, _, recs = ort
    for r in records_of(recs, backend="ort"):
        if r.settings["provider"] != CUDA:
            continue
        nodes = r.extra["node_algos"]
        assert len(nodes) == CONV_NODES[r.case], r.key()
        counts = collections.Counter(v.split("_")[0] for v in nodes.values())
        assert r.chosen_algo == ",".join(f"{e}:{n}" for e, n in counts.most_common())
        if r.settings["cudnn_conv_algo_search"] == "DEFAULT":
            assert set(counts) == {"eng1"}  # heuristics FALLBACK on every node


def test_ort_no_setting_drifts_and_tf32_is_what_changes_the_bits(ort):
    _, _, recs = ort
    hashes = collections.defaultdict(set)
    for r in records_of(recs, backend="ort"):
        for d in r.extra["drift"].values():
            assert (d["in_process"]["distinct"], d["fresh_process"]["distinct"], d["all"]["distinct"]) == (1, 1, 1)
        if r.settings["provider"] == CUDA:
            hashes[(r.case, r.accuracy.precision_class)].add(r.determinism.hash)
    # per model one output for all fp32-class settings and one for the TF32 ones, whatever the search mode
    assert all(len(h) == 1 for h in hashes.values())
    assert {cls for _, cls in hashes} == {"fp32", "tf32"}


def test_the_backward_job_in_two_processes_fits_and_times_the_device():
    """The default backward job once two processes became its default (H200 GPU-01b22bfe, 2026-12-01 17:15 UTC,
    suite 9e5ccb3; docs/evidence/2026-12-01-h200-session13/): complete through asv within its 10 minutes, every
    timed record pooled from two processes, none host-bound or past issue 13's multi-modal shapes, and PyTorch's
    backward, now timed as its one op, dispatched in less host time than its device time on most records."""
    from pathlib import Path

    tarball = Path(__file__).resolve().parents[1] / "docs/evidence/2026-12-01-h200-session13/bwd-2proc-run.tar.gz"
    meta, end, recs = run_tarball(tarball)
    assert meta["suite_revision"] == "9e5ccb3" and meta["options"]["sweep"]["processes"] == 2
    assert end["asv_returncode"] == 0 and end["seconds"] < 600 and end["ok"] == 5080
    timed = [r for r in recs if r["kind"] == "measurement" and r["status"] == OK and r["time"]]
    assert len(timed) == 5080 and all(len(r["extra"]["process_medians_ms"]) == 2 for r in timed)
    for r in timed:
        t = r["time"]
        assert "host_bound" not in t["flags"] and t["median_ms"] / t["min_ms"] <= 1.5
        assert t["iqr_ms"] / t["median_ms"] <= 0.5
    torch = [r["time"] for r in timed if r["backend"] == "torch"]
    assert len(torch) == 1664 and sum(t["host_ms"] < t["median_ms"] for t in torch) > len(torch) / 2


def test_asv_results_of_a_real_forward_night_carry_every_record_s_samples(tmp_path):
    """h200-fwd-asv-samples (2026-12-03 16:02 UTC, lent H200, `scripts/gpu/nightly.sh fwd`): the suite's times are
    asv time benchmarks whose timer replays each record's device-event samples, so asv's own results file holds
    samples and quartiles for every ok record, and asv's value is their median."""
    import json
    import statistics
    import tarfile

    from _fleet_data import FIXTURES

    tarball = FIXTURES.parent / "asv" / "h200-fwd-asv-samples.tar.gz"  # apart from runs/: not a report fixture
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp_path, filter="data")
    (saved,) = [p for p in (tmp_path / "asv-results").rglob("*-convbench-py3.12.json")]
    data = json.loads(saved.read_text())
    cols = data["result_columns"]
    _meta, end, recs = run_tarball(tarball)
    assert end["asv_returncode"] == 0
    ok = collections.Counter(r["backend"] for r in recs if r["kind"] == "measurement" and r["status"] == OK)
    for name, backend in (("bench_cudnn.CudnnForward.time_conv", "cudnn"), ("bench_torch.TorchForward.time_conv",
                                                                             "torch")):
        entry = dict(zip(cols, data["results"][name], strict=False))
        with_samples = [(v, s) for v, s in zip(entry["result"], entry["samples"], strict=True) if s]
        assert len(with_samples) == ok[backend] > 0
        assert all(v == pytest.approx(statistics.median(s), rel=1e-9) for v, s in with_samples)
        assert sum(1 for q in entry["stats_q_25"] if q is not None) >= ok[backend]
