"""compare names a difference in how the two sides were timed (analysis/method.py): on the committed H200 runs, the
one-placement run of 2026-11-30 against a run timed on five placements in two processes, and nothing between the
two legs of an A/A pair."""

import tarfile
from pathlib import Path

from harness.analysis.method import method, method_note, placements
from harness.collect.ingest import read_runs_into
from harness.collect.store import Store
from harness.core.records import Record

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "tests/fixtures/runs"


def _runs(path: Path) -> list[tuple[dict, list[Record]]]:
    store = Store(":memory:")
    read_runs_into(store, [path])
    return [(store.run_json(r["id"]), store.records(r["id"])) for r in store.runs() if r["source"] == "journal"]


def test_a_one_placement_run_against_a_placed_two_process_run_is_named_field_by_field():
    (old, old_recs), = _runs(RUNS / "h200-fwd-asv-s5.tar.gz")
    (new, new_recs), = _runs(ROOT / "docs/evidence/2026-12-07-h200/new-fwd-run.tar.xz")
    assert placements(old_recs) == 1 and placements(new_recs) == 5
    note = method_note(old, new, old_recs, new_recs)
    assert note == ("timed differently: processes 1 -> 2; placements 1 -> 5; noise target 0.002 -> 0.005; "
                    "floor samples not recorded -> 8: time findings compare the two ways of timing as well as "
                    "the two sides")


def test_the_two_legs_of_an_a_a_pair_were_timed_alike():
    (a, a_recs), (b, b_recs) = _runs(RUNS / "h200-aa8-fwd.tar.gz")
    assert method(a, a_recs) == method(b, b_recs)
    assert method_note(a, b, a_recs, b_recs) is None


def test_compare_prints_the_line_beside_its_findings(tmp_path, capsys):
    from harness.cli import main

    for name, tar in (("old", RUNS / "h200-fwd-asv-s5.tar.gz"),
                      ("new", ROOT / "docs/evidence/2026-12-07-h200/new-fwd-run.tar.xz")):
        with tarfile.open(tar) as t:
            t.extractall(tmp_path / name, filter="data")
    base, head = (next((tmp_path / n).glob("*/*/run.json")).parent for n in ("old", "new"))
    main(["compare", str(base), str(head)])
    out = capsys.readouterr()
    assert "compare: timed differently: processes 1 -> 2; placements 1 -> 5;" in out.out + out.err


def test_a_run_json_without_options_is_one_process_with_nothing_recorded():
    m = method({}, [])
    assert m["processes"] == 1 and m["placements"] == 1 and m["noise_target"] is None


def test_the_changes_page_says_when_the_two_nights_were_timed_differently(tmp_path):
    import datetime as dt
    import json

    from _fleet_data import noisy, record, write_run

    from harness.collect.ingest import collect
    from harness.report import build

    t0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
    nights = []
    for night, median in enumerate((1.0, 1.3)):  # a change on the second night, so that it has a changes page
        d = write_run(tmp_path / "r", "h200", "cu13", t0 + dt.timedelta(days=night),
                      [record("a", median=median, samples=noisy(median, seed=night))])
        meta = json.loads((d / "run.json").read_text())
        meta["options"] = {"sweep": {"processes": 2, "timing": {"noise_target": 0.005 if night else 0.002}}}
        (d / "run.json").write_text(json.dumps(meta))
        nights.append(d)
    db = tmp_path / "s.sqlite"
    assert not collect(db, [tmp_path / "r"]).refused
    with Store(db) as s:
        build(s, tmp_path / "site")
    page = next((tmp_path / "site" / "changes").glob("*.html")).read_text()
    assert "<b>Timed differently:</b> noise target 0.002 -&gt; 0.005: time findings compare" in page
