"""cuDNN called directly: every algorithm x math type x dtype x layout, per direction."""

from ._bridge import case_ids, check, run_sweep, value

ALGOS = ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
         "WINOGRAD_NONFUSED")
MATHS = ("DEFAULT", "TENSOR_OP", "TENSOR_OP_ALLOW_CONVERSION", "FMA")


class CudnnForward:
    """Device-event median time, error against float64, and bitwise stability of cudnnConvolutionForward."""

    params = [case_ids(), list(ALGOS), list(MATHS), ["fp32", "fp16", "bf16"], ["NCHW", "NHWC"]]
    param_names = ["case", "algo", "math", "dtype", "layout"]
    rounds = repeat = number = 1

    def setup_cache(self):
        return run_sweep("cudnn", "fwd")

    setup_cache.timeout = 3600

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
