"""`convbench compare` reads path operands with no store (collect/runread.RunsRead), and `collect` stores them: the
two must keep the same copy of a run and refuse the same sources in the same words, or a gate run on a results
tree and a report of its store would judge different runs."""

from __future__ import annotations

import datetime as dt
import shutil

from _fleet_data import record, tar_runs, write_run

from harness.collect.ingest import collect
from harness.collect.runread import RunsRead
from harness.collect.store import Store

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def _tree(tmp_path):
    """A results tree holding each case of a copy of a run: the same run twice (a tarball of it), a run whose
    journal grew after a first copy was taken (the copy first, the grown run later in discovery order), a partial
    copy with fewer records, a tarball that is no tarball, and a run of another machine."""
    tree = tmp_path / "tree"
    night1 = write_run(tmp_path / "src", "m1", "img", T0, [record("a"), record("b", median=2.0)], run_id="n1")
    short = write_run(tmp_path / "short", "m1", "img", T0 + dt.timedelta(days=1), [record("a")], run_id="n2",
                      finished=False)
    grown = write_run(tmp_path / "grown", "m1", "img", T0 + dt.timedelta(days=1),
                      [record("a"), record("b", median=3.0), record("c")], run_id="n2")
    partial = write_run(tmp_path / "part", "m1", "img", T0, [record("a")], run_id="n1")
    other = write_run(tmp_path / "src", "m2", "img", T0, [record("a", median=5.0)], run_id="n1")
    shutil.copytree(night1.parent.parent, tree / "a-results")
    tar_runs([night1], tree / "b-dup.tar.gz")
    tar_runs([short], tree / "c-short.tar.gz")
    tar_runs([grown], tree / "d-grown.tar.gz")
    tar_runs([partial], tree / "e-partial.tar.gz")
    (tree / "f-broken.tar.gz").write_bytes(b"\x1f\x8b not a tarball")
    del other  # collected from a-results with night 1 of m1
    return tree


def _runs(source) -> list[tuple]:
    return [(r["run_id"], r["machine"], r["n_records"], r["complete"]) for r in source.runs()]


def _records(source) -> dict[tuple, list[tuple]]:
    return {(r["run_id"], r["machine"]): [(x.key(), x.status, x.median_ms) for x in source.records(r["id"])]
            for r in source.runs()}


def test_a_results_tree_read_with_no_store_is_what_collect_stores(tmp_path):
    tree = _tree(tmp_path)
    summary = collect(tmp_path / "s.sqlite", [tree])
    read = RunsRead([tree])
    assert sorted(read.refused) == sorted(summary.refused)
    assert len(summary.refused) == 2  # the partial copy and the broken tarball
    with Store(tmp_path / "s.sqlite") as store:
        assert _runs(read) == _runs(store)
        assert _records(read) == _records(store)
    assert [m for _, _, m in _records(read)[("n2", "m1")]] == [1.0, 3.0, 1.0]  # the grown journal replaced its copy
    assert ("n1", "m2", 1, 1) in _runs(read)
