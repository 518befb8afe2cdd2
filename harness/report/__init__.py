"""``report``: the store rendered as a static site a fleet team reads in the morning, offline, from file://.

The index answers "what changed last night" machine by machine (morning.py); every finding drills down to its two
records, samples and fingerprints (changes.py); investigations, determinism, architectures, image regressions,
fingerprints (any two runs side by side) and runs have pages of their own. jinja2 with autoescape on renders
everything; charts are inline SVG computed in charts.py; the only script is the inline one in base.html (table
sorter/filter, permalinks into folded sections, and three pickers: two fingerprints, machines side by side, a
combination's history drawn from data on its page). Every comparison names the hardware and the stack
its numbers come from. To add a page: a module with a context function of the model, a template, a line in PAGES.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..analysis.compare import Finding
from ..analysis.thresholds import Thresholds
from ..collect.store import Store, StoreError
from ..collect.store_schema import error_line
from ..core import children, heap
from ..core.intake import storable
from ..core.progress import Progress
from . import output
from .architecture import architecture
from .changes import changes_pages
from .determinism import determinism
from .drawing import draw_in, drawn, machine_files
from .fingerprints import fingerprints, offered
from .fleet import fleet
from .fmt import fmt_err, fmt_time, slug
from .investigations import findings, ort, rankings
from .machine import flagged
from .model import MAX_ROWS, MachineInfo, Model, finish, gather
from .morning import morning, overview
from .paging import Parts
from .regressions import machine_pages, regressions
from .templating import environment
from .upgrade import upgrade

RUNS_ON_ONE_PAGE = 1000  # more runs than this: runs.html lists the machines, each machine's runs on a page of its own


def _runs(g: Model, machine: MachineInfo | None = None) -> dict[str, Any]:
    """runs.html (every run, or for a fleet the machines with a page of runs each) or runs/<machine>.html."""
    from ..analysis.pairing import stack_line

    everything = g.runs if machine is None else machine.runs
    if machine is None and len(everything) > RUNS_ON_ONE_PAGE:  # 18 250 runs were 9.9 MB and 8 s to load
        by_machine = [{"m": m, "n": len(m.runs), "first": m.runs[0]["started"], "last": m.runs[-1]["started"],
                       "incomplete": sum(1 for r in m.runs if not r["complete"])} for m in g.machines]
        return {"runs": [], "left_out": 0, "minfo": g.minfo, "stacks": {}, "by_machine": by_machine,
                "n_runs": len(everything), "one_page": RUNS_ON_ONE_PAGE, "machine": None}
    cap = 20 * MAX_ROWS if machine is None else MAX_ROWS  # a machine page anchors its newest MAX_ROWS runs
    runs = everything[-cap:]
    return {"runs": runs, "left_out": max(0, len(everything) - cap), "minfo": g.minfo,
            "stacks": {r["id"]: stack_line(g.info[r["id"]]["fingerprint"]) for r in runs}, "by_machine": None,
            "n_runs": len(everything), "one_page": RUNS_ON_ONE_PAGE, "machine": machine}


def _parted(folder: str, title: str, *args: Any) -> dict[str, Any]:
    """A page's context (``args``: the page's file if not the folder's name, then the context's maker, given the
    Parts) with the Parts its long tables registered (their pages are written after it)."""
    *page, make = args
    parts = Parts(folder, title, *page)
    return {**make(parts), "parts": parts}


# (page id, file, title in the navigation, template, context of the model); the order is the navigation's
PAGES: list[tuple[str, str, str, str, Callable[[dict[str, Any]], dict[str, Any]]]] = [
    ("index", "index.html", "Last night", "index.html",
     lambda g: {"mo": morning(g), "ov": overview(g), "fl": fleet(g)}),
    ("investigations", "investigations.html", "Investigations", "investigations.html",
     lambda g: {"fd": findings(g)}),
    ("ort", "ort.html", "onnxruntime search", "ort.html", lambda g: _parted("ort", "onnxruntime search", lambda p: {"o": ort(g, p)})),
    ("rankings", "rankings.html", "cuDNN's choices", "rankings.html", lambda g: _parted("rankings", "cuDNN's choices", lambda p: {"rk": rankings(g, p)})),
    ("upgrade", "upgrade.html", "Stack upgrades", "upgrade.html", lambda g: {"up": upgrade(g)}),
    ("determinism", "determinism.html", "Determinism", "determinism.html", lambda g: _parted("determinism", "Determinism", lambda p: {"det": determinism(g, p)})),
    ("architecture", "architecture.html", "Across hardware", "architecture.html",
     lambda g: _parted("architecture", "Across hardware", lambda p: {"arch": architecture(g, p)})),
    ("regressions", "regressions.html", "Between images", "regressions.html", lambda g: _parted("regressions-steps", "Between images", "regressions.html", lambda p: {"reg": regressions(g, p)})),
    ("fingerprints", "fingerprints.html", "Fingerprints", "fingerprints.html", lambda g: {"fp": fingerprints(g)}),
    ("runs", "runs.html", "All runs", "runs.html", _runs),
]


POOL_FROM_RUNS = 200  # a store of this many runs or more is judged in a pool of processes (one per CPU)
# the judges yield the CPU to this process, whose pages are the report's critical path: a fleet report 16.9 ->
# 15.4 s on 2 cores (docs/harness.md)
NICE = 5


def build(store: Store, out: str | Path, *, title: str = "convbench fleet report",
          workers: int | None = None, meter: bool = False, thresholds: Thresholds | None = None) -> list[Path]:
    """Render every page into a fresh folder and swap it in as ``out`` (output.py); returns the paths written.
    ``workers``: processes that judge the comparisons beside this one (default: one per CPU for a store of
    POOL_FROM_RUNS runs or more, none for a smaller one, where starting them costs more than they save).
    ``meter``: show pages i/N, elapsed and ETA on stderr (core/progress.py). ``thresholds``: the gate's settings
    every judgement is made with and the index names (default: the calibrated ones)."""
    try:
        with heap.bulk_allocations():  # gather holds millions of long-lived objects
            return output.replace(out, lambda folder: _build(store, folder, title, workers, meter, thresholds))
    except sqlite3.DatabaseError as exc:  # a damaged page read before the check of every page (_verified) ended
        raise StoreError(error_line(store.path, exc)) from None


def _verify(path: str) -> None:
    """Every page of the store checked (Store's quick_check on open), in a process of the judges' pool."""
    Store(path, create=False).close()


def _verified(store: Store, check: Any) -> None:
    """The store's pages checked, beside the pages (``check``: _verify started in the pool) or here: a report
    of a damaged store is refused, with the way out, before it replaces the last one. A store opened with its
    check (Store's default) is not checked again."""
    if store.verify or store.path == ":memory:":
        return
    if check is not None:
        try:
            children.wait(check)
            return
        except StoreError:
            raise
        except Exception:  # noqa: BLE001 - the pool failed (a process killed): checked here instead
            pass
    _verify(store.path)


def _judge_start() -> None:
    """A judge's first step: it yields the CPU to the drawing, and leaves Ctrl-C and SIGTERM to the parent."""
    children.quiet_worker()
    os.nice(NICE)


def _pool(store: Store, workers: int | None) -> Any:
    """The judges' pool, forked now, while this process holds little (a fork shares its memory, and the
    benchmark counts what it shares once per process), or None."""
    if workers is None:
        big = store.path != ":memory:" and store.db.execute("SELECT count(*) FROM runs").fetchone()[0] >= POOL_FROM_RUNS
        workers = (os.cpu_count() or 1) if big else 0
    if workers < 1 or store.path == ":memory:":
        return None
    try:
        return children.start_pool(mp.get_context("fork"), workers, _judge_start)
    except (OSError, ValueError):  # no fork here, or no room for a process: judged in this one
        return None


# pages that need no judgement: drawn while the pool's processes judge
NEEDS_NO_JUDGEMENT = frozenset(("investigations", "ort", "upgrade", "determinism", "runs"))


def _build(store: Store, out: Path, title: str, workers: int | None = None, meter: bool = False,
           thresholds: Thresholds | None = None) -> list[Path]:
    (out / "machines").mkdir()
    (out / "changes").mkdir()
    pool, ended = None, False
    try:  # the pool made inside: a signal right after the fork still ends it
        with children.held():  # a signal while forking: raised once ``pool`` holds them all, so they are ended
            pool = _pool(store, workers)
        check = None if pool is None or store.verify else pool.apply_async(_verify, (store.path,))
        g = gather(store, title, pool, False, thresholds)  # positional: tests stand in for gather with (*args)
        env = environment()
        generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        common = {"title": title, "generated": generated, "machines": g.machines, "images": g.images,
                  "store_path": storable(store.path), "nav": [(p[0], p[1], p[2]) for p in PAGES]}
        written: list[tuple[tuple, Path]] = []  # (place in the manifest, path): pages, changes, machines
        # the changes pages are counted one per machine with changes (a long one is split into more: the bar
        # then stops at its total until they are written)
        total = len(PAGES) + len(g.machines) * (2 if len(g.runs) > RUNS_ON_ONE_PAGE else 1) + \
            sum(1 for _, comps in g.nightly if comps)
        bar = Progress("report", total, unit="pages", enabled=meter)

        def page(rank: tuple, template: str, path: Path, root: str, **ctx: Any) -> None:
            html = env.get_template(template).render(**common, root=root, **ctx)
            path.write_text(html, encoding="utf-8")
            written.append((rank, path))
            bar.step(1, path.name)
            parts = ctx.get("parts")
            for k, (file, pt) in enumerate(parts.pages() if parts is not None else ()):  # its long tables' pages
                (out / file).parent.mkdir(exist_ok=True)
                html = env.get_template("parts.html").render(**common, root="../", page_id=ctx["page_id"], pt=pt)
                (out / file).write_text(html, encoding="utf-8")
                written.append(((*rank, k), out / file))

        for i, (page_id, file, _, template, context) in enumerate(PAGES):
            if page_id in NEEDS_NO_JUDGEMENT:
                page((0, i), template, out / file, "", page_id=page_id, **context(g))
        if len(g.runs) > RUNS_ON_ONE_PAGE:  # runs.html then lists the machines: a page of runs for each
            (out / "runs").mkdir()
            for i, m in enumerate(g.machines):
                page((3, i), "runs.html", out / "runs" / f"{m.slug}.html", "../", page_id="runs", **_runs(g, m))
        finish(g)  # waits for the judgements
        _verified(store, check)
        # after the judgements: each machine's history picker offers what they found first; in the pool's
        # processes while this one draws the pages of the judgements (drawing.py)
        found = [flagged(g, m) for m in g.machines]
        drawing = None if pool is None else draw_in(pool, store, g, common, out, found,
                                                    [r["id"] for r in offered(g)])
        _last: dict[str, Any] = {}  # the regressions page's context: its machines' own pages list what it caps
        for i, (page_id, file, _, template, context) in enumerate(PAGES):
            if page_id not in NEEDS_NO_JUDGEMENT:
                ctx = context(g)
                if page_id == "regressions":
                    _last[page_id] = ctx["reg"]
                page((0, i), template, out / file, "", page_id=page_id, **ctx)
        for i, gm in enumerate(reg["groups"] if (reg := _last.get("regressions")) else ()):
            if gm["n_regs"]:
                (out / "regressions").mkdir(exist_ok=True)
                for k, rm in enumerate(machine_pages(g, gm)):
                    page((4, i, k), "regressions_machine.html", out / "regressions" / rm["file"], "../",
                         page_id="regressions", rm=rm)
        blocks = {b["key"] + "|" + b["source"]: b for b in morning(g)["blocks"]}
        for i, (m, comps) in enumerate(g.nightly):
            if comps:
                block = blocks[m.key + "|" + m.source]
                for k, ch in enumerate(changes_pages(block, comps, g.thresholds)):
                    page((1, i, k), "changes.html", out / "changes" / ch["file"], "../", page_id="changes", ch=ch)
        for i, m in enumerate(g.machines):
            files = drawn(drawing[i]) if drawing is not None else None
            if files is None:  # no pool, or its process could not draw them: drawn here, the same pages
                files = machine_files(env, common, g, m, i, out, found[i])
            written += files
            bar.step(1, files[0][1].name)
        ended = True
    finally:
        if pool is not None:  # a judge killed holding a queue's lock, or a signal: its workers killed, not waited on
            children.shut(pool, hard=not ended)
    bar.finish()
    return [path for _, path in sorted(written, key=lambda x: x[0])]


__all__ = ["build", "gather", "slug", "fmt_err", "fmt_time", "Finding", "PAGES"]
