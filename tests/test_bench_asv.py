"""`convbench bench` end to end through a real `asv run` on the CPU: asv's results and the run journal."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_runs_the_asv_suite_on_the_cpu(tmp_path):
    pytest.importorskip("asv")
    if not (ROOT / ".git").exists():
        pytest.skip("asv records results per commit: needs a git checkout")
    machine = "convbench-test-cpu"
    env = dict(os.environ, CONVBENCH_MACHINE=machine, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", "harness.cli", "bench", "--cases", "quick.seed,quick.grouped",
                          "--results", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no GPU here: running the CPU backends" in res.stdout
    run_dir = next((tmp_path / machine).iterdir())
    end = json.loads((run_dir / "end.json").read_text())
    # every class of the suite ran without a failure; the conv records are the torch CPU ones
    assert end["asv_returncode"] == 0 and end["counts"]["skipped"] == 2 * 192
    torch_ok = [r for r in (json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines())
                if r["backend"] == "torch" and r["status"] == "ok"]
    assert len(torch_ok) == 2 * 3 * 2
    asv_dir = ROOT / ".asv" / "results" / machine
    try:
        result_files = [p for p in asv_dir.glob("*.json") if p.name != "machine.json"]
        assert result_files, "asv wrote no results"
        data = json.loads(result_files[0].read_text())
        names = data["result_columns"]
        track = data["results"]["bench_torch.TorchForward.track_time"]
        values = track[names.index("result")]
        measured = [v for v in values if v is not None and v == v]  # asv stores n/a as NaN
        # Only the "cpu" setting column runs on a CPU: one value per case x dtype x layout.
        assert len(measured) == 2 * 3 * 2 and all(0 < v < 1 for v in measured)
        journal = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
        medians = sorted(r["time"]["median_ms"] / 1e3 for r in journal
                         if r["backend"] == "torch" and r["status"] == "ok")
        assert sorted(measured) == pytest.approx(medians)  # asv reports exactly what the records hold
    finally:
        shutil.rmtree(asv_dir, ignore_errors=True)
