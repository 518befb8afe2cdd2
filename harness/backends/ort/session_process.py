"""The onnxruntime session process: sessions, outputs and timings, with cuDNN logging set by the parent.

Why a separate process: cuDNN reads its logging variables once, when the library loads, so a process that
must be logged has to start with them set; and "fresh process" is one of the repetitions the drift question
needs. The process imports neither torch nor anything that loads CUDA besides onnxruntime, so the cuDNN it
logs is the one onnxruntime loaded by itself.

The functions here are what one process runs: ``session_process(job)`` (and ``profile_agreement(job)`` for
scripts/bench_ort.py). The run layer starts each one in a fresh, watched process of its worker pool
(harness.run.pool, through WorkerPool.call) with the environment the backend planned (sessions.py); what it
returns comes back through the pool, and a crash, hang or out-of-memory is the pool's to classify.

Each configuration of the job gets ``sessions`` fresh InferenceSessions in this process. Every session runs
each input once through I/O binding (device-resident input, output buffer poisoned with a NaN pattern first),
session 0 repeats the first input ``repeats`` times in place, and with ``timing`` the last session is timed
with I/O binding and end to end from numpy. Outputs are saved once per distinct content (blake2b of the
bytes) under the job's ``out_dir``, so the parent can hash them with accuracy.output_hash and compute spreads.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import time
import traceback
from pathlib import Path

import numpy as np

from ...measurement.accuracy import POISON_BITS
from ...measurement.timing import HostTimer, TimingPolicy, summarize

CONV_OPS = ("Conv", "FusedConv", "NhwcConv")
_NP = {"tensor(float)": (np.float32, "fp32", np.uint32), "tensor(float16)": (np.float16, "fp16", np.uint16)}


def poisoned(shape, type_str: str) -> np.ndarray:
    dtype, name, itype = _NP[type_str]
    return np.full(shape, POISON_BITS[name], dtype=itype).view(dtype)


def count_unwritten(y: np.ndarray, type_str: str) -> int:
    _, name, itype = _NP[type_str]
    return int((y.view(itype) == POISON_BITS[name]).sum())


def digest(y: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(y).tobytes(), digest_size=16).hexdigest()


def conv_order(profile_path: str, names: list[str] | None = None) -> list[str]:
    """Conv nodes in the order onnxruntime executed them, from its profile (first appearance)."""
    events = json.loads(Path(profile_path).read_text())
    order: list[str] = []
    for ev in events:
        if ev.get("cat") != "Node" or not ev.get("name", "").endswith("_kernel_time"):
            continue
        if ev.get("args", {}).get("op_name") not in CONV_OPS:
            continue
        node = ev["name"][: -len("_kernel_time")]
        if node not in order:
            order.append(node)
    return order


def model_run_ms(profile_path: str) -> list[float]:
    """Durations of every Run() in an onnxruntime profile ("model_run" events, microseconds -> ms)."""
    events = json.loads(Path(profile_path).read_text())
    return [ev["dur"] / 1000.0 for ev in events if ev.get("name") == "model_run" and "dur" in ev]


class Worker:
    def __init__(self, job: dict):
        import onnxruntime as ort

        self.ort = ort
        self.job = job
        self.out_dir = Path(job["out_dir"])
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.inputs = {k: np.load(v) for k, v in job["inputs"].items()}
        self.provider = job["provider"]
        self.device = "cuda" if self.provider == "CUDAExecutionProvider" else "cpu"
        self.saved: dict[str, str] = {}

    def session(self, options: dict, profile: bool = False):
        ort = self.ort
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if profile:
            so.enable_profiling = True
            so.profile_file_prefix = str(self.out_dir / f"profile-{os.getpid()}")
        providers = [(self.provider, options)] if options else [self.provider]
        t0 = time.perf_counter()
        sess = ort.InferenceSession(self.job["model"], so, providers=providers)
        create_ms = (time.perf_counter() - t0) * 1e3
        if self.provider not in sess.get_providers():
            raise RuntimeError(f"{self.provider} did not load (session providers: {sess.get_providers()})")
        return sess, create_ms

    def _save(self, y: np.ndarray) -> tuple[str, str]:
        d = digest(y)
        if d not in self.saved:
            path = self.out_dir / f"out-{d}.npy"
            np.save(path, y)
            self.saved[d] = str(path)
        return d, self.saved[d]

    def bind(self, sess, x: np.ndarray):
        ort = self.ort
        out = sess.get_outputs()[0]
        binding = sess.io_binding()
        # On the CPU an OrtValue wraps the numpy buffer without copying: the arrays must outlive the binding.
        x_host = np.ascontiguousarray(x)
        y_host = poisoned(out.shape, out.type)
        x_dev = ort.OrtValue.ortvalue_from_numpy(x_host, self.device, 0)
        y_dev = ort.OrtValue.ortvalue_from_numpy(y_host, self.device, 0)
        binding.bind_ortvalue_input(sess.get_inputs()[0].name, x_dev)
        binding.bind_ortvalue_output(out.name, y_dev)
        return binding, (x_dev, x_host, y_host), y_dev

    def infer(self, sess, x: np.ndarray) -> tuple[np.ndarray, float, int]:
        """One run through I/O binding into a poisoned device buffer: (output, ms, unwritten elements)."""
        out = sess.get_outputs()[0]
        binding, _keep, y_dev = self.bind(sess, x)
        t0 = time.perf_counter()
        sess.run_with_iobinding(binding)
        ms = (time.perf_counter() - t0) * 1e3
        y = y_dev.numpy().copy()
        return y, ms, count_unwritten(y, out.type)

    def timings(self, sess, x: np.ndarray, policy: TimingPolicy) -> dict:
        binding, _x, _y = self.bind(sess, x)
        name = sess.get_inputs()[0].name
        timer = HostTimer(policy)
        iob = timer(lambda: sess.run_with_iobinding(binding))
        e2e = timer(lambda: sess.run(None, {name: x}))
        return {"iobinding": dataclasses.asdict(iob), "numpy": dataclasses.asdict(e2e)}

    def run_config(self, cfg: dict) -> dict:
        res: dict = {"key": cfg["key"], "status": "ok", "reason": None, "sessions": []}
        names = list(self.inputs)
        policy = TimingPolicy(**self.job.get("timing_policy", {}))
        for si in range(cfg["sessions"]):
            profile = bool(cfg.get("profile")) and si == 0
            sess, create_ms = self.session(cfg["provider_options"], profile=profile)
            if si == 0:
                res["provider_options_effective"] = sess.get_provider_options().get(self.provider, {})
                res["session_providers"] = sess.get_providers()
            srec: dict = {"create_ms": create_ms, "outputs": {}, "runs": 0}
            for i, name in enumerate(names):
                y, ms, unwritten = self.infer(sess, self.inputs[name])
                srec["runs"] += 1
                if i == 0:
                    srec["first_run_ms"] = ms
                d, path = self._save(y)
                srec["outputs"][name] = {"digest": d, "file": path, "unwritten": unwritten, "ms": ms}
            if si == 0 and cfg.get("repeats"):
                srec["repeat_digests"] = []
                for _ in range(cfg["repeats"]):
                    y, _, _ = self.infer(sess, self.inputs[names[0]])
                    srec["runs"] += 1
                    srec["repeat_digests"].append(self._save(y)[0])
            if cfg.get("timing") and si == cfg["sessions"] - 1:
                t = self.timings(sess, self.inputs[names[0]], policy)
                res["timing"] = t
                srec["runs"] = None  # timed runs are not counted: a timed session is never log-mapped
            if profile:
                prof = sess.end_profiling()
                res["conv_order"] = conv_order(prof)
                os.unlink(prof)
            res["sessions"].append(srec)
            del sess
            gc.collect()
        return res

    def run(self) -> dict:
        result = {"ort_version": self.ort.__version__, "available_providers": self.ort.get_available_providers(),
                  "pid": os.getpid(), "configs": []}
        for cfg in self.job["configs"]:
            try:
                result["configs"].append(self.run_config(cfg))
            except Exception as exc:  # one failing configuration costs that configuration only
                result["configs"].append({"key": cfg["key"], "status": "error",
                                          "reason": f"{type(exc).__name__}: {exc}".strip()[:2000],
                                          "traceback": traceback.format_exc()[-4000:], "sessions": []})
        return result


def session_process(job: dict) -> dict:
    """One session process: every configuration of ``job`` (the result the parent assembles records from)."""
    return Worker(job).run()


def profile_agreement(job: dict) -> dict:
    """Our timer and onnxruntime's profiler on the same runs of one session (scripts/bench_ort.py)."""
    w = Worker(job)
    cfg = job["configs"][0]
    sess, _ = w.session(cfg["provider_options"], profile=True)
    x = w.inputs[next(iter(w.inputs))]
    binding, _x, _y = w.bind(sess, x)
    policy = TimingPolicy(**job.get("timing_policy", {}))
    samples: list[float] = []
    for _ in range(max(3, policy.min_samples // 4)):  # warm-up, untimed
        sess.run_with_iobinding(binding)
    n_warm = max(3, policy.min_samples // 4)
    for _ in range(policy.max_samples):
        t0 = time.perf_counter()
        sess.run_with_iobinding(binding)
        samples.append((time.perf_counter() - t0) * 1e3)
    prof = sess.end_profiling()
    runs = model_run_ms(prof)
    os.unlink(prof)
    ours = dataclasses.asdict(summarize(samples, "hot", "perf_counter", policy.keep_samples))
    theirs = dataclasses.asdict(summarize(runs[n_warm:], "hot", "ort_profiler", policy.keep_samples)) if len(runs) > n_warm \
        else None
    return {"ort_version": w.ort.__version__, "ours": ours, "profiler": theirs, "profiled_runs": len(runs),
            "timed_runs": len(samples), "warmup_runs": n_warm}
