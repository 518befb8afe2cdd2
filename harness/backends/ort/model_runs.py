"""Whole models (ResNet-50, MobileNetV2, models.py) under every setting: the part of OrtBackend that
`convbench ort-grid` and the asv suite's OrtModels use.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...core.records import ERROR, OK, SKIPPED, Determinism, Record
from ...measurement import accuracy
from .. import Combo
from . import architectures, cudnn_log, imagenet, models
from .drift import model_accuracy, spread, to_torch
from .engines import expected_conv_path, node_algorithms, ort_version
from .options import (
    CPU_EP,
    CPU_NOTE,
    CUDA_EP,
    IO_MODES,
    NA,
    ModelOptions,
    combo_settings,
    policy_dict,
    provider_options,
    session_key,
    timing_of,
)
from .sessions import (
    NO_PROCESSES,
    WorkerRun,
    api_logged_settings,
    config_result,
    default_parallel,
    failed,
    keep_worker_logs,
    wall_seconds,
)


class ModelRuns:
    """OrtBackend's whole-model methods (a mixin: they use the backend's providers, grid and log)."""

    # models ----------------------------------------------------------------------------------------------------
    def model_combos(self, model_id: str, options: Any) -> list[Combo]:
        architectures.check_model(model_id)
        opts = ModelOptions.from_options(options)
        out = []
        for provider in self._providers(opts):
            for (search, tf32, ws), io in itertools.product(self._settings_grid(provider), IO_MODES):
                out.append(Combo("fwd", "auto", NA if provider == CPU_EP else f"use_tf32={tf32}", "fp32", "NCHW",
                                 combo_settings(provider, search, tf32, ws, io)))
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
            groups.setdefault(session_key(dict(c.settings)), []).append(c)
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
        if self.processes is None:
            for cs in runnable.values():
                for c in cs:
                    yield base(c, status=ERROR, reason=NO_PROCESSES)
            return
        try:
            built = models.build(model_id, opts.batch, Path(opts.cache_dir) / "models" if opts.cache_dir else None)
            params = models.load_params(built.path)
            inputs = imagenet.model_inputs(model_id, opts.batch)
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
        input_hashes = {name: accuracy.output_hash(to_torch(x)) for name, x in inputs.items()}
        version = ort_version()
        expected = expected_conv_path(version)
        legacy = expected.get("path") == "legacy"

        def job(cfgs, provider, name, log=False):
            return WorkerRun({"model": str(built.path), "provider": provider, "inputs": input_files,
                              "timing_policy": policy_dict(opts.timing), "configs": cfgs}, name=name, log=log,
                             function=opts.session_function)

        def cfg(key, cs, sessions, **kw):
            s = dict(cs[0].settings)
            po = {} if s["provider"] == CPU_EP else provider_options(s["cudnn_conv_algo_search"], s["use_tf32"],
                                                                      s["cudnn_conv_use_max_workspace"])
            return {"key": key, "provider_options": po, "sessions": sessions, **kw}

        by_provider: dict[str, list[str]] = {}
        for key, cs in groups.items():
            by_provider.setdefault(dict(cs[0].settings)["provider"], []).append(key)
        # 1. Timing: one unlogged process per provider, every setting in turn, nothing else on the device.
        timing_runs = {p: job([cfg(k, groups[k], 1, timing=True) for k in keys], p, f"timing-{p}")
                       for p, keys in by_provider.items()}
        self.log(f"{model_id}: timing {len(groups)} settings")
        t1 = time.monotonic()
        self._run_sessions(list(timing_runs.values()), workdir, 1, opts.worker_timeout_s)
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
                # cuDNN's API log (every call, slow) in the process holding the sessions; the frontend's
                # one line per execution in every process
                logged = (True if pi == 0 and api_here else "frontend") if opts.log and provider == CUDA_EP \
                    else False
                w = job([cfg(key, cs, n, profile=True, repeats=opts.repeats if pi == 0 else 0)], provider,
                        f"drift-{len(drift):02d}-p{pi}", logged)
                ws.append(w)
                queue.append(w)
            drift[key] = ws
        timed_search = legacy and any(dict(cs[0].settings)["cudnn_conv_algo_search"] == "EXHAUSTIVE"
                                      for cs in groups.values())
        parallel = opts.parallel or default_parallel(timed_search)
        # Longest first: the processes holding all sessions (and the slow API log) start before the one-session
        # ones, so none of them is left running alone at the end (the order of records is unchanged).
        queue.sort(key=lambda w: not w.name.endswith("-p0"))
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
            self._run_sessions(queue, workdir, parallel, opts.worker_timeout_s, on_done=on_done)
        finally:
            pool.shutdown(wait=True)
        phases.update(drift_workers_s=round(time.monotonic() - t2, 2), parallel=parallel,
                      drift_processes=len(queue), api_logged=sum(1 for w in queue if w.log is True))
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
        r = config_result(w, key)
        if r is not None and r.get("status") == OK and (w.api_log or w.fe_log):
            try:
                info = node_algorithms(w, r, graph_convs)
            except Exception as exc:  # an unreadable log costs the engine names, not the measurements
                info = {"why_unmapped": f"reading the cuDNN logs failed: {type(exc).__name__}: {exc}"[:500]}
            info["process"] = pi
        if pi == 0 and opts.keep_logs:
            try:
                keep_worker_logs(w, Path(opts.keep_logs), f"{model_id}.{_slug(key)}")
            except OSError as exc:
                if info is not None:
                    info["logs_not_kept"] = str(exc)[:300]
        return info

    def _model_records(self, model_id, built, inputs, refs, yard, input_hashes, version, expected, key, cs,
                       timing_run, workers, opts, base, infos, phases):
        provider = dict(cs[0].settings)["provider"]
        tcfg = config_result(timing_run, key)
        samples: list[dict] = []  # every session of every drift worker
        problems = []
        node_info = []
        for pi, w in enumerate(workers):
            r = config_result(w, key)
            if r is None or r.get("status") != OK:
                problems.append(failed(w, "session process") if w.failure else (r or {}).get("reason", "no result"))
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
                    hashes[o["digest"]] = accuracy.output_hash(to_torch(arrays[o["digest"]]))
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
                        "hash": hashes.get(d) or accuracy.output_hash(to_torch(np.load(
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
                       "timing_worker_s": wall_seconds(timing_run),
                       "drift_workers_s": [wall_seconds(w) for w in workers],
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
            rec = base(c, status=OK, time=timing_of(t), accuracy=acc, determinism=det,
                       chosen_algo=(algos or {}).get("chosen_summary") if provider == CUDA_EP else "MLAS (CPU EP)",
                       explanation=explanation, extra=dict(extra))
            if t is None:
                rec.reason = (failed(timing_run, "timing process") if timing_run.failure else "timing worker failed: "
                              + ((tcfg or {}).get("reason") or "no result"))[:500]
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


def _slug(key: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in key.replace("ExecutionProvider", ""))


@dataclass(frozen=True)
class ModelSubject:
    """One model as a slice of the sweep's worker pool measures it: its records' case is ``id``."""

    model: str

    @property
    def id(self) -> str:
        return f"model.{self.model}"

