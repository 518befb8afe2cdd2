"""Autotuner stability, and the direct framework-vs-cuDNN cross-check of the seed report.

The mechanism behind "EXHAUSTIVE search gives run-to-run differences": a search times the candidates,
and when two are near-tied a different session can pick the other one; if the two differ numerically
(TF32 vs FMA, or a different summation order), the output changes from session to session. This module
repeats the search K times from scratch (fresh cuDNN handles; fresh processes for PyTorch's
cudnn.benchmark), records each winner and the hash of what it computes, and names near ties whose
candidates differ bitwise, the cases that can flip on another night.

The measuring is here; autotune_study.py runs it through the worker pool (the runners below, torch_worker as a
call in a fresh worker), so a crash of any of it is a record of its kind and `--resume` continues a study.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator

from ..backends import Combo, SweepOptions
from ..backends.cudnn import ConvSession, CudnnBackend, CudnnError, WorkspaceTooLarge
from ..backends.cudnn_lib import ALGOS, Conv, Handle
from ..backends.pytorch import conv_settings
from ..core.cases import Case
from ..core.records import OK, Determinism, Record, RecordKind
from ..measurement import accuracy
from .autotune_study import TuneOptions
from .finalize import finalize

NEAR_TIE = 0.05  # candidates within 5 % of the winner's time count as tied: run-to-run noise is that large
SUCCESS = "CUDNN_STATUS_SUCCESS"


def _record(case: Case, backend: str, direction: str, math: str, dtype: str, layout: str, settings: dict,
            hashes: list[str], winners: list[str], extra: dict) -> Record:
    counts = collections.Counter(winners)
    return Record(case=case.id, backend=backend, direction=direction, algo="auto", math=math, dtype=dtype,
                  layout=layout, status=OK, device="cuda", settings=settings, kind=RecordKind.AUTOTUNE,
                  chosen_algo=counts.most_common(1)[0][0] if counts else None,
                  determinism=Determinism(hash=hashes[0] if hashes else "", hash_algo=accuracy.HASH_ALGO,
                                          repeats=len(hashes), repeat_equal=len(set(hashes)) <= 1,
                                          fresh_handle_equal=None, distinct_outputs=len(set(hashes))),
                  extra=dict(extra, winners=dict(counts)))


class CandidateNumerics:
    """Output hash (and output) of each (algo, math) of one session, computed once on demand."""

    def __init__(self, session: ConvSession):
        self.session = session
        self.hashes: dict[tuple[str, str], str | None] = {}
        self.outputs: dict[tuple[str, str], object] = {}

    def hash(self, algo: str, math: str) -> str | None:
        key = (algo, math)
        if key not in self.hashes:
            try:
                self.hashes[key] = self.session.output_hash(algo, math)
                self.outputs[key] = self.session.out.clone()
            except (CudnnError, WorkspaceTooLarge):
                self.hashes[key] = None
        return self.hashes[key]

    def max_delta(self, a: tuple[str, str], b: tuple[str, str]) -> float | None:
        if self.hash(*a) is None or self.hash(*b) is None:
            return None
        oa, ob = self.outputs[a], self.outputs[b]
        return float((oa.double() - ob.double()).abs().max().item())

    def match(self, digest: str) -> list[str]:
        """Which (algo, math) candidates compute exactly these bits."""
        return [f"{a} ({m})" for (a, m), h in self.hashes.items() if h == digest]


def cudnn_find(cudnn, case: Case, direction: str, dtype: str, layout: str, math: str, k: int) -> Record:
    """K cudnnFind searches, each on a fresh handle; winner, runner-up, gap and numerics of each."""
    session = ConvSession(cudnn, case, direction, dtype, layout, SweepOptions(), reference=False)
    numerics = CandidateNumerics(session)
    ws_bytes = 0
    for algo in ALGOS[direction]:
        try:
            ws_bytes = max(ws_bytes, session.bind(algo, math)[2])
        except (CudnnError, WorkspaceTooLarge):
            continue
    ws = session.workspace(ws_bytes)
    trials, winners, hashes = [], [], []
    for _ in range(k):
        handle = Handle(cudnn, session.stream.cuda_stream)
        try:
            session.desc.set_math(math)
            rows = [r for r in Conv(cudnn, handle, session.desc, direction, session.ptrs).find(ws, ws_bytes)
                    if r["status"] == SUCCESS]
        finally:
            session.stream.synchronize()
            handle.close()
        if not rows:
            continue
        win = rows[0]
        trial = {"winner": win["algo"], "math": win["math_reported"], "time_ms": win["time_ms"]}
        if len(rows) > 1:
            run = rows[1]
            trial.update(runner_up=run["algo"], runner_up_math=run["math_reported"], runner_up_ms=run["time_ms"],
                         gap=(run["time_ms"] - win["time_ms"]) / win["time_ms"] if win["time_ms"] else None)
        trial["hash"] = numerics.hash(win["algo"], win["math_reported"])
        trials.append(trial)
        winners.append(f"{win['algo']} ({win['math_reported']})")
        hashes.append(trial["hash"] or "")
    near_ties = []
    for t in trials:
        if t.get("gap") is not None and t["gap"] <= NEAR_TIE:
            a, b = (t["winner"], t["math"]), (t["runner_up"], t["runner_up_math"])
            if numerics.hash(*a) != numerics.hash(*b):
                near_ties.append({"winner": f"{a[0]} ({a[1]})", "runner_up": f"{b[0]} ({b[1]})",
                                  "gap": t["gap"], "max_abs_delta": numerics.max_delta(a, b)})
    distinct = sorted({(t["winner"], t["math"]) for t in trials})
    spread = numerics.max_delta(distinct[0], distinct[-1]) if len(distinct) > 1 else 0.0
    rec = _record(case, "cudnn", direction, math, dtype, layout, {"search": "cudnnFind", "trials": k}, hashes,
                  winners, {"trials": trials, "near_ties": _unique(near_ties), "max_abs_spread": spread})
    session.close()
    return rec


def _unique(items: list[dict]) -> list[dict]:
    seen, out = set(), []
    for it in items:
        key = (it["winner"], it["runner_up"])
        if key not in seen:
            seen.add(key)
            out.append(it)
    return out


# --- PyTorch cudnn.benchmark across fresh processes ------------------------------------------------------

def torch_worker(spec: list[dict]) -> list[dict]:
    """In a fresh process (WorkerPool.call): autotune each conv with cudnn.benchmark=True and hash its output."""
    import torch
    import torch.nn.functional as F

    from ..core import cases as catalogue

    out = []
    for item in spec:
        case = catalogue.get(item["case"])
        fmt = torch.channels_last if item["layout"] == "NHWC" else torch.contiguous_format
        tdt = accuracy.torch_dtype(item["dtype"])
        ops = {k: torch.from_numpy(v).to("cuda", tdt).contiguous(memory_format=fmt)
               for k, v in accuracy.host_inputs(case).items()}
        with conv_settings(item["tf32"], True, False), torch.no_grad():
            y = F.conv2d(ops["x"], ops["w"], stride=case.stride, padding=case.pad, dilation=case.dilation,
                         groups=case.groups)
            y = F.conv2d(ops["x"], ops["w"], stride=case.stride, padding=case.pad, dilation=case.dilation,
                         groups=case.groups)
            torch.cuda.synchronize()
        out.append(dict(item, hash=accuracy.output_hash(y)))
    return out


def torch_record(case: Case, layout: str, dtype: str, tf32: bool, hashes: list[str],
                 numerics: CandidateNumerics) -> Record:
    """What K fresh processes' cudnn.benchmark computed for one conv, each hash matched to the legacy cuDNN
    (algorithm, math) candidates that give the same bits."""
    matches = [", ".join(numerics.match(h)) or "no legacy cuDNN algorithm gives these bits" for h in hashes]
    return _record(case, "torch", "fwd", "TF32" if tf32 else "IEEE", dtype, layout,
                   {"benchmark": True, "deterministic": False, "tf32": tf32, "processes": len(hashes)}, hashes,
                   matches, {"trials": [{"hash": h, "same_bits_as": m} for h, m in zip(hashes, matches, strict=True)]})


# --- the study's slices, run in the worker pool (runners.load_runner) --------------------------------------

class FindRunner:
    """K cudnnFind searches on fresh handles per combination (layout x math) of a case."""

    name = "cudnn"

    def run(self, case: Case, combos: Iterable[Combo], options: TuneOptions) -> Iterator[Record]:
        cudnn = CudnnBackend().cudnn
        for c in combos:
            yield cudnn_find(cudnn, case, c.direction, c.dtype, c.layout, c.math, options.k)


class TorchRunner:
    """The torch records of a case from what the fresh processes computed (options.processes), each output
    matched against the legacy cuDNN candidates computed here."""

    name = "torch"

    def run(self, case: Case, combos: Iterable[Combo], options: TuneOptions) -> Iterator[Record]:
        cudnn = CudnnBackend().cudnn
        by_layout: dict[str, list[Combo]] = {}
        for c in combos:
            by_layout.setdefault(c.layout, []).append(c)
        for layout, members in by_layout.items():
            session = ConvSession(cudnn, case, "fwd", options.dtype, layout, SweepOptions(), reference=False)
            numerics = CandidateNumerics(session)
            for algo in ALGOS["fwd"]:
                for math in ("FMA", "TENSOR_OP"):
                    numerics.hash(algo, math)
            for c in members:
                tf32 = dict(c.settings)["tf32"]
                hashes = [next(i["hash"] for i in p if i["case"] == case.id and i["layout"] == layout
                               and i["tf32"] == tf32) for p in options.processes or []]
                yield torch_record(case, layout, options.dtype, tf32, hashes, numerics)
            session.close()


class CrosscheckRunner:
    """The seed cross-check of a case (one combination)."""

    name = "torch-vs-cudnn"

    def run(self, case: Case, combos: Iterable[Combo], options: TuneOptions) -> Iterator[Record]:
        for c in combos:
            yield measure_crosscheck(case, c.dtype, c.layout)


def crosscheck(case: Case, dtype: str = "fp32", layout: str = "NCHW") -> Record:
    """The seed report's measure, in this process: max |F.conv2d with PyTorch's defaults - direct cuDNN with
    FMA math|, finalized (explained) as the study journals it."""
    return finalize(measure_crosscheck(case, dtype, layout))


def measure_crosscheck(case: Case, dtype: str = "fp32", layout: str = "NCHW") -> Record:
    """crosscheck's record as measured (the pool's worker finalizes it)."""
    import torch
    import torch.nn.functional as F

    cudnn = CudnnBackend().cudnn
    session = ConvSession(cudnn, case, "fwd", dtype, layout, SweepOptions(), reference=True)
    with torch.no_grad():
        y_torch = F.conv2d(session.ops["x"], session.ops["w"], stride=case.stride, padding=case.pad,
                           dilation=case.dilation, groups=case.groups)
    best = None
    for algo in ALGOS["fwd"]:
        try:
            session.output_hash(algo, "FMA")
        except (CudnnError, WorkspaceTooLarge):
            continue
        delta = float((y_torch.double() - session.out.double()).abs().max().item())
        if best is None or delta > best[1]:
            best = (algo, delta, accuracy.measure(session.out, session.ref, session.scale, dtype,
                                                  accuracy.reduction_length(case, "fwd")))
    acc_torch = accuracy.measure(y_torch, session.ref, session.scale, dtype, accuracy.reduction_length(case, "fwd"))
    tf32_default = (torch.backends.cudnn.conv.fp32_precision if hasattr(torch.backends.cudnn, "conv")
                    and hasattr(torch.backends.cudnn.conv, "fp32_precision") else torch.backends.cudnn.allow_tf32)
    rec = Record(case=case.id, backend="torch-vs-cudnn", direction="fwd", algo=best[0] if best else "-",
                 math="FMA", dtype=dtype, layout=layout, device="cuda", kind=RecordKind.CROSSCHECK, accuracy=acc_torch,
                 settings={"torch_defaults": True, "torch_tf32": str(tf32_default)},
                 extra={"max_abs_delta": best[1] if best else None,
                        "torch_class": acc_torch.precision_class,
                        "cudnn_fma_class": best[2].precision_class if best else None,
                        "cudnn_fma_max_abs": best[2].max_abs if best else None,
                        "sm": ".".join(map(str, torch.cuda.get_device_capability()))})
    session.close()
    return rec
