#!/usr/bin/env python3
"""Two fleet nights on a real Slurm cluster on this machine, end to end, in one command (as root):

    .venv/bin/python scripts/fleet_night.py [--work DIR]

Starts a 3-node x 2-GPU Slurm cluster (tests/slurm_cluster.py: Debian's slurmctld and slurmd, GPUs as generic
resources on placeholder devices), renders the nights with `convbench images render --slurm --no-docker`, runs
night 1 with sbatch, collects the outbox, runs night 2 with ONE GPU slot degraded, collects again, compares each
slot's night 2 with its night 1 (`convbench compare`: exit 1 on exactly the degraded slot, 0 on the five others),
renders the morning report and loads it in headless Chromium; then stops the cluster and says what it proved.

The nodes have no GPU, so each slot measures the CPU (`--job sweep --backends torch --cases quick.seed`), and six
slots share this machine's cores: their times are not stable enough to gate on, so the comparison ignores time
(`--ignore time`). The degradation is injected, and labelled as such: after night 2's job, one ok torch record in
that slot's journal (records.jsonl, inside its tarball) gets its accuracy errors (max_abs, max_norm_err, rel_l2)
multiplied by 1000, and the run's packed copy (records.packed) is deleted so collect reads the journal.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import html
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests._fleet_data import degraded_journal  # noqa: E402
from tests.slurm_cluster import Cluster, unavailable  # noqa: E402

MATRIX = ROOT / "tests" / "fixtures" / "fleet_matrix.toml"
CONVBENCH = Path(sys.executable).parent / "convbench"
DEGRADED = "n2-slot1-cpu"
SLOTS = [f"n{n}-slot{s}-cpu" for n in (1, 2, 3) for s in (0, 1)]


def say(text: str) -> None:
    print(f"fleet_night: {text}", flush=True)


def convbench(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(CONVBENCH), *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise SystemExit(f"fleet_night: convbench {' '.join(args)} exited {out.returncode}:\n{out.stdout}{out.stderr}")
    return out


def night(cluster: Cluster, script: Path, outbox: Path, label: str, date: str) -> dict[str, Path]:
    """One night: the rendered script submitted with sbatch, its night named ``date`` (CONVBENCH_NIGHT, which the
    script otherwise sets to the date the job starts)."""
    started = time.monotonic()
    job = cluster.sbatch(script, cwd=script.parent, env={"CONVBENCH_NIGHT": date})
    end = cluster.wait(job, timeout=600)
    log = script.parent / f"convbench-ci-{job}.log"
    shipped = {s: outbox / f"convbench-ci-{job}-{s}.tar.gz" for s in SLOTS}
    missing = [s for s, p in shipped.items() if not p.exists()]
    say(f"{label}: job {job} {end['JobState']} exit {end['ExitCode']} on {end['NodeList']} in "
        f"{time.monotonic() - started:.1f} s; {len(SLOTS) - len(missing)} of {len(SLOTS)} GPU-slot tarballs")
    if (end["JobState"], end["ExitCode"]) != ("COMPLETED", "0:0") or missing:
        raise SystemExit(f"fleet_night: {label} failed (missing {missing}); its log:\n"
                         + (log.read_text() if log.exists() else "(none)"))
    return shipped


def degrade(tarball: Path) -> str:
    """INJECTED DEGRADATION: one ok torch record's accuracy errors x1000 in the tarball's journal; the packed
    copy removed so that collect reads the journal. Rewritten under a temporary name and renamed."""
    with tarfile.open(tarball) as tf:
        members = [(m, tf.extractfile(m).read() if m.isfile() else None) for m in tf.getmembers()]
    changed = ""
    out = []
    for member, data in members:
        name = member.name
        if name.endswith("/records.packed"):
            continue
        if name.endswith(("/records.jsonl", "/records.jsonl.gz")) and not changed:
            gz = name.endswith(".gz")  # a finished run keeps its journal compressed
            try:
                text, rec = degraded_journal((gzip.decompress(data) if gz else data).decode(), backend="torch")
            except ValueError as exc:
                raise SystemExit(f"fleet_night: {tarball}: {exc}") from None
            changed = f"{name}: {rec['case']} {rec['direction']} {rec['dtype']} {rec['layout']}"
            data = gzip.compress(text.encode()) if gz else text.encode()
            member.size = len(data)
        out.append((member, data))
    if not changed:
        raise SystemExit(f"fleet_night: no journal in {tarball} to degrade")
    part = tarball.with_name("." + tarball.name + ".part")
    with tarfile.open(part, "w:gz") as tf:
        for member, data in out:
            tf.addfile(member, io.BytesIO(data) if data is not None else None)
    part.rename(tarball)
    return changed


def morning_says(page: Path) -> list[str]:
    """The index's status line and, per GPU slot, whether it reported and whether it fails the gate."""
    text = page.read_text()
    plain = lambda h: " ".join(html.unescape(re.sub(r"<[^>]+>", " ", h)).split())  # noqa: E731
    status = re.search(r'<div id="status"[^>]*>(.*?)<span class="muted">', text, re.S)
    out = [plain(status.group(1)) if status else "(no status line)"]
    blocks = text.split('<div class="machine" id="m-')[1:]  # the machines with findings, each to the next one
    for slot in SLOTS:
        mine = [b for b in blocks if f"{slot}</a>" in b.split("</h3>")[0]]
        out.append(f"{slot}: " + ("findings, " + ("FAILS THE GATE" if "fails the gate" in mine[0] else "none gated")
                                  if mine else "nothing new"))
    return out


def screenshot(page: Path, work: Path) -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        return "no chromium on PATH (scripts/host-chromium.sh installs it): page not loaded"
    png = work / "morning.png"
    out = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--user-data-dir={work / 'chromium-profile'}", "--window-size=1440,2000",
                          f"--screenshot={png}", page.as_uri()], capture_output=True, text=True, timeout=120)
    if out.returncode != 0 or not png.exists():
        return f"chromium could not load {page}: {out.stderr.strip().splitlines()[-1:]}"
    return f"loaded in headless Chromium, screenshot {png} ({png.stat().st_size} bytes)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=None, help="folder for the cluster, nights and report "
                    "(default: a new temporary folder, kept)")
    args = ap.parse_args()
    why = unavailable()
    if why:
        raise SystemExit(f"fleet_night: {why}")
    began = time.monotonic()
    work = (args.work or Path(tempfile.mkdtemp(prefix="convbench-fleet-night-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    outbox, store, fleet = work / "inbox", work / "fleet.sqlite", work / "fleet"
    outbox.mkdir(exist_ok=True)
    cluster = Cluster(work / "slurm", nodes=3, gpus=2)
    say(f"work folder {work}")
    cluster.start()
    say(f"Slurm cluster up: {', '.join(f'{n} {s}' for n, s in sorted(cluster.sinfo().items()))}, 2 GPU slots each")
    try:
        convbench("images", "--matrix", str(MATRIX), "render", "--slurm", "--no-docker", f"--convbench={CONVBENCH}",
                  f"--results={work / 'node-local'}", f"--outbox={outbox}", "--job", "sweep", "--backends", "torch",
                  "--cases", "quick.seed", f"--fleet-dir={fleet}", "--out", str(fleet))
        script = fleet / "slurm" / "convbench-ci.sbatch"
        say(f"rendered {script} (submitted unchanged)")
        today = dt.datetime.now(dt.timezone.utc).date()
        dates = [str(today - dt.timedelta(days=1)), str(today)]
        say(f"the two nights run minutes apart; they are named {dates[0]} and {dates[1]} (CONVBENCH_NIGHT), as two "
            "nightly jobs on consecutive dates would be")
        first = night(cluster, script, outbox, "night 1", dates[0])
        convbench("collect", *map(str, first.values()), "--store", str(store), "-q")
        say(f"night 1 collected into {store}")
        second = night(cluster, script, outbox, "night 2", dates[1])
        what = degrade(second[DEGRADED])
        say(f"INJECTED DEGRADATION in GPU slot {DEGRADED} of night 2: accuracy errors x1000 in {what}")
        convbench("collect", *map(str, second.values()), "--store", str(store), "-q")
        say("night 2 collected")
        say("comparing each slot's night 2 with its night 1, --ignore time (six CPU slots share two cores: "
            "their times are not stable enough to gate on)")
        codes = {}
        for slot in SLOTS:
            out = convbench("compare", str(first[slot]), str(second[slot]), "--ignore", "time", check=False)
            codes[slot] = out.returncode
            say(f"  compare {slot}: exit {out.returncode}" + (
                f"  <- {next((ln.strip() for ln in out.stdout.splitlines() if 'accuracy' in ln.lower()), '')}"
                if out.returncode else ""))
        expected = {s: (1 if s == DEGRADED else 0) for s in SLOTS}
        site = work / "report"
        convbench("report", "--store", str(store), "--out", str(site))
        page = site / "index.html"
        say(f"morning report {page}")
        morning = morning_says(page)
        for line in morning:
            say(f"  the morning page: {line}")
        say(screenshot(page, work))
    finally:
        cluster.stop()
        say("Slurm cluster stopped")
    wall = time.monotonic() - began
    gated = [line.split(":")[0] for line in morning[1:] if line.endswith("FAILS THE GATE")]
    ok = codes == expected and gated == [DEGRADED] and "1 finding fails the gate on 1 of 6 machines" in morning[0]
    say(f"{'PROVED' if ok else 'NOT PROVED'} in {wall:.0f} s: two nights of one sbatch each on 3 nodes x 2 GPU "
        f"slots shipped 6 of 6 slot tarballs each; collect took both; compare failed exactly the degraded slot "
        f"{DEGRADED} (exit 1) and passed the other five (exit 0); the morning page fails the gate on that slot "
        f"alone" if ok else f"compare exits {codes}, expected {expected}; the morning page gates {gated}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
