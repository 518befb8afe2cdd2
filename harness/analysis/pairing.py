"""Which runs to compare for the morning question: for each machine, its latest night against its previous night
on the same stack, and against the last night of its previous stack.

A machine is its GPU on its host (``compare.machine_identity``: hostname and GPU UUID), so two GPUs under one
machine name are two machines and a renamed host is still one; a run without a GPU UUID (a CPU host, asv results)
falls back to its machine name. A stack is what the run's fingerprint says it ran on (driver, CUDA, cuDNN, torch,
onnxruntime and its providers, and the stack name where one was given). Runs of a paired study (their options
carry ``paired``) are investigations, not nights, and are left out. asv's copies of the suite's own records are a
second view of the same night and are paired only with asv results.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .compare import fingerprint_field, machine_identity

# (label, dotted fingerprint field) in the order a person reads a stack
STACK_FIELDS = (
    ("GPU", "gpu.name"), ("driver", "gpu.driver"), ("CUDA", "software.torch_cuda"),
    ("cuDNN", "libraries.cudnn.version"), ("torch", "software.torch"), ("onnxruntime", "software.onnxruntime"),
)


_STACKS: dict[int, tuple[dict[str, Any], tuple]] = {}  # id(fingerprint) -> (it, its stack): a fleet report asks
_MAX_STACKS = 100_000  # ~9 times for each of 18 250 runs, whose nights share one fingerprint object (run_jsons)


def stack_fields(fp: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """(label, value) of the stack a run ran on; cuDNN falls back to torch's own number (91900 -> 9.19.0).
    Fingerprints are read-only: the answer is kept per object, beside the object itself (held, so that its id
    cannot pass to another)."""
    hit = _STACKS.get(id(fp))
    if hit is not None and hit[0] is fp:
        return hit[1]
    out = _stack_fields(fp)
    if len(_STACKS) >= _MAX_STACKS:
        _STACKS.clear()
    _STACKS[id(fp)] = (fp, out)
    return out


def _scalar(value: Any) -> Any:
    """A fingerprint value as a stack's part: text, a number or None. A fingerprint comes from another host's
    run.json, so a field may hold an object or a list where a version belongs; it is shown as its JSON, and stays
    hashable (stacks are compared and grouped)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, sort_keys=True, default=str)[:200]


def _stack_fields(fp: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    out = []
    for label, dotted in STACK_FIELDS:
        v = _scalar(fingerprint_field(fp, dotted))
        if label == "cuDNN" and v is None and isinstance(fingerprint_field(fp, "software.torch_cudnn"), int):
            n = fingerprint_field(fp, "software.torch_cudnn")
            v = f"{n // 10000}.{n // 100 % 100}.{n % 100}" if n >= 10000 else str(n)
        out.append((label, v))
    providers = fingerprint_field(fp, "software.onnxruntime_providers")
    if providers is not None:
        names = [str(p).replace("ExecutionProvider", "") for p in providers] if isinstance(providers, list) \
            else [str(_scalar(providers))]
        out.append(("providers", "+".join(names) or "none"))
    if fp.get("image") and fp["image"] != "native":  # a container image is a stack of its own
        out.insert(0, ("image", _scalar(fp["image"])))
    if fp.get("stack"):
        out.insert(0, ("stack", fp["stack"] if isinstance(fp["stack"], str) else _stack_name(fp["stack"])))
    return tuple(out)


def _stack_name(stack: Any) -> str:
    return str(stack.get("name")) if isinstance(stack, dict) and stack.get("name") else str(stack)


def stack_line(fp: dict[str, Any]) -> str:
    """The stack in one line: 'GPU NVIDIA H200, driver 580.65, CUDA 13.0, cuDNN 9.19.0, torch 2.11.0, ...'."""
    parts = [f"{label} {value}" for label, value in stack_fields(fp) if value is not None]
    return ", ".join(parts) if parts else "stack not recorded"


def stack_key(fp: dict[str, Any]) -> tuple:
    """What must be equal for two runs to be on the same stack (the GPU is the machine's, not the stack's)."""
    return tuple(v for label, v in stack_fields(fp) if label != "GPU")


def machine_key(run: dict[str, Any], fp: dict[str, Any]) -> str:
    """The machine a run belongs to: its GPU on its host, else its machine name."""
    return machine_identity(fp) if fingerprint_field(fp, "gpu.uuid") else f"machine:{run['machine']}"


@dataclass
class Night:
    """The runs of one machine on one night (a nightly job may write several: forward, autotune, onnxruntime)."""

    night: str
    stack: tuple
    stack_line: str
    runs: list[dict[str, Any]]  # oldest first
    fields: Sequence[tuple[str, Any]] = ()  # stack_fields of its runs


def stack_change(base: Night, head: Night) -> str:
    """What differs between two nights' stacks, as 'cuDNN 9.19.0 -> 9.20.0, torch 2.11.0 -> 2.12.0'."""
    return fields_change(base.fields, head.fields)


def fields_change(base: Sequence[tuple[str, Any]], head: Sequence[tuple[str, Any]]) -> str:
    """What differs between two ``stack_fields`` lists, in one line ('' when the stacks are the same)."""
    b, h = dict(base), dict(head)
    return ", ".join(f"{k} {b.get(k, '-')} -> {h.get(k, '-')}" for k in dict.fromkeys([*b, *h])
                     if k != "GPU" and b.get(k) != h.get(k))


@dataclass
class Comparison:
    """One answer of the morning question: ``head`` against ``base`` on one machine."""

    what: str  # "previous night" or "previous stack"
    base: Night
    head: Night


@dataclass
class MachineNights:
    key: str
    name: str  # the machine name the runs carry (the newest one, should a host be renamed)
    source: str  # journal or asv
    nights: list[Night]
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def latest(self) -> Night:
        return self.nights[-1]


def latest_pairs(base_runs: list[dict[str, Any]], head_runs: list[dict[str, Any]], base_fp: Callable[[dict], dict],
                 head_fp: Callable[[dict], dict]) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], list, list]:
    """(base, head) for each machine (``machine_key``: its GPU on its node) that both sides ran on, the latest run
    of each side (runs oldest first); with one machine a side and none in common, those two (a comparison across
    hardware). Each source is paired on its own: a night's asv results are a second view of its journal's runs, so
    they neither pair with a journal run nor make a second machine that stops two GPUs' nights from being compared.
    Then each side's latest runs that no pair holds (a GPU the other side has no run of). ``base_fp`` / ``head_fp``
    give a run's fingerprint (the two sides may come from two stores)."""
    b: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    h: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for side, runs, fp in ((b, base_runs, base_fp), (h, head_runs, head_fp)):
        for r in runs:
            side[r.get("source", "journal")][machine_key(r, fp(r) or {})] = r
    pairs = []
    for source in sorted(b.keys() & h.keys()):
        bs, hs = b[source], h[source]
        common = sorted(bs.keys() & hs.keys())
        if common:
            pairs += [(bs[m], hs[m]) for m in common]
        elif len(bs) == 1 and len(hs) == 1:
            pairs.append((next(iter(bs.values())), next(iter(hs.values()))))
    held = {id(r) for pair in pairs for r in pair}
    return (pairs, [r for s in b.values() for r in s.values() if id(r) not in held],
            [r for s in h.values() for r in s.values() if id(r) not in held])


HISTORY_RUNS = 5  # earlier runs whose spread widens a combination's time threshold (timechange.HISTORY_FACTOR)


def history_runs(base: dict[str, Any], base_fp: dict[str, Any], runs: list[dict[str, Any]],
                 fingerprint_of) -> list[dict[str, Any]]:
    """Up to HISTORY_RUNS runs started before ``base`` on its machine (its GPU on its host) and its stack, oldest
    first: the runs whose spread compare uses (``fingerprint_of(run)`` gives a run's fingerprint)."""
    key, stack = machine_key(base, base_fp), stack_key(base_fp)
    same = [r for r in runs if r["started"] < base["started"] and r["id"] != base["id"]
            and r["source"] == base["source"] and machine_key(r, fp := fingerprint_of(r)) == key
            and stack_key(fp) == stack]
    return same[-HISTORY_RUNS:]


def machines(runs: list[dict[str, Any]], info: dict[int, dict[str, Any]]) -> list[MachineNights]:
    """Every machine's nights (oldest first) and its comparisons. ``info`` maps a run's id to its
    ``Store.run_json`` (fingerprint and options)."""
    grouped: dict[tuple[str, str], dict[tuple[str, tuple], list[dict[str, Any]]]] = defaultdict(dict)
    lines: dict[tuple, tuple[str, Sequence[tuple[str, Any]]]] = {}
    names: dict[tuple[str, str], str] = {}
    for r in runs:
        meta = info[r["id"]]
        if (meta.get("options") or {}).get("paired"):
            continue
        fp = meta.get("fingerprint") or {}
        mk = (machine_key(r, fp), r["source"])
        sk = stack_key(fp)
        lines[(mk, sk)] = (stack_line(fp), stack_fields(fp))  # the stack line names this machine's GPU
        grouped[mk].setdefault((r["night"], sk), []).append(r)
        names[mk] = r["machine"]
    out = []
    for mk, by_night in grouped.items():
        nights = [Night(n, sk, lines[(mk, sk)][0], rs, lines[(mk, sk)][1]) for (n, sk), rs in by_night.items()]
        nights.sort(key=lambda n: (n.night, n.runs[-1]["started"]))
        m = MachineNights(mk[0], names[mk], mk[1], nights)
        head = nights[-1]
        same = [n for n in nights[:-1] if n.stack == head.stack]
        if same:
            m.comparisons.append(Comparison("previous night", same[-1], head))
        other = [n for n in nights[:-1] if n.stack != head.stack]
        if other:
            m.comparisons.append(Comparison("previous stack", other[-1], head))
        out.append(m)
    out.sort(key=lambda m: (m.source != "journal", m.name, m.key))
    return out
