"""onnxruntime backend: the CUDA execution provider under every cuDNN conv search setting, and the CPU EP.

Settings grid on CUDA: ``cudnn_conv_algo_search`` (EXHAUSTIVE, HEURISTIC, DEFAULT) x ``use_tf32`` (0, 1) x
``cudnn_conv_use_max_workspace`` (0, 1), each measured with I/O binding (device-resident input and output)
and end to end from numpy. What the modes mean depends on the version (docs/ort.md cites the source):
onnxruntime <= 1.19 searched with cudnnFindConvolutionForwardAlgorithmEx (EXHAUSTIVE, timed on the device),
cudnnGetConvolutionForwardAlgorithm_v7 (HEURISTIC) or IMPLICIT_PRECOMP_GEMM (DEFAULT); from 1.20 a Conv is a
cuDNN frontend graph whose plan comes from heuristics mode B (EXHAUSTIVE), A (HEURISTIC) or FALLBACK
(DEFAULT) -- no timing at all -- and the max-workspace option no longer enters the conv path.

All onnxruntime work runs in session processes (harness/backends/ort/session_process.py): fresh processes are one of the
repetitions the drift question needs, cuDNN's logs can only be switched on before a process loads it, and a
crash in a native library costs that process's combinations, not the sweep. The backend plans the processes
(sessions.py) and runs them through the process service it is given (``processes``: the run layer's
harness.run.pool.FreshProcesses, the worker pool's fresh, watched processes), which says how each one ended.
This process builds the models, computes the float64 references, hashes the outputs with
accuracy.output_hash and assembles the records.
"""

from __future__ import annotations

import itertools
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...core.cases import SEARCH_MODES, Case
from ...core.records import ERROR, OK, SKIPPED, Determinism, Record
from ...measurement import accuracy
from .. import Combo, SweepOptions
from . import cudnn_log, models
from .drift import reference_device, spread, to_torch
from .engines import expected_conv_path, ort_version, parse_api_log, read_log
from .model_runs import ModelRuns
from .options import (
    CPU_EP,
    CPU_NOTE,
    CUDA_EP,
    IO_MODES,
    NA,
    ORT_CONV_SOURCE,
    ModelOptions,
    combo_settings,
    policy_dict,
    provider_options,
    session_key,
    timing_of,
)
from .sessions import (
    NO_PROCESSES,
    SessionProcesses,
    WorkerRun,
    config_result,
    failed,
)


class OrtBackend(ModelRuns):
    name = "ort"

    def __init__(self, log=None, processes: SessionProcesses | None = None):
        """``processes``: the service that runs session processes (harness.run.pool.FreshProcesses); without
        one, whatever needs a session process is an error record that says so."""
        self.log = log or (lambda msg: print(f"[ort] {msg}", file=sys.stderr, flush=True))
        self.processes = processes

    def _run_sessions(self, runs: list[WorkerRun], workdir: Path, parallel: int, timeout_s: float,
                      on_done=None) -> None:
        """Each session process prepared under ``workdir``, then run by the service, ``parallel`` at a time."""
        for w in runs:
            w.prepare(workdir)
        self.processes(runs, parallel, timeout_s, on_done)

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

    # single-Conv catalogue cases ------------------------------------------------------------------------------
    def combos(self, case: Case, options: SweepOptions) -> list[Combo]:
        opts = ModelOptions.from_options(options)
        out = []
        # the CPU EP cross-check is for whole models; catalogue cases run on the device the sweep is for
        for provider in ([CUDA_EP] if opts.device == "cuda" else [CPU_EP]):
            for direction, dtype, layout in itertools.product(opts.directions, opts.dtypes, opts.layouts):
                for (search, tf32, ws), io in itertools.product(self._settings_grid(provider), IO_MODES):
                    out.append(Combo(direction, "auto", NA if provider == CPU_EP else f"use_tf32={tf32}", dtype,
                                     layout, combo_settings(provider, search, tf32, ws, io)))
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
            runnable.setdefault((s["provider"], c.dtype), {}).setdefault(session_key(s), []).append(c)
        if not runnable:
            return
        if self.processes is None:
            for (provider, _), groups in runnable.items():
                for cs in groups.values():
                    for c in cs:
                        yield c.record(case, self.name, status=ERROR, reason=NO_PROCESSES,
                                       device="cuda:0" if provider == CUDA_EP else "cpu")
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

        def job(cfgs, name, log=False):
            return WorkerRun({"model": str(path), "provider": provider, "inputs": {"x": str(workdir / "x.npy")},
                              "timing_policy": policy_dict(opts.case_timing), "configs": cfgs}, name=name,
                             log=log, function=opts.session_function)

        def cfg(key, cs, sessions, **kw):
            s = dict(cs[0].settings)
            po = {} if provider == CPU_EP else provider_options(s["cudnn_conv_algo_search"], s["use_tf32"],
                                                                 s["cudnn_conv_use_max_workspace"])
            return {"key": key, "provider_options": po, "sessions": sessions, **kw}

        timing = job([cfg(k, cs, 1, timing=True) for k, cs in groups.items()], "timing")
        drift = job([cfg(k, cs, max(1, opts.case_sessions), profile=True, repeats=opts.repeats)
                     for k, cs in groups.items()], "drift", opts.log and provider == CUDA_EP)
        self._run_sessions([timing], workdir, 1, opts.worker_timeout_s)
        self._run_sessions([drift], workdir, 1, opts.worker_timeout_s)
        ref = scale = None
        ref_device = reference_device()
        try:
            import torch

            ref, scale = accuracy.reference(case, "fwd", {"x": torch.from_numpy(x), "w": torch.from_numpy(w)},
                                            ref_device)
        except Exception as exc:
            ref_error = f"reference failed: {type(exc).__name__}: {exc}"
        else:
            ref_error = None
        # the drift worker ran every setting in one process: its log covers them in order
        api = parse_api_log(drift.api_log)
        fe = cudnn_log.parse_frontend(read_log(drift.fe_log)) if drift.fe_log else None
        seq, source = cudnn_log.conv_sequence(api, fe)
        pos = 0
        version = ort_version()
        for key, cs in groups.items():
            tr, dr = config_result(timing, key), config_result(drift, key)
            if dr is None or dr.get("status") != OK:
                status, why = (drift.failure[0], failed(drift, "session process")) if drift.failure else \
                    (ERROR, (dr or {}).get("reason") or "no result")
                for c in cs:
                    yield c.record(case, self.name, status=status, reason=why[:1500], device=device)
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
            hashes = {d: accuracy.output_hash(to_torch(a)) for d, a in outs.items()}
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
                rec = c.record(case, self.name, status=OK, device=device, time=timing_of(t), accuracy=acc,
                               determinism=det, chosen_algo=chosen if provider == CUDA_EP else "MLAS (CPU EP)",
                               explanation=expl, extra=dict(extra))
                if t is None:
                    rec.reason = (failed(timing, "timing process") if timing.failure else "timing worker failed: "
                                  + str((tr or {}).get("reason") or "no result"))[:500]
                yield rec
