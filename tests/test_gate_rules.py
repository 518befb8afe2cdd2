"""scripts/gate_rules.py's floor candidates: a floor tried there is the one every judgement's own Thresholds() gets,
and the gate's floor is back as it was afterwards, also when the judging raises."""

import pytest
from _scripts import load

from harness.analysis.thresholds import ABS_FLOOR_US, Thresholds


def test_a_floor_tried_is_every_default_thresholds_floor_and_is_undone():
    floor_of = load("gate_rules").floor_of
    with floor_of(2.5):
        assert Thresholds().abs_us == 2.5 and Thresholds().alpha == 0.01
        assert Thresholds(abs_us=0.5).abs_us == 0.5
    assert Thresholds().abs_us == ABS_FLOOR_US
    with pytest.raises(RuntimeError), floor_of(3.0):
        raise RuntimeError("a judgement that fails")
    assert Thresholds().abs_us == ABS_FLOOR_US
