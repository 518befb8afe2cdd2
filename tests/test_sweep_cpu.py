"""The CPU path end to end: PyTorch's CPU conv through the same machinery, cuDNN recorded as skipped."""

import json

import pytest
from _fleet_data import as_killed, journal_lines

from harness.backends import SweepOptions
from harness.core import cases
from harness.core.records import OK, SKIPPED, Record
from harness.measurement.timing import TimingPolicy
from harness.run import sweep
from harness.run.journal import JOURNAL_FILE, iter_journal

FAST = TimingPolicy(budget_ms=2.0, min_samples=3, max_samples=10)


def _run(tmp_path, case_ids="quick.seed,quick.depthwise", **kw):
    opts = SweepOptions(device="cpu", timing=FAST, directions=kw.pop("directions", ("fwd",)))
    return sweep.run(cases.select(case_ids), ["torch", "cudnn"], opts, tmp_path, log=lambda m: None, **kw)


def _records(journal):
    return [Record.from_dict(d) for d in iter_journal(journal.path / JOURNAL_FILE) if d["kind"] == "measurement"]


def test_cpu_sweep_measures_torch_and_skips_cudnn_with_a_reason(tmp_path):
    journal = _run(tmp_path)
    recs = _records(journal)
    torch_recs = [r for r in recs if r.backend == "torch"]
    cudnn_recs = [r for r in recs if r.backend == "cudnn"]
    assert len(torch_recs) == 2 * 3 * 2  # cases x dtypes x layouts, one setting each on a CPU
    assert len(cudnn_recs) == 2 * 8 * 4 * 3 * 2
    assert all(r.status == SKIPPED and "CUDA" in r.reason for r in cudnn_recs)
    for r in torch_recs:
        if r.status != OK:  # a dtype this CPU build cannot convolve is a record with the reason
            assert r.reason
            continue
        assert r.time.timer == "perf_counter" and r.time.n >= 3
        assert r.determinism.repeat_equal is True
        want = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}[r.dtype]
        assert r.accuracy.precision_class in (want, "fp32"), r
    fp32 = [r for r in torch_recs if r.dtype == "fp32"]
    assert fp32 and all(r.status == OK and r.accuracy.precision_class == "fp32" for r in fp32)
    end = json.loads((journal.path / "end.json").read_text())
    assert end["counts"][SKIPPED] == len(cudnn_recs)
    meta = json.loads((journal.path / "run.json").read_text())
    assert meta["fingerprint"]["gpu"] is None and meta["options"]["cases"] == ["quick.seed", "quick.depthwise"]


def test_resume_measures_nothing_twice(tmp_path):
    journal = _run(tmp_path, "quick.seed")
    lines = journal_lines(journal.path)
    keep = lines[: len(lines) // 2]
    as_killed(journal.path, "\n".join(keep) + "\n" + lines[len(keep)][:40])  # torn tail
    resumed = _run(tmp_path, "quick.seed", resume=journal.path)
    assert resumed.path == journal.path
    recs = _records(resumed)
    keys = [r.key() for r in recs]
    assert len(keys) == len(set(keys)) == len(lines)


@pytest.mark.parametrize("direction", ["bwd_data", "bwd_filter"])
def test_cpu_backward_is_fp32_class(tmp_path, direction):
    recs = _records(_run(tmp_path, "quick.grouped", directions=(direction,)))
    fp32 = [r for r in recs if r.backend == "torch" and r.dtype == "fp32"]
    assert fp32 and all(r.status == OK and r.accuracy.precision_class == "fp32" for r in fp32)
    assert all(r.direction == direction for r in recs)


def test_repro_in_a_fresh_process_matches(tmp_path):
    from harness.run.repro import recompute

    journal = _run(tmp_path, "quick.seed")
    repro = list(recompute(journal.path))
    assert repro and all(r.kind == "repro" for r in repro)
    assert all(r.extra["fresh_process_equal"] is True for r in repro)


@pytest.mark.parametrize("isolate", [False, True])
def test_every_slice_says_where_its_time_went(tmp_path, isolate):
    import subprocess
    import sys
    from pathlib import Path

    from harness.run import slicetime

    journal = _run(tmp_path, isolate=isolate)
    lines = slicetime.read(journal.path)
    recs = [d for d in iter_journal(journal.path / JOURNAL_FILE) if d["kind"] == "measurement"]
    assert sorted((x["backend"], x["case"]) for x in lines) == sorted({(r["backend"], r["case"]) for r in recs})
    for x in lines:
        mine = [r for r in recs if (r["backend"], r["case"]) == (x["backend"], x["case"])]
        assert x["records"] == len(mine) and x["rankings_s"] == 0  # no cuDNN rankings without a GPU
        walls = sum((r["extra"] or {}).get("wall_ms", 0) for r in mine) / 1e3
        assert x["measure_s"] <= walls + 1e-3 and x["measure_s"] <= x["seconds"]
        assert x["measure_s"] + x["rankings_s"] + x["other_s"] == pytest.approx(x["seconds"], abs=1e-3)
        if x["backend"] == "torch":
            assert x["measure_s"] > 0 and x["measure_s"] == pytest.approx(walls, rel=0.05, abs=1e-3)
    end = json.loads((journal.path / "end.json").read_text())
    assert sum(x["seconds"] for x in lines) <= end["seconds"] + 0.1
    script = Path(__file__).resolve().parents[1] / "scripts" / "run_breakdown.py"
    out = subprocess.run([sys.executable, str(script), str(journal.path)], capture_output=True, text=True, check=True)
    assert "slices   torch" in out.stdout and "outside the slices" in out.stdout
    # against itself: every timed record in both, at equal device and host times
    out = subprocess.run([sys.executable, str(script), str(journal.path), "--against", str(journal.path)],
                         capture_output=True, text=True, check=True)
    n = sum(1 for r in recs if r["backend"] == "torch" and r.get("time"))
    line = next(x for x in out.stdout.splitlines() if x.startswith("against  torch"))
    assert f"{n} records in both" in line and "device median ratio 1.000" in line, line
    bands = [x for x in out.stdout.splitlines() if x.startswith("against  torch  ") and " ms " in x]
    assert bands and sum(int(x.split(" ms")[1].split()[0]) for x in bands) == n  # each record in one band
    assert all("device median ratio 1.000" in x for x in bands), bands
    bad = subprocess.run([sys.executable, str(script), str(journal.path), "--against", str(tmp_path / "none")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == f"run_breakdown: {tmp_path / 'none'} is not a run directory (no records.jsonl)"


def test_the_replica_probe_counts_every_timed_record_of_the_pass(capsys):
    """scripts/gpu/replica_probe.py (the next GPU diagnosis of the two-process sweep's cost) runs the replica's
    timing-only pass; without CUDA, PyTorch's on the CPU: every timed record lands in one band of its report."""
    import re
    import sys
    from pathlib import Path

    scripts = Path(__file__).resolve().parents[1] / "scripts" / "gpu"
    sys.path.insert(0, str(scripts))
    try:
        import replica_probe
    finally:
        sys.path.remove(str(scripts))
    assert replica_probe.main(["--cases", "quick.seed,quick.pointwise", "--directions", "fwd"]) == 0
    out = capsys.readouterr().out
    assert "replica pass on the CPU" in out and "for 2 cases, torch" in out
    counted = sum(int(n) for n in re.findall(r"torch +[<>]=? [\d.]+ ms: +(\d+) records", out))
    from harness.run.replicas import replica_options
    from harness.run.runners import resolve_backend

    options = replica_options(SweepOptions(directions=("fwd",), device="cpu", processes=2))
    torch_backend = resolve_backend("torch")
    assert counted == sum(len(torch_backend.combos(c, options)) for c in cases.select("quick.seed,quick.pointwise"))
