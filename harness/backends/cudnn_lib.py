"""ctypes binding of cuDNN's legacy convolution API (cuDNN 8.x and 9.x), and nothing more.

Why ctypes: the point is to call the very libcudnn that the process (PyTorch) loaded, with every algorithm
and math type chosen by us, not by a framework. The library is found, in this order: the path the user
names (CONVBENCH_CUDNN or --cudnn), the libcudnn already mapped into this process (PyTorch's), the folders on
LD_LIBRARY_PATH (where a stack overlay puts its cuDNN), the nvidia-cudnn wheel's directory, then the dynamic
loader's search path.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Iterator
from ctypes import POINTER, Structure, byref, c_float, c_int, c_size_t, c_void_p
from pathlib import Path

from ..core.cases import ALGOS, BWD_DATA_ALGOS, BWD_FILTER_ALGOS, FWD_ALGOS, MATHS  # noqa: F401 (the enum order)

# cuDNN documents these as non-deterministic (they accumulate with atomics).
DOCUMENTED_NONDETERMINISTIC = {("bwd_data", "ALGO_0"), ("bwd_filter", "ALGO_0"), ("bwd_filter", "ALGO_3")}

MATH = {name: value for value, name in enumerate(MATHS)}  # DEFAULT 0, TENSOR_OP 1, ..._CONVERSION 2, FMA 3
MATH_NAMES = {v: k for k, v in MATH.items()}
DATA_TYPE = {"fp32": 0, "fp64": 1, "fp16": 2, "bf16": 9}
FORMAT = {"NCHW": 0, "NHWC": 1}
CROSS_CORRELATION = 1  # what frameworks call convolution
DETERMINISM = {0: "NON_DETERMINISTIC", 1: "DETERMINISTIC"}


class CudnnNotFound(RuntimeError):
    pass


class CudnnError(RuntimeError):
    def __init__(self, status_name: str, call: str):
        super().__init__(f"{call} returned {status_name}")
        self.status = status_name
        self.call = call


class AlgoPerf(Structure):
    """cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the three share this layout."""

    _fields_ = [("algo", c_int), ("status", c_int), ("time", c_float), ("memory", c_size_t),
                ("determinism", c_int), ("mathType", c_int), ("reserved", c_int * 3)]


def decode_version(v: int) -> str:
    """cuDNN 8 encodes MAJOR*1000 + MINOR*100 + PATCH; cuDNN 9 MAJOR*10000 + MINOR*100 + PATCH."""
    if v >= 90000:
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def _mapped_libcudnn(major: int | None = None, maps: str = "/proc/self/maps") -> str | None:
    """The path of the libcudnn mapped into this process (of that major, when given: a process can hold two, e.g.
    torch's cuDNN 9 and a cuDNN 8 bound through CONVBENCH_CUDNN). Paths are read as the kernel's bytes
    (surrogateescape): another mapped file's name may not be UTF-8, and this one is handed back to dlopen."""
    prefix = "libcudnn.so" if major is None else f"libcudnn.so.{major}"
    try:
        with open(maps, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                name = os.path.basename(path)
                if name.startswith(prefix):
                    return path
    except OSError:
        pass
    return None


def candidates(explicit: str | None = None) -> list[str]:
    """Where to look, in order; each entry a path or a bare soname for the dynamic loader."""
    out: list[str] = []
    if explicit or os.environ.get("CONVBENCH_CUDNN"):
        return [explicit or os.environ["CONVBENCH_CUDNN"]]
    mapped = _mapped_libcudnn()
    if mapped:
        out.append(mapped)
    # A stack overlay puts its cuDNN first on LD_LIBRARY_PATH (stacks.py): the loader's order, kept here, so this
    # binding and torch load the same library.
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if d:
            out += sorted(glob.glob(os.path.join(d, "libcudnn.so.*")), reverse=True)
    try:
        import nvidia.cudnn  # the wheel PyTorch depends on

        for d in nvidia.cudnn.__path__:
            out += sorted(glob.glob(os.path.join(d, "lib", "libcudnn.so.*")), reverse=True)
    except ImportError:
        pass
    out += ["libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"]
    return list(dict.fromkeys(out))


class Cudnn:
    """The loaded library with typed prototypes for the calls convbench makes."""

    def __init__(self, path: str | None = None):
        tried = []
        self.lib = None
        for cand in candidates(path):
            try:
                self.lib = ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
                self.requested = cand
                break
            except OSError as exc:
                tried.append(f"{cand} ({exc})")
        if self.lib is None:
            raise CudnnNotFound("no libcudnn could be loaded; looked at: " + "; ".join(tried))
        self._declare()
        self.version_int = int(self.lib.cudnnGetVersion())
        self.version = decode_version(self.version_int)
        # The copy this binding calls, by its major: else a cuDNN 8.9 bound beside torch's 9.19 is
        # recorded with 9.19's path (the first libcudnn in the maps) beside version 8.9.2.
        self.path = _mapped_libcudnn(int(self.version.split(".")[0])) or self.requested
        self.path = str(Path(self.path).resolve()) if os.path.exists(self.path) else self.path

    def _declare(self) -> None:
        L = self.lib
        L.cudnnGetVersion.restype = c_size_t
        L.cudnnGetErrorString.restype = ctypes.c_char_p
        L.cudnnGetErrorString.argtypes = [c_int]
        for name in ("cudnnCreate", "cudnnDestroy", "cudnnSetStream", "cudnnCreateTensorDescriptor",
                     "cudnnDestroyTensorDescriptor", "cudnnSetTensor4dDescriptor", "cudnnCreateFilterDescriptor",
                     "cudnnDestroyFilterDescriptor", "cudnnSetFilter4dDescriptor",
                     "cudnnCreateConvolutionDescriptor", "cudnnDestroyConvolutionDescriptor",
                     "cudnnSetConvolution2dDescriptor", "cudnnSetConvolutionGroupCount",
                     "cudnnSetConvolutionMathType", "cudnnGetConvolutionForwardWorkspaceSize",
                     "cudnnGetConvolutionBackwardDataWorkspaceSize",
                     "cudnnGetConvolutionBackwardFilterWorkspaceSize", "cudnnConvolutionForward",
                     "cudnnConvolutionBackwardData", "cudnnConvolutionBackwardFilter",
                     "cudnnFindConvolutionForwardAlgorithmEx", "cudnnFindConvolutionBackwardDataAlgorithmEx",
                     "cudnnFindConvolutionBackwardFilterAlgorithmEx", "cudnnGetConvolutionForwardAlgorithm_v7",
                     "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                     "cudnnGetConvolutionBackwardFilterAlgorithm_v7"):
            getattr(L, name).restype = c_int
        L.cudnnSetStream.argtypes = [c_void_p, c_void_p]
        L.cudnnSetTensor4dDescriptor.argtypes = [c_void_p, c_int, c_int, c_int, c_int, c_int, c_int]
        L.cudnnSetFilter4dDescriptor.argtypes = [c_void_p, c_int, c_int, c_int, c_int, c_int, c_int]
        L.cudnnSetConvolution2dDescriptor.argtypes = [c_void_p] + [c_int] * 8
        L.cudnnSetConvolutionGroupCount.argtypes = [c_void_p, c_int]
        L.cudnnSetConvolutionMathType.argtypes = [c_void_p, c_int]
        ws = [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int, POINTER(c_size_t)]
        L.cudnnGetConvolutionForwardWorkspaceSize.argtypes = ws
        L.cudnnGetConvolutionBackwardDataWorkspaceSize.argtypes = ws
        L.cudnnGetConvolutionBackwardFilterWorkspaceSize.argtypes = ws
        run = [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int, c_void_p, c_size_t,
               c_void_p, c_void_p, c_void_p]
        L.cudnnConvolutionForward.argtypes = run
        L.cudnnConvolutionBackwardData.argtypes = run
        L.cudnnConvolutionBackwardFilter.argtypes = run
        find = [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int,
                POINTER(c_int), POINTER(AlgoPerf), c_void_p, c_size_t]
        L.cudnnFindConvolutionForwardAlgorithmEx.argtypes = find
        L.cudnnFindConvolutionBackwardDataAlgorithmEx.argtypes = find
        L.cudnnFindConvolutionBackwardFilterAlgorithmEx.argtypes = find
        get = [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int, POINTER(c_int), POINTER(AlgoPerf)]
        L.cudnnGetConvolutionForwardAlgorithm_v7.argtypes = get
        L.cudnnGetConvolutionBackwardDataAlgorithm_v7.argtypes = get
        L.cudnnGetConvolutionBackwardFilterAlgorithm_v7.argtypes = get

    def status_name(self, code: int) -> str:
        raw = self.lib.cudnnGetErrorString(code)
        return raw.decode() if raw else f"CUDNN_STATUS_{code}"

    def check(self, code: int, call: str) -> None:
        if code != 0:
            raise CudnnError(self.status_name(code), call)


class Handle:
    def __init__(self, cudnn: Cudnn, stream_ptr: int):
        self.cudnn = cudnn
        self.ptr = c_void_p()
        cudnn.check(cudnn.lib.cudnnCreate(byref(self.ptr)), "cudnnCreate")
        self.set_stream(stream_ptr)

    def set_stream(self, stream_ptr: int) -> None:
        self.cudnn.check(self.cudnn.lib.cudnnSetStream(self.ptr, c_void_p(stream_ptr)), "cudnnSetStream")

    def close(self) -> None:
        if self.ptr:
            self.cudnn.lib.cudnnDestroy(self.ptr)
            self.ptr = c_void_p()


# The determinism check runs each combination once more on a handle that has run nothing (fresh_handle_equal).
# cudnnCreate takes 1.2-1.8 ms, 3.3 s of a forward night and 7 s of a backward one on its critical path (the
# profiles in docs/performance.md), so a process checking determinism makes the next slice's handles while it
# waits for that slice (make_fresh_handles, from CudnnBackend.ahead), as it draws the next case's operands. A
# handle made ahead has run nothing either; it is pointed at the measuring stream when taken. At most this many
# wait.
FRESH_HANDLES_AHEAD = 160
_fresh_handles: list[Handle] = []


def fresh_handle(cudnn: Cudnn, stream_ptr: int) -> Handle:
    """A handle that has run nothing, on ``stream_ptr``: one made ahead by this library if any, else a new one."""
    while _fresh_handles:
        handle = _fresh_handles.pop()
        if handle.cudnn.path == cudnn.path:
            handle.set_stream(stream_ptr)
            return handle
        handle.close()
    return Handle(cudnn, stream_ptr)


def make_fresh_handles(cudnn: Cudnn, count: int) -> Iterator[None]:
    """Make handles until ``count`` (at most FRESH_HANDLES_AHEAD) wait for fresh_handle, one a step."""
    while len(_fresh_handles) < min(count, FRESH_HANDLES_AHEAD):
        _fresh_handles.append(Handle(cudnn, 0))
        yield


class ConvDescriptors:
    """Tensor, filter and convolution descriptors of one case in one dtype and layout."""

    def __init__(self, cudnn: Cudnn, case, dtype: str, layout: str):
        self.cudnn = cudnn
        L = cudnn.lib
        self.x, self.w, self.y, self.conv = c_void_p(), c_void_p(), c_void_p(), c_void_p()
        cudnn.check(L.cudnnCreateTensorDescriptor(byref(self.x)), "cudnnCreateTensorDescriptor")
        cudnn.check(L.cudnnCreateTensorDescriptor(byref(self.y)), "cudnnCreateTensorDescriptor")
        cudnn.check(L.cudnnCreateFilterDescriptor(byref(self.w)), "cudnnCreateFilterDescriptor")
        cudnn.check(L.cudnnCreateConvolutionDescriptor(byref(self.conv)), "cudnnCreateConvolutionDescriptor")
        dt, fmt = DATA_TYPE[dtype], FORMAT[layout]
        cudnn.check(L.cudnnSetTensor4dDescriptor(self.x, fmt, dt, *case.x_shape()), "cudnnSetTensor4dDescriptor(x)")
        cudnn.check(L.cudnnSetFilter4dDescriptor(self.w, dt, fmt, *case.w_shape()), "cudnnSetFilter4dDescriptor")
        cudnn.check(L.cudnnSetTensor4dDescriptor(self.y, fmt, dt, *case.y_shape()), "cudnnSetTensor4dDescriptor(y)")
        # Half and bfloat16 data accumulate in float, as the frameworks configure it.
        compute = DATA_TYPE["fp64"] if dtype == "fp64" else DATA_TYPE["fp32"]
        cudnn.check(L.cudnnSetConvolution2dDescriptor(self.conv, case.pad[0], case.pad[1], case.stride[0],
                                                      case.stride[1], case.dilation[0], case.dilation[1],
                                                      CROSS_CORRELATION, compute), "cudnnSetConvolution2dDescriptor")
        cudnn.check(L.cudnnSetConvolutionGroupCount(self.conv, case.groups), "cudnnSetConvolutionGroupCount")

    def set_math(self, math: str) -> None:
        self.cudnn.check(self.cudnn.lib.cudnnSetConvolutionMathType(self.conv, MATH[math]),
                         "cudnnSetConvolutionMathType")

    def close(self) -> None:
        L = self.cudnn.lib
        L.cudnnDestroyTensorDescriptor(self.x)
        L.cudnnDestroyTensorDescriptor(self.y)
        L.cudnnDestroyFilterDescriptor(self.w)
        L.cudnnDestroyConvolutionDescriptor(self.conv)


# Per direction: (workspace-size call, run call, find call, get_v7 call) and the order of the operand
# descriptors each takes. Forward reads x and w and writes y; backward-data reads w and dy and writes dx;
# backward-filter reads x and dy and writes dw.
CALLS = {
    "fwd": ("cudnnGetConvolutionForwardWorkspaceSize", "cudnnConvolutionForward",
            "cudnnFindConvolutionForwardAlgorithmEx", "cudnnGetConvolutionForwardAlgorithm_v7"),
    "bwd_data": ("cudnnGetConvolutionBackwardDataWorkspaceSize", "cudnnConvolutionBackwardData",
                 "cudnnFindConvolutionBackwardDataAlgorithmEx", "cudnnGetConvolutionBackwardDataAlgorithm_v7"),
    "bwd_filter": ("cudnnGetConvolutionBackwardFilterWorkspaceSize", "cudnnConvolutionBackwardFilter",
                   "cudnnFindConvolutionBackwardFilterAlgorithmEx",
                   "cudnnGetConvolutionBackwardFilterAlgorithm_v7"),
}


class Conv:
    """One direction of one case, bound to device buffers: workspace query, run, find and get_v7."""

    def __init__(self, cudnn: Cudnn, handle: Handle, desc: ConvDescriptors, direction: str, ptrs: dict[str, int]):
        self.cudnn, self.handle, self.desc, self.direction = cudnn, handle, desc, direction
        self.ptrs = ptrs  # device pointers: x, w, y for fwd; w, dy, dx for bwd_data; x, dy, dw for bwd_filter
        d = desc
        # Descriptor order in the C signatures, per direction.
        if direction == "fwd":
            self.ws_args = (d.x, d.w, d.conv, d.y)
            self.io = ((d.x, "x"), (d.w, "w"), (d.y, "y"))
        elif direction == "bwd_data":
            self.ws_args = (d.w, d.y, d.conv, d.x)
            self.io = ((d.w, "w"), (d.y, "dy"), (d.x, "dx"))
        else:
            self.ws_args = (d.x, d.y, d.conv, d.w)
            self.io = ((d.x, "x"), (d.y, "dy"), (d.w, "dw"))
        self.alpha, self.beta = c_float(1.0), c_float(0.0)

    def workspace_size(self, algo: int) -> int:
        size = c_size_t(0)
        fn = getattr(self.cudnn.lib, CALLS[self.direction][0])
        self.cudnn.check(fn(self.handle.ptr, *self.ws_args, algo, byref(size)), CALLS[self.direction][0])
        return size.value

    def run(self, algo: int, workspace: int, workspace_bytes: int) -> None:
        (a_desc, a), (b_desc, b), (o_desc, o) = self.io
        fn = getattr(self.cudnn.lib, CALLS[self.direction][1])
        code = fn(self.handle.ptr, byref(self.alpha), a_desc, c_void_p(self.ptrs[a]), b_desc, c_void_p(self.ptrs[b]),
                  self.desc.conv, algo, c_void_p(workspace), workspace_bytes, byref(self.beta), o_desc,
                  c_void_p(self.ptrs[o]))
        self.cudnn.check(code, CALLS[self.direction][1])

    def _perf_rows(self, results, count: int) -> list[dict]:
        names = ALGOS[self.direction]
        rows = []
        for i in range(count):
            r = results[i]
            rows.append({"rank": i, "algo": names[r.algo] if 0 <= r.algo < len(names) else str(r.algo),
                         "status": self.cudnn.status_name(r.status),
                         "time_ms": float(r.time) if r.status == 0 and r.time >= 0 else None,
                         "memory_bytes": int(r.memory) if r.status == 0 else None,
                         "determinism": DETERMINISM.get(r.determinism, str(r.determinism)),
                         "math_reported": MATH_NAMES.get(r.mathType, str(r.mathType))})
        return rows

    def find(self, workspace: int, workspace_bytes: int) -> list[dict]:
        """cudnnFind*AlgorithmEx: cuDNN times every algorithm itself (it overwrites the output buffer)."""
        n = len(ALGOS[self.direction])
        results, count = (AlgoPerf * n)(), c_int(0)
        (a_desc, a), (b_desc, b), (o_desc, o) = self.io
        fn = getattr(self.cudnn.lib, CALLS[self.direction][2])
        code = fn(self.handle.ptr, a_desc, c_void_p(self.ptrs[a]), b_desc, c_void_p(self.ptrs[b]), self.desc.conv,
                  o_desc, c_void_p(self.ptrs[o]), n, byref(count), results, c_void_p(workspace), workspace_bytes)
        self.cudnn.check(code, CALLS[self.direction][2])
        return self._perf_rows(results, count.value)

    def get_v7(self) -> list[dict]:
        """cudnnGet*Algorithm_v7: cuDNN's heuristic ranking, without running anything."""
        n = len(ALGOS[self.direction])
        results, count = (AlgoPerf * n)(), c_int(0)
        fn = getattr(self.cudnn.lib, CALLS[self.direction][3])
        code = fn(self.handle.ptr, *self.ws_args, n, byref(count), results)
        self.cudnn.check(code, CALLS[self.direction][3])
        return self._perf_rows(results, count.value)
