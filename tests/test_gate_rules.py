"""scripts/gate_rules.py's floor candidates: a floor tried there is the one every judgement's own Thresholds() gets,
and the gate's floor is back as it was afterwards, also when the judging raises."""

import importlib.util
from pathlib import Path

import pytest

from harness.analysis.thresholds import ABS_FLOOR_US, Thresholds

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("gate_rules", ROOT / "scripts/gate_rules.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_floor_tried_is_every_default_thresholds_floor_and_is_undone():
    floor_of = _script().floor_of
    with floor_of(2.5):
        assert Thresholds().abs_us == 2.5 and Thresholds().alpha == 0.01
        assert Thresholds(abs_us=0.5).abs_us == 0.5
    assert Thresholds().abs_us == ABS_FLOOR_US
    with pytest.raises(RuntimeError), floor_of(3.0):
        raise RuntimeError("a judgement that fails")
    assert Thresholds().abs_us == ABS_FLOOR_US
