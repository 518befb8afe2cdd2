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
                     if r["status"] == "ok" and r["max_norm_err"] is not None), default=None)
    page = browser.open((site / "index.html").as_uri())
    assert page.errors == [] and page.dialogs == [], what
    assert page.evaluate("document.querySelectorAll('#overview tbody tr').length") == len(machines)
    text = page.evaluate("document.body.innerText")
    assert f"{len(runs)} runs" in text and f"{newest['n_ok']}/{newest['n_records']} ok" in text
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
