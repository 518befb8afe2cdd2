"""On a CUDA GPU: the ctypes cuDNN binding, the sweep, and the seed cross-check (skipped without CUDA)."""

import pytest

from harness.backends import SweepOptions
from harness.core import cases
from harness.core.records import OK
from harness.measurement.timing import TimingPolicy

pytestmark = pytest.mark.gpu
FAST = TimingPolicy(budget_ms=2.0, min_samples=3, max_samples=16)


def test_binds_the_cudnn_torch_loaded():
    import torch

    from harness.backends.cudnn import CudnnBackend

    lib = CudnnBackend().cudnn
    assert lib.version_int == torch.backends.cudnn.version()
    assert "libcudnn" in lib.path


def test_forward_combos_are_all_records_and_fma_is_fp32_class():
    from harness.backends.cudnn import CudnnBackend

    case = cases.get("quick.seed")
    opts = SweepOptions(dtypes=("fp32",), layouts=("NCHW",), timing=FAST, rankings=True)
    backend = CudnnBackend()
    out = list(backend.run(case, backend.combos(case, opts), opts))
    recs = [r for r in out if r.kind == "measurement"]
    assert len(recs) == 8 * 4
    ok = [r for r in recs if r.status == OK]
    assert ok and all(r.time.timer == "cuda_event" and r.time.median_ms > 0 for r in ok)
    assert all(r.status.startswith("CUDNN_STATUS") for r in recs if r.status != OK)
    fma = [r for r in ok if r.math == "FMA"]
    assert fma and all(r.accuracy.precision_class == "fp32" for r in fma)
    assert all(r.accuracy.unwritten == 0 for r in ok)
    assert {r.source for r in out if r.kind == "ranking"} == {"find", "get_v7"}


def test_seed_crosscheck_names_tf32_on_ampere_and_newer():
    import torch

    from harness.run.autotune import crosscheck

    rec = crosscheck(cases.get("seed.c8"))
    assert rec.extra["cudnn_fma_class"] == "fp32"
    if torch.cuda.get_device_capability() >= (8, 0) and rec.extra["torch_class"] == "tf32":
        assert "TF32" in rec.explanation and rec.extra["max_abs_delta"] > 0
