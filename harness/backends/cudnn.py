"""cuDNN backend: every algorithm x math type x dtype x layout of a case, called directly through ctypes.

Per case and dtype the operands are made once (rounded from the shared float32 draws) with their float64
reference; per layout the descriptors are made once; then each math type and algorithm is a record. A
combination cuDNN rejects, or whose workspace does not fit, is a record with that status.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..core.cases import Case
from ..core.records import OK, SKIPPED, UNSUPPORTED_ARCH, WORKSPACE_TOO_LARGE, Determinism, Ranking, Record
from ..measurement import accuracy
from ..measurement.timing import CudaTimer
from . import Combo, SweepOptions, by_problem, cudnn_determinism, cudnn_queries
from .cudnn_lib import (
    ALGOS,
    DOCUMENTED_NONDETERMINISTIC,
    MATH,
    Conv,
    ConvDescriptors,
    Cudnn,
    CudnnError,
    Handle,
    make_fresh_handles,
)


def cuda_unavailable_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (it provides the CUDA context and device memory)"
    if not torch.cuda.is_available():
        return "no CUDA device is visible to PyTorch"
    return None


def arch_reason(dtype: str, sm: tuple[int, int]) -> str | None:
    """Why a dtype cannot run on this architecture, or None."""
    if dtype == "bf16" and sm < (8, 0):
        return f"BF16 convolution needs sm_80 or newer (Ampere); this GPU is sm_{sm[0]}{sm[1]}"
    if dtype == "fp16" and sm < (5, 3):
        return f"FP16 arithmetic needs sm_53 or newer; this GPU is sm_{sm[0]}{sm[1]}"
    return None


class WorkspaceTooLarge(Exception):
    def __init__(self, message: str, nbytes: int):
        super().__init__(message)
        self.nbytes = nbytes


class CudnnBackend:
    name = "cudnn"
    replicable = True  # times a combination alone when asked (SweepOptions.timing_only): run/replicas.py
    fresh_handle_in_replica = True  # in a run of two processes, the replica's run is the fresh-handle check

    def __init__(self, library: str | None = None):
        self.library = library
        self._cudnn: Cudnn | None = None

    @property
    def cudnn(self) -> Cudnn:
        if self._cudnn is None:
            import torch

            torch.backends.cudnn.version()  # make PyTorch load its libcudnn, so we bind that same one
            self._cudnn = Cudnn(self.library)
        return self._cudnn

    def available(self) -> str | None:
        why = cuda_unavailable_reason()
        if why:
            return why
        try:
            _ = self.cudnn
        except Exception as exc:  # CudnnNotFound, or a library without the legacy API
            return str(exc)
        return None

    def ahead(self, case: Case, count: int, options: SweepOptions) -> Iterator[None]:
        """What the next slice (``case``, ``count`` combinations) needs that can be made while this process waits
        for it, in short steps (the worker takes its next slice between two): cuDNN's answers that run nothing
        (workspaces; rankings where this process ranks: cudnn_queries) and a fresh handle for each combination's
        determinism check where the run has one process (cudnn_determinism; a timing-only replica checks none)."""
        if self.available():
            return
        import torch

        sm = torch.cuda.get_device_capability()
        problems = ((c.direction, c.dtype, c.layout, c.math) for c in self.combos(case, options)
                    if not arch_reason(c.dtype, sm))
        yield from cudnn_queries.ask_ahead(self.cudnn, case, problems,
                                           rankings=options.rankings and not options.timing_only)
        if not options.timing_only and cudnn_determinism.runs_fresh_handle(options):
            yield from make_fresh_handles(self.cudnn, count)

    def combos(self, case: Case, options: SweepOptions) -> list[Combo]:
        return [Combo(direction, algo, math, dtype, layout)
                for direction in options.directions for dtype in options.dtypes for layout in options.layouts
                for math in MATH for algo in ALGOS[direction]]

    def run(self, case: Case, combos: Iterable[Combo], options: SweepOptions) -> Iterator[Record | Ranking]:
        combos = list(combos)
        why = self.available()
        if why:
            for c in combos:
                yield c.record(case, self.name, status=SKIPPED, reason=why)
            return
        import torch

        sm = torch.cuda.get_device_capability()
        for (direction, dtype, layout), todo in by_problem(combos).items():
            reason = arch_reason(dtype, sm)
            if reason:
                for c in todo:
                    yield c.record(case, self.name, status=UNSUPPORTED_ARCH, reason=reason, device="cuda")
                continue
            yield from ConvSession(self.cudnn, case, direction, dtype, layout, options,
                                   reference=not options.timing_only).run(todo)
            torch.cuda.empty_cache()


# Device-memory placements each combination is timed on (the operands copied to fresh allocations, shifted by
# spacers). On the H200 (scripts/gpu/placement_probe.py) resnet50.layer4.0.conv2 IMPLICIT_GEMM FMA fp32
# ran 539.5 us on 11 placements of 12 and 597.5 us on one; such level switches, one placement per process, made
# the A/A pairs' largest false alarms. Pooled over five placements one slow placement moves the median by a
# quantile of the other four; it takes three slow ones to move it to the slow level. Measured after (H200 x2,
# docs/performance.md): forward A/A pairs failed on 6 findings a pair instead of 16, none a placement
# level. The forward A/A study (both stacks, both GPUs in parallel) took 275 s; single-placement, one GPU: 214 s.
# A run timed in two processes splits them (``placements``); its forward A/A pair then failed on 0 of 2,788
# (H200, docs/performance.md).
PLACEMENTS = 5

# A placement gets a workspace of its own up to this size; larger workspaces are shared (memory, not time).
PLACEMENT_WORKSPACE_MAX = 256 << 20


def placements(options: SweepOptions) -> int:
    """How many of a run's PLACEMENTS this process times: all in a run of one process; split between a run's
    processes otherwise (run/replicas.py: the main process the larger part, the timing-only replica the rest),
    so that a run still pools PLACEMENTS placements and does not pay each process's floor of one batch a
    placement twice."""
    k = max(1, options.processes)
    part = PLACEMENTS // k
    return part if options.timing_only else PLACEMENTS - part * (k - 1)


class ConvSession:
    """Buffers, descriptors and reference for one (case, direction, dtype, layout).

    Also used outside the sweep (autotuner stability, timing fidelity), where ``reference=False`` skips the
    float64 reference that only accuracy needs.
    """

    def __init__(self, cudnn: Cudnn, case: Case, direction: str, dtype: str, layout: str, options: SweepOptions,
                 reference: bool = True):
        import torch

        self.torch = torch
        self.cudnn, self.case, self.direction, self.dtype, self.layout = cudnn, case, direction, dtype, layout
        self.options = options
        fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        tdt = accuracy.torch_dtype(dtype)
        host = accuracy.host_inputs(case, direction)
        ops = {k: torch.from_numpy(v).to("cuda", tdt).contiguous(memory_format=fmt) for k, v in host.items()}
        out_name = {"fwd": "y", "bwd_data": "dx", "bwd_filter": "dw"}[direction]
        out_shape = {"fwd": case.y_shape(), "bwd_data": case.x_shape(), "bwd_filter": case.w_shape()}[direction]
        self.out = torch.empty(out_shape, dtype=tdt, device="cuda").contiguous(memory_format=fmt)
        self.first = torch.empty_like(self.out)
        self.ref, self.scale = accuracy.reference(case, direction, ops, "cuda") if reference else (None, None)
        ptrs = {k: v.data_ptr() for k, v in ops.items()}
        ptrs[out_name] = self.out.data_ptr()
        self.ops = ops  # keep the buffers alive while cuDNN holds their pointers
        self.stream = torch.cuda.current_stream()
        self.handle = Handle(cudnn, self.stream.cuda_stream)
        self.desc = ConvDescriptors(cudnn, case, dtype, layout)
        self.conv = Conv(cudnn, self.handle, self.desc, direction, ptrs)
        self.ptrs = ptrs
        self._ws_buffer = None
        self._placements: list[tuple[Conv, dict]] = []  # (conv on copied operands, {"ws": tensor | None, ...})
        free, _ = torch.cuda.mem_get_info()
        self.ws_limit = min(options.workspace_limit, int(free * 0.8))
        self.timer = CudaTimer(options.timing.share(options.processes))

    def workspace(self, nbytes: int) -> int:
        """Device pointer of a workspace of at least ``nbytes``, grown (never shrunk) as algorithms need."""
        if nbytes == 0:
            return 0
        if self._ws_buffer is None or self._ws_buffer.numel() < nbytes:
            self._ws_buffer = None
            self._ws_buffer = self.torch.empty(nbytes, dtype=self.torch.uint8, device="cuda")
        return self._ws_buffer.data_ptr()

    def placed_calls(self, algo_id: int, ws: int, ws_bytes: int, n: int = PLACEMENTS) -> list[Callable[[], None]]:
        """The same call on ``n`` placements of its operands: this session's buffers and n-1 copies elsewhere."""
        return [call for call, _ in self.placed(algo_id, ws, ws_bytes, n)]

    def placed(self, algo_id: int, ws: int, ws_bytes: int, n: int = PLACEMENTS) -> list[tuple[Callable[[], None], Any]]:
        """``placed_calls`` with the output buffer each call writes.

        Copies are made once per session (spacers of odd sizes in between, so the copies do not line up with the
        originals) and reused by every algorithm; each has its own workspace when it is small enough."""
        torch = self.torch
        while len(self._placements) < n - 1:
            k = len(self._placements) + 1
            spacer = torch.empty((k * 37 + 1) << 20, dtype=torch.uint8, device="cuda")
            ops = {name: t.clone() for name, t in self.ops.items()}
            out = torch.empty_like(self.out)
            ptrs = {name: t.data_ptr() for name, t in ops.items()}
            ptrs[next(name for name in self.ptrs if name not in ops)] = out.data_ptr()
            held = {"spacer": spacer, "ops": ops, "out": out, "ws": None}
            self._placements.append((Conv(self.cudnn, self.handle, self.desc, self.direction, ptrs), held))
        placed: list[tuple[Callable[[], None], Any]] = [(lambda: self.conv.run(algo_id, ws, ws_bytes), self.out)]
        for conv, held in self._placements[:n - 1]:
            pws = ws
            if 0 < ws_bytes <= PLACEMENT_WORKSPACE_MAX:
                if held["ws"] is None or held["ws"].numel() < ws_bytes:
                    held["ws"] = None
                    held["ws"] = torch.empty(ws_bytes, dtype=torch.uint8, device="cuda")
                pws = held["ws"].data_ptr()
            placed.append((lambda conv=conv, pws=pws: conv.run(algo_id, pws, ws_bytes), held["out"]))
        return placed

    def _run_checked(self, algo_id: int, ws: int, ws_bytes: int) -> None:
        accuracy.poison(self.out, self.dtype)
        self.conv.run(algo_id, ws, ws_bytes)

    def bind(self, algo: str, math: str) -> tuple[int, int, int]:
        """Set the math type and size the workspace for ``algo``: (algo id, workspace pointer, bytes).

        Raises CudnnError when cuDNN rejects the combination and WorkspaceTooLarge past the limit.
        """
        algo_id = ALGOS[self.direction].index(algo)
        self.desc.set_math(math)
        ws_bytes = self._asked(math, cudnn_queries.WORKSPACE, algo_id, lambda: self.conv.workspace_size(algo_id))
        if ws_bytes > self.ws_limit:
            raise WorkspaceTooLarge(f"needs {ws_bytes / 2**30:.2f} GiB of workspace; "
                                    f"limit {self.ws_limit / 2**30:.2f} GiB", ws_bytes)
        return algo_id, self.workspace(ws_bytes), ws_bytes

    def _asked(self, math: str, question: str, algo_id: int | None, ask: Callable[[], Any]) -> Any:
        """cuDNN's answer for this problem under ``math``: the one asked ahead for this case, else ``ask()``."""
        return cudnn_queries.answer(self.cudnn, self.case, self.direction, self.dtype, self.layout, math, question,
                                    algo_id, ask)

    def call(self, algo: str, math: str) -> Callable[[], None]:
        """``algo`` under ``math`` as a bare callable for outside timers (do_bench, graph capture).

        Each call first points the handle at torch's current stream: graph capture runs on a side stream.
        Raises as ``bind`` does.
        """
        algo_id, ws, ws_bytes = self.bind(algo, math)
        lib, handle, torch = self.cudnn.lib, self.handle.ptr, self.torch

        def run() -> None:
            lib.cudnnSetStream(handle, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
            self.conv.run(algo_id, ws, ws_bytes)

        return run

    def output_hash(self, algo: str, math: str) -> str:
        """Hash of one run of ``algo`` under ``math`` (no timing, no reference)."""
        algo_id, ws, ws_bytes = self.bind(algo, math)
        self._run_checked(algo_id, ws, ws_bytes)
        self.stream.synchronize()
        return accuracy.output_hash(self.out)

    def measure(self, combo: Combo) -> Record:
        rec = combo.record(self.case, "cudnn", device="cuda")
        documented = (self.direction, combo.algo) in DOCUMENTED_NONDETERMINISTIC
        if documented:
            rec.extra["documented_nondeterministic"] = True
        try:
            algo_id, ws, ws_bytes = self.bind(combo.algo, combo.math)
        except CudnnError as exc:
            rec.status, rec.reason = exc.status, str(exc)
            return rec
        except WorkspaceTooLarge as exc:
            rec.status, rec.reason, rec.workspace_bytes = WORKSPACE_TOO_LARGE, str(exc), exc.nbytes
            return rec
        rec.workspace_bytes = ws_bytes
        try:
            self._run_checked(algo_id, ws, ws_bytes)
        except CudnnError as exc:
            rec.status, rec.reason = exc.status, str(exc)
            return rec
        self.stream.synchronize()
        if self.options.timing_only:
            calls = self.placed_calls(algo_id, ws, ws_bytes, placements(self.options))
            return self._time(rec, calls, output_hash=accuracy.output_hash(self.out))
        rec.accuracy = accuracy.measure(self.out, self.ref, self.scale, self.dtype,
                                        accuracy.reduction_length(self.case, self.direction))
        self.first.copy_(self.out)
        placed = self.placed(algo_id, ws, ws_bytes, placements(self.options))
        rec.determinism, seen = cudnn_determinism.check(self, algo_id, ws, ws_bytes, placed, documented)
        return self._time(rec, [call for call, _ in placed], warmed=min(len(placed), 1 + rec.determinism.repeats),
                          seen=seen)

    def _time(self, rec: Record, calls: list[Callable[[], None]], output_hash: str | None = None,
              warmed: int = 1, seen: list[tuple[float, float]] | None = None) -> Record:
        """Time the bound call on every placement (``calls``); with ``output_hash`` (a replica's pass) the record
        carries that hash alone as its determinism, for the merge to tell whether two processes computed the same
        bits. The first ``warmed`` placements have run already (placement 0 the checked run, the next the
        repeats)."""
        if output_hash is not None:
            rec.determinism = Determinism(hash=output_hash, hash_algo=accuracy.HASH_ALGO, repeats=0,
                                          repeat_equal=None, fresh_handle_equal=None)
        rec.time = self.timer(calls, warmed=warmed, seen=seen or ())
        rec.extra["placement_medians_ms"] = self.timer.placement_medians_ms
        rec.status = OK
        return rec

    def rankings(self, math: str, max_ws: int) -> Iterator[Ranking]:
        self.desc.set_math(math)
        ws_bytes = min(max_ws, self.ws_limit)
        ws = self.workspace(ws_bytes)
        sources = [("get_v7", lambda: self._asked(math, cudnn_queries.GET_V7, None, self.conv.get_v7))]
        if self.options.find:
            sources.append(("find", lambda: self.conv.find(ws, ws_bytes)))
        for source, call in sources:
            try:
                rows = call()
            except CudnnError as exc:
                rows = [{"rank": 0, "algo": "-", "status": exc.status, "time_ms": None, "memory_bytes": None,
                         "determinism": "-", "math_reported": "-"}]
            for row in rows:
                yield Ranking(case=self.case.id, direction=self.direction, dtype=self.dtype, layout=self.layout,
                              math=math, source=source, **row)
        self.stream.synchronize()

    def run(self, combos: list[Combo]) -> Iterator[Record | Ranking]:
        try:
            max_ws: dict[str, int] = {}
            for c in combos:
                t0 = time.perf_counter()
                rec = self.measure(c)
                # Wall time per record: with the run's total it tells what the rest (references, rankings) cost.
                rec.extra["wall_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
                if rec.workspace_bytes is not None and rec.status == OK:
                    max_ws[c.math] = max(max_ws.get(c.math, 0), rec.workspace_bytes)
                yield rec
            if self.options.rankings and not self.options.timing_only:
                for math in dict.fromkeys(c.math for c in combos):
                    yield from self.rankings(math, max_ws.get(math, 0))
        finally:
            self.close()

    def close(self) -> None:
        """Destroy the descriptors and handle; the buffers go with the session."""
        self.conv = None
        self._placements = []
        self.desc.close()
        self.handle.close()
