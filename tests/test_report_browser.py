"""The report as a person sees it: headless Chromium (Debian's chromium) opens it from file:// with no errors."""

import os
import shutil

import pytest
from _fleet_data import EVIL_NAME, copy_run, real_sources

from harness.browser import Browser, BrowserUnavailable
from harness.collect import collect
from harness.report import build, fmt_err, slug
from harness.store import Store

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser():
    try:
        b = Browser()
    except BrowserUnavailable as exc:
        pytest.skip(f"headless Chromium unavailable: {exc}")
    yield b
    b.close()


def _keep(png, name):
    """CONVBENCH_SCREENSHOT_DIR keeps the screenshots (CI artifacts)."""
    dest = os.environ.get("CONVBENCH_SCREENSHOT_DIR")
    if dest:
        os.makedirs(dest, exist_ok=True)
        shutil.copy(png, os.path.join(dest, name))


def test_report_loads_clean_with_fixture_numbers(browser, tmp_path):
    sources, what = real_sources(tmp_path)
    db = tmp_path / "s.sqlite"
    assert not collect(db, sources).refused
    site = tmp_path / "site"
    with Store(db) as s:
        build(s, site)
        runs = s.runs()
        machines = sorted({r["machine"] for r in runs})
        newest = runs[-1]
        worst = max((r["max_norm_err"] for r in s.records(newest["id"], with_samples=False)
                     if r["status"] == "ok" and r["max_norm_err"] is not None and r["kind"] == "measurement"),
                    default=None)
        # the overview counts the newest record of every combination over the runs of a machine and image
        status_of: dict = {}
        for r in reversed([r for r in runs if (r["machine"], r["image"]) == (newest["machine"], newest["image"])]):
            for x in s.records(r["id"], with_samples=False):
                status_of.setdefault(x["combo"], x["status"])
        n_combos, n_ok = len(status_of), sum(v == "ok" for v in status_of.values())
    page = browser.open((site / "index.html").as_uri())
    assert page.errors == [] and page.dialogs == [], what
    assert page.evaluate("document.querySelectorAll('#overview tbody tr').length") == len(machines)
    text = page.evaluate("document.body.innerText")
    assert f"{len(runs)} runs" in text and f"{n_ok}/{n_combos} ok" in text
    png = page.screenshot(tmp_path / "index.png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    _keep(png, "index.png")

    mpage = browser.open((site / "machines" / f"{slug(newest['machine'])}.html").as_uri())
    assert mpage.errors == [] and mpage.dialogs == []
    assert mpage.evaluate("document.querySelectorAll('svg.heatmap').length") > 0
    cells = mpage.evaluate("Array.from(document.querySelectorAll('svg.heatmap text')).map(t => t.textContent)")
    if worst is not None:
        assert fmt_err(worst) in cells  # the newest run's worst error is drawn in its heatmap
    _keep(mpage.screenshot(tmp_path / "machine.png", full_page=True), "machine.png")

    rpage = browser.open((site / "runs.html").as_uri())
    assert rpage.errors == []
    assert rpage.evaluate("document.querySelectorAll('#runs tbody tr').length") == len(runs)
    # sortable: click "records" twice -> descending order of record counts
    order = rpage.evaluate("""(() => { const th = Array.from(document.querySelectorAll('#runs th'))
        .find(h => h.textContent === 'records'); th.click(); th.click();
        const i = th.cellIndex; return Array.from(document.querySelectorAll('#runs tbody tr'))
        .map(r => parseFloat(r.cells[i].textContent)); })()""")
    assert order == sorted(order, reverse=True)
    # filterable: a run id filters to that run
    shown = rpage.evaluate(f"""(() => {{ const f = document.querySelector('input.filter');
        f.value = {newest['run_id']!r}; f.dispatchEvent(new Event('input'));
        return Array.from(document.querySelectorAll('#runs tbody tr')).filter(r => r.style.display !== 'none')
        .length; }})()""")
    assert shown == 1
    for name in ("architecture.html", "determinism.html", "ort.html", "regressions.html"):
        p = browser.open((site / name).as_uri())
        assert p.errors == [] and p.dialogs == [], name
        _keep(p.screenshot(tmp_path / name.replace(".html", ".png")), name.replace(".html", ".png"))


def test_fixture_findings_are_on_screen(browser, tmp_path):
    """The H200 fixture's crosscheck and autotune records (read from the tarballs here) as a person sees them:
    the seed crosscheck's max |delta| in the crosscheck table, the autotune sessions with different bits at the
    top of the index, the ORT search-mode table, and every page free of console errors."""
    from _fleet_data import fixture_records, fixture_tarballs, newest_per_combination

    cross = [d for _, d in fixture_records(("crosscheck",))]
    tune = [d for _, d in fixture_records(("autotune",))]
    if not fixture_tarballs() or not cross or not tune:
        pytest.skip("no H200 crosscheck/autotune fixtures committed")
    db = tmp_path / "s.sqlite"
    assert not collect(db, fixture_tarballs()).refused
    site = tmp_path / "site"
    with Store(db) as s:
        build(s, site)
    page = browser.open((site / "index.html").as_uri())
    assert page.errors == [] and page.dialogs == []
    rows = page.evaluate("Array.from(document.querySelectorAll('#crosscheck tbody tr'))"
                         ".map(r => Array.from(r.cells).map(c => c.innerText))")
    assert len(rows) == len(cross)
    for d in cross:
        row = next(r for r in rows if r[2] == d["case"])
        assert row[5] == f"{d['extra']['max_abs_delta']:.3g}" and row[6] == d["extra"]["torch_class"]
        assert row[8] == d["explanation"]
    unstable = [d for d in tune if len(d["extra"].get("winners") or {}) > 1
                and d["determinism"]["distinct_outputs"] > 1]
    top = page.evaluate("Array.from(document.querySelectorAll('#autotune-top tbody tr'))"
                        ".map(r => Array.from(r.cells).map(c => c.innerText))")
    assert sorted(r[2] for r in top) == sorted(d["case"] for d in unstable)
    for d in unstable:
        row = next(r for r in top if r[2] == d["case"] and r[4] == d["math"])
        if d["extra"].get("max_abs_spread") is not None:
            assert row[-2] == f"{d['extra']['max_abs_spread']:.3g}"
        assert row[-1] == d["explanation"]
    _keep(page.screenshot(tmp_path / "index-findings.png", full_page=True), "index-findings.png")
    det = browser.open((site / "determinism.html").as_uri())
    assert det.errors == []
    assert det.evaluate("document.querySelectorAll('#sessions-table tbody tr').length") == len(tune)
    ort = newest_per_combination([(run, d) for run, d in fixture_records(("measurement",))
                                  if d["backend"] == "ort"])
    if ort:
        op = browser.open((site / "ort.html").as_uri())
        assert op.errors == []
        assert op.evaluate("document.querySelectorAll('#ort tbody tr').length") == len(ort)
        assert op.evaluate("document.querySelectorAll('#ortmodes tbody tr').length") > 0
        _keep(op.screenshot(tmp_path / "ort.png"), "ort-modes.png")
    for html in sorted(site.glob("**/*.html")):
        assert browser.open(html.as_uri()).errors == [], html.name


def test_script_in_a_machine_name_does_not_run(browser, tmp_path):
    sources, _ = real_sources(tmp_path)
    db = tmp_path / "s.sqlite"
    collect(db, sources)
    with Store(db) as s:
        origin = s.runs()[-1]["origin"]
    if ":" in origin and not os.path.isdir(origin):  # from a tarball: take a fresh CPU run instead
        from _fleet_data import sweep_cpu_runs

        origin = str(sweep_cpu_runs(tmp_path / "fresh", n=1)[0])
    evil = copy_run(__import__("pathlib").Path(origin), tmp_path / "evil", machine=EVIL_NAME)
    collect(db, [evil])
    site = tmp_path / "site"
    with Store(db) as s:
        build(s, site)
    for url in ((site / "index.html").as_uri(), (site / "machines" / f"{slug(EVIL_NAME)}.html").as_uri(),
                (site / "runs.html").as_uri(), (site / "determinism.html").as_uri()):
        page = browser.open(url)
        assert page.dialogs == [], url  # alert(1) never ran
        assert page.errors == [], url
        assert EVIL_NAME in page.evaluate("document.body.innerText"), url  # shown as text
        assert page.evaluate("document.scripts.length") == 1, url
