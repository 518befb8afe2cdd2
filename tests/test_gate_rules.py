"""scripts/gate_rules.py's floor candidates: the gate's settings it tries reach the detection-power judgement, whose
default stays the calibrated one (the evening H200 study of 2026-12-07, docs/evidence/2026-12-07-h200-158103a5)."""

import json
import lzma
from pathlib import Path

from _scripts import load

from harness.analysis.thresholds import Thresholds

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "docs/evidence/2026-12-07-h200-158103a5"


def test_detection_power_is_judged_with_the_settings_it_is_given():
    parts = [json.loads(lzma.decompress((STUDY / f"power-gpu0-part{i}.json.xz").read_bytes())) for i in (1, 2)]
    judge = load("gpu/detection_power").judge
    default = judge(parts)["summary"]
    assert (default["50-infus +5%"]["detected"], default["50-infus +5%"]["calls"]) == (304, 316)  # as on the GPU
    assert (default["20-50us +10%"]["detected"], default["20-50us +10%"]["calls"]) == (42, 43)
    assert judge(parts, th=Thresholds())["summary"] == default
    floored = judge(parts, th=Thresholds(abs_us=100.0))["summary"]  # no +10 % of a 20-50 us call reaches 100 us
    assert floored["20-50us +10%"]["detected"] == 0 and floored["20-50us +10%"]["calls"] == 43
    assert floored["50-infus +5%"]["detected"] < default["50-infus +5%"]["detected"]


def test_a_floor_the_gate_would_refuse_is_one_line_and_exit_2(capsys):
    main = load("gate_rules").main
    for arg, words in (("floor=abc", "could not convert"), ("floor=-1", "outside [0, 10000]")):
        assert main(["current", arg]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("gate_rules: floor=US") and words in err, err
