"""cuDNN's answers that run nothing on the device, asked for the next case while the other process measures.

A cuDNN slice asks cuDNN two things that only read descriptors: the workspace each algorithm needs under each
math type (cudnnGet*WorkspaceSize, before each checked run) and the heuristic ranking (cudnnGet*Algorithm_v7,
15 ms a call backward-filter: 18-21 s of a backward night's critical path, docs/performance.md). Both are
functions of the descriptors and the device alone, so a timing process asks them for the case it measures next
once it has replied, while the other process has the GPU (CudnnBackend.ahead), and the next slice's session takes
each answer instead of asking again. An answer is used once, by the library that gave it; what was not asked
ahead is asked in the slice, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from ..core.cases import ALGOS
from .cudnn_lib import Conv, ConvDescriptors, Cudnn, CudnnError, Handle

WORKSPACE = "workspace"
GET_V7 = "get_v7"


class Refused(NamedTuple):
    """cuDNN's refusal, kept as data: a kept exception raised again would carry the frames it is raised through
    (the asking session's, its device buffers with them) in a cycle only the collector frees."""

    status: str
    call: str


# (library path, case, direction, dtype, layout, math, question, algo id or None) -> the answer or its refusal
_answers: dict[tuple, Any] = {}
_handles: dict[str, Handle] = {}  # per library: one handle that only ever asks


def ask_ahead(cudnn: Cudnn, case: Any, problems: Iterable[tuple[str, str, str, str]],
              rankings: bool) -> Iterator[None]:
    """Ask, for each (direction, dtype, layout, math) of ``case`` (a repeated one once), every algorithm's
    workspace and, with ``rankings``, the heuristic ranking, one problem a step. Answers left from an earlier case
    (a slice that did not come) go first."""
    _answers.clear()
    handle = _handles.get(cudnn.path)
    if handle is None:
        handle = _handles[cudnn.path] = Handle(cudnn, 0)
    by_format: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for direction, dtype, layout, math in problems:
        by_format.setdefault((dtype, layout), []).append((direction, math))
    for (dtype, layout), asked in by_format.items():
        desc = ConvDescriptors(cudnn, case, dtype, layout)
        try:
            for direction, math in dict.fromkeys(asked):
                desc.set_math(math)
                conv = Conv(cudnn, handle, desc, direction, {})
                key = (cudnn.path, case, direction, dtype, layout, math)
                for algo_id in range(len(ALGOS[direction])):
                    _keep(key + (WORKSPACE, algo_id), conv.workspace_size, algo_id)
                if rankings:
                    _keep(key + (GET_V7, None), conv.get_v7)
                yield
        finally:
            desc.close()


def _keep(key: tuple, ask: Callable[..., Any], *args: Any) -> None:
    try:
        _answers[key] = ask(*args)
    except CudnnError as exc:  # cuDNN's refusal is the answer: the slice records it as it would have
        _answers[key] = Refused(exc.status, exc.call)


def answer(cudnn: Cudnn, case: Any, direction: str, dtype: str, layout: str, math: str, question: str,
           algo_id: int | None, ask: Callable[[], Any]) -> Any:
    """The answer asked ahead (once), else ``ask()`` now; a refusal asked ahead is raised as it was."""
    got = _answers.pop((cudnn.path, case, direction, dtype, layout, math, question, algo_id), _answers)
    if got is _answers:
        return ask()
    if isinstance(got, Refused):
        raise CudnnError(got.status, got.call)
    return got
