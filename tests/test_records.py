import json
import math

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from harness.core.records import IDENTITY_FIELDS, SCHEMA_VERSION, Accuracy, Record, Timing, dumps, record_key
from harness.core.schema import SchemaError, check_record, check_setting


def _rec(**kw):
    base = dict(case="quick.seed", backend="torch", direction="fwd", algo="auto", math="DEFAULT", dtype="fp32",
                layout="NCHW")
    base.update(kw)
    return Record(**base)


def test_round_trip_keeps_nested_parts():
    r = _rec(time=Timing(1.0, 0.1, 8, "hot", "cuda_event", 0.9, [1.0, 1.1]),
             accuracy=Accuracy(1e-6, 1e-7, 1e-7, 0, 0, 0, "fp32", 72))
    back = Record.from_dict(json.loads(dumps(r)))
    assert back == r and back.key() == r.key()


def test_non_finite_numbers_are_stored_as_null():
    r = _rec(accuracy=Accuracy(math.nan, math.inf, math.nan, 3, 0, 0, "broken"))
    data = json.loads(dumps(r))
    assert data["accuracy"]["max_abs"] is None and data["accuracy"]["rel_l2"] is None


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema=SCHEMA_VERSION + 1), "schema"),
    (lambda d: d.update(surprise=1), "unknown fields"),
    (lambda d: d.pop("case"), "missing"),
])
def test_bad_records_are_refused_with_a_reason(mutate, message):
    data = json.loads(dumps(_rec()))
    mutate(data)
    with pytest.raises(ValueError, match=message):
        Record.from_dict(data)


def test_key_separates_settings():
    a = _rec(settings={"tf32": True}).key()
    b = _rec(settings={"tf32": False}).key()
    assert a != b


def test_wholly_failed_names_only_backends_with_no_result_at_all():
    from harness.core.records import CRASHED, ERROR, OK, SKIPPED, wholly_failed

    pairs = [("torch", OK), ("torch", ERROR), ("cudnn", SKIPPED), ("ort", ERROR), ("ort", CRASHED),
             ("faulty", SKIPPED), ("faulty", ERROR)]
    assert wholly_failed(pairs) == ["ort"]
    assert wholly_failed([]) == []


def test_sweep_command_exits_1_when_a_backend_measured_nothing(capsys):
    from harness.cli.measure_cmds import failed_backends

    assert failed_backends({"failed_backends": []}) == 0
    assert failed_backends({"failed_backends": ["ort"]}) == 1
    assert "every record of backend ort failed" in capsys.readouterr().err


# --- keys are injective: no two accepted identities share a key (journals and asv results alike) ---



_HOSTILE = "ab|,=\"\\ \x01é"  # every separator, the quote settings_key writes, a control character
_text = st.one_of(st.text(_HOSTILE[1:], min_size=1, max_size=5), st.text(_HOSTILE, min_size=1, max_size=5))
_value = st.one_of(_text, st.integers(-3, 3), st.floats(-2, 2, allow_nan=False), st.booleans())
_identity = st.tuples(st.tuples(_text, _text, st.sampled_from(["fwd", "bwd_data"]), _text, _text,
                                st.sampled_from(["fp32", "fp16"]), st.sampled_from(["NCHW", "NHWC"])),
                      st.dictionaries(st.one_of(st.text("ab", max_size=2), st.text(_HOSTILE, max_size=4)), _value,
                                      max_size=3))


def _journal_accepts(fields, settings) -> bool:
    d = {"schema": SCHEMA_VERSION, "kind": "measurement", "status": "ok", "settings": settings,
         **dict(zip(IDENTITY_FIELDS, fields, strict=True))}
    try:
        check_record(d)
    except SchemaError:
        return False
    return True


def _asv_accepts(fields, settings) -> bool:
    try:
        for k, v in settings.items():
            check_setting(k, v, k, value_commas=True)
    except SchemaError:
        return False
    return all("|" not in f and not any(ord(c) < 32 for c in f) for f in fields)


def _same(a, b) -> bool:
    """One identity: the same fields and settings, a value compared by its text (settings_key's documented rule)."""
    return a[0] == b[0] and {k: str(v) for k, v in a[1].items()} == {k: str(v) for k, v in b[1].items()}


@pytest.mark.parametrize("accepts", [_journal_accepts, _asv_accepts], ids=["journal", "asv"])
@hsettings(max_examples=400, deadline=None, database=None)
@given(st.lists(_identity, min_size=2, max_size=12))
def test_distinct_accepted_identities_have_distinct_keys(accepts, identities):
    seen: dict[str, tuple] = {}
    for fields, settings in identities:
        if not accepts(fields, settings):
            continue
        key = record_key(*fields, settings)
        if key in seen:
            assert _same(seen[key], (fields, settings)), f"{key!r} names two identities"
        seen[key] = (fields, settings)


@pytest.mark.parametrize("fields, settings", [
    ({"algo": "x|y", "math": "m"}, {}),
    ({"math": "y|m"}, {}),
    ({}, {"a": "1,b=2"}),
    ({}, {"a=b": "1"}),
    ({}, {"a,b": "1"}),
    ({}, {"a": "x\x1b[2J"}),
    ({"case": "c\x00"}, {}),
])
def test_key_separators_are_refused_in_journal_records(fields, settings):
    assert not _journal_accepts(tuple({**dict(zip(IDENTITY_FIELDS, ("c", "torch", "fwd", "auto", "m", "fp32",
                                                                    "NCHW"), strict=True)), **fields}.values()), settings)


def test_existing_keys_are_spelled_as_before():
    assert _rec(math="use_tf32=1", settings={"tf32": True, "device": "cuda:0"}).key() == \
        "quick.seed|torch|fwd|auto|use_tf32=1|fp32|NCHW|device=cuda:0,tf32=True"
    assert record_key("c", "ort", "fwd", "-", "-", "-", "-", {"setting": "heuristic,tf32=0"}) == \
        'c|ort|fwd|-|-|-|-|setting="heuristic,tf32=0"'


def _decode(key: str) -> tuple:
    """A key read back into its identity: a left inverse of record_key on accepted identities is the proof that
    record_key is injective there."""
    *fields, rest = key.split("|")
    assert len(fields) == 7
    settings, dec = {}, json.JSONDecoder()
    while rest:
        name, _, rest = rest.partition("=")
        if rest.startswith('"'):
            value, end = dec.raw_decode(rest)
            rest = rest[end:]
        else:
            value, _, tail = rest.partition(",")
            rest = "," + tail if _ else ""
        settings[name] = value
        assert rest == "" or rest.startswith(","), key
        rest = rest[1:]
    return tuple(fields), settings


@pytest.mark.parametrize("accepts", [_journal_accepts, _asv_accepts], ids=["journal", "asv"])
@hsettings(max_examples=600, deadline=None, database=None)
@given(_identity)
def test_every_accepted_key_reads_back_as_its_identity(accepts, identity):
    fields, settings = identity
    if accepts(fields, settings):
        assert _decode(record_key(*fields, settings)) == (fields, {k: str(v) for k, v in settings.items()})
