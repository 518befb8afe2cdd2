"""The gate night over night on eight real forward runs of one stack on one H200 (2026-12-01 06:45-06:51 UTC,
GPU-94c564b6, six cases, `nightly.sh repeat`): with each base's earlier runs as history, as `convbench compare
--store` and the report judge, no pair of the eight fails; without the known-level rule (past_level) five do."""

import itertools
from pathlib import Path

import pytest

from harness.analysis import timechange
from harness.analysis.compare import compare_records, gate
from harness.analysis.timechange import Thresholds
from harness.collect.ingest import read_runs_into
from harness.collect.store import Store

FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "h200-repeat8-fwd.tar.gz"


@pytest.fixture(scope="module")
def nights():
    store = Store(":memory:")
    read_runs_into(store, [FIXTURE])
    runs = sorted(store.runs(), key=lambda r: r["started"])
    return [store.records(r["id"]) for r in runs]


def failing_pairs(nights) -> list[tuple[int, int, list[str]]]:
    out = []
    for i, j in itertools.combinations(range(len(nights)), 2):
        found = gate(compare_records(nights[i], nights[j], Thresholds(), nights[max(0, i - 5):i]), Thresholds())
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
