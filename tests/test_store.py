"""The store: schema, idempotent ingest, columnar vectors, refusal of files that are not a convbench store."""

import datetime as dt
import re
import sqlite3

import numpy as np
import pytest
from _fleet_data import record, write_run

from harness.collect.ingest import collect
from harness.collect.store import STORE_SCHEMA, Store, StoreError, samples_array, samples_blob

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
        by_combo = {r.combo: r for r in s.records(runs[0]["id"])}
        for cid, ok, med, chosen in zip(v["combo"], v["ok"], v["median"], v["chosen"], strict=True):
            r = by_combo[int(cid)]
            assert ok == (r.status == "ok")
            if ok:
                assert med == pytest.approx(r.median_ms, rel=1e-6)
            assert (chosen >= 0) == (r.chosen_algo is not None)
        assert s.names()[int(v["chosen"][v["chosen"] >= 0][0])] == "ALGO_1"
        assert s.record_count() == 3


def test_vectors_read_only_the_columns_asked_for_with_the_same_values(tmp_path):
    """A report reads the columns its series need and its judging processes combo and ok alone (a fleet's 10^7
    values cost 33 bytes each with every column): each column read alone is the column read with all the rest."""
    write_run(tmp_path / "r", "m1", "img1", T0, [record("a", median=1.0, chosen="ALGO_1"), record("b", median=2.0)])
    collect(tmp_path / "s.sqlite", [tmp_path / "r"])
    with Store(tmp_path / "s.sqlite") as s:
        run = s.runs()[0]["id"]
        full = s.vectors([run])[run]
        assert set(full) == {"combo", "ok", "median", "norm_err", "hash", "chosen"}
        for column in ("ok", "median", "norm_err", "hash", "chosen"):
            alone = s.vectors([run], (column,))[run]
            assert set(alone) == {"combo", column}
            assert alone[column].tobytes() == full[column].tobytes() and alone["combo"].tobytes() == full["combo"].tobytes()
        assert set(s.vectors([run], ("combo", "ok"))[run]) == {"combo", "ok"}


def test_indexes_serve_the_cross_machine_and_history_questions(tmp_path):
    with Store(tmp_path / "s.sqlite") as s:
        plan = " ".join(str(r) for r in s.db.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM runs WHERE machine=? AND image=? ORDER BY started", ("m", "i")))
        assert "runs_machine_image" in plan
        plan = " ".join(str(r) for r in s.db.execute(
            "EXPLAIN QUERY PLAN SELECT numbers FROM run_records WHERE run IN (1, 2, 3)"))
        assert "PRIMARY KEY" in plan or "INTEGER PRIMARY KEY" in plan
        assert "SCAN" not in plan
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


def test_packed_records_read_back_exactly(tmp_path):
    """run_records packs a run's records (float64 columns, JSON texts, float32 samples): every value a journal
    wrote comes back, nulls stay null, integers stay integers, and a combination written twice keeps the last."""
    from harness.core.records import dumps

    first = record("a", median=1.0, samples=[1.0, 1.25, 0.75])
    again = record("a", median=3.0, samples=[3.0, 3.5])
    other = record("b", status="CUDNN_STATUS_NOT_SUPPORTED", reason="nope", explanation="why: <b>")
    d = write_run(tmp_path / "r", "m1", "img1", T0, [first, other])
    with open(d / "records.jsonl", "a") as f:
        f.write(dumps(again) + "\n")
    with Store(tmp_path / "s.sqlite") as s:
        assert not collect(tmp_path / "s.sqlite", [d]).refused
        (run,) = s.runs()
        recs = {r.case: r for r in s.records(run["id"])}
        assert s.record_count() == 2 and set(recs) == {"a", "b"}
        a, b = recs["a"], recs["b"]
        assert a.median_ms == 3.0 and list(a.samples) == [3.0, 3.5] and a.time.n == 2
        assert a.determinism.repeat_equal == 1 and isinstance(a.determinism.repeats, int)
        assert a.hash == first.determinism.hash
        assert b.median_ms is None and len(b.samples if b.samples is not None else ()) == 0 and b.reason == "nope"
        assert b.explanation == "why: <b>" and (b.determinism and b.determinism.repeat_equal) is None
        assert s.records(run["id"], with_samples=False)[0].samples is None


@pytest.mark.parametrize("field", ["median_ms", "min_ms"])
def test_text_where_a_number_belongs_refuses_the_run(tmp_path, field):
    d = write_run(tmp_path / "r", "m1", "img1", T0, [record("a")])
    text = re.sub(rf'"{field}": [0-9.e-]+', f'"{field}": "fast"', (d / "records.jsonl").read_text())
    assert '"fast"' in text
    (d / "records.jsonl").write_text(text)
    s = collect(tmp_path / "s.sqlite", [d])
    assert s.added == 0 and len(s.refused) == 1 and "fast" in s.refused[0] and "number" in s.refused[0]
    with Store(tmp_path / "s.sqlite") as st:
        assert st.runs() == [] and st.record_count() == 0


def test_hash64s_is_hash64_of_each_hash():
    """The vectorised output-hash reading gives hash64's integer for every kind of text a record may hold: hex
    hashes (and none) on its fast path, anything int(x, 16) reads differently or cannot read on hash64's path."""
    import random

    from harness.collect.rows import hash64, hash64s

    rng = random.Random(1)
    cases = [[f"{rng.getrandbits(128):032x}" for _ in range(500)] + [None, ""],
             ["8000000000000000", "ffffffffffffffff0000", "ABCDEF0123456789", None],
             ["0x112233445566778899", "abc"], ["00112233 445566778899aabbccddeeff", "0011223344556677"],
             ["+0112233445566778"], ["0_11223344556677"], ["é" * 20], []]
    for hashes in cases:
        got = hash64s(hashes)
        assert got.dtype == np.int64 and got.tolist() == [hash64(h) for h in hashes], hashes[:3]


def test_the_checkpointer_copies_the_log_that_writers_leave(tmp_path):
    """collect's parser processes leave the write-ahead log to the Checkpointer (store.Checkpointer): what they
    commit reaches the store file while they write on."""
    import time

    from harness.collect.store import Checkpointer

    path = tmp_path / "s.sqlite"
    Store(path).close()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE t (x BLOB)")
    for _ in range(4):
        writer.execute("INSERT INTO t VALUES (?)", (bytes(1 << 20),))
    size = path.stat().st_size
    assert size < 1 << 20 and (tmp_path / "s.sqlite-wal").stat().st_size > 4 << 20  # all of it in the log
    with Checkpointer(path, every_s=0.05):
        deadline = time.monotonic() + 10
        while path.stat().st_size < 4 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert path.stat().st_size >= 4 << 20  # and now in the store file
    writer.close()
