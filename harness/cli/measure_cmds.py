"""Subcommands that measure on this host: ``doctor``, ``cases`` and ``sweep``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..backends import BACKENDS, SweepOptions, command_options
from ..core import cases as catalogue
from ..core.cases import DIRECTIONS, DTYPES, LAYOUTS
from ..core.intake import EXIT_ENVIRONMENT, UserError, printable
from ..deploy import resources
from ..measurement.timing import TimingPolicy
from ..run import asvselect
from ..run.worker import DEFAULT_TIMEOUT_S

DEFAULT_RESULTS = Path(os.environ.get("CONVBENCH_RESULTS", "results"))


def _list(allowed: tuple[str, ...], what: str):
    def parse(text: str) -> tuple[str, ...]:
        items = tuple(x for x in text.split(",") if x)
        bad = [x for x in items if x not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad) or '(none)'}; "
                                             f"choose from {', '.join(allowed)}")
        return items
    return parse


def _backend_names() -> tuple[str, ...]:
    """The backends a user may name; the fault-injecting one only where CONVBENCH_TEST_BACKENDS=1."""
    from ..run.worker import backend_names

    return backend_names()


MAX_REPEATS = 1000  # in-place repeats of one combination: more only makes a run that never ends
MAX_BUDGET_MS = 60_000.0
MAX_TIMEOUT_S = 86_400.0


def check_results(results: Path) -> None:
    """--results: a directory, or a path where one can be made (checked before anything is measured)."""
    if results.exists() and not results.is_dir():
        raise UserError(f"--results {results}: not a directory")
    if not str(results).strip():
        raise UserError("--results is empty")


def add_sweep_arguments(p) -> None:
    """What a sweep measures and how: shared by `sweep` and `upgrade`."""
    p.add_argument("--backends", type=_list(_backend_names(), "backend"), default=("cudnn", "torch"))
    p.add_argument("--directions", type=_list(DIRECTIONS, "direction"), default=("fwd",))
    p.add_argument("--dtypes", type=_list(DTYPES, "dtype"), default=DTYPES)
    p.add_argument("--layouts", type=_list(LAYOUTS, "layout"), default=LAYOUTS)
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="results root (default: %(default)s)")
    p.add_argument("--cold", action="store_true", help="flush L2 before each timed repetition")
    p.add_argument("--budget-ms", type=float, default=TimingPolicy.budget_ms,
                   help="device time spent sampling one combination (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=2, help="in-place repeats checked bitwise (default: 2)")
    p.add_argument("--no-rankings", action="store_true", help="skip cuDNN's own Find/Get_v7 rankings")
    p.add_argument("--find", action=argparse.BooleanOptionalAction, default=None,
                   help="record Find's ranking beside Get_v7's (default: forward-only sweeps; it times every "
                        "algorithm again)")
    p.add_argument("--processes", type=int, choices=(1, 2), default=None,
                   help="processes each cuDNN / PyTorch combination is timed in, each with its share of the budget "
                        "(default: 2; with isolated workers on CUDA only)")


def sweep_setup(args) -> tuple[list, SweepOptions]:
    """(cases, options) from `add_sweep_arguments`' flags and --cases, checked; the device is CUDA where usable."""
    from ..backends.cudnn import cuda_unavailable_reason

    if not 0 <= args.repeats <= MAX_REPEATS or not 0 < args.budget_ms <= MAX_BUDGET_MS:
        raise UserError(f"--repeats must be >= 0 and at most {MAX_REPEATS}, and --budget-ms > 0 and at most "
                        f"{MAX_BUDGET_MS:g} (one combination's sampling time, ms)")
    check_results(args.results)
    gpu = cuda_unavailable_reason() is None
    try:
        cases = catalogue.select(args.cases or ("default" if gpu else "quick"))
    except catalogue.UnknownCase as exc:
        raise UserError(str(exc)) from None
    if not cases:
        raise UserError(f"--cases {args.cases!r} selects no case; `convbench cases` lists them")
    options = command_options(args.directions, "cuda" if gpu else "cpu", args.processes, args.find,
                              dtypes=args.dtypes, layouts=args.layouts, repeats=args.repeats,
                              timing=TimingPolicy(cold=args.cold, budget_ms=args.budget_ms),
                              rankings=not args.no_rankings)
    return cases, options


def register(sub) -> None:
    p = sub.add_parser("doctor", help="what this host can run, and why not")
    p.set_defaults(handler=doctor)

    p = sub.add_parser("cases", help="list the case catalogue and the named sets")
    p.add_argument("names", nargs="*", help="case ids or set names to show (default: all)")
    p.set_defaults(handler=list_cases)

    p = sub.add_parser("sweep", help="measure cases x backends here, journaling every record")
    p.add_argument("--cases", default=None,
                   help="case ids and/or sets, comma-separated (default: 'default' with a GPU, 'quick' without)")
    add_sweep_arguments(p)
    p.add_argument("--resume", type=Path, help="a run directory to complete instead of starting a new run")
    p.add_argument("--cudnn", help="path of the libcudnn to load (default: the one PyTorch loaded)")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="run each case in a worker process under a watchdog, so a crash, hang or out-of-memory "
                        "costs that combination only (default: on with a GPU, off without)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="watchdog: seconds without a new record before a worker is ended (default: %(default)s)")
    p.set_defaults(handler=sweep)

    p = sub.add_parser("autotune", help="autotuner stability (K fresh searches and processes) and the seed "
                                        "cross-check of F.conv2d against direct cuDNN with FMA math")
    p.add_argument("--cases", default="default", help="case ids and/or sets (default: %(default)s)")
    p.add_argument("-k", type=int, default=5, help="fresh searches / processes per case (default: 5)")
    p.add_argument("--layouts", type=_list(LAYOUTS, "layout"), default=("NCHW",))
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="results root (default: %(default)s)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR",
                   help="continue an interrupted study (with the K, layouts and cases it was started with): what "
                        "its journal holds is not measured again")
    p.set_defaults(handler=autotune)

    p = sub.add_parser("repro", help="recompute every output of a run in fresh worker processes and compare hashes")
    p.add_argument("run_dir", type=Path, help="a run directory written by sweep or bench")
    p.set_defaults(handler=repro)

    p = sub.add_parser("bench", help="the nightly job: the asv suite here, all classes journaled into one run")
    p.add_argument("--cases", default=None,
                   help="case ids and/or sets (default: 'default' with a GPU, 'quick' without)")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="results root (default: %(default)s)")
    p.add_argument("-b", "--bench", action="append", default=[],
                   help="asv benchmark regex (repeatable; default: every class)")
    p.add_argument("--processes", type=int, choices=(1, 2), default=None,
                   help="processes each cuDNN / PyTorch combination is timed in (default: 2, on CUDA; 1 halves "
                        "the replica's cost and reads no process-level noise)")
    p.add_argument("--find", action=argparse.BooleanOptionalAction, default=None,
                   help="record Find's ranking beside Get_v7's (default: forward-only sweeps)")
    p.set_defaults(handler=bench)


def doctor(args) -> int:
    from ..measurement import fingerprint

    print("convbench doctor: what this host can run")
    gpus, why = fingerprint.gpus()
    if why:
        print(f"  GPU (NVML):    none usable: {why}")
    for g in gpus:
        print(f"  GPU {g['index']} (NVML):  {g.get('name')}, sm_{(g.get('sm') or '?').replace('.', '')}, "
              f"driver {g.get('driver')}, {((g.get('memory_total_bytes') or 0) / 2**30):.0f} GiB")
    sw = fingerprint.software()
    print(f"  torch:         {sw.get('torch') or 'not installed'}"
          + (f" (CUDA {sw.get('torch_cuda')}, cuDNN {sw.get('torch_cudnn')})" if sw.get("torch") else ""))
    ort = sw.get("onnxruntime")
    print(f"  onnxruntime:   {ort or 'not installed'}"
          + (f" (providers: {', '.join(sw.get('onnxruntime_providers') or [])})" if ort else ""))
    from ..backends import get_backend

    usable = 0
    for name in BACKENDS:
        try:
            backend = get_backend(name)
            why = backend.available()
        except ImportError as exc:
            why = f"not built into this install ({exc.name})"
        detail = ""
        if name == "cudnn" and not why:
            lib = backend.cudnn
            detail = f" (cuDNN {lib.version} at {lib.path})"
        elif name == "torch" and not why:
            import torch

            detail = " on CUDA" if torch.cuda.is_available() else " on the CPU only"
        elif name == "ort" and not why:
            cuda_why = backend.cuda_reason()
            detail = " on CUDA and the CPU" if not cuda_why else f" on the CPU EP only: {cuda_why}"
        print(f"  backend {name:6s} {'can run' + detail if not why else 'cannot run: ' + why}")
        usable += why is None
    return 0 if usable else EXIT_ENVIRONMENT


def list_cases(args) -> int:
    try:
        ids = [c.id for c in catalogue.select(args.names)] if args.names else list(catalogue.CATALOGUE)
    except catalogue.UnknownCase as exc:
        raise UserError(str(exc)) from None
    for cid in ids:
        c = catalogue.CATALOGUE[cid]
        print(f"{cid:40s} {c.describe()}  [{c.note}]")
    if not args.names:
        print()
        for name, members in catalogue.SETS.items():
            print(f"set {name:10s} {len(members)} cases")
    return 0


def sweep(args) -> int:
    from ..run import sweep as sweep_mod

    if args.cudnn:
        os.environ["CONVBENCH_CUDNN"] = args.cudnn
    if args.resume is not None and not (args.resume / "run.json").is_file():
        raise UserError(f"--resume {args.resume}: not a run directory (no run.json)")
    if not 0 < args.timeout <= MAX_TIMEOUT_S:
        raise UserError(f"--timeout must be > 0 and at most {MAX_TIMEOUT_S:.0f} seconds")
    cases, options = sweep_setup(args)
    journal = sweep_mod.run(cases, list(args.backends), options, args.results, resume=args.resume,
                            isolate=args.isolate, timeout_s=args.timeout)
    end = (journal.path / "end.json").read_text()
    print(f"run written to {journal.path}")
    print(end.strip())
    return _failed_backends(json.loads(end))


def _failed_backends(summary: dict) -> int:
    """1 (said on stderr) when some backend's every record failed: a run that measured nothing must not pass."""
    failed = summary.get("failed_backends") or []
    if failed:
        print(f"convbench: error: every record of backend {', '.join(failed)} failed; the journal says why",
              file=sys.stderr)
        return 1
    return 0


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


def bench(args) -> int:
    """Run the asv suite with one shared run journal; asv keeps its results, the journal keeps everything.

    The sweeps that the selected classes read are measured first, here, in one sweep (one worker process, case
    by case, each case's operands drawn once for every backend and direction); asv's setup_cache then only reads
    the journal, and asv is given only the parameter sets that have data (asvselect). Each class sweeping on its
    own cost a process, a torch import and a CUDA context per class, and drew every case's operands again.
    """
    import subprocess
    import sys
    import time

    from ..backends.cudnn import cuda_unavailable_reason
    from ..run import sweep as sweep_mod

    try:
        from .. import asvplugin
    except ImportError:
        raise UserError("asv is not installed here (pip install asv)", EXIT_ENVIRONMENT) from None
    root = resources.root()  # the checkout, or the suite shipped in the wheel
    gpu = cuda_unavailable_reason() is None
    names = args.cases or ("default" if gpu else "quick")
    try:
        cases = catalogue.select(names)
    except catalogue.UnknownCase as exc:
        raise UserError(str(exc)) from None
    if not gpu:
        print(f"no GPU here: running the CPU backends (PyTorch on the CPU) on {names!r} ({len(cases)} cases); "
              "the cuDNN combinations are recorded as skipped with the reason", flush=True)
    wanted = asvselect.sweeps(root, args.bench)
    # One sweep over the union of what the classes read (a selection that mixes directions across backends
    # measures a little more than asv shows; every record is kept all the same).
    directions = tuple(d for d in DIRECTIONS if any(d in ds for ds in wanted.values()))
    swept = [f"{b}:{d}" for b in wanted for d in directions]
    backends = ["cudnn", "torch"]
    _, _, libraries = sweep_mod.load_backends(backends)
    options = bench_options(directions or ("fwd",), gpu, args.processes, args.find)
    results = args.results.resolve()
    journal = sweep_mod.new_journal(results, options, cases, backends, libraries)
    t0 = time.perf_counter()
    if wanted:
        sweep_mod.run(cases, list(wanted), options, results, into=journal.path)
    sweep_s = time.perf_counter() - t0
    regexes, n_sets, n_left_out = asvselect.selection(root, args.bench, journal.path, [c.id for c in cases])
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
               "--durations", "all"]
        for regex in regexes:
            cmd += ["-b", regex]
        print(f"asv run for {len(cases)} cases on {machine}: {n_sets} parameter sets, {n_left_out} left out as "
              f"n/a (no data in this run); asv's output goes to {log_path}", flush=True)
        rc = (subprocess.run(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode if n_sets
              else 0)
    seconds = time.perf_counter() - t0
    summary = sweep_mod.summarize(journal, gpu, seconds)
    summary.update(asv_returncode=rc, asv_results=str(asv_results / machine),
                   sweep_seconds=round(sweep_s, 1), asv_seconds=round(seconds - sweep_s, 1))
    journal.finish(summary)
    print(f"run written to {journal.path} ({summary['seconds']} s: sweep {sweep_s:.1f} s, asv "
          f"{seconds - sweep_s:.1f} s; {summary['ok']} records ok, counts {summary['counts']}); asv exit code {rc}")
    return _failed_backends(summary) or (0 if rc == 0 else 1)


def autotune(args) -> int:
    from ..backends.cudnn import cuda_unavailable_reason
    from ..run import autotune_study
    from ..run import sweep as sweep_mod

    why = cuda_unavailable_reason()
    if why:
        raise UserError(f"autotuner stability needs a CUDA GPU: {why}", EXIT_ENVIRONMENT)
    if not 2 <= args.k <= MAX_REPEATS:
        raise UserError(f"-k must be 2 to {MAX_REPEATS}: stability needs more than one search")
    check_results(args.results)
    try:
        cases = catalogue.select(args.cases)
    except catalogue.UnknownCase as exc:
        raise UserError(str(exc)) from None
    _, unavailable, libraries = sweep_mod.load_backends(["cudnn"])
    if unavailable["cudnn"]:
        raise UserError(f"cuDNN cannot be loaded: {unavailable['cudnn']}", EXIT_ENVIRONMENT)

    def show(rec) -> None:
        if autotune_study.is_finding(rec):
            print(printable(f"{rec.case} {rec.backend} {rec.math} {rec.layout}: {rec.explanation}"), flush=True)

    journal, summary = autotune_study.run(cases, args.k, args.layouts, args.results, resume=args.resume,
                                          libraries=libraries, on_record=show,
                                          log=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(f"run written to {journal.path} ({summary['seconds']:.0f} s, {summary['flagged']} findings)")
    return _failed_backends(summary)


def repro(args) -> int:
    from ..run import repro as repro_run

    if not (args.run_dir / "run.json").is_file():
        raise UserError(f"{args.run_dir}: not a run directory (no run.json)")
    same = differ = failed = 0
    for rec in repro_run.recompute(args.run_dir, log=lambda msg: print(msg, file=sys.stderr, flush=True)):
        equal = rec.extra.get("fresh_process_equal")
        same += equal is True
        differ += equal is False
        failed += equal is None
        if equal is False:
            print(printable(f"{rec.case} {rec.backend} {rec.direction} {rec.algo} {rec.math} {rec.dtype} "
                            f"{rec.layout}: {rec.explanation}"), flush=True)
    print(f"fresh process: {same} outputs reproduced bit for bit, {differ} differ, {failed} could not be rerun")
    return 0
