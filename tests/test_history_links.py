"""Every finding on a changes page links to its combination's history on the machine page, whose picker offers
the combinations with findings first and opens on the one the link names; each comparison drawn at a glance."""

import datetime as dt
import html
import re
import urllib.parse

import pytest
from _fleet_data import noisy, record, write_run
from browser import Browser, BrowserUnavailable

from harness.collect.ingest import collect
from harness.collect.store import Store
from harness.report import build

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def _site(tmp_path):
    r = tmp_path / "r"
    cases = [f"c{i:02d}" for i in range(12)]
    for night in range(3):
        write_run(r, "h200", "cu13", T0 + dt.timedelta(days=night),
                  [record(c, median=(1.0 + i / 10) * (3.0 if night == 2 and c == "c07" else 1.0),
                          samples=noisy((1.0 + i / 10) * (3.0 if night == 2 and c == "c07" else 1.0),
                                        seed=night * 50 + i)) for i, c in enumerate(cases)])
    db = tmp_path / "s.sqlite"
    assert not collect(db, [r]).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    return tmp_path / "site"


def test_a_finding_links_to_its_history_offered_first(tmp_path):
    site = _site(tmp_path)
    [page] = (site / "changes").glob("*.html")
    text = page.read_text()
    [link] = set(re.findall(r'href="(\.\./machines/[^"]+\?c=[^"#]+#pick)">history</a>', text))
    key = urllib.parse.unquote(link.split("?c=", 1)[1].split("#")[0])
    assert key.startswith("c07|cudnn|fwd|IMPLICIT_GEMM|DEFAULT|fp32|NCHW")
    machine = (site / "machines" / link.split("/")[2].split("?")[0]).read_text()
    first = re.search(r'<li data-c="([^"]+)"', machine).group(1)
    assert html.unescape(first) == key  # the combination with a finding is offered first
    assert 'class="scatter"' in text and "1 slower" in html.unescape(re.sub(r"<[^>]+>", " ", text))


@pytest.mark.browser
def test_the_history_link_opens_the_picker_on_the_finding(tmp_path):
    try:
        b = Browser()
    except BrowserUnavailable as exc:
        pytest.skip(f"headless Chromium unavailable: {exc}")
    try:
        site = _site(tmp_path)
        [page] = (site / "changes").glob("*.html")
        [link] = set(re.findall(r'href="\.\./(machines/[^"]+\?c=[^"#]+#pick)">history</a>', page.read_text()))
        path, query = link.split("?", 1)
        p = b.open((site / path).as_uri() + "?" + html.unescape(query))
        assert p.errors == []
        picked = p.evaluate("Array.from(document.querySelectorAll('#hist-form select')).map(s => s.value).join('|')")
        assert picked.startswith("c07|cudnn|fwd")
        assert p.evaluate("!!document.getElementById('hist-svg')")
    finally:
        b.close()
