"""PyTorch's F.conv2d under its conv settings grid (TF32, cudnn.benchmark, cudnn.deterministic).

As for cuDNN: per direction, the time of every combination, and per (case, dtype, setting) the worst
error and the unstable combinations, both from one sweep (one shared setup_cache).
"""

import os

from ._bridge import case_ids, check, run_sweep, summary, value

DIRECTIONS = os.environ.get("CONVBENCH_DIRECTIONS", "fwd").split(",")
DTYPES = ["fp32", "fp16", "bf16"]
# "cpu": on a CPU the grid collapses to one setting per dtype/layout (the flags are cuDNN's).
SETTINGS = [f"benchmark={b},deterministic={d},tf32={t}"
            for t in (True, False, None) for b in (False, True) for d in (False, True)] + ["cpu"]


def _key(case, dtype, layout, setting):
    if setting == "cpu":
        return (case, "auto", "DEFAULT", dtype, layout, "-")
    tf32 = setting.rsplit("tf32=", 1)[1]
    math = "DEFAULT" if tf32 == "None" else ("TF32" if tf32 == "True" else "IEEE")
    return (case, "auto", math, dtype, layout, setting)


class _Time:
    params = [case_ids(), DTYPES, ["NCHW", "NHWC"], SETTINGS]
    param_names = ["case", "dtype", "layout", "setting"]
    rounds = repeat = number = 1

    def setup(self, cache, case, dtype, layout, setting):
        check(cache, _key(case, dtype, layout, setting))

    def track_time(self, cache, case, dtype, layout, setting):
        return value(cache, _key(case, dtype, layout, setting), "time_s")

    track_time.unit = "seconds"


class _Numerics:
    params = [case_ids(), DTYPES, SETTINGS]
    param_names = ["case", "dtype", "setting"]
    rounds = repeat = number = 1

    @staticmethod
    def _group(case, dtype, setting):
        keys = {_key(case, dtype, layout, setting) for layout in ("NCHW", "NHWC")}
        return lambda key: key in keys

    def setup(self, cache, case, dtype, setting):
        summary(cache, self._group(case, dtype, setting), "rel_l2", max)

    def track_worst_rel_l2_error(self, cache, case, dtype, setting):
        return summary(cache, self._group(case, dtype, setting), "rel_l2", max)

    track_worst_rel_l2_error.unit = "relative L2 error vs float64 (worst layout)"

    def track_unstable_combinations(self, cache, case, dtype, setting):
        return summary(cache, self._group(case, dtype, setting), "bitwise_stable", lambda v: len(v) - sum(v))

    track_unstable_combinations.unit = "combinations not bitwise reproducible"


def _fwd(self):
    return run_sweep("torch", "fwd")


def _bwd_data(self):
    return run_sweep("torch", "bwd_data")


def _bwd_filter(self):
    return run_sweep("torch", "bwd_filter")


for _cache in (_fwd, _bwd_data, _bwd_filter):
    _cache.timeout = 3600

if "fwd" in DIRECTIONS:
    class TorchForward(_Time):
        """F.conv2d forward: device-event median time of every combination."""

        setup_cache = _fwd

    class TorchForwardNumerics(_Numerics):
        """F.conv2d forward: worst error vs float64 and unstable combinations per case/dtype/setting."""

        setup_cache = _fwd

if "bwd_data" in DIRECTIONS:
    class TorchBackwardData(_Time):
        """torch.autograd.grad of F.conv2d with respect to the input: time of every combination."""

        setup_cache = _bwd_data

    class TorchBackwardDataNumerics(_Numerics):
        """Backward-data: worst error and unstable combinations per case/dtype/setting."""

        setup_cache = _bwd_data

if "bwd_filter" in DIRECTIONS:
    class TorchBackwardFilter(_Time):
        """torch.autograd.grad of F.conv2d with respect to the weight: time of every combination."""

        setup_cache = _bwd_filter

    class TorchBackwardFilterNumerics(_Numerics):
        """Backward-filter: worst error and unstable combinations per case/dtype/setting."""

        setup_cache = _bwd_filter
