"""cuDNN called directly: every algorithm x math type x dtype x layout, one class per direction.

Each class's setup_cache runs one sweep of its direction (the forward sweep is the default job; the
backward classes run when CONVBENCH_DIRECTIONS names them, since they take longer).
"""

import os

from ._bridge import case_ids, check, run_sweep, value

ALGOS = {
    "fwd": ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
            "WINOGRAD_NONFUSED"),
    "bwd_data": ("ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"),
    "bwd_filter": ("ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"),
}
MATHS = ("DEFAULT", "TENSOR_OP", "TENSOR_OP_ALLOW_CONVERSION", "FMA")
DIRECTIONS = os.environ.get("CONVBENCH_DIRECTIONS", "fwd").split(",")


class _Cudnn:
    direction = "fwd"
    param_names = ["case", "algo", "math", "dtype", "layout"]
    rounds = repeat = number = 1

    def setup(self, cache, case, algo, math, dtype, layout):
        check(cache, (case, algo, math, dtype, layout, "-"))

    def track_time(self, cache, case, algo, math, dtype, layout):
        return value(cache, (case, algo, math, dtype, layout, "-"), "time_s")

    track_time.unit = "seconds"

    def track_rel_l2_error(self, cache, case, algo, math, dtype, layout):
        return value(cache, (case, algo, math, dtype, layout, "-"), "rel_l2")

    track_rel_l2_error.unit = "relative L2 error vs float64"

    def track_bitwise_stable(self, cache, case, algo, math, dtype, layout):
        return value(cache, (case, algo, math, dtype, layout, "-"), "bitwise_stable")

    track_bitwise_stable.unit = "1 = bitwise reproducible"


def _params(direction):
    return [case_ids(), list(ALGOS[direction]), list(MATHS), ["fp32", "fp16", "bf16"], ["NCHW", "NHWC"]]


if "fwd" in DIRECTIONS:
    class CudnnForward(_Cudnn):
        """cudnnConvolutionForward: device-event median time, error vs float64, bitwise stability."""

        direction = "fwd"

        # asv keys its cache by the defining source line, so each class defines its own setup_cache.
        def setup_cache(self):
            return run_sweep("cudnn", "fwd")

        setup_cache.timeout = 3600
        params = _params("fwd")

if "bwd_data" in DIRECTIONS:
    class CudnnBackwardData(_Cudnn):
        """cudnnConvolutionBackwardData: the same measures for the data gradient."""

        direction = "bwd_data"

        # asv keys its cache by the defining source line, so each class defines its own setup_cache.
        def setup_cache(self):
            return run_sweep("cudnn", "bwd_data")

        setup_cache.timeout = 3600
        params = _params("bwd_data")

if "bwd_filter" in DIRECTIONS:
    class CudnnBackwardFilter(_Cudnn):
        """cudnnConvolutionBackwardFilter: the same measures for the filter gradient."""

        direction = "bwd_filter"

        # asv keys its cache by the defining source line, so each class defines its own setup_cache.
        def setup_cache(self):
            return run_sweep("cudnn", "bwd_filter")

        setup_cache.timeout = 3600
        params = _params("bwd_filter")
