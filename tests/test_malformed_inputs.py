"""Malformed but parseable input never ends in a traceback: fingerprints whose fields hold the wrong JSON type
(generated over every field convbench reads), and a whole report built from runs whose fingerprints are hostile."""

from __future__ import annotations

import datetime as dt
import json

from _fleet_data import record, write_run
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from harness import cli
from harness.analysis.compare import IDENTITY_FIELDS, fingerprint_diff, machine_identity
from harness.analysis.pairing import STACK_FIELDS, stack_fields, stack_key, stack_line
from harness.report.fmt import flatten

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                 max_size=3), max_leaves=6)
_PATHS = sorted({*IDENTITY_FIELDS, *(d for _, d in STACK_FIELDS), "software.onnxruntime_providers", "node",
                 "hostname", "gpu", "software", "libraries", "mapped", "software.torch_cudnn"})


def _put(fp: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    here = fp
    for p in parents:
        if not isinstance(here.get(p), dict):
            here[p] = {}
        here = here[p]
    here[last] = value


@hsettings(max_examples=400, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(_PATHS), _json), min_size=1, max_size=6))
def test_a_fingerprint_of_any_shape_is_read_without_an_error(changes):
    base = {"hostname": "h", "gpu": {"name": "NVIDIA H200", "uuid": "GPU-1"}, "image": "img",
            "software": {"torch": "2.1", "onnxruntime_providers": ["CUDAExecutionProvider"]}}
    fp = json.loads(json.dumps(base))
    for dotted, value in changes:
        _put(fp, dotted, value)
    fields = stack_fields(fp)
    hash(fields)  # stacks are grouped and compared
    hash(stack_key(fp))
    assert isinstance(stack_line(fp), str) and isinstance(machine_identity(fp), str)
    fingerprint_diff(base, fp)
    flatten(fp)


def test_a_report_of_runs_with_hostile_fingerprints_is_built(tmp_path, capsys):
    changes = [{"image": {"a": 1}}, {"software": {"onnxruntime_providers": 5}}, {"software": {"torch": ["x"]}},
               {"gpu": {"name": {"n": 1}, "driver": [1]}}, {"gpu": "an H200, as text"}]
    for i, change in enumerate(changes):
        d = write_run(tmp_path / "r", "m1", "img", T0 + dt.timedelta(days=i), [record("a"), record("b")],
                      run_id=f"r{i}")
        meta = json.loads((d / "run.json").read_text())
        for k, v in change.items():
            meta["fingerprint"][k] = {**meta["fingerprint"].get(k, {}), **v} if isinstance(v, dict) and k != "image" \
                and isinstance(meta["fingerprint"].get(k), dict) else v
        (d / "run.json").write_text(json.dumps(meta))
    db = str(tmp_path / "s.sqlite")
    assert cli.main(["collect", str(tmp_path / "r"), "--store", db]) == 0  # a GPU named by an object: its JSON
    assert "5 runs added" in capsys.readouterr().out
    assert cli.main(["report", "--store", db, "--out", str(tmp_path / "site")]) == 0
    for head in ("r3", "r4"):
        assert cli.main(["compare", str(tmp_path / "r" / "m1" / "r0"), str(tmp_path / "r" / "m1" / head)]) in (0, 1)


_value = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-1, 1, allow_nan=False),
                   st.text(max_size=4), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2),
                                                                                        st.integers(), max_size=2))


@hsettings(max_examples=300, deadline=None, database=None)
@given(tie=st.dictionaries(st.sampled_from(["winner", "runner_up", "gap", "max_abs_delta"]), _value),
       cross=st.dictionaries(st.sampled_from(["max_abs_delta", "torch_class", "cudnn_fma_class", "cudnn_fma_max_abs",
                                              "sm"]), _value))
def test_an_accepted_autotune_or_crosscheck_record_is_formatted_without_an_error(tie, cross):
    """Numbers as text (a gap of "x", a delta of [1]) where the report formats numbers: refused at the record's
    schema, or formatted."""
    from dataclasses import replace

    from harness.core.explain import explain_autotune, explain_crosscheck
    from harness.core.records import Record
    from harness.core.schema import SchemaError, check_record
    from harness.report.investigations import _autotune_row

    for kind, extra in (("autotune", {"near_ties": [tie], "winners": {"A": 1}}), ("crosscheck", cross)):
        rec = record("a")
        rec.kind, rec.extra = kind, extra
        d = json.loads(json.dumps(rec.to_dict()))
        try:
            check_record(d)
        except SchemaError:
            continue
        r = Record.from_dict(d)
        (explain_autotune if kind == "autotune" else explain_crosscheck)(r)
        if kind == "autotune":
            _autotune_row("m", "m", "img", replace(r, run={"id": 1}, determinism=replace(
                r.determinism, distinct_outputs=1, repeats=1)))


_STORE: dict = {}


def _small_store(tmp_path_factory) -> bytes:
    """A collected store of two runs (records with samples, extras and a ranking-free journal), as bytes."""
    if not _STORE:
        from harness.collect.ingest import collect

        tmp = tmp_path_factory.mktemp("store")
        for i in range(2):
            recs = [record(c, samples=[1.0 + i, 1.2, 1.1], clock={"sm_mhz_min": 1, "sm_mhz_max": 2,
                                                                  "slowdowns": []}) for c in ("a", "b", "c")]
            write_run(tmp / "r", "m1", "img", T0 + dt.timedelta(days=i), recs, run_id=f"r{i}")
        collect(tmp / "s.sqlite", [tmp / "r"])
        _STORE["bytes"] = (tmp / "s.sqlite").read_bytes()
    return _STORE["bytes"]


_BLOBS = [("run_records", c) for c in ("combo", "numbers", "texts", "sample_counts", "samples")] + \
    [("run_vectors", c) for c in ("combo", "ok", "median", "norm_err", "hash", "chosen")] + \
    [("runs", c) for c in ("fingerprint", "options", "end_info", "counts")] + [("combos", "settings")]


@hsettings(max_examples=250, deadline=None, database=None)
@given(where=st.sampled_from(_BLOBS), how=st.sampled_from(["flip", "cut", "grow", "empty", "garbage"]),
       at=st.integers(0, 10_000), seed=st.binary(min_size=1, max_size=8))
def test_a_store_damaged_by_a_few_bytes_is_one_store_error(tmp_path_factory, where, how, at, seed):
    """A blob or JSON column of the store changed by a few bytes (zlib streams broken, blobs short or long): every
    read a report or compare makes gives its values or a StoreError (one line), never another exception."""
    import sqlite3

    from harness.collect.store import Store, StoreError

    path = tmp_path_factory.mktemp("damaged") / "s.sqlite"
    path.write_bytes(_small_store(tmp_path_factory))
    table, column = where
    db = sqlite3.connect(path)
    for rowid, value in db.execute(f"SELECT rowid, {column} FROM {table}").fetchall():
        raw = bytearray(value.encode() if isinstance(value, str) else (value or b""))
        i = at % max(1, len(raw))
        if how == "flip" and raw:
            raw[i] ^= seed[0] or 1
        elif how == "cut":
            del raw[i:]
        elif how == "grow":
            raw[i:i] = seed
        elif how == "empty":
            raw = bytearray()
        else:
            raw = bytearray(seed * 3)
        new = bytes(raw).decode("utf-8", "replace") if isinstance(value, str) else bytes(raw)
        db.execute(f"UPDATE {table} SET {column}=? WHERE rowid=?", (new, rowid))
    db.commit()
    db.close()
    try:
        with Store(path, create=False, verify=False) as s:
            runs = s.runs()
            s.run_jsons()
            for r in runs:
                s.run_json(r["id"])
                s.records(r["id"])
                s.medians(r["id"])
                s.rankings(r["id"])
            s.vectors([r["id"] for r in runs])
            s.combos()
    except StoreError as exc:
        assert "\n" not in str(exc)


def test_compare_and_report_on_a_damaged_store_end_in_one_line(tmp_path_factory, capsys):
    import sqlite3

    path = tmp_path_factory.mktemp("cli") / "s.sqlite"
    path.write_bytes(_small_store(tmp_path_factory))
    db = sqlite3.connect(path)
    db.execute("UPDATE run_records SET texts = substr(texts, 1, 5), numbers = x'00'")
    db.commit()
    db.close()
    for argv in (["compare", "r0", "r1", "--store", str(path)],
                 ["report", "--store", str(path), "--out", str(path.parent / "site")]):
        capsys.readouterr()
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "damaged" in err[0], err
        assert not (path.parent / "site").exists()


_toml_value = st.recursive(st.none() | st.booleans() | st.integers(-2, 2) | st.text("ab9.=-", max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                               st.sampled_from(["name", "base", "gpu", "sm", "tag", "requirements", "x"]), inner,
                               max_size=4), max_leaves=8)


@hsettings(max_examples=300, deadline=None, database=None)
@given(doc=st.dictionaries(st.sampled_from(["bases", "row", "pool", "overlay", "other"]), _toml_value, max_size=4))
def test_a_matrix_of_any_shape_is_one_matrix_error(tmp_path_factory, doc):
    """Tables where arrays belong, scalars where tables belong, any field of any type: a MatrixError."""
    from harness.deploy import imagematrix

    with __import__("pytest").MonkeyPatch.context() as m:
        m.setattr(imagematrix, "_load_toml", lambda path: json.loads(json.dumps(doc)))
        try:
            imagematrix.load_matrix(tmp_path_factory.mktemp("m") / "matrix.toml")
        except imagematrix.MatrixError as exc:
            assert "\n" not in str(exc)


def test_a_matrix_nested_100000_deep_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert cli.main(["images", "--matrix", str(path), "list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nested" in err[0], err


@hsettings(max_examples=8, deadline=None, database=None)
@given(name=st.binary(min_size=1, max_size=6).filter(lambda b: b"/" not in b and b"\0" not in b
                                                      and b not in (b".", b"..")))
def test_paths_that_are_not_utf8_are_collected_compared_and_reported(tmp_path_factory, name):
    """Results, store and report folders whose names are any bytes (argv hands Python lone surrogates): each
    command ends with its exit code and prints their bytes escaped, never a UnicodeEncodeError."""
    import io
    import os
    from contextlib import redirect_stderr, redirect_stdout

    tmp = tmp_path_factory.mktemp("bytes")
    odd = os.fsdecode(name)
    results = tmp / f"r{odd}"
    for i in range(2):
        write_run(results, "m1", "img", T0 + dt.timedelta(days=i), [record("a")], run_id=f"r{i}")
    store = str(tmp / f"s{odd}.sqlite")
    out, err = io.TextIOWrapper(io.BytesIO(), "utf-8"), io.TextIOWrapper(io.BytesIO(), "utf-8")  # strict, as a pipe
    with redirect_stdout(out), redirect_stderr(err):
        assert cli.main(["collect", str(results), "--store", store]) == 0
        assert cli.main(["compare", "r0", "r1", "--store", store]) == 0
        assert cli.main(["compare", str(results / "m1" / "r0"), str(results / "m1" / "r1")]) == 0
        assert cli.main(["report", "--store", store, "--out", str(tmp / f"site{odd}")]) == 0
        out.flush()
        err.flush()
