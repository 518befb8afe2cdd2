"""The environment fingerprint a run carries: what GPU, driver, clocks, libraries and numerics settings.

Taken through NVML (nvidia-ml-py) where there is a GPU; every probe that fails says why in the fingerprint
instead of failing the run, since a fingerprint with a hole is still worth more than no run.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

from ..core.errors import UserError

# Environment variables that change numerics or algorithm choice without any code change.
NUMERICS_ENV = (
    "NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "CUBLAS_WORKSPACE_CONFIG", "CUDNN_CONV_WSCAP_DBG",
    "CUDNN_LOGLEVEL_DBG", "CUDNN_LOGDEST_DBG", "CUDNN_LOGINFO_DBG", "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING", "TORCH_CUDNN_V8_API_DISABLED", "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT",
    "ORT_CUDA_FLAGS", "CONVBENCH_IMAGE", "CONVBENCH_IMAGE_ID", "NVIDIA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
)


def _nvml_gpu(index: int) -> dict[str, Any]:
    import pynvml as nv

    h = nv.nvmlDeviceGetHandleByIndex(index)
    info: dict[str, Any] = {"index": index}

    def probe(name, fn):
        try:
            value = fn()
            info[name] = value.decode() if isinstance(value, bytes) else value
        except nv.NVMLError as exc:
            info[name] = None
            info.setdefault("unavailable", {})[name] = str(exc)

    probe("name", lambda: nv.nvmlDeviceGetName(h))
    probe("uuid", lambda: nv.nvmlDeviceGetUUID(h))
    probe("sm", lambda: ".".join(map(str, nv.nvmlDeviceGetCudaComputeCapability(h))))
    probe("memory_total_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(h).total)
    probe("clock_sm_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
    probe("clock_mem_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
    probe("clock_sm_max_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
    probe("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
    probe("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0)
    probe("temperature_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
    probe("throttle_reasons", lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h))
    probe("ecc_enabled", lambda: bool(nv.nvmlDeviceGetEccMode(h)[0]))
    probe("mig_enabled", lambda: bool(nv.nvmlDeviceGetMigMode(h)[0]))
    probe("persistence_mode", lambda: bool(nv.nvmlDeviceGetPersistenceMode(h)))
    probe("pci_bus_id", lambda: nv.nvmlDeviceGetPciInfo(h).busId)
    return info


def gpus() -> tuple[list[dict[str, Any]], str | None]:
    """(GPUs seen by NVML with their facts, None) or ([], why NVML could not be used)."""
    try:
        import pynvml as nv
    except ImportError:
        return [], "nvidia-ml-py is not installed"
    try:
        nv.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return [], f"NVML unavailable: {exc}"
    try:
        driver = nv.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            g = _nvml_gpu(i)
            g["driver"] = driver
            out.append(g)
        return out, None
    finally:
        nv.nvmlShutdown()


def clocks(index: int) -> dict[str, Any]:
    """The fast-changing part (clocks, power, temperature, throttling), taken before and after a run."""
    found, why = gpus()
    if why or index >= len(found):
        return {"unavailable": why or f"no GPU {index}"}
    g = found[index]
    keys = ("clock_sm_mhz", "clock_mem_mhz", "power_w", "temperature_c", "throttle_reasons")
    return {k: g.get(k) for k in keys}


# Shared libraries whose version decides a convolution's speed, numerics or algorithm choice.
TRACKED_LIBRARIES = ("libcudnn", "libcublas", "libcublasLt", "libcudart", "libcufft", "libcurand", "libnvrtc",
                     "libnvJitLink", "libonnxruntime", "libcuda.so", "libtorch_cuda")


def _wheel_version(path: str) -> str | None:
    """The wheel a library came from (name-version of the .dist-info in the site folder that holds it), or None:
    nvidia/<pkg>/lib/x.so -> nvidia_<pkg>*, onnxruntime/capi/x.so -> onnxruntime*, torch/lib/x.so -> torch*."""
    parts = path.split(os.sep)
    for i in range(len(parts) - 2, 0, -1):
        top = parts[i]
        if top in ("nvidia", "onnxruntime", "torch"):
            prefix = f"nvidia_{parts[i + 1]}" if top == "nvidia" else top
            site = os.sep.join(parts[:i]) or os.sep
            try:
                names = sorted(e for e in os.listdir(site) if e.endswith(".dist-info") and e.lower().startswith(prefix))
            except OSError:
                return None
            return names[0][: -len(".dist-info")] if names else None
    return None


def mapped_libraries(maps: str = "/proc/self/maps") -> dict[str, Any]:
    """Every tracked shared library this process has mapped, by file name: its real path and the wheel it came
    from. Two copies of one library (e.g. two cuDNNs, one per path) are listed both and flagged ``mixed``. A path
    is bytes to the kernel: any file a process maps may have a name that does not decode, and that must not stop a
    run from starting."""
    found: dict[str, set[str]] = {}
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) < 6 or not fields[5].startswith("/"):
                    continue
                path = fields[5].strip()
                name = os.path.basename(path)
                if ".so" in name and name.startswith(TRACKED_LIBRARIES):
                    found.setdefault(name, set()).add(path)
    except OSError as exc:
        return {"unavailable": str(exc)}
    out: dict[str, Any] = {}
    for name, paths in sorted(found.items()):
        entries = [{"path": p, "wheel": _wheel_version(p)} for p in sorted(paths)]
        out[name] = entries[0] if len(entries) == 1 else {"mixed": True, "copies": entries}
    return out


def software() -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    try:
        import numpy

        info["numpy"] = numpy.__version__
    except ImportError:
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
        info["torch_cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except ImportError:
        info["torch"] = None
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
        info["onnxruntime_providers"] = onnxruntime.get_available_providers()
    except ImportError:
        info["onnxruntime"] = None
    return info


# ---- which node ----------------------------------------------------------------------------------------------

# Who may name the node, first to last: the host runner or a manifest (Kubernetes passes spec.nodeName through
# the downward API), then Slurm, which sets the node's name in every job, then the hostname: a host's, or a
# container's that was given one. A hostname the runtime made up (the container's id, a pod's name) changes
# every night, so it never names a node.
NODE_SOURCES = ("CONVBENCH_NODE", "SLURMD_NODENAME")


def container() -> str | None:
    """The container runtime this process runs under, or None on a host: Docker and Podman leave a marker file,
    Kubernetes sets its service variables in every pod."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if Path("/.dockerenv").exists():
        return "docker"
    if Path("/run/.containerenv").exists():
        return "podman"
    return None


def host_machine_id() -> str | None:
    """The host's /etc/machine-id (what a reimage changes): passed in by the host runner inside a container."""
    given = os.environ.get("CONVBENCH_HOST_ID")
    if given or container():
        return given or None
    try:
        text = Path("/etc/machine-id").read_text().strip()
    except OSError:
        return None
    return text if text.isalnum() and len(text) <= 64 else None


def made_up_hostname(name: str) -> bool:
    """A hostname a container runtime made up: Docker and Podman name a container's host after the first 12 hex
    digits of its id unless told otherwise (``--hostname``), so it changes with every container."""
    return len(name) == 12 and all(ch in "0123456789abcdef" for ch in name)


def node() -> dict[str, Any]:
    """The node this run is on, as the scheduler or the host names it: ``{"name", "source", "container",
    "machine_id"}``. Inside a container with nothing naming the node the run is refused: its hostname would make
    every night a new machine and the gate would never compare two nights."""
    runtime = container()
    for var in NODE_SOURCES:
        name = os.environ.get(var, "").strip()
        if name:
            source = var
            break
    else:
        name, source = socket.gethostname(), "hostname"
        if runtime == "kubernetes" or (runtime and made_up_hostname(name)):
            raise UserError(f"running in a {runtime} container named {name!r} by the runtime, and nothing names the "
                            "node: pass -e CONVBENCH_NODE=\"$(hostname)\" (the host's name; `convbench run`, Slurm "
                            "and the rendered manifests set it), or every night would be a new machine")
    return {"name": check_node_name(name, source), "source": source, "container": runtime,
            "machine_id": host_machine_id()}


def check_node_name(name: str, source: str) -> str:
    """A node name as it may enter machine names and directories: printable, no '/', not '.' or '..'."""
    if not name or len(name) > 253 or not name.isprintable() or "/" in name or name in (".", ".."):
        raise UserError(f"{source}={name[:60]!r}: a node name is printable, without '/', at most 253 characters")
    return name


def slot() -> int | None:
    """The GPU slot of the node this run was given (``CONVBENCH_SLOT``, set by ``convbench run`` per worker)."""
    text = os.environ.get("CONVBENCH_SLOT", "")
    return int(text) if text.isdigit() else None


def take(gpu_index: int | None = None) -> dict[str, Any]:
    """Full fingerprint for a run on ``gpu_index`` (None: a CPU run)."""
    where = node()
    found, why = gpus()
    fp: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "node": where,
        "slot": slot(),
        "software": software(),
        "env": {k: os.environ[k] for k in NUMERICS_ENV if k in os.environ},
        # a run's image is its container image, or the stack overlay it ran on (stacks.py); None: the host's own
        "image": os.environ.get("CONVBENCH_IMAGE") or (os.environ.get("CONVBENCH_STACK") or None),
        # the image's id (its digest) comes from the host: an image cannot know its own; the lock's digest and
        # the suite revision are baked into each image and name its content when the host passed nothing
        "image_id": os.environ.get("CONVBENCH_IMAGE_ID") or os.environ.get("CONVBENCH_IMAGE_BUILD"),
        "nvml": None if why is None else why,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "stack": os.environ.get("CONVBENCH_STACK", "host"),
        "mapped": mapped_libraries(),
    }
    if gpu_index is not None and gpu_index < len(found):
        fp["gpu"] = found[gpu_index]
    else:
        fp["gpu"] = None
    return fp


def node_name(fp: dict[str, Any], unknown: str = "?") -> str:
    """The node a fingerprint names: its ``node`` (scheduler or host), else, in runs from before nodes were
    recorded, the hostname they carried, else ``unknown``."""
    where = fp.get("node")
    name = where.get("name") if isinstance(where, dict) else None
    return name if isinstance(name, str) and name else str(fp.get("hostname") or unknown)


def this_machine() -> str:
    """The machine name a run on this host gets (CONVBENCH_MACHINE, else the node and the first visible GPU, or
    the CPU), read through NVML only (no CUDA context, no torch): asv's machine is named the same (asvplugin)."""
    if os.environ.get("CONVBENCH_MACHINE"):
        return os.environ["CONVBENCH_MACHINE"]
    found, _ = gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    gpu = next((g for g in found if g["index"] == (int(visible) if visible.isdigit() else 0)), None)
    return machine_name({"hostname": socket.gethostname(), "node": node(), "slot": slot(), "gpu": gpu})


def machine_name(fp: dict[str, Any]) -> str:
    """Stable, file-name-safe name for (node, GPU): the unit results are grouped by. A CPU run on a GPU slot
    (a node whose GPUs NVML cannot see) is named by its slot, so two slots of a node stay two machines."""
    gpu = fp.get("gpu")
    host = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in node_name(fp, "host"))[:128].strip("-.")
    host = host or "host"
    if not gpu:
        return f"{host}-slot{fp['slot']}-cpu" if isinstance(fp.get("slot"), int) else f"{host}-cpu"
    model = "".join(ch if ch.isalnum() else "-" for ch in (gpu.get("name") or "gpu")).strip("-").lower()
    where = fp.get("node")
    if isinstance(where, dict) and where.get("container") and gpu.get("uuid"):
        # a container's NVML numbers only the GPUs it was given (from 0): the UUID tells the node's GPUs apart
        return f"{host}-gpu{str(gpu['uuid']).replace('GPU-', '')[:8]}-{model}"
    return f"{host}-gpu{gpu['index']}-{model}"
