"""onnxruntime's CUDA EP on whole models under every cuDNN conv search setting (and the CPU EP beside it).

All onnxruntime work happens once, in setup_cache, through harness.backends.ort (which runs it in worker
processes); the track_ functions only read numbers out of the records. A setting that did not run (no GPU,
an error) raises NotImplementedError, which asv shows as n/a; its record in the run journal says why.
Models: CONVBENCH_ORT_MODELS (default resnet50,mobilenetv2).
"""

import math

from ._bridge import results_root, settle, suite, suiteshape

MODELS = list(suiteshape.ort_models())
SHAPE = next(c for c in suiteshape.CLASSES if c.kind == suiteshape.ORT)  # the library's row for this class
SETTINGS = [s for s in suiteshape.ORT_SETTINGS if s != "cpu"]


def _label(rec) -> str:
    s = rec.settings
    if s["provider"] != "CUDAExecutionProvider":
        return "cpu"
    return f"{s['cudnn_conv_algo_search']},tf32={s['use_tf32']},ws={s['cudnn_conv_use_max_workspace']}"


def run_grid() -> dict:
    """Every model x setting x io, journaled; returns {(model, setting, io): numbers} for the track_ functions."""
    return suite.ort_grid(MODELS, results_root(), _label)


class OrtModels:
    """Latency (I/O binding and numpy), session creation, first inference, error vs float64, drift."""

    params = SHAPE.params(gpu=False, models=tuple(MODELS))
    param_names = list(SHAPE.param_names)
    rounds = repeat = number = 1

    def setup_cache(self):
        return run_grid()

    setup_cache.timeout = 1200

    def setup(self, cache, model, setting):
        # asv turns NotImplementedError into "n/a" only when setup raises it; from a track_ it is a failure.
        row = cache.get((model, setting, "iobinding"))
        if row is None or row["status"] != "ok":
            raise NotImplementedError(f"{row['status']}: {row['reason']}" if row else
                                      "setting not run on this machine (no GPU)")

    def _v(self, cache, model, setting, field, io="iobinding"):
        row = cache.get((model, setting, io))
        v = None if row is None or row["status"] != "ok" else row[field]
        return float(v) if v is not None and math.isfinite(v) else float("nan")  # nan: not measured

    def track_latency_iobinding(self, cache, model, setting):
        return self._v(cache, model, setting, "latency_s")

    track_latency_iobinding.unit = "seconds"

    def track_latency_numpy(self, cache, model, setting):
        return self._v(cache, model, setting, "latency_s", io="numpy")

    track_latency_numpy.unit = "seconds"

    def track_session_create(self, cache, model, setting):
        return self._v(cache, model, setting, "session_create_s")

    track_session_create.unit = "seconds"

    def track_first_inference(self, cache, model, setting):
        return self._v(cache, model, setting, "first_inference_s")

    track_first_inference.unit = "seconds"

    def track_rel_l2_error(self, cache, model, setting):
        return self._v(cache, model, setting, "rel_l2")

    track_rel_l2_error.unit = "relative L2 error vs float64"

    def track_distinct_outputs(self, cache, model, setting):
        return self._v(cache, model, setting, "distinct_outputs")

    track_distinct_outputs.unit = "distinct outputs over fresh sessions and processes"

    def track_max_spread(self, cache, model, setting):
        return self._v(cache, model, setting, "max_spread")

    track_max_spread.unit = "max elementwise spread across runs"

settle()
