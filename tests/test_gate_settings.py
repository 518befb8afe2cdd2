"""The gate's settings: one Thresholds, checked once, from flags, a --gate-file or ./pyproject.toml's
[tool.convbench.gate], the same for compare, report and upgrade; the report names the settings it judged with;
a run read straight from its directory gives the records the store gives."""

import datetime as dt
from dataclasses import replace

import numpy as np
import pytest
from _fleet_data import noisy, record, write_run

from harness import cli
from harness.analysis.findings import Finding, FindingKind
from harness.analysis.thresholds import Thresholds, load, settings_lines
from harness.collect.discovery import discover
from harness.collect.ingest import collect, parse_item
from harness.collect.runread import read_run, records_of
from harness.collect.store import Store
from harness.core.errors import UserError

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "runs"


def _slower_pair(tmp_path):
    write_run(tmp_path / "r", "m1", "imgA", T0, [record("t", samples=noisy(1.0, seed=1), median=1.0)], run_id="base")
    write_run(tmp_path / "r", "m1", "imgB", T0 + dt.timedelta(days=1),
              [record("t", samples=noisy(1.25, seed=2), median=1.25)], run_id="head")
    return str(tmp_path / "r" / "m1" / "base"), str(tmp_path / "r" / "m1" / "head")


def test_a_gate_file_sets_what_the_flags_set_and_a_flag_wins(tmp_path, capsys, monkeypatch):
    b, h = _slower_pair(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compare", b, h]) == 1  # 25 % slower fails the calibrated gate
    gate = tmp_path / "gate.toml"
    gate.write_text("time-threshold = 1.5\n")
    assert cli.main(["compare", b, h, "--gate-file", str(gate)]) == 0
    assert cli.main(["compare", b, h, "--gate-file", str(gate), "--time-threshold", "1.1"]) == 1
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.convbench.gate]\nignore = ["time"]\n')
    assert cli.main(["compare", b, h]) == 0  # ./pyproject.toml's table, read without a flag
    gate.write_text('[tool.convbench.gate]\nalpha = 0.05\n')  # a gate file replaces pyproject's table
    assert cli.main(["compare", b, h, "--gate-file", str(gate)]) == 1
    capsys.readouterr()


@pytest.mark.parametrize("text, words", [("time_threshold = 0.9\n", "--time-threshold 0.9 is outside"),
                                         ("speed = 2\n", "'speed' is not a gate setting"),
                                         ("bitwise = 1\n", "bitwise must be true or false"),
                                         ('ignore = ["colour"]\n', "'colour' is not a kind of finding"),
                                         ("alpha = [\n", "not TOML")])
def test_a_meaningless_gate_file_is_a_usage_error(tmp_path, capsys, text, words):
    b, h = _slower_pair(tmp_path)
    gate = tmp_path / "gate.toml"
    gate.write_text(text)
    assert cli.main(["compare", b, h, "--gate-file", str(gate)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert cli.main(["report", "--store", str(tmp_path / "none.sqlite"), "--out", str(tmp_path / "site"),
                     "--gate-file", str(gate)]) == 2  # refused before any store is read
    assert words in capsys.readouterr().err


def test_load_orders_defaults_file_flags_and_checks_once(tmp_path):
    assert load() == Thresholds()
    gate = tmp_path / "g.toml"
    gate.write_text("abs_us = 3\nallow-lost-coverage = true\n")
    th = load(gate, lost_coverage_fails=True, alpha=0.05)
    assert (th.abs_us, th.alpha, th.lost_coverage_fails) == (3.0, 0.05, False)
    assert load(lost_coverage_fails=True).lost_coverage_fails
    with pytest.raises(UserError, match="--alpha 0.5 is outside"):
        load(alpha=0.5)
    assert "x1.5" in settings_lines(Thresholds(time_ratio=1.5))[0]
    assert "+10% below 20 us" in settings_lines(Thresholds())[0]


def test_the_report_names_the_settings_it_judged_with(tmp_path, capsys):
    _slower_pair(tmp_path)
    db = str(tmp_path / "s.sqlite")
    collect(db, [tmp_path / "r"])
    assert cli.main(["report", "--store", db, "--out", str(tmp_path / "site"), "--time-threshold", "1.5",
                     "--bitwise"]) == 0
    index = (tmp_path / "site" / "index.html").read_text()
    assert "one time threshold x1.5 for every call" in index and "changed output bits fail" in index
    capsys.readouterr()


def test_findings_carry_their_kind_and_bits_as_fields():
    f = Finding(FindingKind.DETERMINISM, "change", "k", "c", "cudnn", "fwd", "A", "M", "float32", "NCHW", {},
                "a", "b", "words that say nothing of bits", bits=True, expected="documented")
    assert f.judged_kind == "expected bits" and f.to_dict()["kind"] == "determinism"
    f.expected = None
    assert f.judged_kind == "bits"


def _same(a, b):
    """Two record lists equal field by field (samples as arrays; the combination's id is the store's own)."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert (x.time is None) == (y.time is None)
        if x.time is not None:
            assert np.array_equal(x.time.samples_ms, y.time.samples_ms)
            x, y = (replace(r, time=replace(r.time, samples_ms=None)) for r in (x, y))
        assert x == y and x.combo_key == y.combo_key


def test_a_run_read_from_its_directory_gives_the_records_the_store_gives(tmp_path):
    b, _ = _slower_pair(tmp_path)
    db = str(tmp_path / "s.sqlite")
    collect(db, [tmp_path / "r"])
    run, recs = read_run(b)
    with Store(db, create=False) as s:
        (stored,) = [r for r in s.runs() if r["run_id"] == "base"]
        _same(recs, s.records(stored["id"]))
    assert run["run_id"] == "base"
    # the committed A/A study: packed copies and journals alike
    db2 = str(tmp_path / "aa.sqlite")
    tar = FIXTURES / "h200-aa-fwd.tar.gz"
    collect(db2, [tar])
    parsed = [p for item in discover([tar]) for p in parse_item(None, item).parsed]
    with Store(db2, create=False) as s:
        by_id = {r["run_id"]: r for r in s.runs()}
        assert len(parsed) == len(by_id) == 2
        for p in parsed:
            _same(records_of(p), s.records(by_id[p.run["run_id"]]["id"]))
