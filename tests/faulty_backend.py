"""A test-only backend that misbehaves on purpose, so the worker's fault isolation can be tested for real.

It lives beside the tests, not in the package, and is loaded (harness.run.pool) only when
CONVBENCH_TEST_BACKENDS=1. Each case gets four combinations (algos ``ok0``, ``ok1``, the fault, ``ok2``); the fault for a case comes from CONVBENCH_FAULTS, e.g. ``quick.seed=segv,quick.grouped=hang``
(cases not named there get ``ok3`` instead of a fault). Its ``ok2`` computes other bits in a timing-only pass
(a second process), so a test can see a cross-process difference. The faults are real: a SIGSEGV delivered by the kernel
(a read of address 0), a hang, an allocation loop that exhausts the address-space limit, a raised out-of-memory
error as PyTorch raises it for a device, an abort, and on a GPU an out-of-bounds store by a real kernel.
"""

from __future__ import annotations

import ctypes
import os
import resource
import time
from collections.abc import Iterable, Iterator

from harness.backends import Combo, SweepOptions
from harness.core.cases import Case
from harness.core.records import ERROR, OK, Determinism, Record, Timing

ENABLE_ENV = "CONVBENCH_TEST_BACKENDS"
PLAN_ENV = "CONVBENCH_FAULTS"
FAULTS = ("segv", "abort", "hang", "exhaust_memory", "raise_oom", "raise", "exit", "cuda_illegal_address")


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV) == "1"


def plan() -> dict[str, str]:
    """case id -> fault, from CONVBENCH_FAULTS (``case=fault,...``); an unknown fault name is an error."""
    out: dict[str, str] = {}
    for item in filter(None, os.environ.get(PLAN_ENV, "").split(",")):
        case, _, fault = item.partition("=")
        if fault not in FAULTS:
            raise ValueError(f"{PLAN_ENV}: unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        out[case] = fault
    return out


def _segv() -> None:
    ctypes.string_at(0)  # a real invalid read: the kernel delivers SIGSEGV


def _hang() -> None:
    while True:
        time.sleep(3600)


def _exhaust_memory() -> None:
    """Allocate and touch 64 MiB blocks until the allocator fails; only under a finite RLIMIT_AS."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        raise RuntimeError("refusing to exhaust memory without an address-space limit (worker memory_limit)")
    hoard = []
    while True:
        hoard.append(bytearray(64 << 20))


class OutOfMemoryError(RuntimeError):
    """Shaped like torch.OutOfMemoryError (a RuntimeError), without importing torch in the test worker."""


def _raise_oom() -> None:
    raise OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB (injected by the faulty test backend)")


# A kernel that stores one word through the pointer it is given: handed a bad address, it makes a real
# illegal memory access, which leaves the CUDA context unusable (a sticky error) as a buggy kernel would.
_PTX = b"""
.version 7.0
.target sm_50
.address_size 64
.visible .entry poke(.param .u64 p)
{
    .reg .u64 %rd<2>;
    .reg .u32 %r<2>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, 42;
    st.global.u32 [%rd1], %r1;
    ret;
}
"""


def _cuda_illegal_address() -> None:
    """Launch the poke kernel on PyTorch's context with a pointer into unmapped device memory."""
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")  # make the primary context current on this thread
    cuda = ctypes.CDLL("libcuda.so.1")
    module, func = ctypes.c_void_p(), ctypes.c_void_p()
    for target in (b"sm_50", b"sm_75"):  # the driver JIT-compiles the PTX for the GPU it runs on
        if not cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(_PTX.replace(b"sm_50", target))):
            break
    else:
        raise RuntimeError("cuModuleLoadData failed for the poke kernel")
    if cuda.cuModuleGetFunction(ctypes.byref(func), module, b"poke"):
        raise RuntimeError("cuModuleGetFunction failed for the poke kernel")
    bad = ctypes.c_uint64(0x10)  # never mapped on the device
    args = (ctypes.c_void_p * 1)(ctypes.addressof(bad))  # kernelParams: a pointer to each argument
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    if cuda.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, stream, args, None):
        raise RuntimeError("cuLaunchKernel failed for the poke kernel")
    torch.cuda.synchronize()  # raises: an illegal memory access was encountered


def output_hash(case: Case, combo: Combo) -> str:
    """The "output" of a combination: the same in every process."""
    return f"{case.id}-{combo.algo}"


class FaultyBackend:
    name = "faulty"
    replicable = True  # its slices can be timed in a second process (harness/run/replicas.py)

    def available(self) -> str | None:
        return None

    def combos(self, case: Case, options: SweepOptions) -> list[Combo]:
        fault = plan().get(case.id, "ok3")
        return [Combo("fwd", algo, "DEFAULT", "fp32", "NCHW") for algo in ("ok0", "ok1", fault, "ok2")]

    def run(self, case: Case, combos: Iterable[Combo], options: SweepOptions) -> Iterator[Record]:
        for combo in combos:
            rec = combo.record(case, self.name, device=options.device)
            t0 = time.perf_counter()
            try:
                self._do(combo.algo)
            except RuntimeError as exc:  # what a real backend does with an error it can describe
                rec.status, rec.reason = ERROR, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                yield rec
                continue
            ms = (time.perf_counter() - t0) * 1e3
            rec.status = OK
            samples = [ms] + [self._timed(combo.algo) for _ in range(7)]
            rec.time = Timing(median_ms=sorted(samples)[4], iqr_ms=0.0, n=len(samples), mode="hot",
                              timer="perf_counter", min_ms=min(samples), samples_ms=samples)
            # ok2's timing-only pass (a second process, harness/run/replicas.py) computes other bits
            other = "-other" if options.timing_only and combo.algo == "ok2" else ""
            rec.determinism = Determinism(hash=output_hash(case, combo) + other, hash_algo="test", repeats=1,
                                          repeat_equal=True, fresh_handle_equal=None)
            yield rec

    def _timed(self, algo: str) -> float:
        t0 = time.perf_counter()
        self._do(algo)
        return (time.perf_counter() - t0) * 1e3

    def _do(self, algo: str) -> None:
        if algo.startswith("ok"):
            return
        if algo == "segv":
            _segv()
        elif algo == "abort":
            os.abort()
        elif algo == "hang":
            _hang()
        elif algo == "exhaust_memory":
            _exhaust_memory()
        elif algo == "raise_oom":
            _raise_oom()
        elif algo == "raise":
            raise KeyError("an exception the backend did not expect (injected)")
        elif algo == "exit":
            os._exit(7)
        elif algo == "cuda_illegal_address":
            _cuda_illegal_address()


# --- `convbench repro` of a faulty run (harness.run.repro), without a GPU --------------------------------------------

class FaultyRepro:
    """Recomputes a faulty sweep's records: each one's bits again, or its case's planned fault at the combination
    where the sweep ran ``ok3`` (a case with no planned fault in the sweep)."""

    name = "faulty-repro"

    def run(self, case: Case, combos: Iterable[Combo], options) -> Iterator[Record]:
        from harness.run.repro import reproduced

        fault = plan().get(case.id)
        for combo in combos:
            if fault and combo.algo == "ok3":
                FaultyBackend()._do(fault)
            yield reproduced(options.originals[combo.key(case, FaultyBackend.name)], output_hash(case, combo))


# --- the autotuner study's stages (harness.run.autotune_study.Plan), without a GPU --------------------------------

def autotune_plan():
    """The study's plan with every stage run by the faulty tuner; the pool loads them only when ENABLE_ENV=1."""
    from harness.run.autotune_study import Plan

    return Plan(crosscheck="faulty_backend:FaultyTuner", find="faulty_backend:FaultyTuner",
                trial="faulty_backend:faulty_trial", torch="faulty_backend:FaultyTuner")


def faulty_trial(spec: list[dict]) -> list[dict]:
    """One fresh process of the torch stage: each conv's output hash (the same in every process), or the fault
    planned for ``trial`` (CONVBENCH_FAULTS=trial=segv)."""
    fault = plan().get("trial")
    if fault:
        FaultyBackend()._do(fault)
    return [dict(item, hash=f"{item['case']}-{item['layout']}-{item['tf32']}") for item in spec]


class FaultyTuner:
    """Every stage of the study: a cudnnFind combination whose math is FMA gets its case's planned fault; each
    stage's records are shaped as the real ones (kind, backend, settings), the search of quick.seed flips."""

    name = "faulty-tuner"

    def run(self, case: Case, combos: Iterable[Combo], options) -> Iterator[Record]:
        from harness.core.records import Determinism

        for combo in combos:
            s = dict(combo.settings)
            if "torch_defaults" in s:
                rec = combo.record(case, "torch-vs-cudnn", kind="crosscheck", device=options.device)
                rec.algo, rec.settings = "IMPLICIT_GEMM", dict(s, torch_tf32="True")
                rec.extra = {"max_abs_delta": 0.04, "torch_class": "tf32", "cudnn_fma_class": "fp32"}
                yield rec
                continue
            if "search" in s:
                fault = plan().get(case.id)
                if fault and combo.math == "FMA":
                    FaultyBackend()._do(fault)
                winners = {"A (FMA)": 3, "B (FMA)": 2} if case.id == "quick.seed" else {"A (FMA)": options.k}
                hashes = ["h0", "h1"] if len(winners) > 1 else ["h0"]
                backend = "cudnn"
            else:
                hashes = [next(i["hash"] for i in p if i["case"] == case.id and i["layout"] == combo.layout
                               and i["tf32"] == s["tf32"]) for p in options.processes]
                winners, backend = {"same bits as A": len(hashes)}, "torch"
            yield combo.record(case, backend, kind="autotune", device=options.device, status=OK,
                               determinism=Determinism(hash=hashes[0], hash_algo="test", repeats=options.k,
                                                       repeat_equal=len(set(hashes)) == 1, fresh_handle_equal=None,
                                                       distinct_outputs=len(set(hashes))),
                               extra={"winners": winners, "trials": [], "near_ties": [], "max_abs_spread": 0.5})


# --- onnxruntime's session processes (harness.backends.ort.sessions), on the CPU EP ------------------------------

ORT_SESSION = "faulty_backend:faulty_session"  # ModelOptions.session_function: the pool loads it when ENABLE_ENV=1


def faulty_session(job: dict) -> dict:
    """One onnxruntime session process: the fault planned for its name (CONVBENCH_FAULTS=drift-00-p0=segv), else
    the real one (harness.backends.ort.session_process.session_process)."""
    from harness.backends.ort.session_process import session_process

    fault = plan().get(job["name"])
    if fault:
        FaultyBackend()._do(fault)
    return session_process(job)
