"""Every page of the sample report (the committed fixtures' report, built as reports/sample/ is) small enough to
read: under 300 KB and opening in Chromium with no error; and every table spread over pages of its own lists on
them exactly the count its page gives."""

import re
from pathlib import Path

import pytest

PAGE_BYTES = 300_000  # issue 38: every page of the sample report under 300 KB
PAGE_BUDGET_S = 0.5  # and under 0.5 s in Chromium (the load event, from file://): scripts/bench_fleet.py


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
def test_every_page_of_the_sample_report_opens_clean(fixture_site):
    """Each page in headless Chromium, one tab going from page to page as a reader's does: no script error, no
    dialog, and not four times over the 0.5 s a page may take. The 0.5 s is a speed target, measured where speed
    is (scripts/bench_fleet.py prints every page's load against it, side by side); here a page that slow is
    broken, not slow, and its load is tried once more first (the machine is shared)."""
    from browser import Browser, BrowserUnavailable

    try:
        browser = Browser()
    except BrowserUnavailable as exc:
        pytest.skip(f"headless Chromium unavailable: {exc}")
    broken = {}
    try:
        tab = browser.open("about:blank", width=1440, height=900, settle=0)
        for page in _pages(fixture_site):
            # the pages' scripts run while they are parsed, before their load event, and set no timers: 0.02 s
            # after it is for an event already on its way
            load = tab.visit(page.as_uri(), settle=0.02, again_over=4 * PAGE_BUDGET_S)
            assert tab.errors == [] and tab.dialogs == [], page.name
            if load >= 4 * PAGE_BUDGET_S:
                broken[str(page.relative_to(fixture_site))] = round(load, 3)
    finally:
        browser.close()
    assert broken == {}
