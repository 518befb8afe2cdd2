"""report: the pages, their numbers and their escaping, from hand-built fleets (logic) and real CPU runs."""

import datetime as dt
import html
import re

import numpy as np
import pytest
from _fleet_data import FIXTURES, named_runs, noisy, record, slower_nights, write_run

from harness import cli
from harness.collect.ingest import collect
from harness.collect.store import Store
from harness.report import build, fmt_err, fmt_time, slug

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
EVIL = "<script>alert(1)</script>"


def _fleet(tmp_path):
    """Two machines (a GPU and a CPU one), two images on the GPU, eight nights each, one step and one upgrade
    (3.2x slower: beyond the spread the step gives the history that widens the gate's threshold)."""
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
        recs = [record("a", median=4.0, samples=noisy(4.0, seed=night)),
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


def test_report_from_real_runs_via_cli(fixture_report):
    """`convbench collect` and `convbench report` of the real runs, as the session's fixture report ran them."""
    assert fixture_report.collect_code == 0, fixture_report.what
    out = fixture_report.site
    assert fixture_report.report_code == 0
    assert "report written" in fixture_report.report_out
    with Store(fixture_report.store) as s:
        runs = named_runs(s)  # a name that covers several GPUs is one cell per GPU
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


def _text(html):
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&amp;", "&").replace("&#39;", "'")


@pytest.mark.slow
def test_fixture_report_answers_the_seed_questions(fixture_site):
    """The H200 fixtures' crosscheck and autotune records, read from the tarballs here, appear on the
    investigations page with the numbers and explanations they carry, and it says which GPU generations were not
    measured; the index links to it rather than opening with it."""
    from _fleet_data import fixture_records, fixture_runs

    cross = [d for _, d in fixture_records(("crosscheck",))]
    tune = [d for _, d in fixture_records(("autotune",))]
    if not cross or not tune:
        pytest.skip("fixtures hold no crosscheck/autotune records")
    site = fixture_site
    front = (site / "index.html").read_text()
    assert 'href="investigations.html"' in front and "Does cuDNN's autotuner" not in front
    index = _text((site / "investigations.html").read_text())
    for d in cross:
        assert f"{d['extra']['max_abs_delta']:.3g}" in index and d["explanation"] in index
    sms = {(run["fingerprint"].get("gpu") or {}).get("sm") for run in fixture_runs()}
    if not any(sm and sm.split(".")[0] in ("6", "7") for sm in sms):
        assert "not shown by these data" in index
    # autotune: every record whose fresh searches chose different algorithms with different output bits
    unstable = [d for d in tune if len(d["extra"].get("winners") or {}) > 1 and d["determinism"]["distinct_outputs"] > 1]
    assert unstable
    top = index[index.index("Does cuDNN's autotuner"):]
    assert f"{len(unstable)} chose different algorithms with bitwise-different outputs" in top
    for d in unstable:
        assert d["case"] in top and d["explanation"] in top


@pytest.mark.slow
def test_fixture_report_shows_repro_and_ort_search_modes(fixture_site):
    from _fleet_data import fixture_records, newest_per_combination

    repro = [d for _, d in fixture_records(("repro",))]
    ort = newest_per_combination(fixture_records(("measurement",), backend="ort"))
    if not repro or not ort:
        pytest.skip("fixtures hold no repro/ort records")
    site = fixture_site
    det = (site / "determinism.html").read_text()
    from harness.backends.cudnn_lib import DOCUMENTED_NONDETERMINISTIC

    def documented(d):  # cuDNN's atomics, or PyTorch's backward allowed to pick them (cudnn.deterministic=False)
        return ((d["backend"] == "cudnn" and (d["direction"], d["algo"]) in DOCUMENTED_NONDETERMINISTIC)
                or (d["backend"] == "torch" and d["direction"] != "fwd"
                    and d["settings"].get("deterministic") is False))

    by_machine: dict = {}
    for run, d in fixture_records(("repro",)):
        eq = d["extra"].get("fresh_process_equal")
        c = by_machine.setdefault(run["machine"], [0, 0, 0, 0, 0])
        c[0] += 1
        c[1] += eq is True
        c[2] += eq is False and documented(d)
        c[3] += eq is False and not documented(d)
        c[4] += eq is None
    table = _text(det.split('id="detsum"')[1].split("</table>")[0])
    for machine, (n, equal, documented_n, undocumented, unknown) in by_machine.items():
        # columns: ... repro records, fresh process equal, differs documented, differs undocumented, not compared
        assert re.search(rf"{re.escape(machine)} .*? {n} {equal} {documented_n} {undocumented} {unknown}( |$)",
                         table), machine
    assert sum(c[2] for c in by_machine.values()) > 0  # the fixtures hold documented ones: they are told apart
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
    machine_of = {run["run_id"]: run["machine"] for run, _ in ort}  # as the report names it (one GPU each)
    for run_id in complete:
        assert f"{run_id} on {machine_of[run_id]} (complete)" in page


# ---- the morning question: pairing, the index, the drill-down ----------------------------------------------------

def _fp(host="h1", uuid="GPU-1", cudnn="9.19.0", **software):
    fp = {"hostname": host, "gpu": {"name": "NVIDIA H200", "driver": "580.1", "uuid": uuid} if uuid else None,
          "libraries": {"cudnn": {"version": cudnn}},
          "software": {"torch": "2.11.0", "torch_cuda": "13.0", "onnxruntime": "1.30.0",
                       "onnxruntime_providers": ["CUDAExecutionProvider", "CPUExecutionProvider"], **software}}
    return fp


def test_pairing_a_machine_is_a_gpu_on_a_host_and_nights_pair_by_stack():
    from harness.analysis import pairing

    runs, info = [], {}

    def run(machine, day, fp, source="journal", options=None):
        rid = len(runs) + 1
        runs.append({"id": rid, "run_id": f"r{rid}", "machine": machine, "night": f"2026-11-{day:02d}",
                     "started": f"2026-11-{day:02d}T02:00:00", "source": source})
        info[rid] = {"fingerprint": fp, "options": options or {}}

    for day in (1, 2):
        run("box", day, _fp(uuid="GPU-a"))
        run("box", day, _fp(uuid="GPU-b"))  # a second GPU under the same machine name
    for day in (3, 4):
        run("box", day, _fp(uuid="GPU-a", cudnn="9.20.0"))
    run("box", 4, _fp(uuid="GPU-a", cudnn="9.21.0"), options={"paired": {"study": "s", "role": "B"}})
    run("cpu-host", 4, {"hostname": "c", "gpu": None})
    ms = {m.key: m for m in pairing.machines(runs, info)}
    assert set(ms) == {"h1/GPU-a", "h1/GPU-b", "machine:cpu-host"}
    a = ms["h1/GPU-a"]
    assert [n.night for n in a.nights] == ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]
    assert all(r["id"] != 10 for n in a.nights for r in n.runs)  # the paired study is not a night
    (night, stack) = a.comparisons
    assert (night.what, night.base.night, night.head.night) == ("previous night", "2026-11-03", "2026-11-04")
    assert (stack.what, stack.base.night) == ("previous stack", "2026-11-02")
    assert pairing.stack_change(stack.base, stack.head) == "cuDNN 9.19.0 -> 9.20.0"
    assert [c.what for c in ms["h1/GPU-b"].comparisons] == ["previous night"]
    assert ms["machine:cpu-host"].comparisons == []
    assert pairing.stack_line(_fp()) == ("GPU NVIDIA H200, driver 580.1, CUDA 13.0, cuDNN 9.19.0, torch 2.11.0, "
                                         "onnxruntime 1.30.0, providers CUDA+CPU")


def test_index_counts_are_the_gates(tmp_path, capsys):
    """The index's per-machine counts are what `convbench compare` finds on the same nights (the same
    compare_runs, thresholds and history): the image step on the h200 fails the gate in both."""
    import json

    db = _fleet(tmp_path)
    with Store(db) as s:
        runs = [r for r in s.runs() if r["machine"] == "h200"]
        base, head = runs[-3], runs[-1]  # the last cu12 night and the last cu13 night
        build(s, tmp_path / "site")
    capsys.readouterr()
    assert cli.main(["compare", base["run_id"], head["run_id"], "--store", str(db), "--json"]) == 1
    expected = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["verdict"] == "regression"]
    assert expected and all(f["case"] == "a" for f in expected)
    index = html.unescape(_text((tmp_path / "site" / "index.html").read_text()))
    assert f"{len(expected)} finding{'s' if len(expected) != 1 else ''} fail" in index
    block = index[index.index("h200"):]
    assert "vs previous stack" in block and "image cu12 -> cu13" in block
    assert block.index("slower") < block.index("Investigations and other views")
    changes = list((tmp_path / "site" / "changes").glob("*.html"))
    assert len(changes) == 1 and "fails the gate" in changes[0].read_text()


@pytest.mark.parametrize("ms,text", [(0.009408, "9.41 µs"), (0.5, "500 µs"), (1.0, "1 ms"), (12.345, "12.3 ms"),
                                     (None, "-")])
def test_times_read_in_us_or_ms_to_three_figures(ms, text):
    assert fmt_time(ms) == text


# ---- where the report goes ---------------------------------------------------------------------------------------

def test_report_swaps_in_a_fresh_folder_and_touches_nothing_else(tmp_path, monkeypatch, capsys):
    from harness.report import output

    db = _fleet(tmp_path)
    out = tmp_path / "site"
    assert cli.main(["report", "--store", str(db), "--out", str(out)]) == 0
    made = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert (out / output.MANIFEST).is_file() and (out / "index.html").is_file()
    first = (out / "index.html").stat().st_ino
    assert cli.main(["report", "--store", str(db), "--out", str(out)]) == 0  # a report replaces a report
    assert (out / "index.html").stat().st_ino != first  # a new file swapped in, not written over
    assert sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file()) == made
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".site.")] == []  # no temp folder left

    # a file the report did not make: refused in one line, the file and the old report untouched
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert cli.main(["report", "--store", str(db), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "did not make" in err and len(err.strip().splitlines()) == 1
    assert (out / "notes.txt").read_text() == "mine" and (out / "index.html").is_file()

    # a build that fails leaves the old report as it was
    (out / "notes.txt").unlink()
    before = (out / "index.html").read_bytes()
    monkeypatch.setattr("harness.report.gather", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    with Store(db) as s, pytest.raises(RuntimeError):
        build(s, out)
    assert (out / "index.html").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".site.")] == []


@pytest.mark.parametrize("kind", ["empty", "root", "home", "cwd", "symlink", "file"])
def test_dangerous_out_is_refused_in_one_line(tmp_path, monkeypatch, capsys, kind):
    db = _fleet(tmp_path)
    real = tmp_path / "real"
    real.mkdir()
    (real / "keep.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    out = {"empty": "", "root": "/", "home": str(__import__("pathlib").Path.home()), "cwd": ".",
           "symlink": str(tmp_path / "link"), "file": str(real / "keep.txt")}[kind]
    if kind == "symlink":
        (tmp_path / "link").symlink_to(real)
    capsys.readouterr()
    assert cli.main(["report", "--store", str(db), "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("convbench report: error: --out") and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in real.iterdir()) == ["keep.txt"]  # nothing written through the link


def test_a_folder_without_the_manifest_is_never_replaced_even_a_report_from_before_manifests(tmp_path):
    """Pages at the top and in machines/ with an index.html may be a user's own site: without the report's manifest
    a folder is refused, untouched (tests/test_report_out.py generates such folders)."""
    from harness.core.errors import UserError

    db = _fleet(tmp_path)
    out = tmp_path / "old"
    (out / "machines").mkdir(parents=True)
    (out / "index.html").write_text("old")
    (out / "machines" / "x.html").write_text("old")
    with Store(db) as s, pytest.raises(UserError, match="no .convbench-report manifest"):
        build(s, out)
    assert (out / "index.html").read_text() == "old" and (out / "machines" / "x.html").read_text() == "old"


def test_a_report_with_an_empty_changes_folder_is_replaced_by_the_next(tmp_path):
    """A night without findings leaves changes/ empty; the next morning's report still replaces it."""
    r = tmp_path / "r"
    write_run(r, "h200", "cu12", T0, [record("a", median=1.0, samples=noisy(1.0, seed=1))])
    db = tmp_path / "s.sqlite"
    assert not collect(db, [r]).refused
    out = tmp_path / "site"
    for _ in range(2):
        assert cli.main(["report", "--store", str(db), "--out", str(out)]) == 0
    assert (out / "changes").is_dir() and not any((out / "changes").iterdir())


def test_the_upgrade_page_answers_what_cudnn_927_changed(tmp_path):
    """The real H200 study: the stack change in words, the counts, and the largest changes on the first screen."""
    from _fleet_data import FIXTURES

    db = tmp_path / "s.sqlite"
    assert not collect(db, [FIXTURES / "h200-upgrade-cudnn927-fwd.tar.gz"]).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    page = html.unescape(_text((tmp_path / "site" / "upgrade.html").read_text()))
    assert "cuDNN 9.19.0 -> 9.27.0" in page
    assert "output bits changed vs base: 121" in page and "slower: " in page and "faster: " in page
    assert page.index("Largest slowdowns") < page.index("Largest speed-ups")
    assert "Measured on one GPU" in page


def test_fingerprints_page_offers_the_runs_the_morning_compares_with_a_permalink_to_both(tmp_path):
    """Every fingerprint field as a row, one column per offered run; the two runs of each morning comparison are
    offered, the changes page links to them side by side (?a=&b=), and each field shows both runs' values."""
    db = _fleet(tmp_path)
    with Store(db) as s:
        runs = {r["id"]: r for r in s.runs()}
        build(s, tmp_path / "site")
    site = tmp_path / "site"
    page = (site / "fingerprints.html").read_text()
    offered = [int(v) for v in re.findall(r'<th data-run="(\d+)">', page)]
    assert len(offered) == len(set(offered)) >= 3
    for sel in ("fp-a", "fp-b"):
        select = page[page.index(f'id="{sel}"'):]
        select = select[:select.index("</select>")]
        assert [int(v) for v in re.findall(r'<option value="(\d+)"', select)] == offered
        assert select.count(" selected") == 1
    # the image is an identity field: cu12 and cu13 are both in its row, with the escaped CPU host beside them
    image_row = re.search(r"<tr class=\"identity\"><td>image</td>(.*?)</tr>", page).group(1)
    assert "<td>cu12</td>" in image_row and "<td>cu13</td>" in image_row
    assert EVIL not in page and html.escape(EVIL) in page
    changes = next((site / "changes").glob("*.html")).read_text()
    links = re.findall(r'href="\.\./fingerprints\.html\?a=(\d+)&amp;b=(\d+)"', changes)
    assert links
    for a, b in links:
        assert int(a) in offered and int(b) in offered and runs[int(a)]["started"] < runs[int(b)]["started"]
    machine = (site / "machines" / f"{slug('h200')}.html").read_text()
    assert re.search(r'href="\.\./fingerprints\.html\?a=\d+&amp;b=\d+"', machine)


def test_architecture_puts_any_machines_side_by_side_and_no_empty_table(tmp_path):
    """The machine picker has one column and one tick box per machine, the combinations both measured first;
    a fixed section with nothing in common says so instead of printing an empty table."""
    db = _fleet(tmp_path)
    with Store(db) as s:
        build(s, tmp_path / "site")
    arch = (tmp_path / "site" / "architecture.html").read_text()
    form = arch[arch.index('id="pick-form"'):arch.index("</form>")]
    assert form.count('type="checkbox"') == 2 and "h200" in form and html.escape(EVIL) in form
    table = arch[arch.index('id="picktable"'):]
    table = table[:table.index("</table>")]
    first = re.search(r"<tbody>\s*<tr><td>(.*?)</td>(.*?)</tr>", table, re.S)
    assert first.group(1).startswith("a cudnn fwd IMPLICIT_GEMM")  # the one combination both machines ran
    assert first.group(2).count('data-v="') == 2
    for section in re.split(r"<h3>", arch)[1:]:
        body = section.split("<h3>")[0]
        if "Nothing to put side by side" in body:
            assert "<table" not in body


def test_machine_page_offers_any_combinations_history_with_stack_changes_as_events(tmp_path):
    """asv's graph page, offline: every combination measured on two or more runs is offered parameter by
    parameter, its medians on every run of every image on one axis, the image change an event at its run."""
    db = _fleet(tmp_path)
    with Store(db) as s:
        build(s, tmp_path / "site")
    page = (tmp_path / "site" / "machines" / f"{slug('h200')}.html").read_text()
    assert page.count('<select data-param="') == 8
    data = page[page.index('id="hist-data"'):]
    data = data[:data.index("</ol>")]
    times = re.search(r'data-times="([^"]+)"', data).group(1).split(",")
    assert len(times) == 10 and times[0] == "2026-01-01 02:00" and times[-1] == "2026-01-10 02:00"
    assert re.findall(r'<li class="event" data-i="(\d+)">([^<]+)</li>', data) == [("8", "image cu12 -&gt; cu13")]
    combos = dict(re.findall(r'<li data-c="([^"]+)" data-v="([^"]*)">', data))
    assert len(combos) == 3
    a = combos["a|cudnn|fwd|IMPLICIT_GEMM|DEFAULT|fp32|NCHW|-"].split(",")
    assert len(a) == 10 and a[0] == "1" and a[4] == "1.25" and a[-1] == "4"  # the step and the image change


def test_regressions_between_images_drill_down_to_runs_records_and_fingerprints(tmp_path):
    db = _fleet(tmp_path)
    with Store(db) as s:
        build(s, tmp_path / "site")
    site = tmp_path / "site"
    reg = (site / "regressions.html").read_text()
    section = reg[reg.index("image cu12 &rarr; cu13"):]
    section = section[:section.index("</table>", section.index('class="sortable"'))]
    runs = re.findall(r'<p>runs <a href="(machines/[^"#]+\.html)#(run-\d+)">.*?<a href="machines/[^"#]+\.html#(run-\d+)">',
                      section)
    assert len(runs) == 1
    page, *frags = runs[0]
    for frag in frags:
        assert f'id="{frag}"' in (site / page).read_text()
    assert re.search(r"<summary>what differs between the two runs' fingerprints \(\d+ fields\)</summary>", section)
    assert "<td>image</td><td>cu12</td><td>cu13</td>" in section
    row = re.search(r'<tr class="bad" id="(reg\d+-[^"]+)"><td><a href="#\1">time</a></td><td>a</td>(.*?)</tr>',
                    section, re.S)
    assert row, section[:2000]
    cells = section[row.start(2):]
    assert " us" not in cells and "µs" in cells or " ms" in cells
    assert "<summary>both records</summary>" in cells and "<td>median</td>" in cells


def _bits_change_every_night(tmp_path, n: int, documented=()) -> str:
    """determinism.html of one machine's three nights of ``n`` combinations whose output bits change every
    night; the records of the combinations ``documented`` are marked as cuDNN marks its atomics."""
    r = tmp_path / "r"
    for night in range(3):
        recs = [record(f"c{i}", hash_=f"{night:02d}{i:030x}", samples=noisy(1.0, seed=night)) for i in range(n)]
        for i in documented:
            recs[i].extra = {"documented_nondeterministic": True}
        write_run(r, "h200", "cu12", T0 + dt.timedelta(days=night), recs)
    db = tmp_path / "s.sqlite"
    assert not collect(db, [r]).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    return (tmp_path / "site" / "determinism.html").read_text()


def test_long_tables_are_folded_so_pages_stay_short(tmp_path):
    """30 combinations whose output bits change every night on one machine: the determinism page lists them in a
    folded section whose summary gives the count (the page stays short); a short table stays open."""
    det = _bits_change_every_night(tmp_path, 30)
    fold = det[det.index('<details id="across-fold">'):]
    assert fold.startswith('<details id="across-fold"><summary>30 combinations with different bits on different '
                           'nights, folded')
    assert fold.index('<table id="across"') < fold.index("</details>")
    assert fold[:fold.index("</details>")].count("<tr>") == 31  # the header and every row, inside the fold
    assert '<details id="autotune-fold">' not in det  # nothing chosen: no table, nothing folded


def test_documented_bits_across_nights_are_grouped_apart_from_what_nothing_explains(tmp_path):
    """Combinations whose bits change night to night: those whose record is documented to vary (cuDNN's atomics)
    go to a folded group under their cause, capped; the one nothing documents is the table that stands out."""
    det = _bits_change_every_night(tmp_path, 4, documented=range(1, 4))
    table = det[det.index('<table id="across"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 2 and "<td>c0</td>" in table  # the header and the undocumented one
    group = det[det.index('<details id="across-expected-1">'):]
    group = group[:group.index("</details>")]
    assert ("<b>3</b> combinations with different bits on different nights on h200, as documented (expected): "
            "algorithm documented as non-deterministic (atomics)") in group
    assert all(f"<td>c{i}</td>" in group for i in (1, 2, 3)) and "<td>c0</td>" not in group


def test_judges_in_a_pool_give_the_same_pages(tmp_path, monkeypatch):
    """The judgements a fleet report makes in a pool of processes (store.path read again by each) give the very
    pages the report makes in one process, and this process then judges nothing itself; so do the machine pages
    the pool's processes draw (drawing.py), of which this process then draws none."""
    import harness.report as report
    from harness.report import judging

    db = _fleet(tmp_path)
    pages = {}
    judged_here, drawn_here = [], []
    real = judging.compare_runs
    monkeypatch.setattr(judging, "compare_runs", lambda *a, **k: judged_here.append(1) or real(*a, **k))
    real_files = report.machine_files  # this process's drawing; the pool's processes call drawing's own
    monkeypatch.setattr(report, "machine_files", lambda *a, **k: drawn_here.append(a[3].name) or real_files(*a, **k))
    for workers in (0, 2):
        judged_here.clear()
        drawn_here.clear()
        with Store(db, create=False) as s:
            written = build(s, tmp_path / f"site{workers}", workers=workers)
        assert (len(judged_here) > 0) == (workers == 0)
        assert len(drawn_here) == (2 if workers == 0 else 0)
        assert sum(p.parent.name == "machines" for p in written) > 2  # the machine pages and their maps' pages
        pages[workers] = {p.relative_to(tmp_path / f"site{workers}"): re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "",
                                                                            p.read_text()) for p in written}
    assert pages[0].keys() == pages[2].keys() and len(pages[0]) > 5
    for name, text in pages[0].items():
        assert text == pages[2][name], name
    assert "regression" in pages[2][next(p for p in pages[2] if p.name == "regressions.html")]


def test_the_pool_draws_with_the_change_points_the_report_found(tmp_path, monkeypatch):
    """A pool process draws a machine's pages with its series' change points as the report's process found them
    (model.machine_series' ``changes``): it searches none again, and the pages are the same (the test above)."""
    import os

    from harness.analysis import changepoint
    from harness.report import model

    db = _fleet(tmp_path)
    calls = tmp_path / "searched"
    real = changepoint.detect_matrix

    def counted(*a, **k):
        with open(calls, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(*a, **k)

    monkeypatch.setattr(model.changepoint, "detect_matrix", counted)
    with Store(db, create=False) as s:
        written = build(s, tmp_path / "pool", workers=2)
    searched = calls.read_text().split()
    assert searched and set(searched) == {str(os.getpid())}  # the report's process alone
    assert any(p.parent.name == "machines" for p in written)


def test_a_failed_pool_leaves_the_judging_to_the_report(tmp_path, monkeypatch):
    """A pool process that cannot judge (here: every judgement raises there) costs nothing but time: the report
    judges in its own process and the pages are the same."""
    from harness.report import judging

    db = _fleet(tmp_path)
    with Store(db, create=False) as s:
        build(s, tmp_path / "one", workers=0)
    monkeypatch.setattr(judging, "_judge_group", lambda args: (_ for _ in ()).throw(RuntimeError("judge died")))
    with Store(db, create=False) as s:
        written = build(s, tmp_path / "pool", workers=2)
    for p in written:
        rel = p.relative_to(tmp_path / "pool")
        strip = lambda t: re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "", t)  # noqa: E731
        assert strip(p.read_text()) == strip((tmp_path / "one" / rel).read_text()), rel


def _no_drawing(args):
    raise RuntimeError("drawing died")


def test_a_failed_pool_leaves_the_machine_pages_to_the_report(tmp_path, monkeypatch):
    """A pool process that cannot draw a machine's pages (here: every drawing raises there) costs nothing but
    time: the report draws them in its own process, the same pages."""
    from harness.report import drawing

    db = _fleet(tmp_path)
    with Store(db, create=False) as s:
        build(s, tmp_path / "one", workers=0)
    monkeypatch.setattr(drawing, "_draw", _no_drawing)
    with Store(db, create=False) as s:
        written = build(s, tmp_path / "pool", workers=2)
    assert sum(p.parent.name == "machines" for p in written) > 2
    for p in written:
        rel = p.relative_to(tmp_path / "pool")
        strip = lambda t: re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "", t)  # noqa: E731
        assert strip(p.read_text()) == strip((tmp_path / "one" / rel).read_text()), rel


def test_a_pool_process_draws_a_machine_only_from_the_runs_the_report_read(tmp_path):
    """drawing._same_runs: the runs as the pool's connection holds them against the report's rows; a run it
    does not hold, or holds replaced (another record count), leaves the page to the report."""
    from harness.report.drawing import _same_runs

    db = _fleet(tmp_path)
    with Store(db, create=False) as s:
        runs = s.runs()
        assert _same_runs(s, runs)
        assert not _same_runs(s, [*runs[:-1], {**runs[-1], "n_records": runs[-1]["n_records"] + 1}])
        assert not _same_runs(s, [*runs, {**runs[0], "id": max(r["id"] for r in runs) + 1}])
        assert not _same_runs(s, [{**runs[0], "run_id": runs[-1]["run_id"]}])


def test_the_gates_history_is_read_light_and_equal_to_the_records(tmp_path, fixture_report):
    """reading.history_records (key and median of the ok records, from the packed numbers and the vectors) gives
    compare_runs what the whole records give it, on every run of the fixtures (journals, asv results, records
    not ok, untimed ones) and of the hand-built fleet."""
    from harness.report.reading import combinations, current_records, history_records

    fixture_report.copy_store(tmp_path / "s.sqlite")  # the real runs, collected once per session
    db = _fleet(tmp_path)  # and the hand-built fleet collected into the same store
    with Store(db, create=False) as s:
        runs = s.runs()
        vectors = s.vectors([r["id"] for r in runs])
        light = history_records(s, runs, vectors, combinations(s))
        assert len(light) == len(runs) and sum(map(len, light)) > 100
        for r, got in zip(runs, light, strict=True):
            want = [x for x in current_records(s, [r], vectors) if x.status == "ok"]
            assert [(x.identity_key(), x.median_ms) for x in got] == [(x.identity_key(), x.median_ms) for x in want]


def test_one_name_on_two_gpus_is_two_machines_on_every_page(tmp_path):
    """Both GPUs of one host ran under the name `h200x2-lent` (2026-12-01): each GPU gets a machine page of its
    own (its runs, its series), named by its UUID, and no page mixes the two; a name on one GPU stays as it is."""
    db = tmp_path / "s.sqlite"
    src = [FIXTURES / "h200x2-aa2-fwd.tar.gz", FIXTURES / "h200x2-repeat8-fwd.tar.gz"]
    assert cli.main(["collect", *map(str, src), "--store", str(db)]) == 0
    assert cli.main(["report", "--store", str(db), "--out", str(tmp_path / "site")]) == 0
    every = {p.name: p.read_text() for p in (tmp_path / "site" / "machines").glob("*.html")}
    pages = {n: text for n, text in every.items() if n.count(".") == 1}  # a machine's page, not its map pages
    gpus = {"GPU-abd0dca1": "GPU-c77e9498", "GPU-c77e9498": "GPU-abd0dca1"}
    for gpu, other in gpus.items():
        (name,) = [n for n in pages if n.startswith(f"h200x2-lent-{gpu}-")]
        assert f"h200x2-lent ({gpu})" in html.unescape(pages[name])
        assert gpu in pages[name] and other not in pages[name]
        maps = [n for n in every if n.startswith(name[:-len(".html")] + ".")]
        assert maps and all(other not in every[n] for n in maps)
    (single,) = [n for n in pages if n.startswith("h200x2-lent-gpu1-")]  # one GPU under its own name
    assert "GPU-990e118d" in pages[single] and "(GPU-990e118d)" not in html.unescape(pages[single])
    assert len(pages) == 3


def test_the_index_says_which_machines_did_not_run_last_night(tmp_path):
    """The fleet's last night is the h200's tenth; the other machine ran only on the first: the status line counts
    it and its row says so, instead of reading its old night as last night's."""
    db = _fleet(tmp_path)
    with Store(db) as s:
        build(s, tmp_path / "site")
    index = html.unescape(_text((tmp_path / "site" / "index.html").read_text()))
    status = index[index.index("Last night ("):index.index("The verdicts and words")]
    last = (T0 + dt.timedelta(days=9)).date().isoformat()
    assert f"Last night ({last})" in status and "1 of them did not run last night" in status, status


def test_the_determinism_pages_counts_are_counters_most_common():
    """determinism._most_common orders (value, count) as Counter.most_common does: by count, ties as first seen."""
    from collections import Counter

    from harness.report.determinism import _most_common

    rng = np.random.default_rng(3)
    for size in (1, 2, 5, 365):
        for _ in range(30):
            values = rng.integers(-3, 4, size=size) * 10**12
            assert _most_common(values) == Counter(values.tolist()).most_common()


def test_a_changes_page_opens_the_findings_the_index_names_and_folds_the_rest(tmp_path):
    """Twelve combinations 3x slower in the latest night: the machine's changes page lists all twelve with their
    records, and shows open only the first TOP, the ones the index names (a page of a hundred open findings took
    twice as long to load); the others' permalinks open them (the page's script, checked in the browser tests)."""
    from harness.report.morning import TOP

    r = tmp_path / "r"
    slower_nights(r, [("cu13", 1.0), ("cu13", 1.0), ("cu13", 3.0)], T0)
    db = tmp_path / "s.sqlite"
    assert not collect(db, [r]).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    page = next((tmp_path / "site" / "changes").glob("*.html")).read_text()
    findings = re.findall(r'<details class="finding" id="(f-time-[0-9a-f]+)"( open)?>', page)
    assert len(findings) == 12  # every slower combination is there, with its records
    assert [bool(is_open) for _, is_open in findings] == [True] * TOP + [False] * (12 - TOP)
    index = (tmp_path / "site" / "index.html").read_text()
    named = re.findall(r'href="changes/[^"#]+#(f-time-[0-9a-f]+)"', index)
    assert named and set(named) <= {a for a, is_open in findings if is_open}  # the index's top ones are the open ones


def test_the_index_blocks_are_made_once_judged_and_shared(tmp_path):
    """morning(g): the index and the changes pages read one set of blocks, made once the judgements are in;
    before them (gather(complete=False)) nothing is kept, since the nightly comparisons are not known yet."""
    from harness.report.model import finish, gather
    from harness.report.morning import morning

    db = _fleet(tmp_path)
    with Store(db, create=False) as s:
        g = gather(s, "t", None, False)
        assert morning(g)["blocks"] == [] and g.morning is None
        finish(g)
        first = morning(g)
        assert first["blocks"] and morning(g) is first
