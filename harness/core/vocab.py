"""The words the suite, the CLI, the store and the report share, each listed once.

The asv suite (benchmarks/) builds its parameters from these, the backends enumerate them, the schema checks
records against them and the report orders its tables by them, so a new dtype or algorithm is added here and
nowhere else. Values are the names records carry: cuDNN's enum names without their prefix
(``CUDNN_CONVOLUTION_FWD_ALGO_`` ...), in cuDNN's enum order (the binding uses the position as the enum value).
"""

from __future__ import annotations

BACKENDS = ("cudnn", "torch", "ort")
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
DTYPES = ("fp32", "fp16", "bf16")
LAYOUTS = ("NCHW", "NHWC")
# cudnnMathType_t, in enum order
MATHS = ("DEFAULT", "TENSOR_OP", "TENSOR_OP_ALLOW_CONVERSION", "FMA")

# cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, in enum order
FWD_ALGOS = ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
             "WINOGRAD_NONFUSED")
BWD_DATA_ALGOS = ("ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED")
BWD_FILTER_ALGOS = ("ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING")
ALGOS = {"fwd": FWD_ALGOS, "bwd_data": BWD_DATA_ALGOS, "bwd_filter": BWD_FILTER_ALGOS}

# onnxruntime's CUDA EP option cudnn_conv_algo_search
SEARCH_MODES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")

# the precision an output's error puts it in (measurement.accuracy.precision_class)
PRECISION_CLASSES = ("fp32", "tf32", "fp16", "bf16", "broken")


def expected_class(dtype: str) -> str:
    """The class an output of this dtype lands in when nothing reduced the precision of the arithmetic."""
    return {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}[dtype]
