"""scripts/gpu/side_by_side.sh keeps what it leaves in $OUT within what the lent GPU machine returns (at most 8
files, two folders deep): a side by side with an A/A repeat once lost its new run's tarball to that limit. Run here
with a stand-in nightly.sh that writes what the real one writes, so the layout is checked without a GPU."""

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEVICE_MAX_FILES = 8

# What the real nightly.sh leaves for a fwd stage: a doctor file, its tarball and breakdown in $OUT, a run under
# /tmp/convbench-results/$CONVBENCH_MACHINE with an end.json; and its console.
STAND_IN = """#!/usr/bin/env bash
set -eu
stage=$1
echo "revision=${CONVBENCH_REVISION:-this tree} tree=$PWD"
mkdir -p "$OUT"; echo doctor > "$OUT/doctor.txt"; echo tar > "$OUT/$stage-run.tgz"; echo b > "$OUT/$stage-breakdown.txt"
run=/tmp/convbench-results/$CONVBENCH_MACHINE/$(date +%s%N)
mkdir -p "$run"; echo '{"seconds": 1.0, "sweep_seconds": 0.5, "asv_seconds": 0.5, "ok": 3}' > "$run/end.json"
"""


@pytest.fixture
def tree(tmp_path):
    here = tmp_path / "tree"
    (here / "scripts" / "gpu").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "gpu" / "side_by_side.sh", here / "scripts" / "gpu")
    (here / "scripts" / "gpu" / "nightly.sh").write_text(STAND_IN)
    # run_breakdown.py needs real runs: a stand-in that prints its arguments
    (here / "scripts" / "run_breakdown.py").write_text("import sys; print('breakdown', *sys.argv[1:])\n")
    base = here / ".baseline"
    shutil.copytree(here / "scripts", base / "scripts")
    (base / "REVISION").write_text("abc1234\n")
    return here


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_side_by_side_with_a_repeat_leaves_at_most_eight_files(tree, tmp_path):
    out = tmp_path / "out"
    machine = f"test-sbs-{uuid.uuid4().hex[:8]}"
    work = tmp_path / "work"  # the script's baseline copy, scratch and remembered runs, away from /tmp's
    env = {**os.environ, "OUT": str(out), "AGAIN": "1", "CONVBENCH_MACHINE": machine, "SBS_WORK": str(work)}
    try:
        proc = subprocess.run(["bash", "scripts/gpu/side_by_side.sh", "fwd"], cwd=tree, env=env,
                              capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(f"/tmp/convbench-results/{machine}", ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["against.txt", "base-fwd-run.tgz", "base-fwd.log", "new-fwd-run.tgz", "new-fwd.log",
                     "new2-fwd-run.tgz", "new2-fwd.log", "side-by-side.txt"]
    assert len(files) <= DEVICE_MAX_FILES
    # the base side ran the baseline's copy under its own revision; the others this tree
    assert f"revision=abc1234 tree={work}/convbench-baseline" in (out / "base-fwd.log").read_text()
    assert f"revision=this tree tree={tree}" in (out / "new2-fwd.log").read_text()
    assert (out / "against.txt").read_text().startswith("breakdown /tmp/convbench-results/")
    assert "new_run {'seconds': 1.0" in (out / "side-by-side.txt").read_text()
