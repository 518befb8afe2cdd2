"""What the real H200 runs (tests/fixtures/runs, see its README) show, checked from the records themselves.

These are the suite's answers to the two seed reports and the coverage the issues promise; every
expectation is derived from the records or from the catalogue, none is typed in from a reading of them.
"""

import collections

import pytest
from _fleet_data import records_of, run_tarball, worded_today

from harness.backends.cudnn_lib import ALGOS, MATH
from harness.core import cases
from harness.core.explain import explain
from harness.core.records import OK


def _load(name: str) -> tuple[dict, list[dict]]:
    meta, _, recs = run_tarball(name)
    return meta, recs


@pytest.fixture(scope="module")
def fwd():
    return _load("h200-fwd-default")


def test_fingerprint_is_the_h200_and_the_loaded_cudnn(fwd):
    meta, _ = fwd
    gpu = meta["fingerprint"]["gpu"]
    assert gpu["name"] == "NVIDIA H200" and gpu["sm"] == "9.0"
    lib = meta["fingerprint"]["libraries"]["cudnn"]
    assert lib["version"] == "9.19.0" and lib["path"].endswith("libcudnn.so.9")
    assert meta["fingerprint"]["software"]["torch"].startswith("2.11")


def test_every_forward_combination_of_the_default_set_is_a_record(fwd):
    _, recs = fwd
    cudnn = records_of(recs, backend="cudnn")
    want = {(c.id, a, m, d, lay) for c in cases.select("default") for a in ALGOS["fwd"] for m in MATH
            for d in ("fp32", "fp16", "bf16") for lay in ("NCHW", "NHWC")}
    assert {(r.case, r.algo, r.math, r.dtype, r.layout) for r in cudnn} == want
    assert all(r.status == OK or r.status.startswith("CUDNN_STATUS") for r in cudnn)
    ok = [r for r in cudnn if r.status == OK]
    assert all(r.time.timer == "cuda_event" and r.time.n >= 7 for r in ok)
    assert all(r.accuracy.unwritten == 0 and r.determinism.repeat_equal for r in ok)
    ranked = {(r["case"], r["dtype"], r["layout"], r["math"], r["source"]) for r in recs if r["kind"] == "ranking"}
    assert len(ranked) == len(cases.select("default")) * 3 * 2 * 4 * 2


def test_seed_report_1_tf32_explains_the_difference(fwd):
    _, recs = fwd
    seed = records_of(recs, case="seed.c64", dtype="fp32", layout="NCHW")
    torch_default = [r for r in seed if r.backend == "torch" and r.settings.get("tf32") is True]
    fma = [r for r in seed if r.backend == "cudnn" and r.math == "FMA" and r.status == OK]
    assert torch_default and fma
    worst_fma = max(r.accuracy.max_abs for r in fma)
    for r in torch_default:
        assert r.accuracy.precision_class == "tf32" and "TF32" in r.explanation
        assert r.accuracy.max_abs > 10 * worst_fma  # the 0.04-class difference vs fp32-class FMA error
    assert all(r.accuracy.precision_class == "fp32" and r.explanation is None for r in fma)
    ieee = [r for r in seed if r.backend == "torch" and r.settings.get("tf32") is False]
    assert ieee and all(r.accuracy.precision_class == "fp32" for r in ieee)


def test_crosscheck_record_answers_seed_report_1_directly():
    _, recs = _load("h200-autotune")
    cross = [r for r in recs if r["kind"] == "crosscheck" and r["case"] == "seed.c64"]
    assert len(cross) == 1
    c = cross[0]
    assert c["extra"]["torch_class"] == "tf32" and c["extra"]["cudnn_fma_class"] == "fp32"
    assert c["extra"]["max_abs_delta"] > 0.01 and "TF32" in c["explanation"]


def test_autotuner_flips_between_numerically_different_algorithms():
    _, recs = _load("h200-autotune")
    tuned = records_of(recs, kind="autotune")
    find = [r for r in tuned if r.settings.get("search") == "cudnnFind"]
    assert len(find) == len(cases.select("default")) * 2  # DEFAULT and FMA math, NCHW
    flips = [r for r in find if len(r.extra["winners"]) > 1 and r.determinism.distinct_outputs > 1]
    assert flips, "no case flipped between numerically different winners"
    for r in flips:
        assert "different algorithms across sessions" in r.explanation
        assert r.extra["max_abs_spread"] > 0
    ties = [t for r in find for t in r.extra["near_ties"]]
    assert all(t["gap"] <= 0.05 and t["winner"] != t["runner_up"] for t in ties)
    assert all(len(r.extra["trials"]) == 5 for r in find)


def test_fresh_process_reproduces_every_forward_output(fwd):
    _, recs = fwd
    repro = [r for r in recs if r["kind"] == "repro"]
    ok = [r for r in recs if r["kind"] == "measurement" and r["status"] == OK]
    assert len(repro) == len(ok)
    assert all(r["extra"]["fresh_process_equal"] is True for r in repro)


def test_every_unexpected_record_carries_an_explanation(fwd):
    recs = fwd[1] + _load("h200-bwd-asv")[1]
    for r in records_of(recs):
        unexpected = r.status != OK or (r.accuracy and r.accuracy.precision_class not in
                                        (cases.expected_class(r.dtype), "fp32"))
        if unexpected:
            assert r.explanation, r.key()
        assert worded_today(r.explanation) == explain(r)  # what was journaled is what the rules say today


def test_precision_classes_separate_on_real_data(fwd):
    _, recs = fwd
    fp32 = [r for r in records_of(recs, dtype="fp32") if r.status == OK]
    by_class = collections.defaultdict(list)
    for r in fp32:
        by_class[r.accuracy.precision_class].append(r.accuracy.rel_l2)
    assert set(by_class) == {"fp32", "tf32"}
    # the two regimes are an order of magnitude or more apart, not neighbours across a threshold
    assert max(by_class["fp32"]) * 10 < min(by_class["tf32"])
