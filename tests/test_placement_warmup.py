"""What a placement's first call costs (scripts/placement_warmup_effect.py), read from real runs: the four-case
backward jobs of one H100 by the timer that warms every placement and by a trial one that sampled long calls'
placements on their first call (tests/fixtures/runs/h100-first-calls.tar.xz)."""

import tarfile
from pathlib import Path

from _scripts import load

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "tests/fixtures/runs/h100-first-calls.tar.xz"
BASE, TRIAL = "20261206T160419Z-native-ad83781-2090", "20261206T160103Z-native-75be9c97fa06-1073"


def _script():
    return load("placement_warmup_effect")


def test_a_placements_first_call_is_what_the_warm_up_keeps_out_of_the_samples(tmp_path, capsys):
    with tarfile.open(RUNS) as tar:
        tar.extractall(tmp_path, filter="data")
    runs = tmp_path / "h200-lent-gpu0"
    script = _script()
    assert script.main([str(runs / BASE), str(runs / TRIAL), "--top", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    worst = [line for line in out if line.startswith("first call")]
    assert len(worst) == 3 and all("seed.c8 cudnn bwd_filter ALGO_0" in line for line in worst)
    base, trial = script.records(runs / BASE), script.records(runs / TRIAL)
    key = next(k for k, r in trial.items() if (r.case, r.backend, r.direction, r.algo, r.math, r.dtype, r.layout)
               == ("seed.c8", "cudnn", "bwd_filter", "ALGO_0", "FMA", "fp16", "NCHW"))
    # sampled on its first call, the placement ran about a quarter slower; warmed, within 1 % of the first
    assert script.first_call_pct(trial[key], 1) > 20 and abs(script.first_call_pct(base[key], 1)) < 1
    assert trial[key].median_ms > 1.08 * base[key].median_ms


def test_an_unreadable_run_is_one_line_and_exit_2(tmp_path, capsys):
    assert _script().main([str(tmp_path / "nothing"), str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
