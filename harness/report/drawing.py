"""The machine pages, drawn in the pool's processes while this one draws the pages of the judgements.

Why: once the judgements were made, a fleet report's main process drew every remaining page alone while the
pool's processes sat idle (9 of its 18 s on 2 cores; docs/performance.md). A machine page needs only its
machine's runs, series and newest records, which a pool process reads from its own connection to the store, as
the judges read theirs; sending it the model instead cost more than drawing (a page's context pickles to
megabytes). A page whose runs that connection does not see as the report's do (a run replaced by a collect
meanwhile), and any failure of the pool, leave the page to the report's own process: the pages are the same
either way.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import jinja2

from ..collect.store import Store
from ..core import children
from .machine import machine_page
from .model import SERIES_COLUMNS, MachineInfo, Model, machine_series
from .reading import current_records
from .templating import environment


def machine_files(env: jinja2.Environment, common: dict[str, Any], g: Model, m: MachineInfo, i: int, out: Path,
                  found: set[str] | None = None) -> list[tuple[tuple, Path]]:
    """Machine ``m``'s page and its heatmaps' pages written under ``out``: [(place in the manifest, path)]."""
    mp = machine_page(g, m, found)
    path = out / "machines" / f"{m.slug}.html"
    path.write_text(env.get_template("machine.html").render(**common, root="../", page_id="machine", mp=mp),
                    encoding="utf-8")
    written = [((2, i), path)]
    for tp in mp["map_pages"]:
        path = out / "machines" / tp["file"]
        path.write_text(env.get_template("machine_maps.html").render(**common, root="../", page_id="machine",
                                                                       tp=tp), encoding="utf-8")
        written.append(((2, i, tp["page"]), path))
    return written


# what a pool process keeps between its pages: its connection to the store and the templates
_store: Store | None = None
_env: jinja2.Environment | None = None
_combos: dict[int, dict[str, Any]] = {}


def _same_runs(store: Store, runs: list[dict[str, Any]]) -> bool:
    """Whether this connection holds each run as the report read it (a replaced run has more records)."""
    seen = store.run_sizes([r["id"] for r in runs])
    return all(seen.get(r["id"]) == (r["run_id"], r["n_records"]) for r in runs)


def _draw(args: tuple) -> list[tuple[tuple, str]] | None:
    """In a pool process: one machine's pages from this process's own reading of the store, or None where its
    runs are not the report's."""
    global _store, _env, _combos
    path, common, m, i, out, latest, found, offered, changes = args
    if _store is None or _store.path != path:
        _store = Store(path, create=False, verify=False)
        _combos = _store.combos()
        _env = environment()
    if not _same_runs(_store, m.runs):
        return None
    vectors = _store.vectors([r["id"] for r in m.runs], ("combo", "ok", *SERIES_COLUMNS))
    series = list(machine_series(_store, m, vectors, changes))
    memo: dict[int, list] = {}
    current = {(m.name, img): current_records(_store, [r for r in m.runs if r["image"] == img], vectors, memo)
               for img in m.images}
    g = Model(title=common["title"], runs=m.runs, combos=_combos, names={}, machines=[m], minfo={m.name: m},
              images=list(m.images), latest=latest, series=series, steps_up=Counter(), store=_store,
              current=current, info=_store.run_jsons([r["id"] for r in m.runs]), plan=[],
              fp_offered=[{"id": pk} for pk in offered])
    return [(rank, str(p)) for rank, p in machine_files(_env, common, g, m, i, Path(out), found)]


def draw_in(pool: Any, store: Store, g: Model, common: dict[str, Any], out: Path, found: list[set[str]],
            offered: list[int]) -> list[Any]:
    """Every machine's pages started in ``pool``, one task each (``found``: each machine's history keys with a
    finding; ``offered``: the runs the fingerprints page offers): their pending answers, in g.machines' order."""
    light = {k: v for k, v in common.items() if k not in ("machines", "images")}  # the machine pages read neither
    changes: dict[str, list[dict]] = {}  # each machine's series' change points, in machine_series' order
    for s in g.series:
        changes.setdefault(s.machine, []).append(s.changes)
    return [pool.apply_async(_draw, ((store.path, light, m, i, str(out),
                                      {k: r for k, r in g.latest.items() if k[0] == m.name}, found[i], offered,
                                      changes.get(m.name)),))
            for i, m in enumerate(g.machines)]


def drawn(pending: Any) -> list[tuple[tuple, Path]] | None:
    """A machine's pages a pool process drew, or None where the report draws them itself (the runs it read
    differ, or the pool failed)."""
    try:
        got = children.wait(pending)
    except Exception:  # noqa: BLE001 - a pool that failed (a process killed, a store it could not open)
        return None
    return None if got is None else [(rank, Path(p)) for rank, p in got]
