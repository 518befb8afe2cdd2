"""The upgrade page opens with one verdict per stack pair over its studies and GPUs, folds A/A studies under
calibration, and sorts accuracy findings by severity, class changes first."""

import html
import re
from types import SimpleNamespace

import pytest
from _fleet_data import FIXTURES

from harness.collect.ingest import collect
from harness.collect.store import Store
from harness.report import build
from harness.report.upgrade import accuracy_order


def _text(page):
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def test_accuracy_findings_class_changes_first_the_largest_step_first():
    def f(key, base, head, ev, verdict="regression", ratio=None):
        return SimpleNamespace(key=key, base=base, head=head, evidence=ev, verdict=verdict, ratio=ratio)

    grow = f("g", "1e-7", "1e-5", "max normalised error grew 100.0x within class fp32", ratio=100.0)
    small = f("s", "fp32", "tf32", "precision class fp32 -> tf32 (...)")
    big = f("b", "fp32", "bf16", "precision class fp32 -> bf16 (...)")
    better = f("x", "tf32", "fp32", "precision class tf32 -> fp32 (...)", verdict="improvement")
    assert [x.key for x in sorted([grow, better, small, big], key=accuracy_order)] == ["b", "s", "x", "g"]


def test_the_page_opens_with_the_verdict_and_folds_the_calibration(tmp_path):
    tars = [FIXTURES / n for n in ("h200x2-upgrade-cudnn927-fwd.tar.gz", "h200x2-aa-fwd.tar.gz")]
    if not all(t.exists() for t in tars):
        pytest.skip("fixtures not committed")
    db = tmp_path / "s.sqlite"
    assert not collect(db, tars).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    page = (tmp_path / "site" / "upgrade.html").read_text()
    first = page.index('class="answer verdict"')
    assert first < page.index('id="study-1"') < page.index('id="calibration"') < page.index('id="calibration-1"')
    verdict = _text(page[first:page.index('id="study-1"')])
    assert re.search(r"Verdict: \S+ against \S+ \(1 study, 2 GPUs\)", verdict)
    assert re.search(r"Workload: ResNet-50 convolutions \(batch 32, PyTorch defaults\), forward fp32 NHWC, NVIDIA H200: "
                     r"[+-]\d+\.\d % \(median of 2 GPUs", verdict)
    for label in ("slower", "faster", "unchanged", "output bits changed vs base", "less accurate", "status changes"):
        assert re.search(rf"{label}: \d+", verdict), label
    assert re.search(r"\d+ of \d+ findings confirmed on every GPU", verdict)
    assert "The worst changes, grouped" in verdict
    calib = page[page.index('id="calibration"'):]
    assert "Calibration: 1 A/A study" in _text(calib) and "the same stack on both sides" in _text(calib)
