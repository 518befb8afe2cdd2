"""The asv phase of `convbench bench`, old code against new, on one committed journal, side by side in one run.

The sweep is not repeated: each side gets the committed H200 forward night (tests/fixtures/asv/, 2,788 ok records
with their samples) as its run, and runs what `convbench bench` runs after its sweep: the selection, `asv machine`
and `asv run HEAD^! --record-samples` with the `-b` regexes, in a fresh clone of the repository at the side's
revision. The host has no GPU, so NVML is made to report one (a sitecustomize on the suite's path): the classes
then have the parameters a GPU host gives them. Each side's asv results are read back and checked to hold the
samples of every time it reports and every case of the run, so a side that drops cases cannot look fast.

    python scripts/bench_asv_phase.py [--old main] [--new HEAD] [--rounds 2] [-b REGEX]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "asv" / "h200-fwd-asv-samples.tar.gz"
MACHINE = "replay-h200"

SITECUSTOMIZE = """\
import harness.measurement.fingerprint as _fp
_fp.gpus = lambda: ([{"index": 0, "name": "NVIDIA H200 (replayed)"}], None)
"""

# Run inside the side's clone: the selection its bench would hand asv, by whichever API that revision has.
SELECT = """\
import json, sys
from pathlib import Path
from harness.run import asvselect
root, run_dir, cases, bench = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(","), sys.argv[4:]
if hasattr(asvselect, "bench_selection"):
    sel = asvselect.bench_selection(bench, run_dir)
    print(json.dumps([sel.regexes, sel.sets, sel.left_out]))
else:
    print(json.dumps(asvselect.selection(root, bench, run_dir, cases)))
"""


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def prepare(ref: str, work: Path) -> tuple[Path, Path, list[str]]:
    """A clone at ``ref``, the fixture's run extracted beside it; (clone, run dir, the run's cases)."""
    clone = work / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    git("checkout", "--quiet", git("rev-parse", ref, cwd=ROOT), cwd=clone)
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(work / "results", filter="data")
    run_dir = next((work / "results").glob("*/*/records.jsonl")).parent
    cases = sorted({json.loads(line)["case"] for line in (run_dir / "records.jsonl").read_text().splitlines()})
    (work / "shim").mkdir()
    (work / "shim" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (work / "home").mkdir()
    return clone, run_dir, cases


def asv_phase(clone: Path, run_dir: Path, cases: list[str], work: Path, bench: list[str]) -> dict:
    """What `convbench bench` does after its sweep, timed as bench times it (selection through asv's exit)."""
    path = f"{clone}:{work / 'shim'}"
    env = dict(os.environ, PYTHONPATH=path, ASV_PYTHONPATH=path, HOME=str(work / "home"),
               CONVBENCH_MACHINE=MACHINE, CONVBENCH_RUN_DIR=str(run_dir), CONVBENCH_CASES=",".join(cases),
               CONVBENCH_RESULTS=str(work / "results"), CONVBENCH_SWEPT="cudnn:fwd,torch:fwd",
               CONVBENCH_DIRECTIONS="fwd")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", SELECT, str(clone), str(run_dir), ",".join(cases), *bench], cwd=clone,
                         env=env, check=True, capture_output=True, text=True).stdout
    regexes, n_sets, n_left = json.loads(out)
    select_s = time.perf_counter() - t0
    asv = [sys.executable, "-m", "asv"]
    subprocess.run([*asv, "machine", "--yes", "--machine", MACHINE], cwd=clone, env=env, check=True,
                   capture_output=True)
    cmd = [*asv, "run", "HEAD^!", "--machine", MACHINE, "--show-stderr", "--durations", "all", "--record-samples"]
    for regex in regexes:
        cmd += ["-b", regex]
    res = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if res.returncode:
        raise SystemExit(f"asv run failed in {clone}:\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    valued, sampled, cases_seen = coverage(clone)
    return {"seconds": seconds, "select_s": select_s, "sets": n_sets, "left_out": n_left, "time_sets": valued,
            "with_samples": sampled, "cases": len(cases_seen), "all_cases": len(cases_seen) == len(cases)}


def coverage(clone: Path) -> tuple[int, int, set[str]]:
    """(time sets with a value, those carrying samples, the cases with a time) in asv's saved results."""
    (saved,) = [p for p in (clone / ".asv" / "results" / MACHINE).glob("*.json") if p.name != "machine.json"]
    data = json.loads(saved.read_text())
    cols = data["result_columns"]
    valued = sampled = 0
    cases: set[str] = set()
    for name, entry in data["results"].items():
        if ".time_" not in name:
            continue
        entry = dict(zip(cols, entry, strict=False))
        per_case = len(entry["result"]) // len(entry["params"][0])
        for i, (value, samples) in enumerate(zip(entry["result"], entry.get("samples") or [], strict=False)):
            if value is not None and value == value:
                valued += 1
                sampled += bool(samples)
                cases.add(entry["params"][0][i // per_case])
    return valued, sampled, cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", default="main", help="revision of the old side (default: %(default)s)")
    ap.add_argument("--new", default="HEAD", help="revision of the new side (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=2, help="old/new alternations (default: %(default)s)")
    ap.add_argument("-b", "--bench", action="append", default=None,
                    help="asv -b regex, as `convbench bench -b` (default: the forward job's, CudnnForward|TorchForward)")
    args = ap.parse_args(argv)
    ok = sum(1 for line in tarfile.open(FIXTURE).extractfile(
        next(m for m in tarfile.open(FIXTURE).getmembers() if m.name.endswith("records.jsonl"))).read().splitlines()
        if (r := json.loads(line)).get("kind") == "measurement" and r["status"] == "ok")
    with tempfile.TemporaryDirectory(prefix="asv-phase-") as tmp:
        sides = {}
        for name, ref in (("old", args.old), ("new", args.new)):
            work = Path(tmp) / name
            work.mkdir()
            sides[name] = (work, *prepare(ref, work))
        seen: dict[str, list[dict]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            for name in ("old", "new"):
                work, clone, run_dir, cases = sides[name]
                r = asv_phase(clone, run_dir, cases, work, args.bench or ["CudnnForward|TorchForward"])
                seen[name].append(r)
                print(f"{name} ({git('rev-parse', '--short', args.old if name == 'old' else args.new, cwd=ROOT)}): "
                      f"{r['seconds']:.1f} s (selection {r['select_s']:.1f} s), {r['sets']} parameter sets run, "
                      f"{r['left_out']} left out; asv's results: {r['time_sets']} time sets with a value, "
                      f"{r['with_samples']} with samples, {r['cases']} cases ({ok} ok records)", flush=True)
    best = {name: min(r["seconds"] for r in runs) for name, runs in seen.items()}
    print(f"asv phase on the H200 forward journal: old {best['old']:.1f} s, new {best['new']:.1f} s "
          f"(best of {args.rounds}): new/old = {best['new'] / best['old']:.3f}")
    # each side must keep every case, and samples on every time it reports
    return 0 if all(r["all_cases"] and r["with_samples"] == r["time_sets"] > 0
                    for runs in seen.values() for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
