"""The fleet night a reviewer runs in one command (scripts/fleet_night.py): a real 3-node x 2-GPU Slurm cluster,
two nights of the rendered sbatch, one GPU slot degraded (injected), collect, compare per slot, the morning report.
The script's exit code is its proof: 0 only when compare fails exactly the degraded slot and the morning page
fails the gate on that slot alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm_cluster import unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]


def test_the_fleet_night_in_one_command_fails_the_gate_on_exactly_the_degraded_slot(tmp_path):
    why = unavailable()
    if why:
        pytest.skip(why)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "fleet_night.py"), "--work", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "PROVED" in out and "NOT PROVED" not in out
    assert "the morning page: n2-slot1-cpu: findings, FAILS THE GATE" in out
    assert "Nodes and GPU slots" in (tmp_path / "w" / "report" / "index.html").read_text()
    assert "Slurm cluster stopped" in out
