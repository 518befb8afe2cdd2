"""cuDNN called directly: every algorithm x math type x dtype x layout, per direction, read from one sweep.

The classes are built from the library's table (harness/run/suiteshape.py): per direction the time of each case,
dtype and layout (the fastest algorithm and math type's samples), the worst error per case and dtype, and the
unstable combinations per case, all on one setup_cache. The forward classes are the default job; the backward
ones exist when CONVBENCH_DIRECTIONS names them.
"""

from ._bridge import settle, sweep_cache, sweep_classes


def _fwd(self):
    return sweep_cache("cudnn", "fwd")


def _bwd_data(self):
    return sweep_cache("cudnn", "bwd_data")


def _bwd_filter(self):
    return sweep_cache("cudnn", "bwd_filter")


for _cache in (_fwd, _bwd_data, _bwd_filter):
    _cache.timeout = 3600

globals().update(sweep_classes("bench_cudnn", {"fwd": _fwd, "bwd_data": _bwd_data, "bwd_filter": _bwd_filter}))
settle()
