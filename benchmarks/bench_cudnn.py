"""cuDNN called directly: every algorithm x math type x dtype x layout, per direction.

Per direction two classes share one setup_cache (asv keys the cache by the function's source line, so
both run on the records of one sweep): the time of every combination, and per (case, math, dtype) the
worst error and the number of combinations that were not bitwise reproducible. The forward classes are
the default job; the backward ones run when CONVBENCH_DIRECTIONS names them.
"""

import os

from ._bridge import (
    BITWISE_STABLE,
    REL_L2,
    param_cases,
    replay,
    run_sweep,
    settle,
    summary,
    vocab,
)

ALGOS = vocab.ALGOS
MATHS = list(vocab.MATHS)
DTYPES = list(vocab.DTYPES)
DIRECTIONS = os.environ.get("CONVBENCH_DIRECTIONS", "fwd").split(",")


class _Time:
    """Every combination's time: asv's samples are the record's device-event samples (_bridge.replay)."""

    param_names = ["case", "algo", "math", "dtype", "layout"]
    rounds = number = 1
    warmup_time = 0

    def setup(self, cache, case, algo, math, dtype, layout):
        replay(self, cache, (case, algo, math, dtype, layout, "-"))

    def time_conv(self, cache, case, algo, math, dtype, layout):
        pass  # timed by the sweep, on the device; asv's timer replays those samples


class _Numerics:
    param_names = ["case", "math", "dtype"]
    rounds = repeat = number = 1

    @staticmethod
    def _group(case, math, dtype):
        return lambda key: key[0] == case and key[2] == math and key[3] == dtype

    def setup(self, cache, case, math, dtype):
        summary(cache, case, self._group(case, math, dtype), REL_L2, max)

    def track_worst_rel_l2_error(self, cache, case, math, dtype):
        return summary(cache, case, self._group(case, math, dtype), REL_L2, max)

    track_worst_rel_l2_error.unit = "relative L2 error vs float64 (worst algo/layout)"

    def track_unstable_combinations(self, cache, case, math, dtype):
        return summary(cache, case, self._group(case, math, dtype), BITWISE_STABLE, lambda v: len(v) - sum(v))

    track_unstable_combinations.unit = "combinations not bitwise reproducible"


def _time_params(direction):
    return [param_cases(), list(ALGOS[direction]), MATHS, DTYPES, list(vocab.LAYOUTS)]


def _fwd(self):
    return run_sweep("cudnn", "fwd")


def _bwd_data(self):
    return run_sweep("cudnn", "bwd_data")


def _bwd_filter(self):
    return run_sweep("cudnn", "bwd_filter")


for _cache, _direction in ((_fwd, "fwd"), (_bwd_data, "bwd_data"), (_bwd_filter, "bwd_filter")):
    _cache.timeout = 3600
    _cache.sweeps = ("cudnn", _direction)  # what `convbench bench` measures before asv starts

if "fwd" in DIRECTIONS:
    class CudnnForward(_Time):
        """cudnnConvolutionForward: device-event median time of every combination."""

        params = _time_params("fwd")
        setup_cache = _fwd

    class CudnnForwardNumerics(_Numerics):
        """cudnnConvolutionForward: worst error vs float64 and unstable combinations per case/math/dtype."""

        params = [param_cases(), MATHS, DTYPES]
        setup_cache = _fwd

if "bwd_data" in DIRECTIONS:
    class CudnnBackwardData(_Time):
        """cudnnConvolutionBackwardData: device-event median time of every combination."""

        params = _time_params("bwd_data")
        setup_cache = _bwd_data

    class CudnnBackwardDataNumerics(_Numerics):
        """cudnnConvolutionBackwardData: worst error and unstable combinations per case/math/dtype."""

        params = [param_cases(), MATHS, DTYPES]
        setup_cache = _bwd_data

if "bwd_filter" in DIRECTIONS:
    class CudnnBackwardFilter(_Time):
        """cudnnConvolutionBackwardFilter: device-event median time of every combination."""

        params = _time_params("bwd_filter")
        setup_cache = _bwd_filter

    class CudnnBackwardFilterNumerics(_Numerics):
        """cudnnConvolutionBackwardFilter: worst error and unstable combinations per case/math/dtype."""

        params = [param_cases(), MATHS, DTYPES]
        setup_cache = _bwd_filter

settle()
