"""Accuracy and bitwise identity of a conv output, against a float64 reference of the same rounded inputs.

Inputs are drawn once per case from numpy's PCG64 (identical on every machine and stack), rounded to the
dtype under test, and the reference is computed in float64 from those rounded values: what remains is the
error of the arithmetic alone, not of the input rounding.

Precision class. The relative L2 error of a conv whose operands are rounded to a format with unit
roundoff u is about u (each product carries a relative error of at most 2u, with random sign), whatever the
reduction length; fp32 accumulation of exact products adds far less (well under 1e-6 for the reductions
in the catalogue). The classes are therefore separated by the geometric mean of neighbouring unit roundoffs:
  fp32 (u=2^-24) | tf32 and fp16 (u=2^-11, both 10-bit mantissas) | bf16 (u=2^-8) | broken,
  boundaries 2^-17.5 ~ 5.4e-6 (raised to 2 sqrt(L) u_fp32 for reductions of L terms, see fp32_bound),
  2^-9.5 ~ 1.4e-3, and 2^-5 ~ 3.1e-2 (beyond bf16's worst case).
The 10-bit band is called tf32 for fp32 data (tensor-core math) and fp16 for fp16 data. Any NaN, Inf or
unwritten element where the reference is finite makes the output broken.
"""

from __future__ import annotations

import functools
import hashlib
import math
import zlib

import numpy as np

from ..core.cases import Case
from ..core.records import Accuracy

U = {"fp32": 2.0**-24, "tf32": 2.0**-11, "fp16": 2.0**-11, "bf16": 2.0**-8}
BOUND_FP32 = 2.0**-17.5
BOUND_10BIT = 2.0**-9.5
BOUND_BROKEN = 2.0**-5

# NaN bit patterns that no arithmetic produces (hardware makes canonical NaNs): an element that still holds
# one after the run was never written.
POISON_BITS = {"fp32": 0x7FC0DEAD, "fp16": 0x7D5A, "bf16": 0x7FA5, "fp64": 0x7FF8DEADDEADDEAD}

HASH_ALGO = "polyhash2x64-v1"


def fp32_bound(reduction: int) -> float:
    """Upper edge of the fp32 class for a reduction of this length.

    Exact products summed in fp32 give a relative error that grows like sqrt(L) * u (Higham and Mary's
    probabilistic bound); backward-filter reductions run over N*P*Q terms (260,100 for the seed case), where
    that term, not operand rounding, decides. Measured on the H200 (docs/history.md): seed.c64 backward-filter in
    IEEE fp32 2.5e-5 against 6.1e-5 for this bound, and 8.1e-4 with TF32.
    """
    return max(BOUND_FP32, 2.0 * math.sqrt(max(reduction, 1)) * U["fp32"])


def reduction_length(case: Case, direction: str) -> int:
    """Terms summed per output element: C/g*R*S forward, K/g*R*S backward-data, N*P*Q backward-filter."""
    if direction == "fwd":
        return case.reduction
    if direction == "bwd_data":
        return case.k // case.groups * case.r * case.s
    p, q = case.out_hw
    return case.n * p * q


def precision_class(rel_l2: float, dtype: str, bad_elements: int, reduction: int = 1) -> str:
    if bad_elements or not math.isfinite(rel_l2) or rel_l2 > BOUND_BROKEN:
        return "broken"
    if rel_l2 <= fp32_bound(reduction):
        return "fp32"
    if rel_l2 <= BOUND_10BIT:
        return "fp16" if dtype == "fp16" else "tf32"
    return "bf16"


def case_seed(case: Case, role: str) -> int:
    return zlib.crc32(f"{case.id}:{role}".encode())


def host_inputs(case: Case, direction: str = "fwd") -> dict[str, np.ndarray]:
    """Float32 operands of the case, the same on every machine: x and w, and dy for the backward directions.

    Each operand is drawn from its own seeded stream, so every direction of a case uses the same x and w and
    both backward directions the same dy. Drawing is the costly part (0.44 s for seed.c64's three operands on
    the H200), so two cases' arrays are kept (the one measured and the next, draw_ahead), shared by a case's
    directions, dtypes and layouts, and by both backends when one process sweeps them. Callers copy them (to the
    device or to another dtype) and must not write into them.
    """
    roles = ("x", "w", "dy") if direction != "fwd" else ("x", "w")
    return {role: _drawn(case, role) for role in roles}


def draw_ahead(case: Case, directions: tuple[str, ...]) -> None:
    """The operands of the case a timing process measures next, drawn while it waits for its next slice: the two
    processes of a run take turns on the GPU, so a draw made while the other one measures is off the night's
    critical path (what the draws cost a night: the profiles in docs/performance.md)."""
    host_inputs(case, next((d for d in directions if d != "fwd"), "fwd"))  # a backward one draws dy too


@functools.lru_cache(maxsize=6)
def _drawn(case: Case, role: str) -> np.ndarray:
    shape = {"x": case.x_shape, "w": case.w_shape, "dy": case.y_shape}[role]()
    rng = np.random.Generator(np.random.PCG64(case_seed(case, role)))
    return rng.standard_normal(shape, dtype=np.float32)


def torch_dtype(name: str):
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64}[name]


def int_view(t):
    """The same bytes as integers: NaN payloads and signed zeros compare bit for bit."""
    import torch

    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def bitwise_equal(a, b) -> bool:
    return bool(int_view(a).equal(int_view(b)))


def _poison_word(t, dtype: str) -> int:
    """The poison pattern as the signed integer of ``t``'s element width (what int_view holds)."""
    bits = POISON_BITS[dtype]
    width = t.element_size() * 8
    return bits - (1 << width) if bits >= 1 << (width - 1) else bits


def poison(t, dtype: str) -> None:
    """Fill ``t`` with the poison NaN of its dtype, bit for bit."""
    int_view(t).fill_(_poison_word(t, dtype))


def count_unwritten(t, dtype: str) -> int:
    return int((int_view(t) == _poison_word(t, dtype)).sum().item())


class _Multipliers:
    """The hash's multipliers, one stream per device, drawn once and grown as larger outputs come.

    The multipliers of an n-word output are the stream's first 2n odd numbers, row 0 the first n: numpy draws
    integers one after another, so a stream drawn in pieces holds the same numbers as one drawn whole, and every
    output size reads a prefix of one stream. Drawing them per output size, as a cache of sizes did, drew about
    220 million numbers a process in the backward catalogue, with the device idle (2.9-3.9 s of the 2-core
    development VM's CPU, against 0.6-1.0 s for one stream); one stream draws twice the largest output once, and
    holds one copy of it on the device instead of up to eight.
    """

    def __init__(self) -> None:
        self._rng: dict[str, np.random.Generator] = {}
        self._stream: dict[str, object] = {}

    def rows(self, n: int, device) -> tuple[object, object]:
        """The two rows of n multipliers on ``device``, as views of its stream."""
        import torch

        key = str(device)
        stream = self._stream.get(key)
        have = 0 if stream is None else stream.numel()
        if have < 2 * n:
            rng = self._rng.setdefault(key, np.random.Generator(np.random.PCG64(0x5EED)))  # the same in every image
            more = torch.from_numpy(rng.integers(-(2**62), 2**62, size=2 * n - have, dtype=np.int64) * 2 + 1)
            stream = more.to(device) if stream is None else torch.cat([stream, more.to(device)])
            self._stream[key] = stream
        return stream[:n], stream[n:2 * n]


_MULTIPLIERS = _Multipliers()


def output_hash(t) -> str:
    """Hash of the bits of ``t`` in logical (NCHW) order; equal iff bitwise equal, barring a 2^-128 accident.

    Computed on the tensor's device: a sum of the words times two fixed pseudo-random odd multipliers per
    position, modulo 2^64. Copying 100 MB outputs to the host to hash them would cost more than the sweep.
    """
    import torch

    words = int_view(t.contiguous()).reshape(-1).to(torch.int64)
    if t.element_size() < 8:
        words = words & ((1 << (8 * t.element_size())) - 1)
    sums = torch.stack([(words * row).sum() for row in _MULTIPLIERS.rows(words.numel(), words.device)]).tolist()
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{t.dtype}:{tuple(t.shape)}:".encode())
    for s in sums:
        h.update(int(s & (2**64 - 1)).to_bytes(8, "little"))
    return h.hexdigest()


def reference(case: Case, direction: str, operands: dict, device: str):
    """(reference, scale) in float64: the exact result of the rounded operands, and |a| (op) |b| per element.

    ``operands`` holds the operands already rounded to the dtype under test (any float torch tensors).
    """
    import torch
    import torch.nn.functional as F

    d = {k: v.to(device=device, dtype=torch.float64) for k, v in operands.items()}
    kw = dict(stride=case.stride, padding=case.pad, dilation=case.dilation, groups=case.groups)

    def op(a: dict):
        if direction == "fwd":
            return F.conv2d(a["x"], a["w"], **kw)
        if direction == "bwd_data":
            return torch.nn.grad.conv2d_input(case.x_shape(), a["w"], a["dy"], **kw)
        return torch.nn.grad.conv2d_weight(a["x"], case.w_shape(), a["dy"], **kw)

    with torch.no_grad():
        ref = op(d)
        scale = op({k: v.abs() for k, v in d.items()})
    return ref, scale


def measure(out, ref, scale, dtype: str, reduction: int = 1) -> Accuracy:
    """Error metrics of ``out`` (any dtype, any layout) against the float64 ``ref`` and bound ``scale``."""
    import torch

    unwritten = count_unwritten(out, dtype)
    o = out.to(torch.float64)
    nan = int(torch.isnan(o).sum().item()) - unwritten
    inf = int(torch.isinf(o).sum().item())
    diff = (o - ref).abs()
    finite = torch.isfinite(diff)
    bad = unwritten + nan + inf
    if bad:
        diff = torch.where(finite, diff, torch.zeros_like(diff))
    max_abs = float(diff.max().item()) if diff.numel() else 0.0
    ref_norm = float(torch.linalg.vector_norm(ref).item())
    err_norm = float(torch.linalg.vector_norm(diff).item())
    rel_l2 = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    denom = scale.clamp_min(torch.finfo(torch.float64).tiny)
    max_norm = float((diff / denom).max().item()) if diff.numel() else 0.0
    if bad:
        max_abs = rel_l2 = max_norm = float("nan")
    return Accuracy(max_abs=max_abs, rel_l2=rel_l2, max_norm_err=max_norm, nan=nan, inf=inf,
                    unwritten=unwritten, precision_class=precision_class(rel_l2, dtype, bad, reduction),
                    reduction=reduction)
