"""Every page of the sample report (the committed fixtures' report, built as reports/sample/ is) small enough to
read: under 300 KB and loaded in Chromium in under 0.5 s; and every table spread over pages of its own lists on
them exactly the count its page gives."""

import re
from pathlib import Path

import pytest

PAGE_BYTES = 300_000  # issue 38: every page of the sample report under 300 KB
PAGE_BUDGET_S = 0.5  # and under 0.5 s in Chromium (the load event, from file://)


def _pages(site: Path) -> list[Path]:
    pages = sorted(site.glob("**/*.html"))
    assert len(pages) > 40, len(pages)  # the fixtures' report, not an empty one
    return pages


def test_every_page_of_the_sample_report_is_under_300_kb(fixture_site):
    over = {str(p.relative_to(fixture_site)): p.stat().st_size for p in _pages(fixture_site)
            if p.stat().st_size >= PAGE_BYTES}
    assert over == {}


def test_a_tables_pages_list_the_count_its_page_gives(fixture_site):
    """A table cut on its page says "all N are listed on pages 1 2 ..."; those pages hold N rows together."""
    notes = 0
    for page in _pages(fixture_site):
        for n, links in re.findall(r'<p class="note" id="[^"]+-parts">.*?all (\d+) are listed on [^:]*: (.*?)\.</p>',
                                   page.read_text(), re.S):
            listed = 0
            for href in re.findall(r'href="([^"]+)"', links):
                body = (page.parent / href).read_text().split("<tbody>", 1)[1].split("</tbody>", 1)[0]
                listed += body.count("<tr")
            assert listed == int(n), (page.name, n, links)
            notes += 1
    assert notes > 0  # the sample report has such tables (documented non-determinism, rankings)
    assert not any("query the store" in p.read_text() for p in _pages(fixture_site))


@pytest.mark.browser
def test_every_page_of_the_sample_report_loads_in_half_a_second(fixture_site):
    """Each page's load in headless Chromium, one tab going from page to page as a reader's does, the best of
    three (the machine is shared: one slow load is the machine's, three are the page's)."""
    from browser import Browser, BrowserUnavailable

    try:
        browser = Browser()
    except BrowserUnavailable as exc:
        pytest.skip(f"headless Chromium unavailable: {exc}")
    slow = {}
    try:
        tab = browser.open("about:blank", width=1440, height=900, settle=0)
        for page in _pages(fixture_site):
            best = None
            for _ in range(3):
                # the pages' scripts run while they are parsed, before their load event, and set no timers: 0.02 s
                # after it is for an event already on its way (a new tab per page and 0.3 s were 130 of this
                # test's 154 s over 325 pages)
                tab.navigate(page.as_uri(), settle=0.02)
                assert tab.errors == [] and tab.dialogs == [], page.name
                best = tab.load_seconds if best is None else min(best, tab.load_seconds)
                if best < PAGE_BUDGET_S:
                    break
            if best >= PAGE_BUDGET_S:
                slow[str(page.relative_to(fixture_site))] = round(best, 3)
    finally:
        browser.close()
    assert slow == {}
