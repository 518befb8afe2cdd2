"""json_texts.encode_all writes the text json.dumps(value, sort_keys=True) writes, on its fast path and off it."""

from __future__ import annotations

import json
import random
import struct

import pytest

from harness.collect import json_texts

orjson = pytest.importorskip("orjson")


def _want(values):
    return [None if v is None else json.dumps(v, sort_keys=True) for v in values]


@pytest.fixture
def python_calls(monkeypatch):
    """How many values Python's encoder wrote (0: the run took orjson's path)."""
    calls = []
    real = json_texts.encode
    monkeypatch.setattr(json_texts, "encode", lambda v: calls.append(v) or real(v))
    return calls


def test_a_real_lines_extra_takes_the_fast_path_and_reads_as_python_writes_it(python_calls):
    values = [{"clock": {"slowdowns": ["SW_POWER_CAP"], "sm_mhz_max": 1980, "sm_mhz_min": 1410}, "flags": ["wide"],
               "host_ms": 0.021, "placement_medians_ms": [0.824488, 1e-07, 1.5e-05, 10.00001, 2.5e+16, -0.0],
               "process_medians_ms": [0.00001, 123456789.0], "fresh_process_equal": True, "wall_ms": 52.019},
              None, {"wall_ms": 2.5}, {"replica": "replica 2 of 3: e-5, 0.00001", "sweep_hash": "ab12:3,4"},
              {"near_ties": [{"algo": "0", "ms": 0.5}], "winners": {"IMPLICIT_GEMM": 3}},
              {"k": [0.00001, "0"], "0": "0"}]
    assert json_texts.encode_all(values) == _want(values)
    assert python_calls == []


@pytest.mark.parametrize("odd", [
    {"big": 2 ** 64}, {"text": "caf\u00e9"}, {"text": 'a "quoted" \\ word'}, {"text": "line\nbreak"},
    {"text": "del\x7f"}, {"text": "\U0001f600"}, {"list": ["a", "0", "b"]},
])
def test_what_the_fast_path_cannot_respell_is_written_by_python(odd, python_calls):
    values = [{"wall_ms": 1e-05}, odd, None]
    assert json_texts.encode_all(values) == _want(values)
    assert python_calls  # the run was written by Python's encoder


def test_random_values_read_as_python_writes_them(python_calls):
    rnd = random.Random(16)
    alphabet = "abcxyz_ .-0123456789,:e+[]{}"

    def number():
        if rnd.random() < 0.4:  # any finite double
            while True:
                x = struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0]
                if x == x and abs(x) != float("inf"):
                    return x
        return rnd.choice([1, -1]) * 10 ** rnd.uniform(-12, 25)

    def value(depth=0):
        k = rnd.random()
        if depth < 3 and k < 0.15:
            return {text(): value(depth + 1) for _ in range(rnd.randrange(4))}
        if depth < 3 and k < 0.3:
            return [value(depth + 1) for _ in range(rnd.randrange(4))]
        if k < 0.65:
            return number()
        if k < 0.75:
            return rnd.choice([0, -5, 2 ** 63 - 1, -2 ** 63, rnd.getrandbits(40), True, False, None])
        return text()

    def text():
        return rnd.choice(["0", "0.00001", "e-5", ",", ":", ""]) if rnd.random() < 0.2 else "".join(
            rnd.choice(alphabet) for _ in range(rnd.randrange(8)))

    fast = 0
    for _ in range(400):
        values = [None if rnd.random() < 0.2 else {text(): value() for _ in range(rnd.randrange(1, 5))}
                  for _ in range(rnd.randrange(1, 20))]
        before = len(python_calls)
        assert json_texts.encode_all(values) == _want(values)
        fast += len(python_calls) == before
    assert fast > 100  # most runs were respelled, not handed to Python
