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
