"""report: the pages, their numbers and their escaping, from hand-built fleets (logic) and real CPU runs."""

import datetime as dt
import re

import pytest
from _fleet_data import noisy, real_sources, record, write_run

from harness import cli
from harness.collect import collect
from harness.report import build, fmt_err, slug
from harness.store import Store

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
EVIL = "<script>alert(1)</script>"


def _fleet(tmp_path):
    """Two machines (a GPU and a CPU one), two images on the GPU, eight nights each, one step and one upgrade."""
    r = tmp_path / "r"
    for night in range(8):
        step = 1.25 if night >= 4 else 1.0
        recs = [record("a", median=1.0 * step, samples=noisy(1.0 * step, seed=night)),
                record("b", algo="FFT", math="TENSOR_OP", dtype="fp16", err=3e-4, cls="fp16",
                       samples=noisy(2.0, seed=100 + night), median=2.0),
                record("o", backend="ort", settings={"cudnn_conv_algo_search": "EXHAUSTIVE"}, chosen="FFT",
                       fresh_equal=False, explanation="autotuner picked another algorithm")]
        write_run(r, "h200", "cu12", T0 + dt.timedelta(days=night), recs)
    for night in range(8, 10):
        recs = [record("a", median=1.6, samples=noisy(1.6, seed=night)),
                record("b", algo="FFT", math="TENSOR_OP", dtype="fp16", err=3e-4, cls="fp16", median=2.0,
                       samples=noisy(2.0, seed=100 + night)),
                record("o", backend="ort", settings={"cudnn_conv_algo_search": "EXHAUSTIVE"}, chosen="GEMM",
                       fresh_equal=False)]
        write_run(r, "h200", "cu13", T0 + dt.timedelta(days=night), recs)
    write_run(r, EVIL, "cu12", T0, [record("a", median=9.0, err=2e-7, explanation=f"explained {EVIL}")], gpu=None)
    db = tmp_path / "s.sqlite"
    assert not collect(db, [r]).refused
    return db


def test_pages_carry_the_fleet_numbers(tmp_path):
    db = _fleet(tmp_path)
    with Store(db) as s:
        written = build(s, tmp_path / "site")
    names = {p.name for p in written}
    assert {"index.html", "architecture.html", "determinism.html", "ort.html", "regressions.html",
            "runs.html", f"{slug('h200')}.html", f"{slug(EVIL)}.html"} <= names
    site = tmp_path / "site"
    index = (site / "index.html").read_text()
    assert "GPU NVIDIA H200, sm 9.0" in index and "CPU only (x86_64, 2 cores)" in index
    assert "8 runs, last 2026-01-08" in index and "2 runs, last 2026-01-10" in index
    reg = (site / "regressions.html").read_text()
    assert "image cu12 &rarr; cu13" in reg and "Mann-Whitney" in reg and "<circle" in reg  # evidence + samples
    assert "1.25" in reg or "1.2" in reg  # the nightly step is listed with its ratio
    machine = (site / "machines" / f"{slug('h200')}.html").read_text()
    assert 'class="changepoint"' in machine and 'class="heatmap"' in machine
    assert fmt_err(3e-4) in machine  # the fp16 heatmap cell shows its worst error
    arch = (site / "architecture.html").read_text()
    assert "h200" in arch and "CPU only" in arch and "9" in arch
    ort = (site / "ort.html").read_text()
    assert "EXHAUSTIVE" in ort and "autotuner picked another algorithm" in ort and ">GEMM<" in ort
    det = (site / "determinism.html").read_text()
    assert "FFT x8" in det or "FFT x" in det


def test_everything_is_escaped_and_inline(tmp_path):
    db = _fleet(tmp_path)
    with Store(db) as s:
        written = build(s, tmp_path / "site")
    for page in written:
        html = page.read_text()
        assert "<script>alert" not in html, page
        assert len(re.findall(r"<script\b", html)) == 1, page  # only the inline table sorter
        assert not re.search(r"""(src|href)=["']https?:""", html), page  # nothing fetched from a network
    index = (tmp_path / "site" / "index.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in index


def test_report_from_real_runs_via_cli(tmp_path, capsys):
    sources, what = real_sources(tmp_path)
    db = str(tmp_path / "s.sqlite")
    assert cli.main(["collect", *map(str, sources), "--store", db]) == 0, what
    out = tmp_path / "reports"
    assert cli.main(["report", "--store", db, "--out", str(out)]) == 0
    assert "report written" in capsys.readouterr().out
    with Store(db) as s:
        runs = s.runs()
    index = (out / "index.html").read_text()
    assert f"{len(runs)} runs, {sum(r['n_records'] for r in runs)} records" in index
    last = runs[-1]
    assert f"{last['n_ok']}/{last['n_records']} ok" in index
    assert (out / "index.html").stat().st_size < 5 * 1024 * 1024


def test_report_on_missing_store_is_a_one_line_error(tmp_path, capsys):
    assert cli.main(["report", "--store", str(tmp_path / "none.sqlite"), "--out", str(tmp_path / "o")]) == 2
    assert "no store" in capsys.readouterr().err
    assert not (tmp_path / "none.sqlite").exists()


@pytest.mark.parametrize("name", ["a/b", "..", EVIL, "x" * 300])
def test_machine_slugs_are_safe_file_names(name):
    s = slug(name)
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", s) and len(s) < 80 and s not in (".", "..")
