"""The accuracy machinery on the CPU: classes, poison, hashes, references."""

import hashlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness.core import cases
from harness.measurement import accuracy

CASE = cases.get("quick.seed")


def _operands():
    host = accuracy.host_inputs(CASE)
    return {k: torch.from_numpy(v) for k, v in host.items()}


def _round_mantissa(t: torch.Tensor, bits: int) -> torch.Tensor:
    """Round float32 values to ``bits`` explicit mantissa bits (nearest, ties away): TF32 is 10."""
    drop = 23 - bits
    i = t.view(torch.int32)
    return ((i + (1 << (drop - 1))) & ~((1 << drop) - 1)).view(torch.float32)


def _classify(x, w, dtype="fp32"):
    ops = _operands()
    ref, scale = accuracy.reference(CASE, "fwd", ops, "cpu")
    out = F.conv2d(x.double(), w.double(), stride=CASE.stride, padding=CASE.pad).float()
    return accuracy.measure(out, ref, scale, dtype, accuracy.reduction_length(CASE, "fwd"))


def test_inputs_are_the_same_draws_every_time():
    a, b = accuracy.host_inputs(CASE), accuracy.host_inputs(CASE)
    assert all((a[k] == b[k]).all() for k in a)
    assert a["x"].shape == CASE.x_shape() and abs(float(a["x"].mean())) < 0.1


def test_operands_drawn_ahead_are_the_ones_the_next_case_uses_and_the_current_case_keeps_its_own():
    """A worker draws the next case's operands while it waits (accuracy.draw_ahead): the case it is measuring
    and the next one both stay drawn, and what was drawn ahead is what a fresh draw gives."""
    now, ahead = cases.select("quick.seed,quick.grouped")
    accuracy._drawn.cache_clear()
    current = accuracy.host_inputs(now, "bwd_data")
    accuracy.draw_ahead(ahead, ("bwd_data", "bwd_filter"))
    drawn = accuracy._drawn.cache_info()
    assert drawn.misses == 6 and drawn.currsize == 6
    again, nxt = accuracy.host_inputs(now, "bwd_filter"), accuracy.host_inputs(ahead, "bwd_data")
    assert accuracy._drawn.cache_info().misses == 6  # neither drawn a second time
    assert all(again[k] is current[k] for k in current)
    accuracy._drawn.cache_clear()
    fresh = accuracy.host_inputs(ahead, "bwd_data")
    assert all((fresh[k] == nxt[k]).all() for k in fresh)
    accuracy.draw_ahead(now, ("fwd",))
    assert accuracy._drawn.cache_info().currsize == 5  # a forward night draws x and w only


def test_fp32_arithmetic_is_fp32_class():
    ops = _operands()
    acc = _classify(ops["x"], ops["w"])
    assert acc.precision_class == "fp32" and acc.rel_l2 < 1e-7


def test_ten_bit_operands_are_tf32_class():
    ops = _operands()
    acc = _classify(_round_mantissa(ops["x"], 10), _round_mantissa(ops["w"], 10))
    assert acc.precision_class == "tf32"
    assert accuracy.fp32_bound(72) < acc.rel_l2 < accuracy.BOUND_10BIT


def test_bf16_operands_are_bf16_class_and_fp16_band_is_named_by_dtype():
    ops = _operands()
    acc = _classify(ops["x"].bfloat16().float(), ops["w"].bfloat16().float())
    assert acc.precision_class == "bf16"
    assert accuracy.precision_class(3e-4, "fp16", 0) == "fp16"
    assert accuracy.precision_class(3e-4, "fp32", 0) == "tf32"


def test_fp32_edge_grows_with_reduction_length():
    assert accuracy.fp32_bound(9) == accuracy.BOUND_FP32
    assert accuracy.fp32_bound(260100) == pytest.approx(2 * 510 * 2.0**-24)
    assert accuracy.precision_class(2.5e-5, "fp32", 0, 260100) == "fp32"
    assert accuracy.precision_class(2.5e-5, "fp32", 0, 576) == "tf32"
    seed = cases.get("seed.c64")
    assert accuracy.reduction_length(seed, "bwd_filter") == 510 * 510
    assert accuracy.reduction_length(seed, "bwd_data") == 576


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_poison_marks_unwritten_elements(dtype):
    t = torch.zeros(4, 5, dtype=accuracy.torch_dtype(dtype))
    accuracy.poison(t, dtype)
    assert torch.isnan(t.float()).all()
    assert accuracy.count_unwritten(t, dtype) == 20
    t[0, :3] = 1.0
    assert accuracy.count_unwritten(t, dtype) == 17


def test_unwritten_output_is_broken():
    ops = _operands()
    ref, scale = accuracy.reference(CASE, "fwd", ops, "cpu")
    out = ref.float().clone()
    accuracy.poison(out[0, 0, 0], "fp32")
    acc = accuracy.measure(out, ref, scale, "fp32")
    assert acc.unwritten == out.shape[-1] and acc.nan == 0 and acc.precision_class == "broken"
    out = ref.float().clone()
    out[0, 0, 0, 0] = float("inf")
    assert accuracy.measure(out, ref, scale, "fp32").inf == 1


def test_hash_is_bitwise_and_layout_independent():
    ops = _operands()
    y = F.conv2d(ops["x"], ops["w"])
    h = accuracy.output_hash(y)
    assert h == accuracy.output_hash(y.clone())
    assert h == accuracy.output_hash(y.contiguous(memory_format=torch.channels_last))
    flipped = y.clone()
    flipped.view(torch.int32).view(-1)[123] ^= 1  # one bit of one element
    assert accuracy.output_hash(flipped) != h
    swapped = y.clone().view(-1)
    swapped[[0, 1]] = swapped[[1, 0]]
    assert accuracy.output_hash(swapped.view_as(y)) != h or y.view(-1)[0] == y.view(-1)[1]


def _hash_drawn_for_its_size(t) -> str:
    """The hash as committed runs hold it: the multipliers drawn afresh for each output size."""
    words = accuracy.int_view(t.contiguous()).reshape(-1).to(torch.int64)
    if t.element_size() < 8:
        words = words & ((1 << (8 * t.element_size())) - 1)
    rng = np.random.Generator(np.random.PCG64(0x5EED))
    mult = torch.from_numpy(rng.integers(-(2**62), 2**62, size=(2, words.numel()), dtype=np.int64) * 2 + 1)
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{t.dtype}:{tuple(t.shape)}:".encode())
    for s in (words.unsqueeze(0) * mult).sum(dim=1).tolist():
        h.update(int(s & (2**64 - 1)).to_bytes(8, "little"))
    return h.hexdigest()


def test_the_hash_of_every_size_is_the_one_drawn_for_that_size():
    """One multiplier stream grown as sizes come (small, larger, smaller, larger again) gives each size the hash
    its own draw gave, for every element width."""
    _ = accuracy.output_hash(torch.zeros(3))  # the stream may already be longer than any size below
    gen = torch.Generator().manual_seed(7)
    for shape, dtype in [((2, 3, 5, 5), torch.float32), ((4, 8, 33, 31), torch.float16), ((1, 2, 3, 3), torch.bfloat16),
                         ((8, 16, 61, 67), torch.float32), ((5, 7), torch.float64), ((3, 9, 40, 41), torch.float16)]:
        t = torch.randn(shape, generator=gen).to(dtype)
        assert accuracy.output_hash(t) == _hash_drawn_for_its_size(t), (shape, dtype)
    assert accuracy.output_hash(torch.ones(10)) != accuracy.output_hash(torch.ones(11)[:10] * 2)


@pytest.mark.parametrize("direction", ["bwd_data", "bwd_filter"])
def test_backward_references_match_autograd(direction):
    ops = {k: torch.from_numpy(v).double() for k, v in accuracy.host_inputs(CASE, direction).items()}
    ref, scale = accuracy.reference(CASE, direction, ops, "cpu")
    x = ops["x"].clone().requires_grad_()
    w = ops["w"].clone().requires_grad_()
    F.conv2d(x, w, stride=CASE.stride, padding=CASE.pad).backward(ops["dy"])
    want = x.grad if direction == "bwd_data" else w.grad
    assert torch.allclose(ref, want, rtol=1e-12, atol=1e-12)
    assert (scale >= ref.abs() - 1e-12).all()


def test_a_sweep_leaves_the_shared_operands_as_drawn(tmp_path):
    """host_inputs shares one draw of each operand between a case's directions and dtype x layout sessions."""
    import dataclasses

    from harness.backends import SweepOptions
    from harness.core import cases
    from harness.measurement.timing import TimingPolicy
    from harness.run import sweep

    case = cases.get("quick.seed")
    opts = SweepOptions(device="cpu", timing=TimingPolicy(budget_ms=1.0, min_samples=3, max_samples=5),
                        directions=("fwd", "bwd_data", "bwd_filter"))
    for direction in opts.directions:
        sweep.run([case], ["torch"], dataclasses.replace(opts, directions=(direction,)), tmp_path,
                  log=lambda m: None, isolate=False)
        shared = accuracy.host_inputs(case, direction)
        assert shared["x"] is accuracy.host_inputs(case, direction)["x"]  # the draw is shared, not repeated
        assert set(shared) == ({"x", "w"} if direction == "fwd" else {"x", "w", "dy"})
        fresh = {k: accuracy._drawn.__wrapped__(case, k) for k in shared}
        for k in fresh:
            assert torch.equal(torch.from_numpy(shared[k]), torch.from_numpy(fresh[k])), (direction, k)
    assert accuracy.host_inputs(case, "bwd_filter")["x"] is accuracy.host_inputs(case, "fwd")["x"]


def _timed_backward_against_autograd(device: str, dtype: str, layout: str, case_id: str, direction: str):
    """The PyTorch backend's timed backward call against autograd.grad of F.conv2d on the same operands."""
    from harness.backends.pytorch import TorchBackend
    from harness.core import cases

    case = cases.get(case_id)
    call, *_ = TorchBackend().prepare(case, direction, dtype, layout, device, reference=False)
    got = call()
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    ops = {k: torch.from_numpy(v).to(device, accuracy.torch_dtype(dtype)).contiguous(memory_format=fmt)
           for k, v in accuracy.host_inputs(case, direction).items()}
    x, w = ops["x"].requires_grad_(direction == "bwd_data"), ops["w"].requires_grad_(direction == "bwd_filter")
    y = F.conv2d(x, w, stride=case.stride, padding=case.pad, dilation=case.dilation, groups=case.groups)
    want = torch.autograd.grad(y, x if direction == "bwd_data" else w, ops["dy"])[0]
    return got, want


@pytest.mark.parametrize("case_id", ["quick.seed", "quick.grouped"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("direction", ["bwd_data", "bwd_filter"])
def test_the_timed_backward_is_autograds_gradient_bit_for_bit(case_id, layout, direction):
    """PyTorch's backward is timed as the one op autograd runs for it (aten.convolution_backward), without
    the forward conv: it must compute exactly what autograd.grad of F.conv2d computes."""
    got, want = _timed_backward_against_autograd("cpu", "fp32", layout, case_id, direction)
    assert got.shape == want.shape and accuracy.bitwise_equal(got.contiguous(), want.contiguous())
