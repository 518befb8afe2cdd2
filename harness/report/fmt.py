"""Numbers and names as a person reads them: times in µs or ms to 3 significant figures, errors in
scientific notation, timestamps to the minute, file-safe slugs, settings in one line."""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from ..analysis import compare


def slug(name: str) -> str:
    """File-name-safe and collision-free (hash suffix) for any machine name."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:60] or "machine"
    return f"{base}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


fmt_time = compare.fmt_time  # one format for the CLI and the pages


def minute(stamp: str | None) -> str:
    """An ISO timestamp to the minute, as '2026-11-29 14:36'."""
    return (stamp or "")[:16].replace("T", " ") or "-"


def flatten(d: Any, prefix: str = "") -> list[tuple[str, str]]:
    """A fingerprint as (dotted field, value) rows, for a readable table instead of raw JSON."""
    if isinstance(d, dict):
        out: list[tuple[str, str]] = []
        for k in sorted(d):
            out += flatten(d[k], f"{prefix}{k}.")
        return out
    if isinstance(d, list):
        return [(prefix[:-1], ", ".join(map(str, d)) if d else "(none)")]
    return [(prefix[:-1], "-" if d is None else str(d))]


def fmt_err(v: float | None) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.2e}"


def settings_str(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((settings or {}).items()) if k != "device")


def err_color(err: float | None, status_ok: bool = True) -> str:
    """Heatmap colour for a max normalised error: green (fp32-exact) through yellow to red (bf16 and worse)."""
    if not status_ok:
        return "#b8b8b8"
    if err is None or not math.isfinite(err):
        return "#5a0000"
    t = min(1.0, max(0.0, (math.log10(max(err, 1e-10)) + 9.0) / 8.0))  # 1e-9 -> 0, 1e-1 -> 1
    hue = 120 * (1 - t)
    return f"hsl({hue:.0f},70%,{45 + 10 * (1 - t):.0f}%)"


def hardware_label(run: dict[str, Any], fingerprint: dict[str, Any]) -> str:
    if run.get("gpu_model"):
        sm = f", sm {run['sm']}" if run.get("sm") else ""
        return f"GPU {run['gpu_model']}{sm}"
    if run["hardware"] == "cpu":
        cpu = fingerprint.get("cpu") or "?"
        return f"CPU only ({cpu}, {fingerprint.get('cpu_count') or '?'} cores)"
    return "hardware not recorded (asv results)"


def history_key(f: Any) -> str:
    """A finding's combination as the machine page's history picker names it (machine.picker_data), so that a
    link can open its history: ``machines/<slug>.html?c=<key>#pick``."""
    return "|".join((f.case, f.backend, f.direction, f.algo, f.math, f.dtype, f.layout, settings_str(f.settings) or "-"))
