"""--json on the commands a machine reads: one strict JSON document with "schema": 1, numbers as numbers."""

from __future__ import annotations

import json

import pytest

from harness.cli import main


def _doc(capsys, argv):
    code = main(argv)
    out = capsys.readouterr().out
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in strict JSON"))
    assert doc["schema"] == 1, argv
    return code, doc


def test_doctor_json(capsys):
    code, doc = _doc(capsys, ["doctor", "--json"])
    assert code == doc["exit_code"] == 0
    names = {b["name"]: b for b in doc["backends"]}
    assert names["torch"]["can_run"] is True and names["cudnn"]["can_run"] in (True, False)


def test_cases_json(capsys):
    code, doc = _doc(capsys, ["cases", "--json"])
    assert code == 0 and len(doc["sets"]["quick"]) >= 2
    seed = next(c for c in doc["cases"] if c["id"] == "seed.c64")
    assert isinstance(seed["n"], int) and isinstance(seed["k"], int)


def test_images_and_stacks_list_json(capsys):
    code, doc = _doc(capsys, ["images", "list", "--json"])
    assert code == 0 and doc["rows"] and isinstance(doc["engine"], bool)
    row = doc["rows"][0]
    assert row["wheels"] is None or isinstance(row["wheels"], int)
    code, doc = _doc(capsys, ["stacks", "list", "--json"])
    assert code == 0 and all(isinstance(o["installed"], bool) for o in doc["overlays"])


def test_strict_json_has_no_infinity():
    from harness.cli.jsonout import dumps

    assert json.loads(dumps({"ratio": float("inf"), "x": [float("nan")]})) == {"schema": 1, "ratio": None, "x": [None]}
