"""onnxruntime backend: the CUDA execution provider under every cuDNN conv search setting, and the CPU EP.

Settings grid on CUDA: ``cudnn_conv_algo_search`` (EXHAUSTIVE, HEURISTIC, DEFAULT) x ``use_tf32`` (0, 1) x
``cudnn_conv_use_max_workspace`` (0, 1), each measured with I/O binding (device-resident input and output)
and end to end from numpy. What the modes mean depends on the version (docs/ort.md cites the source):
onnxruntime <= 1.19 searched with cudnnFindConvolutionForwardAlgorithmEx (EXHAUSTIVE, timed on the device),
cudnnGetConvolutionForwardAlgorithm_v7 (HEURISTIC) or IMPLICIT_PRECOMP_GEMM (DEFAULT); from 1.20 a Conv is a
cuDNN frontend graph whose plan comes from heuristics mode B (EXHAUSTIVE), A (HEURISTIC) or FALLBACK
(DEFAULT) -- no timing at all -- and the max-workspace option no longer enters the conv path.

All onnxruntime work runs in worker processes (harness/ort_worker.py): fresh processes are one of the
repetitions the drift question needs, cuDNN's logs can only be switched on before a process loads it, and a
crash in a native library costs that worker's combinations, not the sweep. This process builds the models,
computes the float64 references, hashes the outputs with accuracy.output_hash and assembles the records.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.cases import Case
from ..core.records import CRASHED, ERROR, OK, SKIPPED, TIMEOUT, Accuracy, Determinism, Record, Timing
from ..core.vocab import SEARCH_MODES
from ..measurement import accuracy
from ..measurement.timing import TimingPolicy
from . import Combo, SweepOptions, cudnn_log, models

IO_MODES = ("iobinding", "numpy")
CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"
NA = "n/a"
CPU_NOTE = "cuDNN search settings do not apply to the CPU EP (MLAS kernels); recorded as n/a"
ORT_CONV_SOURCE = "onnxruntime/core/providers/cuda/nn/conv.cc"


def ort_version() -> str | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime.__version__


def version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def expected_conv_path(version: str | None) -> dict[str, Any]:
    """What onnxruntime's source says its CUDA Conv does with each search mode, for this version."""
    if version is None:
        return {"path": None}
    if version_tuple(version) >= (1, 20):
        return {"path": "cudnn_frontend", "EXHAUSTIVE": "heuristics mode B", "HEURISTIC": "heuristics mode A",
                "DEFAULT": "heuristics FALLBACK", "max_workspace": "not used by the frontend conv path",
                "source": f"{ORT_CONV_SOURCE} (Conv::UpdateState, CreateCudnnFeExecutionPlan; PR #19470)"}
    return {"path": "legacy", "EXHAUSTIVE": "cudnnFindConvolutionForwardAlgorithmEx (timed)",
            "HEURISTIC": "cudnnGetConvolutionForwardAlgorithm_v7", "DEFAULT": "IMPLICIT_PRECOMP_GEMM",
            "max_workspace": "caps the workspace cudnnFind may use", "source": f"{ORT_CONV_SOURCE} (<= 1.19)"}


@dataclass
class ModelOptions:
    """Knobs of the onnxruntime runs; the sweep's SweepOptions fills what it has (see from_options)."""

    device: str = "cuda"
    batch: int = 1
    sessions: int = 5  # fresh sessions in one process, per setting
    processes: int = 5  # fresh processes, per setting (the first also holds the in-process sessions)
    repeats: int = 2  # in-place repeats of the first input in the first session
    case_sessions: int = 3  # fresh sessions per setting for single-Conv catalogue cases
    parallel: int | None = None  # concurrent drift workers; None: default_parallel()
    log: bool = True  # capture cuDNN's API log and the frontend log in drift workers
    # which 5-session processes also write cuDNN's API log (slow: every cuDNN call): "setting" = every setting's,
    # "mode" = the first setting of each search mode only (the frontend log still names every engine; onnxruntime
    # <= 1.19 keeps "setting", its engines are in the API log only)
    api_log: str = "setting"
    # onnxruntime's grid keeps the 0.5 % noise target its H200 figures were measured with (docs/ort.md); the
    # tighter default of the conv sweeps was not measured on it.
    timing: TimingPolicy = field(default_factory=lambda: TimingPolicy(
        warmup_ms=50.0, min_samples=20, max_samples=300, budget_ms=400.0, batch=1, keep_samples=64,
        noise_target=0.005))
    case_timing: TimingPolicy = field(default_factory=lambda: TimingPolicy(
        warmup_ms=10.0, min_samples=7, max_samples=200, budget_ms=100.0, batch=1, keep_samples=64,
        noise_target=0.005))
    directions: tuple[str, ...] = ("fwd",)
    dtypes: tuple[str, ...] = ("fp32", "fp16")
    layouts: tuple[str, ...] = ("NCHW",)
    cache_dir: str | None = None
    keep_logs: str | None = None  # directory to keep gzipped cuDNN logs of the first drift worker per setting
    worker_timeout_s: float = 600.0
    cpu_ep: bool = True  # also run the CPU EP on GPU hosts (a cross-check; always on CPU hosts)

    @classmethod
    def from_options(cls, options: Any) -> ModelOptions:
        if isinstance(options, ModelOptions):
            return options
        out = cls()
        for name in ("device", "directions", "dtypes", "layouts", "repeats"):
            if getattr(options, name, None) is not None:
                setattr(out, name, getattr(options, name))
        for name in ("batch", "sessions", "processes", "case_sessions", "parallel", "log", "cache_dir",
                     "keep_logs", "worker_timeout_s", "cpu_ep", "api_log"):
            value = getattr(options, f"ort_{name}", None)
            if value is not None:
                setattr(out, name, value)
        return out


# ---- workers -----------------------------------------------------------------------------------------------------

@dataclass
class WorkerRun:
    job: dict
    proc: subprocess.Popen | None = None
    started: float = 0.0
    ended: float = 0.0
    result: dict | None = None
    failure: tuple[str, str] | None = None  # (status, reason)
    api_log: str | None = None
    fe_log: str | None = None


def _worker_env(api_log: str | None, fe_log: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("CUDNN_LOGLEVEL_DBG", "CUDNN_LOGINFO_DBG", "CUDNN_LOGDEST_DBG", "CUDNN_FRONTEND_LOG_INFO",
              "CUDNN_FRONTEND_LOG_FILE"):
        env.pop(k, None)
    if api_log or fe_log:
        full = cudnn_log.log_env(api_log or "", fe_log or "")
        env.update({k: v for k, v in full.items() if v and (api_log or not k.startswith("CUDNN_LOG"))
                    and (fe_log or not k.startswith("CUDNN_FRONTEND"))})
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "") if env.get("PYTHONPATH") else root
    return env


def _start(w: WorkerRun, workdir: Path, name: str, log: bool | str) -> None:
    """Start one worker; ``log``: False, "frontend" (the cheap frontend log only) or True (API log too)."""
    wdir = workdir / name
    wdir.mkdir(parents=True, exist_ok=True)
    w.job["out_dir"] = str(wdir)
    w.job["result"] = str(wdir / "result.json")
    job_path = wdir / "job.json"
    job_path.write_text(json.dumps(w.job))
    if log:
        w.fe_log = str(wdir / "cudnn_frontend.log")
    if log is True:
        w.api_log = str(wdir / "cudnn_api.log")
    stderr = open(wdir / "stderr.txt", "wb")
    w.proc = subprocess.Popen([sys.executable, "-m", "harness.backends.ort_worker", str(job_path)], stdout=stderr,
                              stderr=subprocess.STDOUT, env=_worker_env(w.api_log, w.fe_log), cwd=str(wdir))
    stderr.close()
    w.started = time.monotonic()


def _finish(w: WorkerRun) -> None:
    w.ended = time.monotonic()
    rc = w.proc.returncode
    path = Path(w.job["result"])
    if rc == 0 and path.exists():
        w.result = json.loads(path.read_text())
        return
    tail = ""
    err = Path(w.job["out_dir"]) / "stderr.txt"
    if err.exists():
        tail = err.read_text(errors="replace")[-600:].strip().replace("\n", " | ")
    if rc is not None and rc < 0:
        w.failure = (CRASHED, f"worker died with signal {-rc}: {tail}")
    else:
        w.failure = (ERROR, f"worker exited {rc}: {tail}")


def api_logged_settings(modes: dict[str, str], policy: str, legacy: bool) -> set[str]:
    """Session keys whose 5-session process writes cuDNN's API log: every one, or ("mode", frontend path
    only) the first of each search mode. ``modes``: session key -> cudnn_conv_algo_search, in grid order."""
    if policy != "mode" or legacy:
        return set(modes)
    first: dict[str, str] = {}
    for key, mode in modes.items():
        first.setdefault(mode, key)
    return set(first.values())


def default_parallel(timed_search: bool, cpus: int | None = None) -> int:
    """Concurrent drift workers: 1 where a search is timed on the device (concurrency would perturb it),
    else three quarters of the cores, at most 12 (12 on the lent H200's 16 cores; its only grid so far ran 8).

    Without a timed search nothing a drift worker does depends on what runs beside it; a worker is mostly
    process start, CUDA/cuDNN initialisation and plan building on the host, so it is bounded by cores.
    """
    if timed_search:
        return 1
    return min(12, max(1, (cpus if cpus is not None else (os.cpu_count() or 2)) * 3 // 4))


def run_workers(runs: list[tuple[WorkerRun, str, bool | str]], workdir: Path, parallel: int, timeout_s: float,
                log=lambda msg: None, on_done: Callable[[WorkerRun], None] | None = None) -> None:
    """Run workers, at most ``parallel`` at a time; each ends with a result or a failure, never an exception.

    ``on_done(worker)`` is called as each one ends (e.g. to hand its logs to a parser while the others run).
    """
    pending = list(runs)
    active: list[WorkerRun] = []
    while pending or active:
        while pending and len(active) < max(1, parallel):
            w, name, logged = pending.pop(0)
            try:
                _start(w, workdir, name, logged)
                active.append(w)
            except OSError as exc:
                w.failure = (ERROR, f"could not start worker: {exc}")
        time.sleep(0.02)
        for w in list(active):
            if w.proc.poll() is not None:
                _finish(w)
                active.remove(w)
            elif time.monotonic() - w.started > timeout_s:
                w.proc.kill()
                w.proc.wait()
                w.ended = time.monotonic()
                w.failure = (TIMEOUT, f"worker ran past {timeout_s:.0f} s and was ended")
                active.remove(w)
            else:
                continue
            if on_done:
                on_done(w)
        if pending or active:
            continue
    del log


# ---- analysis -----------------------------------------------------------------------------------------------------

def _read_log(path: str | None, limit: int = 512 << 20) -> str:
    if not path or not Path(path).exists():
        return ""
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", errors="replace")


def node_algorithms(w: WorkerRun, cfg_result: dict, graph_convs: list[str]) -> dict[str, Any]:
    """Per-session {conv node: engine/algo} of one logged worker, or why it could not be told."""
    t0 = time.monotonic()
    api = _parse_api(w.api_log)
    fe_text = _read_log(w.fe_log)
    fe = cudnn_log.parse_frontend(fe_text) if fe_text else None
    seq, source = cudnn_log.conv_sequence(api, fe)
    info: dict[str, Any] = {
        "source": source, "executions": len(seq),
        "cudnn_version_loaded": cudnn_log.version_string(api.version) if api else None,
        "conv_path_observed": api.conv_path() if api else ("cudnn_frontend" if fe and fe.executions else None),
        "find_calls": api.finds if api else None, "get_v7_calls": api.get_v7 if api else None,
        "api_backend_executes": sum(1 for k, _ in api.events if k == "backend") if api else None,
        "frontend_heuristic_queries": fe.heuristic_queries if fe else None,
        "frontend_graph_executions": fe.graph_executions if fe else None,
        "log_bytes": {k: Path(p).stat().st_size for k, p in (("api", w.api_log), ("frontend", w.fe_log))
                      if p and Path(p).exists()},
    }
    order = cfg_result.get("conv_order") or []
    nodes = [_graph_name(n, graph_convs) for n in order] if order else list(graph_convs)
    info["node_order_from"] = "profile" if order else "graph"
    runs = [s.get("runs") for s in cfg_result.get("sessions", [])]
    if not seq:
        info["why_unmapped"] = "no conv execution in the logs (logging off, or a library without logging)"
        return info
    if any(r is None for r in runs):
        info["why_unmapped"] = "a timed session is in this worker"
        return info
    sessions, why = cudnn_log.assign(seq, runs, nodes)
    if why:
        info["why_unmapped"] = why
        info["sequence_head"] = seq[:8]
    else:
        info["sessions"] = sessions
    info["parse_s"] = round(time.monotonic() - t0, 3)
    return info


def _parse_api(path: str | None) -> cudnn_log.ApiLog | None:
    if not path or not Path(path).exists() or not Path(path).stat().st_size:
        return None
    return cudnn_log.parse_api_file(path)


def _graph_name(profiled: str, graph_convs: list[str]) -> str:
    """onnxruntime may rename a fused node; map it back to the graph's Conv name it contains."""
    if profiled in graph_convs:
        return profiled
    hits = [g for g in graph_convs if g in profiled]
    return max(hits, key=len) if hits else profiled


def spread(arrays: list[np.ndarray]) -> float:
    if len(arrays) < 2:
        return 0.0
    stack = np.stack([a.astype(np.float64) for a in arrays])
    return float(np.nanmax(stack.max(axis=0) - stack.min(axis=0)))


def model_accuracy(y: np.ndarray, ref: np.ndarray, yardstick: float, unwritten: int) -> Accuracy:
    """Error against the float64 reference; the class compares the error with this model's fp32 yardstick.

    A network's output error is (to first order) proportional to the unit roundoff of its arithmetic:
    err = A * u. The yardstick (an independent float32 evaluation) measures A * u_fp32, so err / yardstick *
    u_fp32 is the error a single conv would show, and accuracy.precision_class applies its usual bounds.
    """
    y64 = y.astype(np.float64)
    nan = max(0, int(np.isnan(y64).sum()) - unwritten)  # unwritten elements hold a NaN poison
    inf = int(np.isinf(y64).sum())
    bad = nan + inf + unwritten
    diff = np.abs(y64 - ref)
    diff = np.where(np.isfinite(diff), diff, 0.0)
    max_abs = float(diff.max()) if diff.size else 0.0
    rel = float(np.linalg.norm(diff) / np.linalg.norm(ref)) if np.linalg.norm(ref) > 0 else 0.0
    scale = float(np.abs(ref).max()) or 1.0
    equiv = rel / yardstick * accuracy.U["fp32"] if yardstick > 0 else rel
    if bad:
        max_abs = rel = float("nan")
    return Accuracy(max_abs=max_abs, rel_l2=rel, max_norm_err=max_abs / scale if not bad else float("nan"),
                    nan=nan, inf=inf, unwritten=unwritten,
                    precision_class=accuracy.precision_class(equiv, "fp32", bad))


def _timing(d: dict | None) -> Timing | None:
    return Timing(**d) if d else None


def _settings(provider: str, search: str, tf32: Any, ws: Any, io: str) -> tuple[tuple[str, object], ...]:
    return (("cudnn_conv_algo_search", search), ("use_tf32", tf32), ("cudnn_conv_use_max_workspace", ws),
            ("provider", provider), ("io", io))


def _provider_options(search: str, tf32: int, ws: int) -> dict[str, str]:
    return {"device_id": "0", "cudnn_conv_algo_search": search, "use_tf32": str(tf32),
            "cudnn_conv_use_max_workspace": str(ws)}


def _session_key(settings: dict) -> str:
    return "|".join(f"{k}={settings[k]}" for k in ("provider", "cudnn_conv_algo_search", "use_tf32",
                                                     "cudnn_conv_use_max_workspace"))


# ---- the backend -------------------------------------------------------------------------------------------------

class OrtBackend:
    name = "ort"

    def __init__(self, log=None):
        self.log = log or (lambda msg: print(f"[ort] {msg}", file=sys.stderr, flush=True))

    # availability ----------------------------------------------------------------------------------------------
    def available(self) -> str | None:
        try:
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
        except ImportError as exc:
            return f"{exc.name} is not installed (pip install onnxruntime-gpu onnx, or onnxruntime onnx on a CPU)"
        return None

    def cuda_reason(self) -> str | None:
        try:
            import onnxruntime
        except ImportError:
            return "onnxruntime is not installed"
        providers = onnxruntime.get_available_providers()
        if CUDA_EP not in providers:
            return f"this onnxruntime ({onnxruntime.__version__}) has no CUDA EP (providers: {', '.join(providers)})"
        return None

    def _providers(self, opts: ModelOptions) -> list[str]:
        if opts.device != "cuda":
            return [CPU_EP]
        return [CUDA_EP, CPU_EP] if opts.cpu_ep else [CUDA_EP]

    def _settings_grid(self, provider: str) -> list[tuple[str, Any, Any]]:
        if provider == CPU_EP:
            return [(NA, NA, NA)]
        return list(itertools.product(SEARCH_MODES, (0, 1), (0, 1)))

    # models ----------------------------------------------------------------------------------------------------
    def model_combos(self, model_id: str, options: Any) -> list[Combo]:
        models.check_model(model_id)
        opts = ModelOptions.from_options(options)
        out = []
        for provider in self._providers(opts):
            for (search, tf32, ws), io in itertools.product(self._settings_grid(provider), IO_MODES):
                out.append(Combo("fwd", "auto", NA if provider == CPU_EP else f"use_tf32={tf32}", "fp32", "NCHW",
                                 _settings(provider, search, tf32, ws, io)))
        return out

    def run_model(self, model_id: str, combos: Iterable[Combo], options: Any) -> Iterator[Record]:
        """Measure ``combos`` of one model; yields one record per combo, whatever happens."""
        combos = list(combos)
        case_id = f"model.{model_id}"
        opts = ModelOptions.from_options(options)

        def base(c: Combo, **kw) -> Record:
            provider = dict(c.settings)["provider"]
            return Record(case=case_id, backend=self.name, direction=c.direction, algo=c.algo, math=c.math,
                          dtype=c.dtype, layout=c.layout, settings=dict(c.settings),
                          device="cuda:0" if provider == CUDA_EP else "cpu", **kw)

        why = self.available()
        if why:
            for c in combos:
                yield base(c, status=SKIPPED, reason=why)
            return
        groups: dict[str, list[Combo]] = {}
        for c in combos:
            groups.setdefault(_session_key(dict(c.settings)), []).append(c)
        cuda_why = self.cuda_reason()
        runnable = {}
        for key, cs in groups.items():
            if dict(cs[0].settings)["provider"] == CUDA_EP and cuda_why:
                for c in cs:
                    yield base(c, status=SKIPPED, reason=cuda_why)
            else:
                runnable[key] = cs
        if not runnable:
            return
        try:
            built = models.build(model_id, opts.batch, Path(opts.cache_dir) / "models" if opts.cache_dir else None)
            params = models.load_params(built.path)
            inputs = models.model_inputs(model_id, opts.batch)
        except Exception as exc:  # a model that cannot be built costs this model's records
            for cs in runnable.values():
                for c in cs:
                    yield base(c, status=ERROR, reason=f"building {model_id}: {type(exc).__name__}: {exc}")
            return
        workdir = Path(tempfile.mkdtemp(prefix=f"convbench-ort-{model_id}-"))
        try:
            yield from self._run_model_groups(model_id, built, params, inputs, runnable, opts, workdir, base)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _run_model_groups(self, model_id, built, params, inputs, groups, opts, workdir, base):
        t0 = time.monotonic()
        input_files = {}
        for name, x in inputs.items():
            path = workdir / f"input-{name}.npy"
            np.save(path, x)
            input_files[name] = str(path)
        refs = {name: models.reference(model_id, params, x) for name, x in inputs.items()}
        yard = {name: models.fp32_yardstick(model_id, params, inputs[name], refs[name][0]) for name in inputs}
        phases = {"reference_s": round(time.monotonic() - t0, 2)}
        input_hashes = {name: accuracy.output_hash(_torch(x)) for name, x in inputs.items()}
        version = ort_version()
        expected = expected_conv_path(version)
        legacy = expected.get("path") == "legacy"

        def job(cfgs, provider):
            return {"model": str(built.path), "provider": provider, "inputs": input_files,
                    "timing_policy": _policy_dict(opts.timing), "configs": cfgs}

        def cfg(key, cs, sessions, **kw):
            s = dict(cs[0].settings)
            po = {} if s["provider"] == CPU_EP else _provider_options(s["cudnn_conv_algo_search"], s["use_tf32"],
                                                                      s["cudnn_conv_use_max_workspace"])
            return {"key": key, "provider_options": po, "sessions": sessions, **kw}

        by_provider: dict[str, list[str]] = {}
        for key, cs in groups.items():
            by_provider.setdefault(dict(cs[0].settings)["provider"], []).append(key)
        # 1. Timing: one unlogged process per provider, every setting in turn, nothing else on the device.
        timing_runs = {p: WorkerRun(job([cfg(k, groups[k], 1, timing=True) for k in keys], p))
                       for p, keys in by_provider.items()}
        self.log(f"{model_id}: timing {len(groups)} settings")
        t1 = time.monotonic()
        run_workers([(w, f"timing-{p}", False) for p, w in timing_runs.items()], workdir, 1, opts.worker_timeout_s)
        phases["timing_worker_s"] = round(time.monotonic() - t1, 2)
        # 2. Drift: per setting, process 0 holds `sessions` sessions, processes 1.. one each; all logged.
        drift: dict[str, list[WorkerRun]] = {}
        queue = []
        api_keys = api_logged_settings({k: dict(cs[0].settings)["cudnn_conv_algo_search"] for k, cs in groups.items()},
                                       opts.api_log, legacy)
        for key, cs in groups.items():
            provider = dict(cs[0].settings)["provider"]
            api_here = key in api_keys
            ws = []
            for pi in range(max(1, opts.processes)):
                n = max(1, opts.sessions) if pi == 0 else 1
                w = WorkerRun(job([cfg(key, cs, n, profile=True, repeats=opts.repeats if pi == 0 else 0)],
                                  provider))
                ws.append(w)
                # cuDNN's API log (every call, slow) in the process holding the sessions; the frontend's
                # one line per execution in every process
                logged = (True if pi == 0 and api_here else "frontend") if opts.log and provider == CUDA_EP \
                    else False
                queue.append((w, f"drift-{len(drift):02d}-p{pi}", logged))
            drift[key] = ws
        timed_search = legacy and any(dict(cs[0].settings)["cudnn_conv_algo_search"] == "EXHAUSTIVE"
                                      for cs in groups.values())
        parallel = opts.parallel or default_parallel(timed_search)
        # Longest first: the processes holding all sessions (and the slow API log) start before the one-session
        # ones, so none of them is left running alone at the end (the order of records is unchanged).
        queue.sort(key=lambda item: not item[1].endswith("-p0"))
        self.log(f"{model_id}: drift {len(queue)} worker processes, {parallel} at a time")
        # Each worker's logs are parsed (and kept) as soon as it ends, in a thread, while the others run: the
        # parent is otherwise idle then, and parsing them all after the last worker was a serial tail.
        owner = {id(w): (key, pi) for key, ws in drift.items() for pi, w in enumerate(ws)}
        digests: dict[int, Future] = {}
        graph_convs = list(built.conv_nodes)
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ort-logs")

        def on_done(w: WorkerRun) -> None:
            key, pi = owner[id(w)]
            digests[id(w)] = pool.submit(self._digest_logs, model_id, key, pi, w, graph_convs, opts)

        t2 = time.monotonic()
        try:
            run_workers(queue, workdir, parallel, opts.worker_timeout_s, on_done=on_done)
        finally:
            pool.shutdown(wait=True)
        phases.update(drift_workers_s=round(time.monotonic() - t2, 2), parallel=parallel,
                      drift_processes=len(queue), api_logged=sum(1 for _, _, lg in queue if lg is True))
        # 3. Records.
        for key, cs in groups.items():
            infos = [digests[id(w)].result() if id(w) in digests else
                     self._digest_logs(model_id, key, pi, w, graph_convs, opts) for pi, w in enumerate(drift[key])]
            yield from self._model_records(model_id, built, inputs, refs, yard, input_hashes, version, expected,
                                           key, cs, timing_runs[dict(cs[0].settings)["provider"]], drift[key],
                                           opts, base, infos, phases)
        self.log(f"{model_id}: done in {time.monotonic() - t0:.0f} s ({phases})")

    @staticmethod
    def _digest_logs(model_id: str, key: str, pi: int, w: WorkerRun, graph_convs: list[str],
                     opts: ModelOptions) -> dict | None:
        """Engines per node from one drift worker's cuDNN logs (None where there is nothing to map)."""
        info = None
        r = _cfg_result(w, key)
        if r is not None and r.get("status") == OK and (w.api_log or w.fe_log):
            try:
                info = node_algorithms(w, r, graph_convs)
            except Exception as exc:  # an unreadable log costs the engine names, not the measurements
                info = {"why_unmapped": f"reading the cuDNN logs failed: {type(exc).__name__}: {exc}"[:500]}
            info["process"] = pi
        if pi == 0 and opts.keep_logs:
            try:
                _keep_logs(w, Path(opts.keep_logs), f"{model_id}.{_slug(key)}")
            except OSError as exc:
                if info is not None:
                    info["logs_not_kept"] = str(exc)[:300]
        return info

    def _model_records(self, model_id, built, inputs, refs, yard, input_hashes, version, expected, key, cs,
                       timing_run, workers, opts, base, infos, phases):
        provider = dict(cs[0].settings)["provider"]
        tcfg = _cfg_result(timing_run, key)
        samples: list[dict] = []  # every session of every drift worker
        problems = []
        node_info = []
        for pi, w in enumerate(workers):
            r = _cfg_result(w, key)
            if r is None or r.get("status") != OK:
                problems.append(w.failure[1] if w.failure else (r or {}).get("reason", "no result"))
                continue
            for si, s in enumerate(r["sessions"]):
                samples.append({"label": f"p{pi}s{si}", "process": pi, "session": si, **s})
            if provider == CUDA_EP and infos[pi] is not None:
                node_info.append(infos[pi])
        if not samples:
            why = "; ".join(p for p in problems if p)[:1500] or "no session ran"
            status = next((w.failure[0] for w in workers if w.failure), ERROR)
            for c in cs:
                yield base(c, status=status, reason=why)
            return
        names = list(inputs)
        hashes: dict[str, str] = {}  # digest -> output_hash
        arrays: dict[str, np.ndarray] = {}
        for s in samples:
            for name in names:
                o = s["outputs"][name]
                if o["digest"] not in hashes:
                    arrays[o["digest"]] = np.load(o["file"])
                    hashes[o["digest"]] = accuracy.output_hash(_torch(arrays[o["digest"]]))
        drift = {}
        for name in names:
            def stats(subset, _name=name):
                ds = [s["outputs"][_name]["digest"] for s in subset]
                distinct = list(dict.fromkeys(ds))
                sp = spread([arrays[d] for d in distinct])
                return {"n": len(ds), "distinct": len(distinct), "hashes": [hashes[d] for d in ds],
                        "max_spread": sp, "max_spread_rel": sp / (float(np.abs(refs[_name][0]).max()) or 1.0)}
            drift[name] = {"in_process": stats([s for s in samples if s["process"] == 0]),
                           "fresh_process": stats([s for s in samples if s["session"] == 0]),
                           "all": stats(samples)}
        first = samples[0]
        primary = names[0]
        acc = model_accuracy(arrays[first["outputs"][primary]["digest"]], refs[primary][0], yard[primary],
                             first["outputs"][primary]["unwritten"])
        acc_by_output = {}
        for name in names:
            for d in dict.fromkeys(s["outputs"][name]["digest"] for s in samples):
                a = model_accuracy(arrays[d], refs[name][0], yard[name], 0)
                acc_by_output[f"{name}:{hashes[d]}"] = {"rel_l2": a.rel_l2, "max_abs": a.max_abs,
                                                        "class": a.precision_class}
        rep = first.get("repeat_digests") or []
        all_first = drift[primary]["all"]
        det = Determinism(hash=hashes[first["outputs"][primary]["digest"]], hash_algo=accuracy.HASH_ALGO,
                          repeats=len(rep), repeat_equal=all(d == first["outputs"][primary]["digest"] for d in rep)
                          if rep else None, fresh_handle_equal=all_first["distinct"] == 1,
                          distinct_outputs=all_first["distinct"])
        algos = self._algo_summary(node_info, samples) if provider == CUDA_EP else None
        unlogged = None
        if tcfg and tcfg.get("status") == OK and tcfg["sessions"]:
            d = tcfg["sessions"][0]["outputs"][primary]["digest"]
            logged = {s["outputs"][primary]["digest"] for s in samples}
            unlogged = {"digest_in_logged_outputs": d in logged,
                        "hash": hashes.get(d) or accuracy.output_hash(_torch(np.load(
                            tcfg["sessions"][0]["outputs"][primary]["file"])))}
        extra = {
            "model": model_id, "model_sha256": built.sha256, "batch": built.batch,
            "input_hashes": input_hashes, "inputs": {n: "scikit-image sample photographs, ImageNet preprocessing"
                                                     if n == "image" else "seeded N(0,1)" for n in names},
            "reference": refs[primary][1], "fp32_yardstick_rel_l2": yard,
            "accuracy_by_output": acc_by_output, "drift": drift,
            "ort_version": version, "conv_path_expected": expected if provider == CUDA_EP else NA,
            "unlogged_session": unlogged, "problems": problems or None,
            "graph_optimization_level": "ORT_ENABLE_ALL (default)",
            # where the grid's time goes, measured: the model's phases and this setting's worker processes
            "cost_s": {"model_phases": dict(phases),
                       "timing_worker_s": _wall(timing_run),
                       "drift_workers_s": [_wall(w) for w in workers],
                       "log_parse_s": [i.get("parse_s") for i in node_info]},
        }
        if tcfg and tcfg.get("status") == OK:
            s0 = tcfg["sessions"][0]
            extra.update(session_create_ms=s0["create_ms"], first_inference_ms=s0["first_run_ms"],
                         provider_options_effective=tcfg.get("provider_options_effective"),
                         session_providers=tcfg.get("session_providers"))
        else:
            extra["session_create_ms_drift"] = [s["create_ms"] for s in samples]
            extra["first_inference_ms_drift"] = [s["first_run_ms"] for s in samples]
        if algos:
            extra.update(algos)
        explanation = self._explain(provider, drift[primary], algos, expected)
        for c in cs:
            io = dict(c.settings)["io"]
            t = (tcfg or {}).get("timing", {}).get(io) if tcfg and tcfg.get("status") == OK else None
            rec = base(c, status=OK, time=_timing(t), accuracy=acc, determinism=det,
                       chosen_algo=(algos or {}).get("chosen_summary") if provider == CUDA_EP else "MLAS (CPU EP)",
                       explanation=explanation, extra=dict(extra))
            if t is None:
                rec.reason = "timing worker failed: " + ((tcfg or {}).get("reason") or (
                    timing_run.failure[1] if timing_run.failure else "no result"))[:500]
            yield rec

    def _algo_summary(self, node_info: list[dict], samples: list[dict]) -> dict[str, Any]:
        per_session, labels = [], []
        for info in node_info:
            for si, sess in enumerate(info.get("sessions") or []):
                per_session.append(sess)
                labels.append(f"p{info['process']}s{si}")
        out: dict[str, Any] = {"algo_logs": [{k: v for k, v in i.items() if k != "sessions"} for i in node_info]}
        if not per_session:
            out["chosen_summary"] = None
            return out
        out["node_algos"] = per_session[0]
        out["node_algo_differences"] = cudnn_log.differences(per_session, labels)
        out["chosen_summary"] = cudnn_log.engine_counts(per_session[0])
        # which output each algorithm set produced
        by_label = {s["label"]: s for s in samples}
        combos: dict[str, set] = {}
        for lab, sess in zip(labels, per_session, strict=False):
            sig = json.dumps(sess, sort_keys=True)
            d = by_label.get(lab, {}).get("outputs", {})
            combos.setdefault(sig, set()).update(o["digest"] for o in d.values())
        out["distinct_algo_sets"] = len(combos)
        return out

    @staticmethod
    def _explain(provider: str, d: dict, algos: dict | None, expected: dict) -> str:
        if provider == CPU_EP:
            head = CPU_NOTE + ". "
        else:
            head = ""
        ip, fp = d["in_process"], d["fresh_process"]
        text = (f"{head}{ip['n']} fresh sessions in one process: {ip['distinct']} distinct output(s); "
                f"{fp['n']} fresh processes: {fp['distinct']} distinct output(s)")
        if d["all"]["distinct"] > 1:
            text += f"; max spread {d['all']['max_spread']:.3g} ({d['all']['max_spread_rel']:.3g} of max |ref|)"
        if algos:
            diffs = algos.get("node_algo_differences") or {}
            if algos.get("node_algos") is None:
                text += "; per-node algorithms not mapped (see extra.algo_logs)"
            elif diffs:
                nodes = ", ".join(f"{n}: {'/'.join(sorted(set(v.values())))}" for n, v in list(diffs.items())[:4])
                text += f"; {len(diffs)} conv node(s) ran different engines between sessions ({nodes})"
            else:
                text += "; every conv node ran the same engine in every logged session"
        if provider == CUDA_EP and expected.get("path") == "cudnn_frontend":
            text += "; onnxruntime >= 1.20: EXHAUSTIVE is cuDNN heuristics mode B, no timed search"
        return text

    # single-Conv catalogue cases ------------------------------------------------------------------------------
    def combos(self, case: Case, options: SweepOptions) -> list[Combo]:
        opts = ModelOptions.from_options(options)
        out = []
        # the CPU EP cross-check is for whole models; catalogue cases run on the device the sweep is for
        for provider in ([CUDA_EP] if opts.device == "cuda" else [CPU_EP]):
            for direction, dtype, layout in itertools.product(opts.directions, opts.dtypes, opts.layouts):
                for (search, tf32, ws), io in itertools.product(self._settings_grid(provider), IO_MODES):
                    out.append(Combo(direction, "auto", NA if provider == CPU_EP else f"use_tf32={tf32}", dtype,
                                     layout, _settings(provider, search, tf32, ws, io)))
        return out

    @staticmethod
    def _unsupported(c: Combo) -> str | None:
        provider = dict(c.settings)["provider"]
        if c.direction != "fwd":
            return "onnxruntime runs inference: forward convolutions only"
        if c.layout != "NCHW":
            return ("NHWC Conv needs the CUDA EP's prefer_nhwc option and an ENABLE_CUDA_NHWC_OPS build; the ONNX "
                    "graph itself is NCHW. Not measured")
        if c.dtype not in models.ONNX_DTYPES:
            return f"onnxruntime registers no {c.dtype} Conv kernel ({ORT_CONV_SOURCE}: float, double, MLFloat16)"
        if provider == CPU_EP and c.dtype != "fp32":
            return "the CPU EP's Conv kernel is float32 only"
        return None

    def run(self, case: Case, combos: Iterable[Combo], options: SweepOptions) -> Iterator[Record]:
        combos = list(combos)
        opts = ModelOptions.from_options(options)
        why = self.available()
        runnable: dict[tuple[str, str], dict[str, list[Combo]]] = {}  # (provider, dtype) -> session key -> combos
        cuda_why = self.cuda_reason()
        for c in combos:
            s = dict(c.settings)
            reason = why or self._unsupported(c) or (cuda_why if s["provider"] == CUDA_EP else None)
            if reason:
                yield c.record(case, self.name, status=SKIPPED, reason=reason,
                               device="cuda:0" if s["provider"] == CUDA_EP else "cpu")
                continue
            runnable.setdefault((s["provider"], c.dtype), {}).setdefault(_session_key(s), []).append(c)
        if not runnable:
            return
        workdir = Path(tempfile.mkdtemp(prefix=f"convbench-ort-{case.id}-"))
        try:
            for (provider, dtype), groups in runnable.items():
                yield from self._run_case(case, provider, dtype, groups, opts, workdir / f"{provider}-{dtype}")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _run_case(self, case, provider, dtype, groups, opts, workdir):
        workdir.mkdir(parents=True, exist_ok=True)
        device = "cuda:0" if provider == CUDA_EP else "cpu"
        try:
            path, sha = models.build_conv_case(case, dtype, Path(opts.cache_dir) / "models" if opts.cache_dir
                                               else None)
            host = accuracy.host_inputs(case)
            x = host["x"].astype(models.NUMPY_DTYPES[dtype])
            w = host["w"].astype(models.NUMPY_DTYPES[dtype])
            np.save(workdir / "x.npy", x)
        except Exception as exc:
            for cs in groups.values():
                for c in cs:
                    yield c.record(case, self.name, status=ERROR, device=device,
                                   reason=f"building the Conv model: {type(exc).__name__}: {exc}")
            return

        def job(cfgs):
            return {"model": str(path), "provider": provider, "inputs": {"x": str(workdir / "x.npy")},
                    "timing_policy": _policy_dict(opts.case_timing), "configs": cfgs}

        def cfg(key, cs, sessions, **kw):
            s = dict(cs[0].settings)
            po = {} if provider == CPU_EP else _provider_options(s["cudnn_conv_algo_search"], s["use_tf32"],
                                                                 s["cudnn_conv_use_max_workspace"])
            return {"key": key, "provider_options": po, "sessions": sessions, **kw}

        timing = WorkerRun(job([cfg(k, cs, 1, timing=True) for k, cs in groups.items()]))
        drift = WorkerRun(job([cfg(k, cs, max(1, opts.case_sessions), profile=True, repeats=opts.repeats)
                               for k, cs in groups.items()]))
        run_workers([(timing, "timing", False)], workdir, 1, opts.worker_timeout_s)
        run_workers([(drift, "drift", opts.log and provider == CUDA_EP)], workdir, 1, opts.worker_timeout_s)
        ref = scale = None
        ref_device = _reference_device()
        try:
            import torch

            ref, scale = accuracy.reference(case, "fwd", {"x": torch.from_numpy(x), "w": torch.from_numpy(w)},
                                            ref_device)
        except Exception as exc:
            ref_error = f"reference failed: {type(exc).__name__}: {exc}"
        else:
            ref_error = None
        # the drift worker ran every setting in one process: its log covers them in order
        api = _parse_api(drift.api_log)
        fe = cudnn_log.parse_frontend(_read_log(drift.fe_log)) if drift.fe_log else None
        seq, source = cudnn_log.conv_sequence(api, fe)
        pos = 0
        version = ort_version()
        for key, cs in groups.items():
            tr, dr = _cfg_result(timing, key), _cfg_result(drift, key)
            if dr is None or dr.get("status") != OK:
                fail = drift.failure or (ERROR, (dr or {}).get("reason") or "no result")
                for c in cs:
                    yield c.record(case, self.name, status=fail[0], reason=fail[1][:1500], device=device)
                continue
            sessions = dr["sessions"]
            runs = [s["runs"] for s in sessions]
            n_exec = sum(runs)
            algos = seq[pos:pos + n_exec] if len(seq) >= pos + n_exec else []
            pos += n_exec
            digests = [s["outputs"]["x"]["digest"] for s in sessions]
            distinct = list(dict.fromkeys(digests))
            outs = {d: np.load(next(s["outputs"]["x"]["file"] for s in sessions if s["outputs"]["x"]["digest"] == d))
                    for d in distinct}
            hashes = {d: accuracy.output_hash(_torch(a)) for d, a in outs.items()}
            first = sessions[0]["outputs"]["x"]
            acc = None
            if ref is not None:
                import torch

                yt = torch.from_numpy(outs[first["digest"]]).to(ref_device)
                acc = accuracy.measure(yt, ref, scale, dtype)
                acc.unwritten = first["unwritten"]
            rep = sessions[0].get("repeat_digests") or []
            det = Determinism(hash=hashes[first["digest"]], hash_algo=accuracy.HASH_ALGO, repeats=len(rep),
                              repeat_equal=all(d == first["digest"] for d in rep) if rep else None,
                              fresh_handle_equal=len(distinct) == 1, distinct_outputs=len(distinct))
            chosen = None
            per_session = []
            if algos:
                i = 0
                for r in runs:
                    labs = list(dict.fromkeys(algos[i:i + r]))
                    per_session.append("->".join(labs))
                    i += r
                chosen = per_session[0]
            sp = spread(list(outs.values()))
            extra = {"model_sha256": sha, "ort_version": version, "sessions": len(sessions),
                     "session_hashes": [hashes[d] for d in digests], "max_spread": sp,
                     "session_algos": per_session or None, "algo_source": source if algos else None,
                     "conv_path_expected": expected_conv_path(version) if provider == CUDA_EP else NA,
                     "cudnn_version_loaded": cudnn_log.version_string(api.version) if api else None,
                     "reference_error": ref_error}
            if tr and tr.get("status") == OK:
                extra.update(session_create_ms=tr["sessions"][0]["create_ms"],
                             first_inference_ms=tr["sessions"][0]["first_run_ms"],
                             provider_options_effective=tr.get("provider_options_effective"))
            expl = (f"{len(sessions)} fresh sessions in one process: {len(distinct)} distinct output(s)"
                    + (f", max spread {sp:.3g}" if len(distinct) > 1 else "")
                    + (f"; engines per session: {', '.join(per_session)}" if per_session and
                       len(set(per_session)) > 1 else ""))
            if provider == CPU_EP:
                expl = CPU_NOTE + ". " + expl
            for c in cs:
                io = dict(c.settings)["io"]
                t = tr.get("timing", {}).get(io) if tr and tr.get("status") == OK else None
                rec = c.record(case, self.name, status=OK, device=device, time=_timing(t), accuracy=acc,
                               determinism=det, chosen_algo=chosen if provider == CUDA_EP else "MLAS (CPU EP)",
                               explanation=expl, extra=dict(extra))
                if t is None:
                    rec.reason = "timing worker failed: " + str((tr or {}).get("reason") or (
                        timing.failure[1] if timing.failure else "no result"))[:500]
                yield rec


# ---- helpers ------------------------------------------------------------------------------------------------------

def _torch(a: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a))


def _reference_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def _policy_dict(p: TimingPolicy) -> dict:
    from dataclasses import asdict

    return asdict(p)


def _cfg_result(w: WorkerRun, key: str) -> dict | None:
    if not w.result:
        return None
    return next((c for c in w.result["configs"] if c["key"] == key), None)


def _slug(key: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in key.replace("ExecutionProvider", ""))


def _wall(w: WorkerRun) -> float | None:
    return round(w.ended - w.started, 2) if w.started and w.ended else None


def _keep_logs(w: WorkerRun, directory: Path, stem: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for kind, path in (("api", w.api_log), ("frontend", w.fe_log)):
        if path and Path(path).exists() and Path(path).stat().st_size:
            # level 1: these logs are tens of MB of repetitive text; level 9 cost seconds per setting for ~10 %
            with open(path, "rb") as src, gzip.open(directory / f"{stem}.{kind}.log.gz", "wb",
                                                    compresslevel=1) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
