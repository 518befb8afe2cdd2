"""PyTorch's F.conv2d under its conv settings grid (TF32, cudnn.benchmark, cudnn.deterministic).

As for cuDNN: per direction, the time of every combination, and per (case, precision, setting) the worst
error and the unstable combinations, both from one sweep (one shared setup_cache).
"""

import os

from ._bridge import (
    BITWISE_STABLE,
    REL_L2,
    on_gpu,
    param_cases,
    replay,
    run_sweep,
    settle,
    summary,
    vocab,
)

DIRECTIONS = os.environ.get("CONVBENCH_DIRECTIONS", "fwd").split(",")
# asv's parameters are a product, PyTorch's grid is not: TF32 applies to fp32 only. So the operand precision
# carries it ("fp32/tf32", "fp32/ieee", then fp16 and bf16, where the flag does nothing) and the product has no
# n/a member: on the H200 each parameter set costs asv about 10 ms whether it runs or not.
# On a CPU the grid collapses to one setting per dtype/layout (the flags are cuDNN's).
GPU_GRID = (["fp32/tf32", "fp32/ieee", "fp16", "bf16"],
            [f"benchmark={b},deterministic={d}" for b in (False, True) for d in (False, True)])
CPU_GRID = (list(vocab.DTYPES), ["cpu"])
PRECISIONS, SETTINGS = GPU_GRID if on_gpu() else CPU_GRID
_TF32 = {"tf32": "True", "ieee": "False", "": "None"}
_MATH = {"True": "TF32", "False": "IEEE", "None": "DEFAULT"}


def _key(case, precision, layout, setting):
    dtype, _, mode = precision.partition("/")
    if setting == "cpu":
        return (case, "auto", "DEFAULT", dtype, layout, "-")
    tf32 = _TF32[mode]
    return (case, "auto", _MATH[tf32], dtype, layout, f"{setting},tf32={tf32}")


class _Time:
    """Every combination's time: asv's samples are the record's device-event samples (_bridge.replay)."""

    params = [param_cases(), PRECISIONS, list(vocab.LAYOUTS), SETTINGS]
    param_names = ["case", "precision", "layout", "setting"]
    rounds = number = 1
    warmup_time = 0

    def setup(self, cache, case, precision, layout, setting):
        replay(self, cache, _key(case, precision, layout, setting))

    def time_conv(self, cache, case, precision, layout, setting):
        pass  # timed by the sweep, on the device; asv's timer replays those samples


class _Numerics:
    params = [param_cases(), PRECISIONS, SETTINGS]
    param_names = ["case", "precision", "setting"]
    rounds = repeat = number = 1

    @staticmethod
    def _group(case, precision, setting):
        keys = {_key(case, precision, layout, setting) for layout in vocab.LAYOUTS}
        return lambda key: key in keys

    def setup(self, cache, case, precision, setting):
        summary(cache, case, self._group(case, precision, setting), REL_L2, max)

    def track_worst_rel_l2_error(self, cache, case, precision, setting):
        return summary(cache, case, self._group(case, precision, setting), REL_L2, max)

    track_worst_rel_l2_error.unit = "relative L2 error vs float64 (worst layout)"

    def track_unstable_combinations(self, cache, case, precision, setting):
        return summary(cache, case, self._group(case, precision, setting), BITWISE_STABLE, lambda v: len(v) - sum(v))

    track_unstable_combinations.unit = "combinations not bitwise reproducible"


def _fwd(self):
    return run_sweep("torch", "fwd")


def _bwd_data(self):
    return run_sweep("torch", "bwd_data")


def _bwd_filter(self):
    return run_sweep("torch", "bwd_filter")


for _cache, _direction in ((_fwd, "fwd"), (_bwd_data, "bwd_data"), (_bwd_filter, "bwd_filter")):
    _cache.timeout = 3600
    _cache.sweeps = ("torch", _direction)  # what `convbench bench` measures before asv starts

if "fwd" in DIRECTIONS:
    class TorchForward(_Time):
        """F.conv2d forward: device-event median time of every combination."""

        setup_cache = _fwd

    class TorchForwardNumerics(_Numerics):
        """F.conv2d forward: worst error vs float64 and unstable combinations per case/precision/setting."""

        setup_cache = _fwd

if "bwd_data" in DIRECTIONS:
    class TorchBackwardData(_Time):
        """F.conv2d's gradient with respect to the input (autograd's op, timed alone): every combination's time."""

        setup_cache = _bwd_data

    class TorchBackwardDataNumerics(_Numerics):
        """Backward-data: worst error and unstable combinations per case/precision/setting."""

        setup_cache = _bwd_data

if "bwd_filter" in DIRECTIONS:
    class TorchBackwardFilter(_Time):
        """F.conv2d's gradient with respect to the weight (autograd's op, timed alone): every combination's time."""

        setup_cache = _bwd_filter

    class TorchBackwardFilterNumerics(_Numerics):
        """Backward-filter: worst error and unstable combinations per case/precision/setting."""

        setup_cache = _bwd_filter

settle()
