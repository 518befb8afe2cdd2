"""The nightly job (`convbench bench`): the sweeps the asv suite's classes read, measured once into one run, then
`asv run` on the parameter sets that have data, with asv's results saved for this commit.

The sweeps that the selected classes read are measured first, here, in one sweep (one worker process, case by
case, each case's operands drawn once for every backend and direction); asv's setup_cache then only reads the
journal, and asv is given only the parameter sets that have data (asvselect). Each class sweeping on its own cost
a process, a torch import and a CUDA context per class, and drew every case's operands again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ..backends import SweepOptions, command_options
from ..core.cases import DIRECTIONS, Case
from ..core.errors import EXIT_ENVIRONMENT, UserError
from ..core.progress import Progress
from ..deploy import resources
from . import asvselect

ASV_STEP = re.compile(r"^\[\s*(\d+(?:\.\d+)?)%\]")  # asv's "[ 12.50%] ··· bench_torch...." lines


@dataclass(frozen=True)
class BenchOptions:
    """What one night measures: the cases, the directions whose classes run, the asv classes, where it goes."""

    cases: list[Case]
    case_names: str  # as the user named them (sets and ids), for the lines that say what runs
    directions: tuple[str, ...]  # the classes of these directions run (the suite reads CONVBENCH_DIRECTIONS)
    results: Path
    bench: tuple[str, ...] = ()  # asv benchmark regexes; none: every class
    processes: int | None = None  # processes each cuDNN / PyTorch combination is timed in; None: the default
    find: bool | None = None  # Find's ranking beside Get_v7's; None: forward-only sweeps


@dataclass
class BenchResult:
    run: Path
    summary: dict[str, Any]  # end.json's: counts, seconds, asv's exit code and results folder
    asv_returncode: int


def asv_with_progress(cmd: list[str], cwd, env: dict[str, str], log) -> int:
    """Run asv with its output into ``log``, its own percentages shown as the asv phase's progress."""
    with Progress("asv", 100, unit="%") as progress, \
            subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             errors="replace", bufsize=1) as proc:
        for line in proc.stdout:
            log.write(line)
            m = ASV_STEP.match(line)
            if m:
                progress.update(int(float(m.group(1))), line[m.end():].strip(" ·\n")[:60])
        return proc.wait()


def asv_env(base: dict[str, str], **extra: str) -> dict[str, str]:
    """The environment for `asv run`: ``base`` plus ``extra``, with PYTHONPATH carried as ASV_PYTHONPATH.

    asv drops PYTHONPATH from its benchmark processes and keeps ASV_PYTHONPATH. Without this a host whose
    onnxruntime-gpu (or torch) lives on PYTHONPATH benchmarks another install than the one doctor reports
    (seen on the H200: every CUDA setting of onnxruntime went n/a).
    """
    env = dict(base, **extra)
    if base.get("PYTHONPATH") and "ASV_PYTHONPATH" not in base:
        env["ASV_PYTHONPATH"] = base["PYTHONPATH"]
    return env


def bench_options(directions: tuple[str, ...], gpu: bool, processes: int | None,
                  find: bool | None = None) -> SweepOptions:
    """The nightly sweep's options: the directions the selected classes read, on the GPU where there is one,
    the processes and Find's ranking asked for or the commands' defaults (backends.command_options)."""
    return command_options(directions, "cuda" if gpu else "cpu", processes, find)


def bench(opts: BenchOptions, say: TextIO | None = None) -> BenchResult:
    """Run the asv suite with one shared run journal; asv keeps its results, the journal keeps everything.
    ``say`` gets the lines a user reads while it runs (stdout by default)."""
    from ..backends.cudnn import cuda_unavailable_reason
    from . import sweep as sweep_mod

    try:
        from .. import asvplugin
    except ImportError:
        raise UserError("asv is not installed here (pip install asv)", EXIT_ENVIRONMENT) from None
    say = say or sys.stdout
    root = resources.root()  # the checkout, or the suite shipped in the wheel
    os.environ["CONVBENCH_DIRECTIONS"] = ",".join(opts.directions)  # the suite's classes read it (asv's too)
    cases = opts.cases
    gpu = cuda_unavailable_reason() is None
    if not gpu:
        print(f"no GPU here: running the CPU backends (PyTorch on the CPU) on {opts.case_names!r} ({len(cases)} "
              "cases); the cuDNN combinations are recorded as skipped with the reason", file=say, flush=True)
    wanted = asvselect.sweeps(list(opts.bench), opts.directions)
    # One sweep over the union of what the classes read (a selection that mixes directions across backends
    # measures a little more than asv shows; every record is kept all the same).
    directions = tuple(d for d in DIRECTIONS if any(d in ds for ds in wanted.values()))
    swept = [f"{b}:{d}" for b in wanted for d in directions]
    backends = ["cudnn", "torch"]
    _, _, libraries = sweep_mod.load_backends(backends)
    options = bench_options(directions or ("fwd",), gpu, opts.processes, opts.find)
    results = opts.results.resolve()
    journal = sweep_mod.new_journal(results, options, cases, backends, libraries)
    t0 = time.perf_counter()
    if wanted:
        sweep_mod.run(cases, list(wanted), options, results, into=journal.path)
    sweep_s = time.perf_counter() - t0
    chosen = asvselect.bench_selection(list(opts.bench), journal.path)  # the journal read once, shared with asv
    regexes, n_sets, n_left_out = chosen.regexes, chosen.sets, chosen.left_out
    env = asv_env(os.environ, CONVBENCH_RUN_DIR=str(journal.path), CONVBENCH_CASES=",".join(c.id for c in cases),
                  CONVBENCH_RESULTS=str(results), CONVBENCH_SWEPT=",".join(swept))
    machine = journal.meta["machine"]
    if resources.in_git_checkout():  # the checkout's own asv project: `asv publish` there shows every run
        cwd, config, asv_results = root, [], root / ".asv" / "results"
    else:  # installed (an image) or no git: asv's project, results and machine file inside the run directory
        cwd = journal.path / "asv"
        config, asv_results = ["--config", str(asvplugin.project(cwd))], cwd / "results"
        env["HOME"] = str(cwd / "home")
    log_path = journal.path / "asv.log"
    with open(log_path, "w") as log:
        subprocess.run([sys.executable, "-m", "asv", *config, "machine", "--yes", "--machine", machine], cwd=cwd,
                       env=env, stdout=log, stderr=subprocess.STDOUT)
        # HEAD^!: the commit this interpreter's convbench is (asvplugin.HostEnvironment), results saved
        cmd = [sys.executable, "-m", "asv", *config, "run", "HEAD^!", "--machine", machine, "--show-stderr",
               "--durations", "all", "--record-samples"]
        for regex in regexes:
            cmd += ["-b", regex]
        print(f"asv run for {len(cases)} cases on {machine}: {n_sets} parameter sets, {n_left_out} left out as "
              f"n/a (no data in this run); asv's output goes to {log_path}", file=say, flush=True)
        rc = asv_with_progress(cmd, cwd, env, log) if n_sets else 0
    seconds = time.perf_counter() - t0
    summary = sweep_mod.summarize(journal, gpu, seconds)
    summary.update(asv_returncode=rc, asv_results=str(asv_results / machine),
                   sweep_seconds=round(sweep_s, 1), asv_seconds=round(seconds - sweep_s, 1))
    journal.finish(summary)
    return BenchResult(journal.path, summary, rc)
