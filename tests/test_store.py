"""The store: schema, idempotent ingest, columnar vectors, refusal of files that are not a convbench store."""

import datetime as dt
import sqlite3

import numpy as np
import pytest
from _fleet_data import record, write_run

from harness.collect import collect
from harness.store import STORE_SCHEMA, Store, StoreError, samples_array, samples_blob

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def test_samples_blob_roundtrip_float32():
    s = [0.1234567, 2.5, 1e-3]
    back = samples_array(samples_blob(s))
    assert np.allclose(back, s, rtol=1e-6)
    assert samples_blob([]) is None and len(samples_array(None)) == 0


def test_ingest_is_idempotent_and_vectors_match_records(tmp_path):
    recs = [record("a", median=1.0, chosen="ALGO_1"), record("b", median=2.0, algo="FFT"),
            record("c", status="CUDNN_STATUS_NOT_SUPPORTED", reason="nope")]
    write_run(tmp_path / "r", "m1", "img1", T0, recs)
    db = tmp_path / "s.sqlite"
    first = collect(db, [tmp_path / "r"])
    assert (first.added, first.records) == (1, 3)
    again = collect(db, [tmp_path / "r"])
    assert (again.added, again.unchanged, again.records) == (0, 1, 0)
    with Store(db) as s:
        runs = s.runs()
        assert len(runs) == 1 and runs[0]["n_ok"] == 2 and runs[0]["counts"] == {"ok": 2,
                                                                                 "CUDNN_STATUS_NOT_SUPPORTED": 1}
        v = s.vectors([runs[0]["id"]])[runs[0]["id"]]
        by_combo = {r["combo"]: r for r in s.records(runs[0]["id"])}
        for cid, ok, med, chosen in zip(v["combo"], v["ok"], v["median"], v["chosen"], strict=True):
            r = by_combo[int(cid)]
            assert ok == (r["status"] == "ok")
            if ok:
                assert med == pytest.approx(r["median_ms"], rel=1e-6)
            assert (chosen >= 0) == (r["chosen_algo"] is not None)
        assert s.names()[int(v["chosen"][v["chosen"] >= 0][0])] == "ALGO_1"
        assert s.db.execute("SELECT count(*) FROM records").fetchone()[0] == 3


def test_indexes_serve_the_cross_machine_and_history_questions(tmp_path):
    with Store(tmp_path / "s.sqlite") as s:
        plan = " ".join(str(r) for r in s.db.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM runs WHERE machine=? AND image=? ORDER BY started", ("m", "i")))
        assert "runs_machine_image" in plan
        plan = " ".join(str(r) for r in s.db.execute(
            "EXPLAIN QUERY PLAN SELECT median_ms FROM records WHERE run IN (1, 2, 3) AND combo=?", (1,)))
        assert "PRIMARY KEY" in plan and "SCAN" not in plan
        plan = " ".join(str(r) for r in s.db.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM runs WHERE gpu_model=? AND image=?", ("g", "i")))
        assert "runs_model_image" in plan


def test_refuses_foreign_sqlite_and_other_store_schema(tmp_path):
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE x (a)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="not a convbench store"):
        Store(other)
    newer = tmp_path / "newer.sqlite"
    Store(newer).close()
    con = sqlite3.connect(newer)
    con.execute("UPDATE meta SET value=? WHERE key='store_schema'", (str(STORE_SCHEMA + 1),))
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="store schema"):
        Store(newer)
    with pytest.raises(StoreError, match="no store"):
        Store(tmp_path / "missing.sqlite", create=False)


def test_latest_runs_picks_newest_per_machine_and_image(tmp_path):
    for i in range(3):
        write_run(tmp_path / "r", "m1", "img1", T0 + dt.timedelta(days=i), [record("a", median=1.0 + i)])
    write_run(tmp_path / "r", "m1", "img2", T0 + dt.timedelta(days=5), [record("a")])
    write_run(tmp_path / "r", "m2", "img1", T0, [record("a")], gpu=None)
    collect(tmp_path / "s.sqlite", [tmp_path / "r"])
    with Store(tmp_path / "s.sqlite") as s:
        latest = {(r["machine"], r["image"]): r for r in s.latest_runs()}
        assert set(latest) == {("m1", "img1"), ("m1", "img2"), ("m2", "img1")}
        assert latest[("m1", "img1")]["night"] == "2026-01-03"
        assert latest[("m2", "img1")]["hardware"] == "cpu" and latest[("m1", "img2")]["gpu_model"] == "NVIDIA H200"
