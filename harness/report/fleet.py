"""The fleet on the index: every node and its GPU slots, and which of them did not report last night.

A fleet team's first question after "what changed" is "did everything run": a node that died, a slot whose job
failed or whose results never reached the outbox leaves no run, so nothing else on the page would mention it. A
slot is a machine (its GPU on its node, ``compare.machine_identity``); its node is what the scheduler or the host
named (``fingerprint.node_name``), so the slots of one node are grouped however their containers were named.
A slot reported when it has a run on the fleet's latest night; one that reported on an earlier night and not on
that one is named, with the night it last reported.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..measurement import fingerprint
from .model import Model


def slot_of(fp: dict[str, Any]) -> str:
    """The slot as a person reads it: the GPU's index on the node and its model, or the scheduler's slot."""
    gpu = fp.get("gpu") if isinstance(fp.get("gpu"), dict) else None
    slot = fp.get("slot")
    index = slot if isinstance(slot, int) and not isinstance(slot, bool) else (gpu or {}).get("index")
    if gpu:
        uuid = str(gpu.get("uuid") or "").replace("GPU-", "")[:8]
        return f"GPU {index if index is not None else '?'}" + (f" ({uuid})" if uuid else "")
    return f"slot {index} (CPU: no GPU seen)" if index is not None else "CPU"


def fleet(g: Model) -> dict[str, Any]:
    """Nodes, each with its slots (name, slot, hardware, last night, reported), the nodes with a silent slot first."""
    journal = [m for m in g.machines if any(r["source"] == "journal" for r in m.runs)]
    nights = {m.name: max(r["night"] for r in m.runs if r["source"] == "journal") for m in journal}
    last = max(nights.values(), default=None)
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in journal:
        fp = m.latest_fp if isinstance(m.latest_fp, dict) else {}
        by_node[fingerprint.node_name(fp)].append({
            "name": m.name, "slug": m.slug, "slot": slot_of(fp), "label": m.label, "night": nights[m.name],
            "reported": nights[m.name] == last})
    nodes = []
    for node, slots in by_node.items():
        slots.sort(key=lambda s: (s["slot"], s["name"]))
        silent = [s for s in slots if not s["reported"]]
        nodes.append({"node": node, "slots": slots, "n_silent": len(silent)})
    nodes.sort(key=lambda n: (-n["n_silent"], n["node"]))
    return {"night": last, "nodes": nodes, "n_slots": sum(len(n["slots"]) for n in nodes),
            "silent": [(n["node"], s) for n in nodes for s in n["slots"] if not s["reported"]]}
