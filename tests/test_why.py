"""why.time_cause: every time finding names its cause from the two records' evidence, never from a record's
accuracy note; the CLI prints the same words."""

import json

import pytest
from _fleet_data import FIXTURES

from harness.analysis import paired_judgement as judgement
from harness.analysis.compare import compare_runs
from harness.analysis.why import time_cause
from harness.collect.ingest import collect
from harness.collect.store import Store
from harness.core.records import Accuracy, Determinism, Record, Timing


def _rec(median_ms=1.0, hash="aa", precision_class="tf32", chosen_algo=None, extra=None, clock=None):
    return Record("c", "cudnn", "fwd", "A", "DEFAULT", "fp32", "NCHW",
                  time=Timing(median_ms, 0.0, 9, "hot", "cuda_event", clock=clock),
                  accuracy=Accuracy(None, None, None, None, None, None, precision_class),
                  determinism=Determinism(hash, "sha256", None, None, None, None), chosen_algo=chosen_algo,
                  extra={"process_medians_ms": [1.0, 1.01]} if extra is None else extra)


def test_same_bits_name_the_library_other_bits_name_the_engines():
    assert time_cause(_rec(), _rec(median_ms=1.2)).startswith(
        "same kernel (output bits unchanged): the library made it slower")
    assert "made it faster" in time_cause(_rec(), _rec(median_ms=0.8))
    moved = time_cause(_rec(chosen_algo="GEMM"), _rec(hash="bb", chosen_algo="FFT", median_ms=1.2))
    assert moved == "another engine/algorithm was chosen (output bits changed) (GEMM -> FFT)"
    assert "precision class changed (fp32 -> tf32)" in time_cause(_rec(precision_class="fp32"),
                                                                  _rec(hash="bb", median_ms=1.2))


def test_a_capped_clock_and_one_process_are_said():
    capped = {"slowdowns": ["sw_power_cap"]}
    why = time_cause(_rec(), _rec(median_ms=1.2, extra={"process_medians_ms": [1.0, 1.0]}, clock=capped))
    assert why.startswith("the GPU's clock was capped on the head side (sw_power_cap)")
    one = time_cause(_rec(extra={}), _rec(median_ms=1.2))
    assert one.endswith("base timed in one process: the spread between processes is unknown")


@pytest.fixture(scope="module")
def upgrade_store(tmp_path_factory):
    tar = FIXTURES / "h200-upgrade-cudnn927-fwd.tar.gz"
    if not tar.exists():
        pytest.skip("fixture not committed")
    db = tmp_path_factory.mktemp("why") / "s.sqlite"
    assert not collect(db, [tar]).refused
    return db


def test_no_time_finding_of_a_real_upgrade_quotes_an_accuracy_note(upgrade_store):
    """cuDNN 9.19 -> 9.27 on an H200: the TF32 note of an fp32 record is no cause of its slowdown."""
    with Store(upgrade_store) as s:
        [study] = judgement.studies(s)
    times = [f for leg in study["legs"].values() for f in leg["findings"] if f.kind == "time"]
    assert times
    assert not any("TF32 tensor-core" in (f.explanation or "") for f in times)
    same = [f for f in times if "same kernel" in f.explanation]
    moved = [f for f in times if "another engine" in f.explanation]
    assert same and moved and all(f.explanation for f in times)


def test_compare_prints_the_cause(tmp_path, capsys):
    from _report_data import next_night, unpack

    from harness import cli

    if not (FIXTURES / "h200-fwd-asv.tar.gz").exists():
        pytest.skip("fixture not committed")
    base = unpack("h200-fwd-asv", tmp_path / "base")
    head, changed = next_night(base, tmp_path / "next", slower=1.5)
    db = tmp_path / "s.sqlite"
    assert not collect(db, [base, head]).refused
    ids = [json.loads((d / "run.json").read_text())["run_id"] for d in (base, head)]
    capsys.readouterr()
    assert cli.main(["compare", *ids, "--store", str(db)]) == 1
    out = capsys.readouterr().out
    assert "why: same kernel (output bits unchanged): the library made it slower" in out
    with Store(db) as s:
        runs = s.runs()
        fs = compare_runs(s.records(runs[0]["id"]), s.records(runs[1]["id"]))
    [f] = [f for f in fs if f.kind == "time" and f.verdict == "regression"]
    assert f.case == changed["case"] and f.explanation.startswith("same kernel")
