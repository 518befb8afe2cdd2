"""PyTorch's F.conv2d under its conv settings grid (TF32, cudnn.benchmark, cudnn.deterministic), per direction.

The classes are built from the library's table (harness/run/suiteshape.py). asv's parameters are a product and
PyTorch's grid is not (TF32 applies to fp32 only), so the operand precision carries it ("fp32/tf32", "fp32/ieee",
fp16, bf16); on a CPU the precision is the dtype (the flags are cuDNN's). A time set replays the fastest setting's
samples of its case, precision and layout.
"""

from ._bridge import settle, sweep_cache, sweep_classes


def _fwd(self):
    return sweep_cache("torch", "fwd")


def _bwd_data(self):
    return sweep_cache("torch", "bwd_data")


def _bwd_filter(self):
    return sweep_cache("torch", "bwd_filter")


for _cache in (_fwd, _bwd_data, _bwd_filter):
    _cache.timeout = 3600

globals().update(sweep_classes("bench_torch", {"fwd": _fwd, "bwd_data": _bwd_data, "bwd_filter": _bwd_filter}))
settle()
