"""rollup: settings variants of one call collapsed, findings grouped, and the net line that reconciles the gate's
counts with the geometric mean; shown on the index and the changes page."""

import json
import math
from types import SimpleNamespace

import pytest
from _fleet_data import FIXTURES

from harness.analysis import rollup
from harness.collect.ingest import collect
from harness.collect.store import Store
from harness.core.records import Determinism, Record, Timing
from harness.report import build


def _f(key, settings, ratio=1.2, verdict="regression", kind="time", algo="auto", backend="torch"):
    words = {"regression": "slower", "improvement": "faster"}.get(verdict, verdict)
    return SimpleNamespace(kind=kind, verdict=verdict, words=words, key=key, case="c", backend=backend,
                           direction="fwd", algo=algo, math="TF32", dtype="fp32", layout="NCHW", settings=settings,
                           ratio=ratio, delta_us=(ratio - 1) * 100)


def _r(ms, h="aa"):
    return Record("c", "torch", "fwd", "auto", "TF32", "fp32", "NCHW", time=Timing(ms, 0.0, 9, "hot", "cuda_event"),
                  determinism=Determinism(h, "h", None, None, None, None))


def test_variants_with_the_same_bits_and_times_are_one_row():
    fs = [_f("k1", {"benchmark": True}), _f("k2", {"benchmark": False}), _f("k3", {"deterministic": True}),
          _f("k4", {"deterministic": False})]
    base = {"k1": _r(0.1), "k2": _r(0.101), "k3": _r(0.1, "bb"), "k4": _r(0.2)}
    head = {"k1": _r(0.12), "k2": _r(0.1205), "k3": _r(0.12, "bb"), "k4": _r(0.24)}
    rows = rollup.collapse(fs, base, head)
    assert [(rep.key, [v.key for v in vs]) for rep, vs in rows] == [("k1", ["k1", "k2"]), ("k3", ["k3"]),
                                                                      ("k4", ["k4"])]


def test_groups_and_the_net_line():
    fs = [_f("a", {}, 1.2, algo="GEMM", backend="cudnn"), _f("b", {}, 1.4, algo="GEMM", backend="cudnn"),
          _f("c", {}, 0.5, "improvement", algo="FFT", backend="cudnn"), _f("d", {}, 1.3, "ambiguous")]
    [slow, fast] = rollup.groups(fs)
    assert (slow["words"], slow["n"], slow["max_ratio"]) == ("slower", 2, 1.4)
    assert slow["median_ratio"] == pytest.approx(1.3) and slow["median_delta_us"] == pytest.approx(30)
    assert (fast["words"], fast["max_ratio"]) == ("faster", 0.5)
    base = {k: _r(1.0) for k in "abcde"}
    head = {"a": _r(1.2), "b": _r(1.4), "c": _r(0.5), "d": _r(1.3), "e": _r(1.0)}
    n = rollup.net(fs, base, head, 2)
    assert (n["timed"], n["slower"], n["faster"], n["undecided"], n["unchanged"]) == (5, 2, 1, 1, 1)
    assert n["geomean"] == pytest.approx(math.exp(sum(map(math.log, (1.2, 1.4, 0.5, 1.3))) / 5))
    line = rollup.net_line(n)
    assert line.startswith("5 combinations timed on both sides: 2 slower, 1 faster, 1 unchanged, 1 undecided; "
                           "2 finding(s) fail the gate; geometric mean")


def test_the_pages_show_the_net_line_and_the_groups(tmp_path):
    from _report_data import next_night, unpack

    if not (FIXTURES / "h200-fwd-asv.tar.gz").exists():
        pytest.skip("fixture not committed")
    base = unpack("h200-fwd-asv", tmp_path / "base")
    head, changed = next_night(base, tmp_path / "next", slower=1.5)
    db = tmp_path / "s.sqlite"
    assert not collect(db, [base, head]).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert "Net:</b>" in index and "1 slower, 0 faster" in index
    [page] = (tmp_path / "site" / "changes").glob("*.html")
    text = page.read_text()
    assert 'id="c0-groups"' in text and f"<td>{changed['algo']}</td>" in text
    assert json.loads((head / "run.json").read_text())["run_id"]
