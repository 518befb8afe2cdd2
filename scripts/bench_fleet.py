#!/usr/bin/env python3
"""Synthetic-fleet benchmark of `convbench collect` + `convbench report` (targets: 10^7 records in <= 30 s and
<= 1 GiB peak RSS on 2 cores; index page <= 5 MB rendering in <= 1 s in headless Chromium), with `asv publish`
on the same data (a subset it can finish) measured side by side in the same run.

The fleet is synthetic by design (a year of 50 machines does not exist on this host): run directories as a
finished run leaves them (the journal compressed beside its packed copy) with realistic shapes (5 GPU models, 4 images a year, CUDA 13 images not on Pascal, 2% night noise,
a few image regressions and nightly steps; forward and both backward passes, the records of cuDNN's documented
non-deterministic algorithms marked as real runs mark them and giving other bits on about half their nights, and an
undocumented surprise on about one machine in five; each line with the wall time, clock, flags, host time and
process and placement medians a real sweep writes, which cost collect 1.8x the parse of lines without them,
docs/fleet.md). It measures the harness, not GPUs.
Prints measured figures and ratios; nothing is hard-coded.

    python scripts/bench_fleet.py                       # full: 50 machines x 365 nights x 548 records
    python scripts/bench_fleet.py --machines 5 --nights 30   # a quick look
    python scripts/bench_fleet.py --morning             # also what one more night costs a fleet's morning
    python scripts/bench_fleet.py --reuse --workdir W --baseline DIR --rounds 3   # against another checkout:
        # ABBA rounds, each side's median and the ratio round by round (a shared VM drifts 10 % between runs)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = [("Tesla P40", "6.1"), ("NVIDIA GeForce RTX 3090", "8.6"), ("NVIDIA A100-SXM4-80GB", "8.0"),
          ("NVIDIA H100 80GB HBM3", "9.0"), ("NVIDIA H200", "9.0")]
IMAGES = ["cu118-cudnn8.9-torch2.1-ort1.17", "cu124-cudnn9.1-torch2.4-ort1.19", "cu126-cudnn9.5-torch2.6-ort1.20",
          "cu130-cudnn9.19-torch2.11-ort1.23"]
from harness.backends.cudnn_lib import DOCUMENTED_NONDETERMINISTIC  # noqa: E402  (after sys.path)
from harness.collect.packed import write_packed  # noqa: E402
from harness.core.cases import ALGOS as CUDNN_ALGOS  # noqa: E402
from harness.run.journal import read_journal  # noqa: E402

ALGOS = list(CUDNN_ALGOS["fwd"])  # onnxruntime's chosen algorithm names (forward)
# how often a documented non-deterministic record (cuDNN's atomics: backward data ALGO_0, backward filter ALGO_0
# and ALGO_3) gave other bits over its repeats in real runs: 713 of 1 560 on the H200 (docs/performance.md)
DOCUMENTED_UNSTABLE = 713 / 1560


def combos(n: int) -> list[dict]:
    out = []
    cases = [f"resnet50.layer{i}" for i in range(40)]
    for case in cases:
        for dtype in ("fp32", "fp16", "bf16"):
            for direction, algos in CUDNN_ALGOS.items():  # forward and both backward passes, as a sweep runs them
                for algo in algos:
                    for math_ in ("DEFAULT", "FMA"):
                        out.append({"case": case, "backend": "cudnn", "direction": direction, "algo": algo,
                                    "math": math_, "dtype": dtype, "settings": {},
                                    # marked as cudnn.py marks a real run's record
                                    "documented": (direction, algo) in DOCUMENTED_NONDETERMINISTIC})
            for mode in ("EXHAUSTIVE", "HEURISTIC", "DEFAULT"):
                out.append({"case": case, "backend": "ort", "direction": "fwd", "algo": "auto", "math": "DEFAULT",
                            "dtype": dtype, "settings": {"cudnn_conv_algo_search": mode}, "documented": False})
    random.Random(0).shuffle(out)
    return out[:n]


def _extra(c: dict, status: str, med: float) -> str:
    """extra as a real sweep writes it: every line its wall time; a timed cuDNN line also its two processes' and
    five placements' medians and whether the processes agreed (run/replicas.py). Derived from the median, not
    drawn, so the fleet's random stream (and so its findings) is the same as without them."""
    parts = [f'"wall_ms": {med * 60 + 2.5:.3f}']
    if c["documented"]:
        parts.append('"documented_nondeterministic": true')
    if status == "ok" and c["backend"] == "cudnn":
        placed = ", ".join(f"{med * (1 + 0.0005 * (k - 2)):.6g}" for k in range(5))
        parts += ['"fresh_process_equal": true', f'"placement_medians_ms": [{placed}]',
                  f'"process_medians_ms": [{med:.6g}, {med * 1.001:.6g}]']
    return "{" + ", ".join(sorted(parts)) + "}"


# the clock, flags and host time of a real timed line (measurement/timing.py): a GPU at its clock
_CLOCK = '"clock": {"sm_mhz_max": 1980, "sm_mhz_min": 1980, "slowdowns": []}, '
# a real night flags about one timed line in twenty "wide" (29-32 of 632 on each committed H200 night of
# h200-repeat8-fwd), not the same lines each night: the store keeps those lines' extras in a key set of their own,
# so a run's key sets and their members change from night to night as a real machine's do
WIDE_EVERY = 20


def _timer_extras(med: float) -> str:
    """A timed line's clock, flags and host time; flagged "wide" where the crc32 of its median's text falls on one
    in WIDE_EVERY (derived, not drawn: the fleet's random stream stays as it was)."""
    flags = '["wide"]' if zlib.crc32(f"{med:.6g}".encode()) % WIDE_EVERY == 0 else "[]"
    return f'{_CLOCK}"flags": {flags}, "host_ms": 0.021, '


def _line(c: dict, status: str, med: float, samples: list[float], err: float, cls: str, h: int,
          chosen: str | None, rep_eq: bool) -> str:
    s = ",".join(f"{v:.6g}" for v in samples)
    settings = json.dumps(c["settings"], sort_keys=True)
    extra = _extra(c, status, med)
    d = c["direction"]
    ch = f'"{chosen}"' if chosen else "null"
    if status != "ok":
        return (f'{{"accuracy": null, "algo": "{c["algo"]}", "backend": "{c["backend"]}", "case": "{c["case"]}", '
                f'"chosen_algo": null, "determinism": null, "device": "cuda:0", "direction": "{d}", '
                f'"dtype": "{c["dtype"]}", "explanation": "cuDNN does not implement this", "extra": {extra}, '
                f'"kind": "measurement", "layout": "NHWC", "math": "{c["math"]}", "reason": "not supported", '
                f'"schema": 1, "settings": {settings}, "status": "{status}", "time": null, '
                f'"workspace_bytes": null}}\n')
    return (f'{{"accuracy": {{"inf": 0, "max_abs": {err * 3:.4g}, "max_norm_err": {err:.4g}, "nan": 0, '
            f'"precision_class": "{cls}", "rel_l2": {err / 2:.4g}, "unwritten": 0}}, "algo": "{c["algo"]}", '
            f'"backend": "{c["backend"]}", "case": "{c["case"]}", "chosen_algo": {ch}, "determinism": '
            f'{{"distinct_outputs": {1 if rep_eq else 2}, "fresh_handle_equal": true, "hash": "{h & (2**64 - 1):016x}{h & 0xffff:016x}", '
            f'"hash_algo": "polyhash2x64-v1", "repeat_equal": {"true" if rep_eq else "false"}, "repeats": 2}}, '
            f'"device": "cuda:0", "direction": "{d}", "dtype": "{c["dtype"]}", "explanation": null, "extra": {extra}, '
            f'"kind": "measurement", "layout": "NHWC", "math": "{c["math"]}", "reason": null, "schema": 1, '
            f'"settings": {settings}, "status": "ok", "time": {{{_timer_extras(med)}"iqr_ms": {med * 0.01:.4g}, "median_ms": {med:.6g}, '
            f'"min_ms": {min(samples):.6g}, "mode": "hot", "n": {len(samples)}, "samples_ms": [{s}], '
            f'"timer": "cuda_event"}}, "workspace_bytes": 0}}\n')


def gen_machine(args: tuple) -> int:
    """All nights of one machine (run directories), deterministic from its index; each run packed at its end as a
    host's Journal.finish packs it (collect/packed.py), unless a fifth argument False says not to."""
    mi, nights, n_combos, out = args[:4]
    pack = args[4] if len(args) > 4 else True
    rng = random.Random(mi)
    model, sm = MODELS[mi % len(MODELS)]
    machine = f"node{mi:02d}-gpu0-{model.split()[-1].lower()}"
    cs = combos(n_combos)
    base = [rng.lognormvariate(0, 1) for _ in cs]
    unsupported = {i for i in range(len(cs)) if rng.random() < 0.08}
    step_combos = {i: (rng.randrange(nights // 3, max(nights // 3 + 1, nights - 10)), 1.3)
                   for i in rng.sample(range(len(cs)), 3)}
    # what gives other bits run to run: the combinations cuDNN documents as non-deterministic, on about half their
    # nights as on the H200 (each record marked, as cudnn.py marks it), and, on about one machine in five, one
    # combination nothing documents (the surprise the determinism page is there to show)
    surprise = set(rng.sample([i for i, c in enumerate(cs) if not c["documented"]], 1)) if rng.random() < 0.2 else set()
    start = dt.datetime(2025, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
    written = 0
    for night in range(nights):
        q = min(3, night * 4 // max(nights, 1))
        if model == "Tesla P40":
            q = min(q, 2)  # CUDA 13 images no longer build for Pascal
        image = IMAGES[q]
        started = start + dt.timedelta(days=night, seconds=rng.randrange(600))
        run_id = f"{started:%Y%m%dT%H%M%SZ}-{image}-bench-{mi}"
        d = Path(out) / machine / run_id
        d.mkdir(parents=True, exist_ok=True)
        # the stack an image carries, so that the report pairs each night with its previous stack
        cu, cudnn, torch_v, ort_v = (re.sub("^[a-z]+", "", part) for part in image.split("-"))
        fp = {"hostname": f"node{mi:02d}", "gpu": {"name": model, "sm": sm, "index": 0, "driver": "580.65",
                                                   "uuid": f"GPU-{mi:08x}-bench"},
              "image": image, "image_id": f"sha256:{hash(image) & (2**64 - 1):016x}", "cpu": "x86_64",
              "cpu_count": 64, "libraries": {"cudnn": {"version": cudnn}},
              "software": {"python": "3.12", "torch": torch_v, "torch_cuda": f"{cu[:-1]}.{cu[-1]}",
                           "onnxruntime": ort_v, "onnxruntime_providers": ["CUDAExecutionProvider",
                                                                                       "CPUExecutionProvider"]},
              "env": {}}
        (d / "run.json").write_text(json.dumps({"schema": 1, "run_id": run_id, "machine": machine, "image": image,
                                                "started": started.isoformat(), "suite_revision": "bench",
                                                "fingerprint": fp, "options": {"synthetic": True}}))
        night_noise = rng.gauss(0, 0.02)
        lines = []
        for i, c in enumerate(cs):
            if i in unsupported:
                lines.append(_line(c, "CUDNN_STATUS_NOT_SUPPORTED", 0, [], 0, "", 0, None, True))
                continue
            med = base[i] * (1 + night_noise) * (1 + rng.gauss(0, 0.01))
            if q >= 2 and i % 97 == 0:
                med *= 1.2  # an image regression on a few combinations
            if i in step_combos and night >= step_combos[i][0]:
                med *= step_combos[i][1]
            samples = [med * (1 + rng.gauss(0, 0.01)) for _ in range(8)]
            cls = {"fp32": "tf32" if c["math"] == "DEFAULT" and sm >= "8" else "fp32", "fp16": "fp16",
                   "bf16": "bf16"}[c["dtype"]]
            err = {"fp32": 1e-7, "tf32": 2e-4, "fp16": 3e-4, "bf16": 2e-3}[cls] * (1 + 0.1 * rng.random())
            unstable = i in surprise or (c["documented"] and rng.random() < DOCUMENTED_UNSTABLE)
            h = (i * 1_000_003 + q) if not unstable else rng.getrandbits(63)
            chosen = ALGOS[(i + (rng.random() < 0.1)) % len(ALGOS)] if c["backend"] == "ort" else None
            lines.append(_line(c, "ok", med, samples, err, cls, h, chosen, not unstable))
        (d / "records.jsonl").write_text("".join(lines))
        (d / "end.json").write_text(json.dumps({"counts": {"ok": len(cs) - len(unsupported)}}))
        if pack and not write_packed(d):
            raise RuntimeError(f"{d}: the generated journal could not be packed")
        written += len(cs)
    return written


class TreeRSS:
    """Peak of the summed RSS of a process and all its descendants, sampled every 0.1 s from /proc."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0, False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _tree(self) -> list[int]:
        kids: dict[int, list[int]] = {}
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
                    kids.setdefault(ppid, []).append(int(p))
                except (OSError, IndexError, ValueError):
                    pass
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo += kids.get(p, [])
        return out

    def _run(self) -> None:
        while not self._stop:
            total = 0
            for p in self._tree():
                try:
                    for line in open(f"/proc/{p}/status"):
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
                except OSError:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(0.1)

    def stop(self) -> int:
        self._stop = True
        self.thread.join()
        return self.peak


CPU_SECONDS: dict[str, float] = {}
# a run's files collect reads: its journal too, whose sha256 a packed copy must match (packed.py); without it in
# the page cache, the first collect of a --baseline run read 10 GiB of journals from the disk and the second did not
WARMED = ("run.json", "end.json", "records.packed", "records.jsonl", "records.jsonl.gz")


def timed(cmd: list[str], **kw) -> tuple[float, int, str]:
    """(wall s, peak RSS of the process tree, output); the tree's CPU seconds (user + sys of the command and its
    workers, which the shared VM's other load does not inflate the way it inflates wall time) go to CPU_SECONDS."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    rss = TreeRSS(proc.pid)
    out, _ = proc.communicate()
    wall = time.perf_counter() - t0
    peak = rss.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_SECONDS[cmd[-1] if cmd[0] != sys.executable else cmd[3]] = (after.ru_utime - before.ru_utime
                                                                    + after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-3000:]}")
    return wall, peak, out


def convbench(*args: str, root: Path = ROOT) -> list[str]:
    """The command line of `convbench ARGS` with the harness of ``root``. ``root`` goes first on sys.path: with
    ``-c``, Python puts the current folder there, ahead of PYTHONPATH, so a --baseline run started from a
    checkout's root measured that checkout's harness instead of the baseline's."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(root)!r}); from harness.cli import main; "
            "import harness; assert harness.__file__.startswith(sys.path[0]), harness.__file__; sys.exit(main())",
            *args]


def collect_fleet(fleet: Path, store: Path, jobs: int, root: Path = ROOT) -> list[str]:
    """`convbench collect` of the whole fleet into ``store`` with ``jobs`` parsers, quiet (convbench)."""
    return convbench("collect", str(fleet), "--store", str(store), "--jobs", str(jobs), "-q", root=root)


def remove_store(store: Path) -> None:
    """The store and its write-ahead log, so that the next collect builds it from nothing."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store}{suffix}").unlink(missing_ok=True)


class Side(NamedTuple):
    """One code measured on the fleet: its harness, environment, store and site."""

    label: str
    root: Path
    env: dict[str, str]
    store: Path
    site: Path


def run_side(side: Side, fleet: Path, jobs: int, round_no: int) -> dict[str, float]:
    """One collect of the whole fleet into a new store, then the report of it, by ``side``'s code; printed."""
    remove_store(side.store)
    subprocess.run(["sync"], check=False)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    c_wall, c_rss, c_out = timed(collect_fleet(fleet, side.store, jobs, root=side.root), env=side.env)
    c_cpu = CPU_SECONDS["collect"]
    r_wall, r_rss, r_out = timed(convbench("report", "--store", str(side.store), "--out", str(side.site),
                                           root=side.root), env=side.env)
    r_cpu = CPU_SECONDS["report"]
    print(f"round {round_no}, {side.label} (load {load}): collect {c_wall:.1f} s, {c_cpu:.1f} CPU-s, peak RSS "
          f"{c_rss / 2**20:.0f} MiB -- {c_out.strip()}")
    print(f"round {round_no}, {side.label}: report {r_wall:.1f} s, {r_cpu:.1f} CPU-s, peak RSS {r_rss / 2**20:.0f} "
          f"MiB -- {r_out.strip()}; collect + report {c_wall + r_wall:.1f} s, {c_cpu + r_cpu:.1f} CPU-s")
    return {"c_wall": c_wall, "r_wall": r_wall, "wall": c_wall + r_wall, "cpu": c_cpu + r_cpu,
            "c_cpu": c_cpu, "r_cpu": r_cpu, "rss": max(c_rss, r_rss)}


def asv_tree(fleet: Path, dest: Path, machines: int, nights: int) -> int:
    """The first ``machines`` x ``nights`` of the fleet as an asv project: a git repo with one commit per night,
    results/<machine>/<commit>-<env>.json with one parameterised benchmark, benchmarks.json, asv.conf.json."""
    repo = dest / "repo"
    repo.mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    commits = []
    for i in range(nights):
        (repo / "night.txt").write_text(str(i))
        subprocess.run([*git, "add", "night.txt"], check=True)
        env = dict(os.environ, GIT_AUTHOR_DATE=f"2025-01-01T00:00:00+00:00 +{i}day",
                   GIT_COMMITTER_DATE=(dt.datetime(2025, 1, 1) + dt.timedelta(days=i)).isoformat())
        subprocess.run([*git, "commit", "-q", "-m", f"night {i}"], check=True, env=env)
        commits.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                      check=True).stdout.strip())
    (dest / "asv.conf.json").write_text(json.dumps({"version": 1, "project": "fleet", "project_url": "",
                                                    "repo": str(repo), "branches": ["main"],
                                                    "environment_type": "existing", "results_dir": "results",
                                                    "html_dir": "html", "benchmark_dir": "benchmarks"}))
    results = dest / "results"
    results.mkdir()
    n = 0
    machine_dirs = sorted(p for p in fleet.iterdir() if p.is_dir())[:machines]
    bench = "bench_fleet.TimeConv.time_conv"
    params_written = False
    for md in machine_dirs:
        (results / md.name).mkdir()
        (results / md.name / "machine.json").write_text(json.dumps({"machine": md.name, "arch": "x86_64",
                                                                     "cpu": "x", "num_cpu": "64", "os": "Linux",
                                                                     "ram": "1", "version": 1}))
        for night, rd in enumerate(sorted(md.iterdir())[:nights]):
            keys, vals, samples = [], [], []
            for line in read_journal(rd).decode().splitlines():
                r = json.loads(line)
                keys.append(f"'{r['case']}|{r['backend']}|{r['direction']}|{r['algo']}|{r['math']}|{r['dtype']}|"
                            f"{r['settings'].get('cudnn_conv_algo_search', '')}'")
                t = r["time"]
                vals.append(t["median_ms"] / 1000 if t else None)
                samples.append([s / 1000 for s in t["samples_ms"]] if t else None)
            if not params_written:
                (results / "benchmarks.json").write_text(json.dumps({bench: {
                    "name": bench, "param_names": ["combo"], "params": [keys], "type": "time", "unit": "seconds",
                    "version": "1", "timeout": 60, "code": "", "number": 0, "repeat": 0, "min_run_count": 2,
                    "rounds": 1, "sample_time": 0.01, "warmup_time": -1}, "version": 2}))
                params_written = True
            meta = json.loads((rd / "run.json").read_text())
            data = {"commit_hash": commits[night], "env_name": "existing-py", "date":
                    int(dt.datetime.fromisoformat(meta["started"]).timestamp() * 1000),
                    "params": {"machine": md.name, "python": "3.12"}, "python": "3.12", "requirements": {},
                    "env_vars": {}, "result_columns": ["result", "params", "version", "started_at", "duration",
                                                       "stats_ci_99_a", "stats_ci_99_b", "stats_q_25",
                                                       "stats_q_75", "stats_number", "stats_repeat", "samples"],
                    "results": {bench: [vals, [keys], "1", 0, 1.0, None, None, None, None, None, None, samples]},
                    "durations": {}, "version": 2}
            (results / md.name / f"{commits[night][:8]}-existing-py.json").write_text(json.dumps(data))
            n += len(vals)
    return n


def every_page(browser: object, site: Path) -> None:
    """Every page of the report loaded in Chromium, against the browser tests' 0.5 s a page: a page over it is
    loaded once more and its better load counts (the VM's noise is not the page's)."""
    loads = []
    for f in sorted(site.rglob("*.html")):
        pg = browser.open(f.as_uri())
        assert not pg.errors, (f, pg.errors)
        t = pg.load_seconds
        if t > 0.5:
            pg.navigate(f.as_uri())
            t = min(t, pg.load_seconds)
        browser.call("Target.closeTarget", {"targetId": pg.target})  # 160 open tabs slow the browser down
        loads.append((t, str(f.relative_to(site))))
    loads.sort(reverse=True)
    over = [name for t, name in loads if t > 0.5]
    print(f"every page in Chromium: {len(loads)} pages, slowest {', '.join(f'{n} {t * 1000:.0f} ms' for t, n in loads[:3])}"
          f"; median {loads[len(loads) // 2][0] * 1000:.0f} ms; {len(over)} over 0.5 s{': ' + ', '.join(over) if over else ''}")


def morning(fleet: Path, work: Path, jobs: int, env: dict) -> None:
    """A nightly job's morning, beside the cold collect of the whole year that the target is about: the store holds
    the fleet but its newest night, that night's runs arrive (one a machine), then collect and the report. What a
    fleet pays each day once its store exists (collect/fresh.py: such a collect writes through the log)."""
    newest = [max(m.iterdir()) for m in sorted(fleet.iterdir()) if m.is_dir()]
    aside, store = work / "newest-night", work / "morning.sqlite"
    remove_store(store)
    moved = []
    try:
        for run in newest:
            (aside / run.parent.name).mkdir(parents=True, exist_ok=True)
            moved.append((run, run.rename(aside / run.parent.name / run.name)))
        timed(collect_fleet(fleet, store, jobs), env=env)
    finally:  # the fleet is left as it was found
        for run, held in moved:
            held.rename(run)
    c_wall, c_rss, c_out = timed(collect_fleet(fleet, store, jobs), env=env)
    r_wall, r_rss, _ = timed(convbench("report", "--store", str(store), "--out", str(work / "site-morning")), env=env)
    print(f"morning (the newest night's {len(newest)} runs into a store of the rest, then the report): collect "
          f"{c_wall:.1f} s, report {r_wall:.1f} s, {c_wall + r_wall:.1f} s; peak RSS "
          f"{max(c_rss, r_rss) / 2**30:.2f} GiB -- {c_out.strip()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machines", type=int, default=50)
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--combos", type=int, default=548, help="records per run (50 x 365 x 548 = 1.0e7)")
    ap.add_argument("--workdir", default=None, help="where the fleet is generated (default: a temp dir)")
    ap.add_argument("--reuse", action="store_true", help="reuse a fleet already generated in --workdir")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--asv-machines", type=int, default=2, help="asv publish subset: machines (0: skip)")
    ap.add_argument("--asv-nights", type=int, default=30, help="asv publish subset: nights")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--every-page", action="store_true", help="also load every page of the report in Chromium "
                    "(a page over 0.5 s gets a second try; about a minute more)")
    ap.add_argument("--no-packed", action="store_true", help="generate runs without their packed copies (as "
                    "older hosts wrote them): collect parses every journal line")
    ap.add_argument("--morning", action="store_true", help="also time a nightly job's morning: the newest night "
                    "collected into a store of the rest of the fleet, then the report (about a minute more)")
    ap.add_argument("--rounds", type=int, default=1, help="collect + report this many times on each side, "
                    "alternating with --baseline (ABBA): figures are each side's median, ratios round by round")
    ap.add_argument("--baseline", default=None, help="another checkout's root (e.g. `git archive OLD harness | tar "
                    "-x -C DIR`): its collect + report run on the same fleet first, then in turn with this code's (--rounds), for a "
                    "before/after in one run")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be 1 or more")

    work = Path(args.workdir or tempfile.mkdtemp(prefix="convbench-fleet-"))
    fleet = work / "fleet"
    print(f"bench_fleet: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.node()} "
          f"({os.cpu_count()} CPUs, {platform.processor() or platform.machine()}), python "
          f"{platform.python_version()}, harness from {ROOT}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        import orjson  # noqa: F401

        print("bench_fleet: JSON parser: orjson")
    except ImportError:
        print("bench_fleet: JSON parser: stdlib json (install orjson for the fast path)")
    expected = args.machines * args.nights * args.combos
    if not (args.reuse and fleet.exists()):
        shutil.rmtree(fleet, ignore_errors=True)
        fleet.mkdir(parents=True)
        t0 = time.perf_counter()
        with mp.get_context("fork").Pool(args.jobs) as pool:
            n = sum(pool.imap_unordered(gen_machine, [(mi, args.nights, args.combos, str(fleet), not args.no_packed)
                                                      for mi in range(args.machines)]))
        size = sum(f.stat().st_size for f in fleet.rglob("*"))
        print(f"generated: {n} records in {args.machines * args.nights} runs"
              f"{'' if args.no_packed else ' with their packed copies'}, {size / 2**30:.2f} GiB, "
              f"{time.perf_counter() - t0:.0f} s (not part of the target)")
    else:  # read once what collect reads, so that the figures are of the same warm page cache a fresh fleet has
        t0 = time.perf_counter()
        names = WARMED if not args.no_packed else (*WARMED[:2], WARMED[3])
        size = sum(len(f.read_bytes()) for f in fleet.glob("*/*/*") if f.name in names)
        print(f"reusing the fleet in {fleet} ({expected} records); {size / 2**30:.2f} GiB that collect reads "
              f"read once beforehand, {time.perf_counter() - t0:.0f} s (not part of the target)")
    subprocess.run(["sync"], check=False)

    store = work / "fleet.sqlite"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    sides = [Side("this", ROOT, env, store, work / "site")]
    if args.baseline:  # the same fleet, the same machine state, the code before: printed next to the figures below
        base_root = Path(args.baseline).resolve()
        sides.insert(0, Side("baseline", base_root, dict(os.environ, PYTHONPATH=str(base_root)),
                             work / "fleet-base.sqlite", work / "site-base"))
        print(f"baseline: harness from {args.baseline}")
    runs: dict[str, list[dict[str, float]]] = {side.label: [] for side in sides}
    for k in range(args.rounds):  # ABBA...: a drift of this VM's speed over the rounds falls on both sides alike
        for side in (sides if k % 2 == 0 else sides[::-1]):
            runs[side.label].append(run_side(side, fleet, args.jobs, k + 1))
    for side in sides[:-1]:
        remove_store(side.store)
    this = {key: statistics.median(r[key] for r in runs["this"]) for key in runs["this"][0]}
    this["rss"] = max(r["rss"] for r in runs["this"])  # the peak of every round
    total = this["wall"]
    index = work / "site" / "index.html"
    site_size = sum(f.stat().st_size for f in (work / "site").rglob("*.html"))
    print(f"store: {store.stat().st_size / 2**30:.2f} GiB; site: {site_size / 2**20:.1f} MiB; "
          f"index.html: {index.stat().st_size / 2**20:.3f} MiB")
    of = f" (median of {args.rounds} rounds)" if args.rounds > 1 else ""
    print(f"collect + report: {total:.1f} s{of} = {total / 30:.2f} x the 30 s target; peak RSS "
          f"{this['rss'] / 2**30:.2f} GiB = {this['rss'] / 2**30:.2f} x the 1 GiB target; index "
          f"{index.stat().st_size / 5e6:.3f} x the 5 MB target")
    if args.baseline:
        ratios = {what: sorted(a[w] / b[w] for a, b in zip(runs["this"], runs["baseline"], strict=True))
                  for what, w in (("wall", "wall"), ("CPU", "cpu"), ("collect", "c_wall"), ("report", "r_wall"))}
        print("after / baseline, round by round: " + "; ".join(
            f"{what} {statistics.median(v):.2f} ({v[0]:.2f}-{v[-1]:.2f})" if len(v) > 1 else f"{what} {v[0]:.2f}"
            for what, v in ratios.items()))
    s_wall, _, s_out = timed(collect_fleet(fleet, store, args.jobs), env=env)
    print(f"re-collect (nothing new): {s_wall:.1f} s -- {s_out.strip()}")
    if args.morning:
        morning(fleet, work, args.jobs, env)

    try:
        sys.path.insert(0, str(ROOT / "tests"))  # the browser is a test helper, not part of the package
        from browser import Browser, BrowserUnavailable

        try:
            with Browser() as b:
                times = []
                for _ in range(3):
                    page = b.open(index.as_uri())
                    nav = page.evaluate("(() => { const e = performance.getEntriesByType('navigation')[0]; "
                                        "return e.loadEventEnd - e.startTime; })()")
                    times.append((page.load_seconds, nav / 1000))
                    assert not page.errors, page.errors
                best = min(times)
                height = page.evaluate("document.documentElement.scrollHeight")
                print(f"index in Chromium: load {best[0] * 1000:.0f} ms (navigate -> load event), navigation "
                      f"timing {best[1] * 1000:.0f} ms; best of 3 = {best[0]:.2f} x the 1 s target; {height} px "
                      "tall at 1440 px")
                # the pages a fleet makes longest (runs, determinism) and the three largest files, against the
                # browser tests' 0.5 s a page
                site = work / "site"
                largest = sorted(site.rglob("*.html"), key=lambda f: f.stat().st_size)[-3:]
                for f in dict.fromkeys([site / "runs.html", site / "determinism.html", *largest]):
                    loads = []
                    for _ in range(2):
                        pg = b.open(f.as_uri())
                        assert not pg.errors, (f, pg.errors)
                        loads.append(pg.load_seconds)
                    print(f"  {f.relative_to(site)}: {f.stat().st_size / 2**20:.2f} MiB, load {min(loads) * 1000:.0f} "
                          f"ms (best of 2) = {min(loads) / 0.5:.2f} x 0.5 s, "
                          f"{pg.evaluate('document.documentElement.scrollHeight')} px tall")
                if args.every_page:
                    every_page(b, site)
        except BrowserUnavailable as exc:
            print(f"index in Chromium: not measured ({exc})")
    except ImportError as exc:
        print(f"index in Chromium: not measured ({exc})")

    if args.asv_machines and shutil.which("asv"):
        adir = work / "asv"
        shutil.rmtree(adir, ignore_errors=True)
        n = asv_tree(fleet, adir, args.asv_machines, args.asv_nights)
        a_wall, a_rss, a_out = timed(["asv", "publish", "--config", str(adir / "asv.conf.json")], cwd=adir)
        sub_store = adir / "sub.sqlite"
        sub_dirs = [str(p) for p in sorted(fleet.iterdir())[:args.asv_machines]]
        # the same runs as journal directories (first nights of the same machines) for convbench
        sub_runs = [str(r) for d in sub_dirs for r in sorted(Path(d).iterdir())[:args.asv_nights]]
        cb_wall, cb_rss, _ = timed(convbench("collect", *sub_runs, "--store", str(sub_store), "-q"), env=env)
        cr_wall, cr_rss, _ = timed(convbench("report", "--store", str(sub_store), "--out", str(adir / "site")),
                                   env=env)
        print(f"asv publish on {n} results ({args.asv_machines} machines x {args.asv_nights} nights): "
              f"{a_wall:.1f} s, peak RSS {a_rss / 2**20:.0f} MiB")
        print(f"convbench collect + report on the same runs: {cb_wall + cr_wall:.1f} s "
              f"(collect {cb_wall:.1f} + report {cr_wall:.1f}), peak RSS {max(cb_rss, cr_rss) / 2**20:.0f} MiB; "
              f"ratio asv publish / convbench = {a_wall / (cb_wall + cr_wall):.2f}")
        print(f"asv publish extrapolated linearly to {expected} results: "
              f"{a_wall * expected / max(n, 1) / 60:.0f} min (not run)")
    elif args.asv_machines:
        print("asv publish: not measured (asv not on PATH)")
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
