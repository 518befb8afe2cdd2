"""Stores for the report's tests: a committed H200 fixture run and a next night made from it, with one change
injected (a slower combination, combinations that stopped running, a new stack), everything else byte-equal."""

from __future__ import annotations

import datetime as dt
import json
import tarfile
from pathlib import Path
from typing import Any

from _fleet_data import FIXTURES

from harness.analysis.timechange import untrusted
from harness.core.records import Record


def unpack(name: str, dest: Path) -> Path:
    """The one run directory of tests/fixtures/runs/<name>.tar.gz, unpacked under ``dest``."""
    with tarfile.open(FIXTURES / f"{name}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    return next(p.parent for p in dest.rglob("run.json"))


def slowest_first(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ok cuDNN measurement with trusted samples (timechange.untrusted finds nothing) and the longest median: a
    slowdown there is one the gate decides."""
    ok = [r for r in recs if r["kind"] == "measurement" and r["status"] == "ok" and r["backend"] == "cudnn"
          and len((r.get("time") or {}).get("samples_ms") or ()) >= 8
          and not untrusted(Record.from_dict(r))]
    return max(ok, key=lambda r: r["time"]["median_ms"])


def next_night(run: Path, dest: Path, *, days: int = 1, slower: float | None = None, skip_backend: str | None = None,
               reason: str = "", fingerprint: dict[str, Any] | None = None,
               machine: str | None = None, pick: Any = None) -> tuple[Path, dict[str, Any] | None]:
    """A copy of ``run`` started ``days`` later: optionally one combination ``slower`` times slower (every sample),
    every record of ``skip_backend`` skipped with ``reason``, fingerprint fields replaced (dotted keys), another
    ``machine`` name; ``pick``: the record made slower is the first one it accepts (given as a Record; default:
    slowest_first). Returns the run directory and the record made slower (its journal line)."""
    meta = json.loads((run / "run.json").read_text())
    started = dt.datetime.fromisoformat(meta["started"]) + dt.timedelta(days=days)
    meta["started"] = started.isoformat()
    meta["run_id"] = f"{started:%Y%m%dT%H%M%SZ}-night{days}"
    meta["machine"] = machine or meta["machine"]
    for dotted, value in (fingerprint or {}).items():
        node = meta["fingerprint"]
        *path, last = dotted.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    recs = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines() if line.strip()]
    changed = None
    if slower:
        changed = slowest_first(recs) if pick is None else next(r for r in recs if r["kind"] != "ranking"
                                                                   and pick(Record.from_dict(r)))
        t = changed["time"]
        t["samples_ms"] = [v * slower for v in t["samples_ms"]]
        for k in ("median_ms", "min_ms", "iqr_ms"):
            if t.get(k) is not None:
                t[k] *= slower
    if skip_backend:
        for r in recs:
            if r["backend"] == skip_backend:
                r.update(status="skipped", reason=reason, time=None, accuracy=None, determinism=None)
    d = dest / meta["machine"] / meta["run_id"]
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(meta))
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    if (run / "end.json").exists():
        (d / "end.json").write_text((run / "end.json").read_text())
    return d, changed
