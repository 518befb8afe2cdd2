"""One judge, one count: the index's link names what the changes pages list (paginated, never 'query the
store'), and the between-images judgement reads the base's history as the nightly one and the gate do."""

import datetime as dt
import re

from _fleet_data import noisy, record, slower_nights, write_run

from harness.collect.ingest import collect
from harness.collect.store import Store
from harness.report import build, gather

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def test_every_finding_the_index_counts_is_listed_on_the_changes_pages(tmp_path, monkeypatch):
    import importlib

    morning = importlib.import_module("harness.report.morning")  # the package names its function so
    monkeypatch.setattr(morning, "PAGE_ROWS", 5)
    r = tmp_path / "r"
    slower_nights(r, [("cu13", 1.0), ("cu13", 1.0), ("cu13", 3.0)], T0)
    db = tmp_path / "s.sqlite"
    assert not collect(db, [r]).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    [(slug, n)] = set(re.findall(r'href="changes/([^"#]+)\.html#c0">all (\d+) findings', index))
    pages = sorted((tmp_path / "site" / "changes").glob("*.html"))
    assert [p.name for p in pages] == [f"{slug}-2.html", f"{slug}-3.html", f"{slug}.html"]
    listed = [a for p in pages for a in re.findall(r'class="finding" id="(f-time-[0-9a-f]+)"', p.read_text())]
    assert len(listed) == len(set(listed)) == int(n) == 12
    first = pages[-1].read_text()
    assert f'<a href="{slug}-2.html">2</a>' in first and "query the store" not in first
    assert "rows 1-5 of 12 on this page" in first and "rows 11-12 of 12" in pages[1].read_text()


def test_between_images_the_base_back_at_a_known_level_is_judged_as_every_night(tmp_path):
    """Image A ran at 1.0 ms twice, then at 1.3 ms (an excursion), then image B at 1.0 ms: the nightly judge (its
    previous stack, with history) and the between-images judge both call it ambiguous, not faster."""
    r = tmp_path / "r"
    for night, (image, ms) in enumerate((("A", 1.0), ("A", 1.0), ("A", 1.3), ("B", 1.0))):
        write_run(r, "h200", image, T0 + dt.timedelta(days=night),
                  [record("c", median=ms, samples=noisy(ms, seed=night))])
    db = tmp_path / "s.sqlite"
    assert not collect(db, [r]).refused
    with Store(db) as s:
        g = gather(s, "t")
        [t] = g.transitions
        [(_, comps)] = g.nightly
        nightly = {f.key: f.verdict for c in comps if c.comparison.what == "previous stack" for f in c.findings}
        between = {f.key: f.verdict for f in t["findings"]}
    assert between == nightly == {next(iter(between)): "ambiguous"}


def test_the_model_keeps_a_runs_medians_hashes_and_algorithms_in_its_series_only(tmp_path):
    """Each value a series is made of is held once: once the series is made, the run vectors the rest of the report
    reads (which runs cover which combinations, and which were ok) keep their combo and ok columns alone."""
    r = tmp_path / "r"
    for night in range(3):
        write_run(r, "h200", "A", T0 + dt.timedelta(days=night), [record("c", median=1.0 + night, chosen="ALGO_1")])
    db = tmp_path / "s.sqlite"
    assert not collect(db, [r]).refused
    with Store(db) as s:
        g = gather(s, "t", None, False)
        [series] = g.series
        assert series.median[:, 0].tolist() == [1.0, 2.0, 3.0] and (series.chosen >= 0).all()
        assert {k for v in g.judging.vectors.values() for k in v} <= {"combo", "ok", "combo_set"}


def test_the_regressions_page_links_its_caps_to_pages_that_list_every_regression(tmp_path, monkeypatch):
    import importlib

    regressions = importlib.import_module("harness.report.regressions")  # the package names its function so

    monkeypatch.setattr(regressions, "MAX_PER_PAIR", 3)
    monkeypatch.setattr(regressions, "PAGE_ROWS", 5)
    r = tmp_path / "r"
    slower_nights(r, [("A", 1.0), ("B", 3.0)], T0)
    db = tmp_path / "s.sqlite"
    assert not collect(db, [r]).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    reg = (tmp_path / "site" / "regressions.html").read_text()
    assert "query the store" not in reg
    [(first, n)] = set(re.findall(r'<a href="regressions/([^"]+\.html)">(\d+) regressions</a>', reg))
    assert n == "12" and "9 more regressions of this transition are listed on" in reg
    pages = sorted((tmp_path / "site" / "regressions").glob("*.html"))
    assert len(pages) == 3 and pages[-1].name == first
    rows = [x for p in pages for x in re.findall(r'<tr class="bad" id="([^"]+)">', p.read_text())]
    assert len(rows) == len(set(rows)) == 12


def test_the_index_links_each_top_finding_to_the_changes_page_that_lists_it(tmp_path, monkeypatch):
    """Combinations that stopped running are gate failures and come first on the changes pages, so the faster
    calls the index names sit on a later page: each of the index's links opens the page holding its finding."""
    import importlib

    morning = importlib.import_module("harness.report.morning")
    monkeypatch.setattr(morning, "PAGE_ROWS", 5)
    r = tmp_path / "r"
    lost = [f"lost{i}" for i in range(7)]
    for night, slow in enumerate((1.0, 1.0, 1 / 3)):
        write_run(r, "h200", "cu13", T0 + dt.timedelta(days=night),
                  [record(c, median=(1.0 + i / 10) * slow, samples=noisy((1.0 + i / 10) * slow, seed=night * 50 + i))
                   for i, c in enumerate(["c0", "c1", "c2"])]
                  + [record(c, status="error" if night == 2 else "ok", reason="worker died") for c in lost])
    db = tmp_path / "s.sqlite"
    assert not collect(db, [r]).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    site = tmp_path / "site"
    links = re.findall(r'href="(changes/[^"#]+)#(f-time-[0-9a-f]+)"', (site / "index.html").read_text())
    assert len(links) == 3 and all(re.search(r"-\d\.html$", file) for file, _ in links), links  # past page 1
    for file, fid in links:
        assert f'id="{fid}"' in (site / file).read_text(), (file, fid)
