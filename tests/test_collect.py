"""collect: run directories, results trees, tarballs and asv results; idempotent; refuses what it cannot read."""

import datetime as dt
import hashlib
import json
import os
import zlib
from pathlib import Path

import pytest
from _fleet_data import journal_lines, record, sweep_cpu_runs, tar_runs, write_run

from harness import cli
from harness.collect.ingest import collect
from harness.collect.store import Store

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)


def _tree_digest(root):
    h = hashlib.sha1()
    for dirpath, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            p = os.path.join(dirpath, f)
            h.update(p.encode())
            h.update(open(p, "rb").read())
            h.update(str(os.stat(p).st_mtime_ns).encode())
    return h.hexdigest()


def _dump(db):
    with Store(db) as s:
        return [list(s.db.execute(f"SELECT * FROM {t} ORDER BY 1, 2")) for t in ("runs", "combos", "run_records",
                                                                                  "rankings", "run_vectors")]


def test_real_cpu_sweep_collects_and_recollect_changes_nothing(tmp_path):
    runs = sweep_cpu_runs(tmp_path / "results", n=2)
    before = _tree_digest(tmp_path / "results")
    db = tmp_path / "store" / "s.sqlite"
    db.parent.mkdir()
    s1 = collect(db, [tmp_path / "results"])
    n_lines = sum(len(journal_lines(r)) for r in runs)
    assert s1.added == 2 and s1.records == n_lines and not s1.refused
    dump1 = _dump(db)
    s2 = collect(db, [tmp_path / "results", runs[0]], jobs=2)
    assert s2.added == 0 and s2.unchanged == 3
    assert _dump(db) == dump1
    assert _tree_digest(tmp_path / "results") == before  # sources are never written
    assert sorted(os.listdir(db.parent)) == ["s.sqlite"]  # nothing but the store (WAL checkpointed away)


def test_tarball_equals_directory(tmp_path):
    d1 = write_run(tmp_path / "r", "m1", "img", T0, [record("a"), record("b", algo="FFT")])
    d2 = write_run(tmp_path / "r", "m2", "img", T0, [record("a")], finished=False)
    tar = tar_runs([d1, d2], tmp_path / "runs.tar.gz")
    s_dir = collect(tmp_path / "a.sqlite", [tmp_path / "r"])
    s_tar = collect(tmp_path / "b.sqlite", [tar])
    assert (s_dir.added, s_dir.records) == (s_tar.added, s_tar.records) == (2, 3)
    with Store(tmp_path / "b.sqlite") as s:
        complete = {r["machine"]: r["complete"] for r in s.runs()}
    assert complete == {"m1": 1, "m2": 0}
    # the same runs from a directory after the tarball: same identity, same content, nothing changes
    again = collect(tmp_path / "b.sqlite", [tmp_path / "r"])
    assert again.unchanged == 2 and again.added == 0


def test_grown_journal_replaces_the_run(tmp_path):
    d = write_run(tmp_path / "r", "m1", "img", T0, [record("a")], finished=False)
    collect(tmp_path / "s.sqlite", [d])
    with open(d / "records.jsonl", "a") as f:
        from harness.core.records import dumps

        f.write(dumps(record("b")) + "\n")
    (d / "end.json").write_text("{}")
    s = collect(tmp_path / "s.sqlite", [d])
    assert s.updated == 1
    with Store(tmp_path / "s.sqlite") as st:
        (run,) = st.runs()
        assert run["n_records"] == 2 and run["complete"] == 1
        assert st.record_count() == 2


def test_torn_last_line_is_ignored(tmp_path):
    d = write_run(tmp_path / "r", "m1", "img", T0, [record("a"), record("b")], finished=False)
    with open(d / "records.jsonl", "a") as f:
        f.write('{"case": "torn')
    s = collect(tmp_path / "s.sqlite", [d])
    assert s.added == 1 and s.records == 2 and not s.refused


def test_other_schema_refused_with_message_and_exit_code(tmp_path, capsys):
    write_run(tmp_path / "r", "old", "img", T0, [record("a")], schema=0)
    write_run(tmp_path / "r", "good", "img", T0, [record("a")])
    db = tmp_path / "s.sqlite"
    code = cli.main(["collect", str(tmp_path / "r"), "--store", str(db)])
    err = capsys.readouterr().err
    assert code == 1
    assert "run schema 0 is not supported" in err and "schema 1" in err
    with Store(db) as s:
        assert [r["machine"] for r in s.runs()] == ["good"]  # the readable run is kept


def test_malformed_record_refuses_the_whole_run(tmp_path):
    d = write_run(tmp_path / "r", "m1", "img", T0, [record("a")])
    with open(d / "records.jsonl", "a") as f:
        f.write('{"schema": 1, "kind": "measurement"}\n')
    s = collect(tmp_path / "s.sqlite", [d])
    assert s.added == 0 and len(s.refused) == 1 and "line 2" in s.refused[0]
    with Store(tmp_path / "s.sqlite") as st:
        assert st.runs() == []


def test_missing_and_unknown_sources_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    s = collect(tmp_path / "s.sqlite", [tmp_path / "nope", tmp_path / "notes.txt"])
    assert len(s.refused) == 2 and "does not exist" in s.refused[0]


def _asv_tree(root, machine="gpu-box", commit="0123456789abcdef0123", env="virtualenv-py3.12-torch"):
    """An asv results tree in asv 0.6's format (results/benchmarks.json, <machine>/machine.json, results)."""
    res = root / "results"
    (res / machine).mkdir(parents=True)
    (res / "benchmarks.json").write_text(json.dumps({
        "bench_torch.TimeConv.time_conv": {"param_names": ["case", "dtype"], "unit": "seconds", "type": "time"},
        "bench_torch.Track.track_err": {"param_names": ["case"], "unit": "unit", "type": "track"},
        "version": 2}))
    (res / machine / "machine.json").write_text(json.dumps({"machine": machine, "arch": "x86_64", "cpu": "x",
                                                            "num_cpu": "2", "os": "Linux", "ram": "1",
                                                            "version": 1}))
    data = {"commit_hash": commit, "env_name": env, "date": 1767232800000, "params": {"machine": machine},
            "python": "3.12", "requirements": {}, "env_vars": {},
            "result_columns": ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
                               "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
                               "samples", "profile"],
            "results": {
                "bench_torch.TimeConv.time_conv": [
                    [0.001, None, float("nan"), 0.004], [["'quick.seed'", "'quick.pointwise'"], ["'fp32'", "'fp16'"]],
                    "v1", 1, 1.0, None, None, [0.0009, None, None, 0.0039], [0.0011, None, None, 0.0041], None, None,
                    [[0.001, 0.0011, 0.0009], None, None, [0.004, 0.0041, 0.0039]]],
                "bench_torch.Track.track_err": [[1e-7], [["'quick.seed'"]], "v1"]},
            "durations": {}, "version": 2}
    (res / machine / f"{commit[:8]}-{env}.json").write_text(json.dumps(data))
    return res


def test_asv_results_tree_is_collected(tmp_path):
    res = _asv_tree(tmp_path)
    s = collect(tmp_path / "s.sqlite", [res])
    assert s.added == 1 and s.records == 5, s
    with Store(tmp_path / "s.sqlite") as st:
        (run,) = st.runs()
        assert run["source"] == "asv" and run["machine"] == "gpu-box" and run["image"] == "virtualenv-py3.12-torch"
        assert run["counts"] == {"ok": 3, "failed": 1, "skipped": 1}
        recs = {(r.case, r.dtype, r.backend): r for r in st.records(run["id"])}
        seed = recs[("quick.seed", "fp32", "torch")]
        assert seed.median_ms == pytest.approx(1.0) and list(seed.samples) == pytest.approx([1.0, 1.1, 0.9])
        assert recs[("quick.pointwise", "fp16", "torch")].median_ms == pytest.approx(4.0)
        assert recs[("quick.seed", "fp16", "torch")].status == "failed"
        track = [r for r in recs.values() if r.extra.get("unit") == "unit"]
        assert track and track[0].extra["value"] == pytest.approx(1e-7) and track[0].median_ms is None
    assert collect(tmp_path / "s.sqlite", [res]).unchanged == 1


def test_asv_old_format_refused(tmp_path):
    res = _asv_tree(tmp_path)
    f = next((res / "gpu-box").glob("0123*.json"))
    data = json.loads(f.read_text())
    data["version"] = 1
    f.write_text(json.dumps(data))
    s = collect(tmp_path / "s.sqlite", [res])
    assert s.added == 0 and "asv update" in s.refused[0]


def test_other_record_kinds_keep_their_own_keys(tmp_path):
    from harness.core.records import dumps

    d = write_run(tmp_path / "r", "m1", "img", T0, [record("a", median=1.0)])
    repro = record("a", median=5.0)
    repro.kind = "repro"
    with open(d / "records.jsonl", "a") as f:
        f.write(dumps(repro) + "\n")
    collect(tmp_path / "s.sqlite", [d])
    with Store(tmp_path / "s.sqlite") as st:
        (run,) = st.runs()
        recs = {r.kind: r for r in st.records(run["id"])}
    assert recs["measurement"].median_ms == 1.0 and recs["repro"].median_ms == 5.0
    assert recs["repro"].listed_settings["record"] == "repro"


ASV_FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "h200-asv-results.tar.gz"
FWD_FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "h200-fwd-default.tar.gz"


@pytest.mark.skipif(not (ASV_FIXTURE.exists() and FWD_FIXTURE.exists()), reason="H200 asv fixtures not committed")
def test_real_asv_results_agree_with_the_journal_of_the_same_run(tmp_path):
    """The H200 forward run's asv results (no benchmarks.json beside them) against the suite's own journal of
    that run: parameter names inferred, time in ms, the error and bitwise metrics joined to the time's record."""
    s = collect(tmp_path / "s.sqlite", [ASV_FIXTURE, FWD_FIXTURE])
    assert s.added == 2 and not s.refused, s
    with Store(tmp_path / "s.sqlite") as st:
        runs = {r["source"]: r for r in st.runs()}
        asv = [r for r in st.records(runs["asv"]["id"], with_samples=False) if r.status == "ok"]
        journal = {(r.case, r.algo, r.math, r.dtype, r.layout): r
                   for r in st.records(runs["journal"]["id"], with_samples=False)
                   if r.kind == "measurement" and r.backend == "cudnn" and r.status == "ok"}
        fp = st.run_json(runs["asv"]["id"])["fingerprint"]
    assert "inferred" in fp["asv_param_names"]
    cudnn = [r for r in asv if r.backend == "cudnn"]
    assert len(cudnn) == len(journal)  # every combination cuDNN ran, none of the NaN (skipped) ones
    for r in cudnn:
        assert r.direction == "fwd"
        j = journal[(r.case, r.algo, r.math, r.dtype, r.layout)]
        assert r.median_ms == pytest.approx(j.median_ms, rel=1e-9)
        assert r.accuracy.rel_l2 == pytest.approx(j.accuracy.rel_l2, rel=1e-9)
        assert r.determinism.repeat_equal == j.determinism.repeat_equal


def test_asv_precision_parameter_gives_the_dtype(tmp_path):
    """PyTorch's asv classes name the operand precision ("fp32/tf32", "fp32/ieee", "fp16"...): the stored dtype is
    its format, and the precision stays in the settings."""
    res = _asv_tree(tmp_path)
    name = "bench_torch.TorchForward.track_time"
    bench = json.loads((res / "benchmarks.json").read_text())
    bench[name] = {"param_names": ["case", "precision", "layout", "setting"], "unit": "seconds", "type": "track"}
    (res / "benchmarks.json").write_text(json.dumps(bench))
    path = next((res / "gpu-box").glob("0123*.json"))
    data = json.loads(path.read_text())
    data["results"][name] = [[0.001, 0.002, 0.003], [["'seed.c8'"], ["'fp32/tf32'", "'fp32/ieee'", "'fp16'"],
                                                     ["'NCHW'"], ["'benchmark=False,deterministic=False'"]], "v1"]
    path.write_text(json.dumps(data))
    assert collect(tmp_path / "s.sqlite", [res]).added == 1
    with Store(tmp_path / "s.sqlite") as st:
        (run,) = st.runs()
        got = sorted((r.dtype, r.settings["precision"], r.median_ms) for r in st.records(run["id"])
                     if r.case == "seed.c8")
    assert got == [("fp16", "fp16", pytest.approx(3.0)), ("fp32", "fp32/ieee", pytest.approx(2.0)),
                   ("fp32", "fp32/tf32", pytest.approx(1.0))]


def test_extra_with_an_integer_beyond_64_bits_is_the_same_from_copy_and_journal(tmp_path):
    """An extra may hold an integer beyond 64 bits (up to 1e300). The journal's parser (orjson) reads it as the
    nearest float, as collect always has; the store writes it whatever it is, and a host's packed copy of the run
    gives the store the journal gives."""
    from harness.collect.packed import write_packed

    recs = [record("a"), record("b", algo="FFT")]
    recs[1].extra = {"value": 10 ** 30, "nested": {"n": -(10 ** 25)}, "unit": "bits"}
    d = write_run(tmp_path / "r", "m1", "img", T0, recs)
    assert write_packed(d)
    s = collect(tmp_path / "s.sqlite", [d])
    assert (s.added, s.records, s.refused, s.packed) == (1, 2, [], 1)
    with Store(tmp_path / "s.sqlite") as st:
        (run,) = st.runs()
        by_case = {r.case: r for r in st.records(run["id"])}
    assert by_case["b"].extra == json.loads('{"value": 1e30, "nested": {"n": -1e25}, "unit": "bits"}')
    assert by_case["a"].extra == {}
    (d / "records.packed").unlink()
    assert collect(tmp_path / "t.sqlite", [d]).added == 1
    assert _dump(tmp_path / "t.sqlite") == _dump(tmp_path / "s.sqlite")


def test_store_texts_written_where_orjson_cannot_write_them():
    """A row whose extra holds an integer beyond 64 bits (an asv track value, parsed by the standard library) is
    packed by the standard library's encoder and read back as the nearest float, as a journal's value is."""
    from harness.collect.store_packing import pack_texts, text_columns

    rows = [["ok", None, {"value": 10 ** 30, "unit": "bits"}], ["ok", None, None]]
    columns = list(zip(*rows, strict=True))
    assert text_columns(pack_texts(columns), 2) == [["ok", "ok"], [None, None], [{"value": 1e30, "unit": "bits"}, None]]


def test_a_keys_values_are_kept_encoded_and_read_back_as_they_were():
    """encode_values keeps objects alike by key and lists of numbers alike flat; anything else (a bool list, lists
    of other lengths, objects with other keys, a null among them) as it is; text_columns gives every value back
    with its type and its keys' order."""
    from harness.collect.store_packing import decode_values, encode_values, pack_texts, text_columns

    clock = [{"slowdowns": [], "sm_mhz_max": 1980, "sm_mhz_min": 1755.5} for _ in range(3)]
    assert encode_values(clock) == {"keys": ["slowdowns", "sm_mhz_max", "sm_mhz_min"], "columns": [
        {"width": 0, "flat": []}, [1980] * 3, [1755.5] * 3]}
    assert encode_values([[1.0, 2], [3.5, 4]]) == {"width": 2, "flat": [1.0, 2, 3.5, 4]}
    kept = [[[True, False], [True, True]], [[1.0], [2.0, 3.0]], [{"a": 1}, {"b": 1}], [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
            [{"a": 1}, None], [[1.0, "x"], [2.0, "y"]], [[[1.0]], [[2.0]]], []]
    for values in kept:
        assert encode_values(values) is values
    extras = [{"p": [1.0, 2.0], "clock": clock[0], "b": [True], "n": {"deep": {"x": [1, 2]}}},
              {"p": [3.0, 4.5], "clock": clock[1], "b": [False], "n": {"deep": {"x": [3, 4]}}},
              {"wall_ms": 1.0}, None]
    columns = [["ok"] * 4, extras]
    assert zlib.decompress(pack_texts(columns)).startswith(b"\0BIN")  # their numbers binary
    back = text_columns(pack_texts(columns), 4)
    assert back == columns and [list(e) for e in back[1][:3]] == [list(e) for e in extras[:3]]
    assert [type(x) for x in back[1][0]["clock"].values()] == [list, int, float]
    assert decode_values(encode_values([{"k": [[1]]}] * 2), 2) == [{"k": [[1]]}] * 2


def test_items_written_together_are_refused_alone(tmp_path, monkeypatch):
    """A parser writes the items it has parsed in one transaction (ingest._worker), each under a savepoint: an
    item the store refuses at writing (a partial copy of a stored run, or a tarball holding one) rolls back
    alone, and the runs around it in the same transaction are stored, as one transaction each stored them."""
    from harness.collect import ingest

    monkeypatch.setattr(ingest, "WRITE_RECORDS", 10_000)  # every batch's items in one transaction (forked too)
    full = [record("a"), record("b", algo="FFT"), record("c", algo="GEMM")]
    stored = write_run(tmp_path / "first", "m0", "img", T0, full, run_id="r0")
    db = tmp_path / "s.sqlite"
    assert collect(db, [stored]).added == 1
    src = tmp_path / "second"
    good = [write_run(src, f"m{i}", "img", T0 + dt.timedelta(days=i), full) for i in (1, 2, 3)]
    partial = write_run(src, "m0", "img", T0, full[:2], run_id="r0")  # the stored run, with fewer records
    inner = write_run(tmp_path / "t", "m0", "img", T0, full[:1], run_id="r0")
    also = write_run(tmp_path / "t", "m9", "img", T0, full)
    (src / "m8").mkdir()
    tar_runs([also, inner], src / "m8" / "runs.tar.gz")  # m9 written before the partial one is refused
    s = collect(db, [src], jobs=2)
    assert s.added == 3 and len(s.refused) == 2, (s.line(), s.refused)
    assert any(str(partial) in r and "partial copy" in r for r in s.refused)
    assert any("runs.tar.gz" in r for r in s.refused), s.refused
    with Store(db, create=False) as st:
        runs = st.runs()
        assert sorted(r["machine"] for r in runs) == ["m0", "m1", "m2", "m3"]  # nothing of the tarball
        assert {r["machine"]: r["n_records"] for r in runs}["m0"] == 3  # the stored run as it was
        assert all(len(st.records(r["id"])) == 3 for r in runs)
    assert {p.name for p in good} <= {Path(r["origin"]).name for r in runs}
