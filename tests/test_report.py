"""report: the pages, their numbers and their escaping, from hand-built fleets (logic) and real CPU runs."""

import datetime as dt
import re

import pytest
from _fleet_data import noisy, real_sources, record, write_run

from harness import cli
from harness.collect import collect
from harness.report import build, fmt_err, fmt_time, slug
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
    per_cell: dict = {}
    for r in runs:
        per_cell[(r["machine"], r["image"])] = per_cell.get((r["machine"], r["image"]), 0) + 1
    text = _text(index)
    for (machine, _), n in per_cell.items():  # each machine x image cell counts its runs
        assert f"{n} run{'s' if n != 1 else ''}, last" in text, machine
    assert (out / "index.html").stat().st_size < 5 * 1024 * 1024


def test_report_on_missing_store_is_a_one_line_error(tmp_path, capsys):
    assert cli.main(["report", "--store", str(tmp_path / "none.sqlite"), "--out", str(tmp_path / "o")]) == 2
    assert "no store" in capsys.readouterr().err
    assert not (tmp_path / "none.sqlite").exists()


@pytest.mark.parametrize("name", ["a/b", "..", EVIL, "x" * 300])
def test_machine_slugs_are_safe_file_names(name):
    s = slug(name)
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", s) and len(s) < 80 and s not in (".", "..")


def _fixture_site(tmp_path):
    from _fleet_data import fixture_tarballs

    tars = fixture_tarballs()
    if not tars:
        pytest.skip("no fixtures committed")
    db = tmp_path / "f.sqlite"
    assert not collect(db, tars).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    return tmp_path / "site"


def _text(html):
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&amp;", "&").replace("&#39;", "'")


def test_fixture_report_answers_the_seed_questions(tmp_path):
    """The H200 fixtures' crosscheck and autotune records, read from the tarballs here, appear on the
    investigations page with the numbers and explanations they carry, and it says which GPU generations were not
    measured; the index links to it rather than opening with it."""
    from _fleet_data import fixture_records

    cross = [d for _, d in fixture_records(("crosscheck",))]
    tune = [d for _, d in fixture_records(("autotune",))]
    if not cross or not tune:
        pytest.skip("fixtures hold no crosscheck/autotune records")
    site = _fixture_site(tmp_path)
    front = (site / "index.html").read_text()
    assert 'href="investigations.html"' in front and "Does cuDNN's autotuner" not in front
    index = _text((site / "investigations.html").read_text())
    for d in cross:
        assert f"{d['extra']['max_abs_delta']:.3g}" in index and d["explanation"] in index
    sms = {(run["fingerprint"].get("gpu") or {}).get("sm") for run, _ in fixture_records()}
    if not any(sm and sm.split(".")[0] in ("6", "7") for sm in sms):
        assert "not shown by these data" in index
    # autotune: every record whose fresh searches chose different algorithms with different output bits
    unstable = [d for d in tune if len(d["extra"].get("winners") or {}) > 1 and d["determinism"]["distinct_outputs"] > 1]
    assert unstable
    top = index[index.index("Does cuDNN's autotuner"):]
    assert f"{len(unstable)} chose different algorithms with bitwise-different outputs" in top
    for d in unstable:
        assert d["case"] in top and d["explanation"] in top


def test_fixture_report_shows_repro_and_ort_search_modes(tmp_path):
    from _fleet_data import fixture_records, newest_per_combination

    repro = [d for _, d in fixture_records(("repro",))]
    ort = newest_per_combination([(run, d) for run, d in fixture_records(("measurement",))
                                  if d["backend"] == "ort"])
    if not repro or not ort:
        pytest.skip("fixtures hold no repro/ort records")
    site = _fixture_site(tmp_path)
    det = (site / "determinism.html").read_text()
    by_machine: dict = {}
    for run, d in fixture_records(("repro",)):
        eq = d["extra"].get("fresh_process_equal")
        c = by_machine.setdefault(run["machine"], [0, 0, 0, 0])
        c[0] += 1
        c[1] += eq is True
        c[2] += eq is False
        c[3] += eq is None
    table = _text(det.split('id="detsum"')[1].split("</table>")[0])
    for machine, (n, equal, differs, unknown) in by_machine.items():
        # columns: ... repro records, fresh process equal, fresh process differs, not compared
        assert re.search(rf"{re.escape(machine)} .*? {n} {equal} {differs} {unknown}( |$)", table), machine
    page = _text((site / "ort.html").read_text())
    modes = {d["settings"]["cudnn_conv_algo_search"] for _, d in ort}
    for mode in modes & {"EXHAUSTIVE", "HEURISTIC", "DEFAULT"}:
        assert f"{mode} time" in page
    for _, d in ort:
        assert fmt_err(d["accuracy"]["max_norm_err"]) in page
        assert fmt_time(d["time"]["median_ms"]) in page
    interrupted = {run["run_id"] for run, _ in ort if not run.get("end_json_present")}
    complete = {run["run_id"] for run, _ in ort} - interrupted
    for run_id in interrupted:
        assert f"{run_id} on " in page and "interrupted: no end.json" in page
    for run_id in complete:
        assert re.search(rf"{run_id} on \S+ \(complete\)", page)
