"""A stream held until the host releases it: the device waits for a batch to be enqueued, and no longer.

The timer must keep the device from starting a batch before the host has enqueued all of it (a call whose host
side is slower than its kernel would otherwise be timed with the host's dispatch in it). A spin kernel of a
guessed length does that at a cost: it must outlast the host's dispatch with a margin (1.5x), the device spins
the margin away on every batch, and a batch the host fell behind on is thrown away. nvbench holds the stream
with a kernel that spins on a flag the host sets; this holds it with the driver's stream memory operations, no
kernel to build: ``cuStreamWaitValue32`` stops the measured stream at a word of device memory, and
``cuStreamWriteValue32`` on a side stream (non-blocking, so it never waits behind the held stream) writes the
word once the batch is enqueued. The word counts up, so a hold never needs resetting.

Where the driver lacks the operations (drivers before stream memory operations were on by default) or a hold
does not hold when tried once at start, ``open`` returns None and the timer spins as before.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

CU_STREAM_WAIT_VALUE_GEQ = 0x0
CU_STREAM_WRITE_VALUE_DEFAULT = 0x0
CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 = 92

_driver: Any = None


def _functions() -> tuple[Any, Any] | None:
    """(wait, write) from libcuda: the _v2 entry points (always available where they exist), else v1 where the
    device says stream memory operations are enabled."""
    global _driver
    try:
        _driver = _driver or ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    for suffix in ("_v2", ""):
        try:
            wait = getattr(_driver, "cuStreamWaitValue32" + suffix)
            write = getattr(_driver, "cuStreamWriteValue32" + suffix)
        except AttributeError:
            continue
        if suffix == "" and not _v1_enabled():
            return None
        for f in (wait, write):
            f.restype = ctypes.c_int
            f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        return wait, write
    return None


def _v1_enabled() -> bool:
    import torch

    value, device = ctypes.c_int(0), ctypes.c_int(0)
    if _driver.cuDeviceGet(ctypes.byref(device), torch.cuda.current_device()) != 0:
        return False
    ok = _driver.cuDeviceGetAttribute(ctypes.byref(value), CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, device)
    return ok == 0 and value.value == 1


class StreamGate:
    """Holds one stream at a point of its queue until ``release``; see the module's docstring."""

    def __init__(self, torch: Any, stream: Any, wait: Any, write: Any):
        self.torch, self.stream = torch, stream
        self._wait, self._write = wait, write
        self._word = torch.zeros(1, dtype=torch.int32, device=stream.device)
        self._side = torch.cuda.Stream(device=stream.device)  # torch's pool streams are non-blocking
        self._count = 0

    @classmethod
    def open(cls, stream: Any = None) -> StreamGate | None:
        """A gate on ``stream`` (torch's current one by default) that was seen to hold, or None."""
        import torch

        functions = _functions()
        if functions is None:
            return None
        gate = cls(torch, stream or torch.cuda.current_stream(), *functions)
        return gate if gate._holds() else None

    def hold(self) -> bool:
        """Enqueue the wait; False when the driver refused it (nothing was enqueued)."""
        self._count += 1
        return self._wait(self.stream.cuda_stream, self._word.data_ptr(), self._count, CU_STREAM_WAIT_VALUE_GEQ) == 0

    def release(self) -> None:
        """Let the held stream run; the word is written from the side stream (a fill kernel if the driver refuses
        the write, so a hold is never left in place)."""
        status = self._write(self._side.cuda_stream, self._word.data_ptr(), self._count, CU_STREAM_WRITE_VALUE_DEFAULT)
        if status != 0:
            with self.torch.cuda.stream(self._side):
                self._word.fill_(self._count)

    def _holds(self) -> bool:
        """One hold tried: an event behind it must still be pending 5 ms later, and complete once released."""
        torch = self.torch
        torch.cuda.synchronize()
        if not self.hold():
            return False
        behind = torch.cuda.Event()
        behind.record(self.stream)
        time.sleep(0.005)
        held = not behind.query()
        self.release()
        behind.synchronize()
        return held
