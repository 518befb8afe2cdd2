import json
import math

import pytest

from harness.core.records import SCHEMA_VERSION, Accuracy, Record, Timing, dumps


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
    from harness.cli.measure_cmds import _failed_backends

    assert _failed_backends({"failed_backends": []}) == 0
    assert _failed_backends({"failed_backends": ["ort"]}) == 1
    assert "every record of backend ort failed" in capsys.readouterr().err
