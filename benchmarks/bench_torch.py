"""PyTorch's F.conv2d under its conv settings grid (TF32, cudnn.benchmark, cudnn.deterministic)."""

import os

from ._bridge import case_ids, check, run_sweep, value

DIRECTIONS = os.environ.get("CONVBENCH_DIRECTIONS", "fwd").split(",")
SETTINGS = [f"benchmark={b},deterministic={d},tf32={t}"
            for t in (True, False, None) for b in (False, True) for d in (False, True)]


def _key(case, dtype, layout, setting):
    # On the CPU the grid collapses to one setting per dtype/layout (the flags are cuDNN's).
    tf32 = setting.rsplit("tf32=", 1)[1]
    math = "DEFAULT" if tf32 == "None" else ("TF32" if tf32 == "True" else "IEEE")
    return (case, "auto", math, dtype, layout, setting)


class _Torch:
    direction = "fwd"
    params = [case_ids(), ["fp32", "fp16", "bf16"], ["NCHW", "NHWC"], SETTINGS + ["cpu"]]
    param_names = ["case", "dtype", "layout", "setting"]
    rounds = repeat = number = 1

    def setup(self, cache, case, dtype, layout, setting):
        check(cache, self._key(case, dtype, layout, setting))

    @staticmethod
    def _key(case, dtype, layout, setting):
        return (case, "auto", "DEFAULT", dtype, layout, "-") if setting == "cpu" else _key(case, dtype, layout,
                                                                                           setting)

    def _v(self, cache, case, dtype, layout, setting, field):
        return value(cache, self._key(case, dtype, layout, setting), field)

    def track_time(self, cache, case, dtype, layout, setting):
        return self._v(cache, case, dtype, layout, setting, "time_s")

    track_time.unit = "seconds"

    def track_rel_l2_error(self, cache, case, dtype, layout, setting):
        return self._v(cache, case, dtype, layout, setting, "rel_l2")

    track_rel_l2_error.unit = "relative L2 error vs float64"

    def track_bitwise_stable(self, cache, case, dtype, layout, setting):
        return self._v(cache, case, dtype, layout, setting, "bitwise_stable")

    track_bitwise_stable.unit = "1 = bitwise reproducible"


if "fwd" in DIRECTIONS:
    class TorchForward(_Torch):
        """F.conv2d forward: device-event median time, error against float64, bitwise stability."""

        direction = "fwd"

        # asv keys its cache by the defining source line, so each class defines its own setup_cache.
        def setup_cache(self):
            return run_sweep("torch", "fwd")

        setup_cache.timeout = 3600

if "bwd_data" in DIRECTIONS:
    class TorchBackwardData(_Torch):
        """torch.autograd.grad of F.conv2d with respect to the input."""

        direction = "bwd_data"

        # asv keys its cache by the defining source line, so each class defines its own setup_cache.
        def setup_cache(self):
            return run_sweep("torch", "bwd_data")

        setup_cache.timeout = 3600

if "bwd_filter" in DIRECTIONS:
    class TorchBackwardFilter(_Torch):
        """torch.autograd.grad of F.conv2d with respect to the weight."""

        direction = "bwd_filter"

        # asv keys its cache by the defining source line, so each class defines its own setup_cache.
        def setup_cache(self):
            return run_sweep("torch", "bwd_filter")

        setup_cache.timeout = 3600
