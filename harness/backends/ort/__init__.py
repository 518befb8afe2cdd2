"""onnxruntime backend: the CUDA execution provider under every cuDNN conv search setting, and the CPU EP.

Settings grid on CUDA: ``cudnn_conv_algo_search`` (EXHAUSTIVE, HEURISTIC, DEFAULT) x ``use_tf32`` (0, 1) x
``cudnn_conv_use_max_workspace`` (0, 1), each measured with I/O binding and end to end from numpy (docs/ort.md).
All onnxruntime work runs in fresh session processes, run by the service the backend is given (the run layer's
harness.run.pool.FreshProcesses: the worker pool's fresh, watched processes); this process builds the models,
computes the float64 references, hashes the outputs and assembles the records.

    backend.py     OrtBackend: the backend interface, single-Conv catalogue cases
    model_runs.py  whole models under every setting (ort_grid, the asv suite's OrtModels)
    options.py     providers, the settings a record carries, ModelOptions
    sessions.py    the session processes as planned: job, name, cuDNN logging; the service that runs them
    session_process.py  what one session process runs (session_process, profile_agreement)
    engines.py     which cuDNN path a version takes, which engine each Conv node ran (from the logs)
    cudnn_log.py   parsers of cuDNN's API and frontend logs
    drift.py       spread across sessions and processes, model error in the model's own yardstick
    architectures.py  ResNet-50 and MobileNetV2 written once, the ONNX and PyTorch builders, seeded weights
    imagenet.py    the models' inputs: sample photographs preprocessed the ImageNet way, a seeded batch
    models.py      the ONNX models built and cached, their float64 references, a single Conv per case
"""

from .backend import OrtBackend
from .drift import model_accuracy, spread
from .engines import expected_conv_path, node_algorithms, ort_version, version_tuple
from .options import CPU_EP, CUDA_EP, IO_MODES, NA, ModelOptions
from .sessions import SessionProcesses, WorkerRun, api_logged_settings, default_parallel

__all__ = ["CPU_EP", "CUDA_EP", "IO_MODES", "NA", "ModelOptions", "OrtBackend", "SessionProcesses", "WorkerRun",
           "api_logged_settings", "default_parallel", "expected_conv_path", "model_accuracy", "node_algorithms",
           "ort_version", "spread", "version_tuple"]
