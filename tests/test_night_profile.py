"""The diagnosis switch: workers under cProfile leave profiles that scripts/night_profile.py splits into phases."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_profiled_workers_split_into_phases(tmp_path):
    prof = tmp_path / "prof"
    env = dict(os.environ, CONVBENCH_PROFILE_DIR=str(prof), PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "harness.cli", "sweep", "--isolate", "--cases", "seed.c8",
                    "--backends", "torch", "--results", str(tmp_path / "res")], check=True, env=env,
                   capture_output=True, cwd=ROOT, timeout=300)
    assert list(prof.glob("worker-*.prof")), "a profiled worker left no profile"
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "night_profile.py"), str(prof)], check=True,
                         capture_output=True, text=True, cwd=ROOT).stdout
    seconds = {label.strip(): float(s) for s, label in re.findall(r"^\s*([\d.]+) s  (.+)$", out, re.M)}
    assert seconds["worker: slices in all"] > 0
    assert 0 < seconds["PyTorch measure"] <= seconds["worker: slices in all"]
    assert seconds["float64 reference"] > 0


def test_no_profile_without_the_switch(tmp_path, monkeypatch):
    from harness.run.profiling import PROFILE_ENV, WorkerProfile

    monkeypatch.delenv(PROFILE_ENV, raising=False)
    profile = WorkerProfile()
    assert profile.profile is None
    profile.dump()
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "p"))
    profile = WorkerProfile()
    sum(range(1000))
    profile.dump()
    assert (tmp_path / "p" / f"worker-{os.getpid()}.prof").stat().st_size > 0
