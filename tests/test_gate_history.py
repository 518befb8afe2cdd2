"""The gate night over night on eight real forward runs of one stack on one H200 (2026-12-01 06:45-06:51 UTC,
GPU-94c564b6, six cases, `nightly.sh repeat`): with each base's earlier runs as history, as `convbench compare
--store` and the report judge, no pair of the eight fails; without the known-level rule (past_level) five do.
The rule was written after seeing those runs; eight more of another H200 (GPU-990e118d of another host,
09:53-09:59 UTC, made after the rule) are its out-of-sample check: 0 of 28 pairs fail with it, 3 without."""

import itertools
from pathlib import Path

import pytest

from harness.analysis import timechange
from harness.analysis.compare import compare_runs, gate
from harness.analysis.timechange import Thresholds
from harness.collect.ingest import read_runs_into
from harness.collect.store import Store

RUNS = Path(__file__).parent / "fixtures" / "runs"


def _nights(name: str):
    store = Store(":memory:")
    read_runs_into(store, [RUNS / f"{name}.tar.gz"])
    runs = sorted(store.runs(), key=lambda r: r["started"])
    return [store.records(r["id"]) for r in runs]


@pytest.fixture(scope="module")
def nights():
    return _nights("h200-repeat8-fwd")


@pytest.fixture(scope="module")
def later_nights():
    return _nights("h200x2-repeat8-fwd")


def failing_pairs(nights) -> list[tuple[int, int, list[str]]]:
    out = []
    for i, j in itertools.combinations(range(len(nights)), 2):
        found = gate(compare_runs(nights[i], nights[j], Thresholds(), nights[max(0, i - 5):i]), Thresholds())
        if found:
            out.append((i, j, sorted({f"{f.case} {f.algo} {f.math} {f.dtype}" for f in found})))
    return out


def test_eight_nights_of_one_stack_fail_no_pair_with_their_history(nights):
    assert len(nights) == 8 and all(len(n) == len(nights[0]) for n in nights)
    assert failing_pairs(nights) == []


def test_a_base_at_a_rare_level_fails_later_nights_without_the_known_level_rule(nights, monkeypatch):
    # the second night (index 1) drew 415 us in both processes for a GEMM at 433-446 us in every other run
    monkeypatch.setattr(timechange, "LEVEL_MATCH", 0.0)
    failing = failing_pairs(nights)
    assert {(i, j) for i, j, _ in failing} == {(1, 2), (1, 3), (1, 4), (1, 5), (1, 6)}
    assert {k for *_, keys in failing for k in keys} == {"resnet50.layer3.0.conv2.n32 GEMM TENSOR_OP fp16"}


def test_eight_later_nights_of_another_gpu_fail_no_pair_out_of_sample(later_nights, monkeypatch):
    # made after the rule was written: the same GEMM family drew its low level in night 3 (index 3)
    assert len(later_nights) == 8 and all(len(n) == len(later_nights[0]) for n in later_nights)
    assert failing_pairs(later_nights) == []
    monkeypatch.setattr(timechange, "LEVEL_MATCH", 0.0)
    failing = failing_pairs(later_nights)
    assert {(i, j) for i, j, _ in failing} == {(3, 5), (3, 6), (3, 7)}
    assert {k for *_, keys in failing for k in keys} == {"resnet50.layer3.0.conv2.n32 GEMM FMA fp16"}
