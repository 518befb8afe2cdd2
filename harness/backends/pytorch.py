"""PyTorch backend: ``F.conv2d`` and its gradients under PyTorch's conv settings grid.

A backward direction is timed as the one op F.conv2d's autograd node runs for it (``aten.convolution_backward``
with that gradient's output mask), not as ``autograd.grad`` of a fresh forward: that timed the forward conv and
autograd's host work too (older suites' records did; their PyTorch backward times are not comparable).

On CUDA the grid is TF32 (allow_tf32 / conv.fp32_precision) x cudnn.benchmark x cudnn.deterministic; on a
CPU these settings do not apply, so the CPU runs one setting per dtype and layout through the same
accuracy and determinism machinery, timed with the host clock.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterable, Iterator

from ..core.cases import Case
from ..core.records import ERROR, OK, UNSUPPORTED_ARCH, Determinism, Record
from ..measurement import accuracy
from ..measurement.timing import CudaTimer, HostTimer
from . import Combo, SweepOptions
from .cudnn import arch_reason


@contextlib.contextmanager
def conv_settings(tf32: bool | None, benchmark: bool | None, deterministic: bool | None):
    """Apply PyTorch's cuDNN conv flags for the duration, restoring them after."""
    import torch

    cudnn = torch.backends.cudnn
    conv_ns = getattr(cudnn, "conv", None)
    new_api = conv_ns is not None and hasattr(conv_ns, "fp32_precision")
    saved = (cudnn.benchmark, cudnn.deterministic,
             conv_ns.fp32_precision if new_api else cudnn.allow_tf32)
    try:
        if benchmark is not None:
            cudnn.benchmark = benchmark
        if deterministic is not None:
            cudnn.deterministic = deterministic
        if tf32 is not None:
            if new_api:
                conv_ns.fp32_precision = "tf32" if tf32 else "ieee"
            else:
                cudnn.allow_tf32 = tf32
        yield
    finally:
        cudnn.benchmark, cudnn.deterministic = saved[0], saved[1]
        if new_api:
            conv_ns.fp32_precision = saved[2]
        else:
            cudnn.allow_tf32 = saved[2]


def _math_name(dtype: str, tf32: bool | None) -> str:
    if dtype != "fp32" or tf32 is None:
        return "DEFAULT"
    return "TF32" if tf32 else "IEEE"


class TorchBackend:
    name = "torch"
    # times a combination alone when asked (SweepOptions.timing_only): with cudnn.benchmark each process searches
    # anew, and on the H200 one such search landed 12 % slower in one process (run/replicas.py; docs/history.md)
    replicable = True

    def available(self) -> str | None:
        try:
            import torch  # noqa: F401
        except ImportError:
            return "PyTorch is not installed"
        return None

    def _on_cuda(self, options: SweepOptions) -> bool:
        import torch

        return options.device == "cuda" and torch.cuda.is_available()

    def combos(self, case: Case, options: SweepOptions) -> list[Combo]:
        out = []
        cuda = self._on_cuda(options)
        for direction, dtype, layout in itertools.product(options.directions, options.dtypes, options.layouts):
            if not cuda:
                out.append(Combo(direction, "auto", "DEFAULT", dtype, layout, (("device", "cpu"),)))
                continue
            tf32s = (True, False) if dtype == "fp32" else (None,)
            for tf32, bench, det in itertools.product(tf32s, (False, True), (False, True)):
                settings = (("benchmark", bench), ("deterministic", det), ("tf32", tf32))
                out.append(Combo(direction, "auto", _math_name(dtype, tf32), dtype, layout, settings))
        return out

    def run(self, case: Case, combos: Iterable[Combo], options: SweepOptions) -> Iterator[Record]:
        import torch

        cuda = self._on_cuda(options)
        device = "cuda" if cuda else "cpu"
        sm = torch.cuda.get_device_capability() if cuda else None
        timer = CudaTimer(options.timing.share(options.processes)) if cuda else HostTimer(options.timing)
        cache: dict[tuple[str, str, str], tuple] = {}
        for combo in combos:
            rec = combo.record(case, self.name, device=device)
            settings = dict(combo.settings)
            if cuda:
                reason = arch_reason(combo.dtype, sm)
                if reason is None and settings.get("tf32") and sm < (8, 0):
                    reason = (f"TF32 needs sm_80 or newer (Ampere); this GPU is sm_{sm[0]}{sm[1]}, so TF32 on "
                              "is the same computation as TF32 off")
                if reason:
                    rec.status, rec.reason = UNSUPPORTED_ARCH, reason
                    yield rec
                    continue
            key = (combo.direction, combo.dtype, combo.layout)
            if key not in cache:
                cache.clear()
                cache[key] = self.prepare(case, *key, device, reference=not options.timing_only)
            t0 = time.perf_counter()
            try:
                with conv_settings(settings.get("tf32"), settings.get("benchmark"), settings.get("deterministic")):
                    self._measure(rec, cache[key], timer, options, device)
            except (RuntimeError, NotImplementedError) as exc:
                rec.status, rec.reason = ERROR, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            rec.extra["wall_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            yield rec
        cache.clear()
        if cuda:
            torch.cuda.empty_cache()

    def prepare(self, case: Case, direction: str, dtype: str, layout: str, device: str, reference: bool = True):
        """(call, float64 reference, bound, reduction length) for one case, direction, dtype and layout; without
        ``reference`` (a replica's timing pass) the reference and bound are None."""
        import torch
        import torch.nn.functional as F

        fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        tdt = accuracy.torch_dtype(dtype)
        host = accuracy.host_inputs(case, direction)
        ops = {k: torch.from_numpy(v).to(device, tdt).contiguous(memory_format=fmt) for k, v in host.items()}
        ref, scale = accuracy.reference(case, direction, ops, device) if reference else (None, None)
        kw = dict(stride=case.stride, padding=case.pad, dilation=case.dilation, groups=case.groups)
        if direction == "fwd":
            def call():
                return F.conv2d(ops["x"], ops["w"], **kw)
        else:
            # The op F.conv2d's autograd node runs for this gradient (same output mask, same flags, so the same
            # kernels under PyTorch's settings), called alone: timing autograd.grad of F.conv2d also timed the
            # forward conv and autograd's own host work (the dispatch was 2x the device time on the H200).
            backward = torch.ops.aten.convolution_backward
            mask, which = ([True, False, False], 0) if direction == "bwd_data" else ([False, True, False], 1)
            geometry = (list(case.stride), list(case.pad), list(case.dilation), False, [0, 0], case.groups)

            def call():
                return backward(ops["dy"], ops["x"], ops["w"], None, *geometry, mask)[which]
        return call, ref, scale, accuracy.reduction_length(case, direction)

    def _measure(self, rec: Record, prepared, timer, options: SweepOptions, device: str) -> None:
        import torch

        call, ref, scale, reduction = prepared
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        if options.timing_only:  # a replica: its output's hash, to tell whether two processes agree, and the time
            with torch.no_grad():
                out = call()
                sync()
                rec.determinism = Determinism(hash=accuracy.output_hash(out), hash_algo=accuracy.HASH_ALGO,
                                              repeats=0, repeat_equal=None, fresh_handle_equal=None)
                rec.time = timer(call, warmed=1)  # the checked run above was its first call
            rec.status = OK
            return
        with torch.no_grad():
            if device == "cuda":
                # Poison the block the caching allocator will hand the output: an unwritten element shows.
                bait = torch.empty_like(ref, dtype=accuracy.torch_dtype(rec.dtype))
                accuracy.poison(bait, rec.dtype)
                del bait
            out = call()
            sync()
            rec.accuracy = accuracy.measure(out, ref, scale, rec.dtype, reduction)
            first = out.clone()
            first_hash = accuracy.output_hash(first)
            hashes = {first_hash}
            repeat_equal = True
            for _ in range(options.repeats):
                again = call()
                if not accuracy.bitwise_equal(again, first):
                    repeat_equal = False
                    hashes.add(accuracy.output_hash(again))
            rec.determinism = Determinism(hash=first_hash, hash_algo=accuracy.HASH_ALGO, repeats=options.repeats,
                                          repeat_equal=repeat_equal, fresh_handle_equal=None,
                                          distinct_outputs=len(hashes))
            rec.time = timer(call, warmed=1)  # the checked run above was its first call
        rec.status = OK
