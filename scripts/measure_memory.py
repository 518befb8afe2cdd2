"""Peak memory of collect, report and compare on the largest inputs the docs allow (docs/reliability.md).

    python scripts/measure_memory.py OUT [--scale 1.0] [--json OUT/memory.json]

At ``--scale 1`` each input sits at a documented limit (core/intake.py, core/schema.py, collect/asv_results.py):
100,000 records in a run (and a 256 MiB journal of more), a 256 MiB journal of 100,000-sample records, a journal
of lines just under and just over the 16 MiB line limit, 400 runs with 256 KiB fingerprints and one with 15 MiB,
an asv results file of 100,000 parameter combinations, and JSON nested 100,000 deep in each file collect reads.
Each command runs forked by a small launcher that reads its peak resident set from ``wait4`` (its own and its
waited children's ``ru_maxrss``), with an 8 GiB address-space cap so that a regression fails instead of taking
the host. A smaller ``--scale`` shrinks the sizes (not the per-line limits) for tests (tests/test_memory_bounds.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's harness, not an installed one
GiB = 1 << 30
CAP = 8 * GiB  # address space of each command: a runaway fails here rather than on the host
STARTED = "2026-12-03T01:00:00+00:00"


def _run_json(d: Path, run_id: str, fingerprint: dict | None = None) -> None:
    fp = fingerprint or {"hostname": "vm", "gpu": {"name": "NVIDIA H200", "sm": "9.0", "index": 0}, "image": "m",
                         "cpu": "x86_64", "cpu_count": 2, "software": {"python": "3.11"}}
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps({"schema": 1, "run_id": run_id, "machine": "vm", "image": "m",
                                            "started": STARTED, "suite_revision": "mem", "fingerprint": fp,
                                            "options": {}}))
    (d / "end.json").write_text("{}")


def _line(i: int, samples: int = 9, reason: str | None = None) -> str:
    med = 1.0 + (i % 97) * 1e-3
    rec = {"schema": 1, "kind": "measurement", "case": f"c{i}", "backend": "torch", "direction": "fwd",
           "algo": "auto", "math": "DEFAULT", "dtype": "fp32", "layout": "NCHW", "status": "ok", "reason": reason,
           "device": "cpu", "settings": {},
           "time": {"median_ms": med, "iqr_ms": 0.01, "n": samples, "mode": "hot", "timer": "cuda_event",
                    "min_ms": med, "samples_ms": [med + (k % 7) * 1e-4 for k in range(samples)]},
           "accuracy": {"max_abs": 1e-7, "rel_l2": 1e-7, "max_norm_err": 1e-7, "nan": 0, "inf": 0, "unwritten": 0,
                        "precision_class": "fp32"},
           "determinism": {"hash": f"{i:032x}", "hash_algo": "polyhash2x64-v1", "repeats": 2,
                           "repeat_equal": True, "fresh_handle_equal": True, "distinct_outputs": 1}}
    return json.dumps(rec, separators=(",", ":")) + "\n"


def _journal(d: Path, size: int, samples: int, records: int | None = None) -> int:
    """records.jsonl of about ``size`` bytes (or of ``records`` records); returns the records written."""
    d.mkdir(parents=True, exist_ok=True)
    n, written = 0, 0
    with open(d / "records.jsonl", "w") as f:
        while written < size and (records is None or n < records):
            chunk = "".join(_line(n + k, samples) for k in range(1000 if samples < 100 else 1))
            if written + len(chunk) > size:  # the limit is the journal's size: stay at or under it
                break
            f.write(chunk)
            written += len(chunk)
            n += 1000 if samples < 100 else 1
    return n


def build(out: Path, scale: float) -> list[dict]:
    """The inputs, each a dict: name, what it is, the source folder and the commands to measure on it."""
    out.mkdir(parents=True, exist_ok=True)
    cases = []

    def case(name: str, what: str, accept: bool, compare: bool = False) -> Path:
        src = out / name
        shutil.rmtree(src, ignore_errors=True)
        cases.append({"name": name, "what": what, "src": src, "accept": accept, "compare": compare})
        return src

    from harness.core.intake import MAX_JOURNAL_BYTES, MAX_RUN_RECORDS

    size = int(MAX_JOURNAL_BYTES * scale)
    src = case("too-many-records", "", False)  # over the record bound at any scale
    n = _journal(src / "vm" / "run-a", max(size, 1 << 30) if scale < 1 else size, 9,
                 records=MAX_RUN_RECORDS + 1000 if scale < 1 else None)
    size_over = (src / "vm" / "run-a" / "records.jsonl").stat().st_size
    _run_json(src / "vm" / "run-a", "run-a")
    cases[-1]["what"] = f"a {size_over >> 20} MiB journal of {n:,} records (over the {MAX_RUN_RECORDS:,} a run holds)"

    src = case("many-records", "", True, compare=True)
    n = _journal(src / "vm" / "run-a", size, 9, records=int(MAX_RUN_RECORDS * scale) // 1000 * 1000)
    _run_json(src / "vm" / "run-a", "run-a")
    _run_json(src / "vm" / "run-b", "run-b")
    os.link(src / "vm" / "run-a" / "records.jsonl", src / "vm" / "run-b" / "records.jsonl")
    mib = (src / "vm" / "run-a" / "records.jsonl").stat().st_size / (1 << 20)
    cases[-1]["what"] = f"2 runs sharing one {mib:.0f} MiB journal of {n:,} records"
    tar_src = case("tarball", f"a gzip tarball of one run with a {mib:.0f} MiB journal of {n:,} records", True)
    tar_src.mkdir(parents=True)
    with tarfile.open(tar_src / "runs.tar.gz", "w:gz", compresslevel=1) as tar:
        tar.add(src / "vm" / "run-a", arcname="vm/run-a")

    src = case("many-samples", "", True, compare=True)
    n = _journal(src / "vm" / "run-a", size, 100_000)
    _run_json(src / "vm" / "run-a", "run-a")
    _run_json(src / "vm" / "run-b", "run-b")
    os.link(src / "vm" / "run-a" / "records.jsonl", src / "vm" / "run-b" / "records.jsonl")
    cases[-1]["what"] = f"2 runs sharing one {size >> 20} MiB journal of {n} records of 100,000 samples"

    src = case("huge-lines", "", False)
    d = src / "vm" / "run-a"
    _run_json(d, "run-a")
    lines = max(2, int(size / (16 << 20)))
    with open(d / "records.jsonl", "w") as f:
        for i in range(lines):  # just under the 16 MiB line limit (a 16 MiB reason), the last one over it
            f.write(_line(i, reason="x" * ((16 << 20) - 2048 + (4096 if i == lines - 1 else 0))))
    cases[-1]["what"] = f"a journal of {lines} lines of ~16 MiB (reason text past its 64 KiB bound; one past 16 MiB)"

    src = case("huge-fingerprints", "", True)
    runs = max(2, int(400 * scale))
    fp = {"hostname": "vm", "gpu": {"name": "NVIDIA H200", "sm": "9.0", "index": 0}, "image": "m", "cpu": "x86_64",
          "software": {"python": "3.11"}}
    for r in range(runs + 1):  # each just under the 256 KiB a fingerprint may hold; the last one 15 MiB
        blob = {f"k{k}": [f"{r:04d}" + "y" * 996] * (62 if r < runs else 4000) for k in range(4)}
        d = src / "vm" / f"run-{r:03d}"
        _run_json(d, f"run-{r:03d}", dict(fp, blob=blob))
        (d / "records.jsonl").write_text("".join(_line(i) for i in range(10)))
    kib = [len((src / "vm" / f"run-{r:03d}" / "run.json").read_bytes()) >> 10 for r in (0, runs)]
    cases[-1]["what"] = (f"{runs} runs, each with a different {kib[0]} KiB fingerprint, and one with a "
                         f"{kib[1] >> 10} MiB fingerprint")

    src = case("big-asv", "", True)
    combos, mib = _asv_tree(src, scale)
    cases[-1]["what"] = f"an asv results file of {combos:,} parameter combinations ({mib:.1f} MiB)"

    src = case("deep-json", "", False)
    deep = "[" * 100_000 + "]" * 100_000
    d = src / "vm" / "run-a"
    _run_json(d, "run-a")
    (d / "records.jsonl").write_text(deep + "\n")
    d2 = src / "vm" / "run-b"
    d2.mkdir(parents=True)
    (d2 / "run.json").write_text('{"fingerprint": ' + deep + "}")
    (d2 / "records.jsonl").write_text(_line(0))
    asv = src / "asv-results" / "vm"
    asv.mkdir(parents=True)
    (asv / "machine.json").write_text(json.dumps({"machine": "vm", "version": 1}))
    (src / "asv-results" / "benchmarks.json").write_text(deep)
    (asv / "abc-env.json").write_text(deep)
    cases[-1]["what"] = "JSON nested 100,000 deep in a journal line, a run.json and asv results files"
    return cases


def _asv_tree(src: Path, scale: float) -> tuple[int, float]:
    """An asv results tree whose one benchmark has params making up to 100,000 combinations, each with a result,
    quartiles and 10 samples, within the 16 MiB file limit."""
    per_axis = max(2, int(round((100_000 * scale) ** 0.5)))
    while per_axis * per_axis > 100_000:
        per_axis -= 1
    n = per_axis * per_axis
    name = "bench_torch.TorchForward.time_conv"
    params = [[f"'c{i}'" for i in range(per_axis)], [f"'a{i}'" for i in range(per_axis)]]
    results = {name: [[1e-3] * n, params, "v1", 0, 1.0, None, None, [9e-4] * n, [1.1e-3] * n, None, None,
                      [[1e-3] * 10] * n]}
    machine = src / "asv-results" / "vm"
    machine.mkdir(parents=True)
    (machine / "machine.json").write_text(json.dumps({"machine": "vm", "arch": "x86_64", "version": 1}))
    (src / "asv-results" / "benchmarks.json").write_text(json.dumps(
        {name: {"name": name, "param_names": ["case", "algo"], "params": params, "type": "time", "unit": "seconds",
                "version": "v1"}, "version": 2}))
    doc = {"commit_hash": "0" * 40, "env_name": "convbench-py3.11", "date": 1796313767000,
           "params": {"machine": "vm", "python": "3.11"}, "python": "3.11", "requirements": {}, "env_vars": {},
           "result_columns": ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
                              "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
                              "samples"], "results": results, "durations": {}, "version": 2}
    text = json.dumps(doc, separators=(",", ":"))
    (machine / "0000000000000000-convbench-py3.11.json").write_text(text)
    return n, len(text) / (1 << 20)


# Forks the measured command and prints its peak RSS (KiB) and exit code. A child forked from a large process
# starts with that process's peak as its own (Linux carries the high-water mark of the memory it copies across
# exec), so the command is forked from this small interpreter, not from the caller (a test worker holds 1.5 GiB).
_LAUNCHER = r"""
import os, resource, sys
pid = os.fork()
if pid == 0:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]),) * 2)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.execv(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def measure(args: list[str], cwd: Path) -> dict:
    """One convbench command as a child: exit code, peak RSS (MiB), wall seconds, stderr's last lines."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    with open(cwd / "stderr.txt", "w+") as err:
        launched = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, str(CAP), sys.executable, "-m",
                                   "harness.cli", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err,
                                  text=True, check=True)
        maxrss_kib, exit_code = (int(v) for v in launched.stdout.split())
        err.seek(0)
        lines = err.read().splitlines()
    return {"args": args[0], "exit": exit_code, "peak_mib": round(maxrss_kib / 1024, 1),
            "seconds": round(time.monotonic() - t0, 1), "traceback": any("Traceback" in ln for ln in lines),
            "refusals": [ln for ln in lines if "refused" in ln or ": error:" in ln][:5],
            "last": lines[-1][:300] if lines else ""}


def run_all(out: Path, scale: float) -> list[dict]:
    rows = []
    for c in build(out, scale):
        store = out / f"{c['name']}.sqlite"
        store.unlink(missing_ok=True)
        got = {"name": c["name"], "what": c["what"],
               "input_mib": round(sum(p.stat().st_size for p in c["src"].rglob("*") if p.is_file()) / (1 << 20), 1)}
        got["collect"] = measure(["collect", str(c["src"]), "--store", str(store)], out)
        if c["accept"]:
            got["report"] = measure(["report", "--store", str(store), "--out", str(out / f"{c['name']}-site")], out)
        if c["compare"]:
            got["compare_store"] = measure(["compare", "--store", str(store), "run-a", "run-b"], out)
            got["compare_paths"] = measure(["compare", str(c["src"] / "vm" / "run-a"),
                                            str(c["src"] / "vm" / "run-b")], out)
        rows.append(got)
        shutil.rmtree(c["src"], ignore_errors=True)
        print(json.dumps(got), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="a scratch folder (the inputs are written there, and removed)")
    ap.add_argument("--scale", type=float, default=1.0, help="1: the documented limits (needs ~3 GiB of disk)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    a = ap.parse_args()
    rows = run_all(a.out, a.scale)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    worst = max(m["peak_mib"] for r in rows for k, m in r.items() if isinstance(m, dict))
    print(f"worst peak RSS: {worst:.0f} MiB over {len(rows)} inputs")
    return 0 if worst <= 2048 else 1


if __name__ == "__main__":
    sys.exit(main())
