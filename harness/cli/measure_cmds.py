"""Subcommands that measure on this host: ``doctor``, ``cases`` and ``sweep``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..backends import SweepOptions, command_options
from ..core import cases as catalogue
from ..core.cases import DEFAULT_SET, DIRECTIONS, DTYPES, LAYOUTS
from ..core.errors import EXIT_ENVIRONMENT, UserError, printable
from ..core.paths import RESULTS_DIR
from ..measurement.timing import TimingPolicy
from ..run.pool import DEFAULT_TIMEOUT_S
from .helptext import command
from .jsonout import add_json, emit

DEFAULT_RESULTS = Path(os.environ.get("CONVBENCH_RESULTS", RESULTS_DIR))


def comma_list(allowed: tuple[str, ...], what: str):
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
    from ..run.runners import backend_names

    return backend_names()


MAX_REPEATS = 1000  # repeats of one combination: more only makes a run that never ends
MAX_BUDGET_MS = 60_000.0
MAX_TIMEOUT_S = 86_400.0


def check_results(results: Path) -> None:
    """--results: a directory, made if need be, checked before anything is measured. Not a directory is a usage
    error (2); a folder the host will not let us make is the host's lack (3)."""
    if not str(results).strip():
        raise UserError("--results is empty")
    if results.exists() and not results.is_dir():
        raise UserError(f"--results {results}: not a directory")
    try:
        results.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"--results {results}: not a directory") from None
    except OSError as exc:
        raise UserError(f"--results {results}: cannot be created ({exc.strerror})", EXIT_ENVIRONMENT) from None
    # not probed for writing: in a container the root is read-only and only <results>/<machine> is mounted
    # writable; a machine folder that cannot be made is refused by the journal with the same code (3)


def add_sweep_arguments(p) -> None:
    """What a sweep measures and how: shared by `sweep` and `upgrade`."""
    p.add_argument("--backends", type=comma_list(_backend_names(), "backend"), default=("cudnn", "torch"),
                   help="backends to measure, comma-separated (default: cudnn,torch)")
    p.add_argument("--directions", type=comma_list(DIRECTIONS, "direction"), default=("fwd",),
                   help=f"convolution directions, comma-separated, of {', '.join(DIRECTIONS)} (default: fwd)")
    p.add_argument("--dtypes", type=comma_list(DTYPES, "dtype"), default=DTYPES,
                   help=f"data types, comma-separated (default: {','.join(DTYPES)})")
    p.add_argument("--layouts", type=comma_list(LAYOUTS, "layout"), default=LAYOUTS,
                   help=f"memory layouts, comma-separated (default: {','.join(LAYOUTS)})")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="results root (default: %(default)s)")
    p.add_argument("--cold", action="store_true", help="flush L2 before each timed repetition")
    p.add_argument("--budget-ms", type=float, default=TimingPolicy.budget_ms,
                   help="device time spent sampling one combination (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=2, help="repeats on the same operands checked bitwise (default: 2)")
    p.add_argument("--no-rankings", action="store_true", help="skip cuDNN's own Find/Get_v7 rankings")
    p.add_argument("--find", action=argparse.BooleanOptionalAction, default=None,
                   help="record Find's ranking beside Get_v7's (default: forward-only sweeps; it times every "
                        "algorithm again)")
    p.add_argument("--processes", type=int, choices=(1, 2), default=None,
                   help="processes each cuDNN / PyTorch combination is timed in, each with its share of the budget "
                        "(default: 2; with isolated workers on CUDA only)")


def select_cases(names: str | None) -> list:
    """--cases checked: an unknown or empty selection is a usage error (2), the same for every command."""
    try:
        cases = catalogue.select(names or DEFAULT_SET)
    except catalogue.UnknownCase as exc:
        raise UserError(str(exc)) from None
    if not cases:
        raise UserError(f"--cases {names!r} selects no case; `convbench cases` lists them")
    return cases


def sweep_setup(args) -> tuple[list, SweepOptions]:
    """(cases, options) from `add_sweep_arguments`' flags and --cases, checked; the device is CUDA where usable."""
    from ..backends.cudnn import cuda_unavailable_reason

    if not 0 <= args.repeats <= MAX_REPEATS or not 0 < args.budget_ms <= MAX_BUDGET_MS:
        raise UserError(f"--repeats must be >= 0 and at most {MAX_REPEATS}, and --budget-ms > 0 and at most "
                        f"{MAX_BUDGET_MS:g} (one combination's sampling time, ms)")
    cases = select_cases(args.cases)  # before torch is imported: a mistyped case is refused at once
    check_results(args.results)
    gpu = cuda_unavailable_reason() is None
    options = command_options(args.directions, "cuda" if gpu else "cpu", args.processes, args.find,
                              dtypes=args.dtypes, layouts=args.layouts, repeats=args.repeats,
                              timing=TimingPolicy(cold=args.cold, budget_ms=args.budget_ms),
                              rankings=not args.no_rankings)
    return cases, options


def register(sub) -> None:
    p = command(sub, "doctor", help="what this host can run, and why not",
                description="Say what this host can measure: the GPUs NVML sees, the torch and onnxruntime "
                            "installed, and for each backend whether it can run here and, if not, why. Exits 3 "
                            "when no backend can run.",
                examples=["convbench doctor", "convbench doctor --json | jq .backends"])
    add_json(p)
    p.set_defaults(handler=doctor)

    p = command(sub, "cases", help="list the case catalogue and the named sets",
                description="List the convolution cases (shape, padding, stride, dilation, groups) and the named "
                            "sets (quick, seed, resnet50, default, full) that --cases accepts.",
                examples=["convbench cases", "convbench cases quick", "convbench cases seed.c64 --json"])
    p.add_argument("names", nargs="*", help="case ids or set names to show (default: all)")
    add_json(p)
    p.set_defaults(handler=list_cases)

    p = command(sub, "sweep", help="measure cases x backends here, journaling every record",
                description="Measure every combination of the cases, backends, directions, dtypes and layouts "
                            "on this host without asv: speed, accuracy against a float64 reference, and "
                            "determinism. Every record is journaled as it is measured, so an interrupted sweep "
                            "resumes with --resume.",
                examples=["convbench sweep --cases quick --backends torch",
                          "convbench sweep --cases seed --directions fwd,bwd_data --dtypes fp16",
                          "convbench sweep --resume results/MACHINE/RUN_ID"])
    p.add_argument("--cases", default=DEFAULT_SET,
                   help="case ids and/or sets, comma-separated (default: %(default)s; `convbench cases` lists them)")
    add_sweep_arguments(p)
    p.add_argument("--resume", type=Path, help="a run directory to complete instead of starting a new run")
    p.add_argument("--cudnn", help="path of the libcudnn to load (default: the one PyTorch loaded)")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="run each case in a worker process under a watchdog, so a crash, hang or out-of-memory "
                        "costs that combination only (default: on with a GPU, off without)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="watchdog: seconds without a new record before a worker is ended (default: %(default)s)")
    p.set_defaults(handler=sweep)

    p = command(sub, "autotune", help="autotuner stability (K fresh searches and processes) and the seed "
                                      "cross-check of F.conv2d against direct cuDNN with FMA math",
                description="Run cuDNN's Find K times in fresh searches and PyTorch's cudnn.benchmark in K "
                            "fresh processes per case, and report which algorithm each picks and how close the "
                            "ties are. Needs a CUDA GPU (exit 3 without one).",
                examples=["convbench autotune --cases seed -k 5",
                          "convbench autotune --resume results/MACHINE/RUN_ID"])
    p.add_argument("--cases", default=DEFAULT_SET, help="case ids and/or sets (default: %(default)s)")
    p.add_argument("-k", type=int, default=5, help="fresh searches / processes per case (default: 5)")
    p.add_argument("--layouts", type=comma_list(LAYOUTS, "layout"), default=("NCHW",),
                   help="memory layouts, comma-separated (default: NCHW)")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="results root (default: %(default)s)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR",
                   help="continue an interrupted study (with the K, layouts and cases it was started with): what "
                        "its journal holds is not measured again")
    p.set_defaults(handler=autotune)

    p = command(sub, "repro", help="recompute every output of a run in fresh worker processes and compare hashes",
                description="Recompute every output a run recorded, each in a fresh worker process, and compare "
                            "its hash with the recorded one: what differs is not reproducible across processes.",
                examples=["convbench repro results/MACHINE/RUN_ID"])
    p.add_argument("run_dir", type=Path, help="a run directory written by sweep or bench")
    p.set_defaults(handler=repro)


def doctor(args) -> int:
    from ..backends.registry import availability
    from ..measurement import fingerprint

    gpus, gpu_why = fingerprint.gpus()
    sw = fingerprint.software()
    backends = availability()
    code = 0 if any(b["can_run"] for b in backends) else EXIT_ENVIRONMENT
    if args.json:
        emit({"gpus": gpus, "gpu_why_not": gpu_why, "software": sw, "backends": backends, "exit_code": code})
        return code
    print("convbench doctor: what this host can run")
    if gpu_why:
        print(f"  GPU (NVML):    none usable: {gpu_why}")
    for g in gpus:
        print(f"  GPU {g['index']} (NVML):  {g.get('name')}, sm_{(g.get('sm') or '?').replace('.', '')}, "
              f"driver {g.get('driver')}, {((g.get('memory_total_bytes') or 0) / 2**30):.0f} GiB")
    print(f"  torch:         {sw.get('torch') or 'not installed'}"
          + (f" (CUDA {sw.get('torch_cuda')}, cuDNN {sw.get('torch_cudnn')})" if sw.get("torch") else ""))
    ort = sw.get("onnxruntime")
    print(f"  onnxruntime:   {ort or 'not installed'}"
          + (f" (providers: {', '.join(sw.get('onnxruntime_providers') or [])})" if ort else ""))
    for b in backends:
        detail = f" {b['detail']}" if b["detail"] else ""
        print(f"  backend {b['name']:6s} {'can run' + detail if b['can_run'] else 'cannot run: ' + b['why_not']}")
    return code


def list_cases(args) -> int:
    try:
        ids = [c.id for c in catalogue.select(args.names)] if args.names else list(catalogue.CATALOGUE)
    except catalogue.UnknownCase as exc:
        raise UserError(str(exc)) from None
    if args.json:
        emit({"cases": [{"id": cid, **catalogue.CATALOGUE[cid].to_dict(), "note": catalogue.CATALOGUE[cid].note}
                        for cid in ids],
              "sets": {name: members for name, members in catalogue.SETS.items()} if not args.names else {}})
        return 0
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
    sweep_mod.refuse_before_loading(args.resume)
    cases, options = sweep_setup(args)
    journal = sweep_mod.run(cases, list(args.backends), options, args.results, resume=args.resume,
                            isolate=args.isolate, timeout_s=args.timeout)
    end = (journal.path / "end.json").read_text()
    print(f"run written to {journal.path}")
    print(end.strip())
    return failed_backends(json.loads(end))


def failed_backends(summary: dict) -> int:
    """1 (said on stderr) when some backend's every record failed: a run that measured nothing must not pass."""
    failed = summary.get("failed_backends") or []
    if failed:
        print(f"convbench: error: every record of backend {', '.join(failed)} failed; the journal says why",
              file=sys.stderr)
        return 1
    return 0


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
    return failed_backends(summary)


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
