"""A generated corpus of over 1000 hostile result sources fed to `convbench collect`: every one is refused with
one line naming it, the process never crashes or hangs, memory stays bounded (decompression bombs), and
nothing is written outside the store (checked by snapshotting the sandbox the command runs in)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from _scripts import load

from harness.collect import journals as col
from harness.collect.discovery import Archive, RawRun, Refused, dir_run, discover
from harness.core.intake import Hostile

ROOT = Path(__file__).resolve().parents[1]
ESCAPE = Path("/tmp/convbench-escape")  # where the traversal members of the corpus point


def _corpus_module():
    return load("make_hostile_corpus")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile") / "corpus"
    mod = _corpus_module()
    assert mod.main([str(out)]) == 0
    items = json.loads((out / "manifest.json").read_text())
    return out, items, mod


def _snapshot(root: Path) -> dict[str, str]:
    """Every entry under root (not following links): type, size and content hash of regular files."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_symlink():
                snap[str(p)] = "link:" + os.readlink(p)
            elif p.is_file():
                snap[str(p)] = f"file:{st.st_size}:" + hashlib.sha1(p.read_bytes()).hexdigest()
            else:
                snap[str(p)] = f"mode:{st.st_mode:o}"
    return snap


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a bomb read into memory would die here


PROGRESS = re.compile(r"^collect( \d+/\d+ \(\d+%\), | ?: ?\d+/\d+ items done in )")


def _collect(sandbox: Path, sources: list[str], *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(sandbox), TMPDIR=str(sandbox / "tmp"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "harness.cli", "collect", *sources, "--store",
                           str(sandbox / "store" / "s.sqlite"), *extra], cwd=sandbox, env=env, capture_output=True,
                          text=True, timeout=600, preexec_fn=_limit_memory)


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_every_hostile_item_is_refused_in_one_line_and_nothing_escapes(tmp_path, corpus, jobs):
    out, items, mod = corpus
    assert len(items) >= 1000
    sandbox = tmp_path / "sandbox"
    (sandbox / "tmp").mkdir(parents=True)
    (sandbox / "store").mkdir()
    good = tmp_path / "good" / "hostile-host" / "run-good"  # one valid run among them is still collected
    good.mkdir(parents=True)
    (good / "run.json").write_bytes(json.dumps(mod.valid_meta("run-good")).encode())
    (good / "records.jsonl").write_bytes(b"".join(mod.GOOD_LINES))
    before_corpus, before_sandbox = _snapshot(out), _snapshot(sandbox)
    assert not ESCAPE.exists()

    sources = [str(out / it["path"].split("/")[0]) for it in items] + [str(tmp_path / "good")]
    res = _collect(sandbox, sources, "--jobs", jobs)

    assert res.returncode == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    # a collect this long also says how far it got (core/progress.py): those lines are not refusals
    lines = [line for line in res.stderr.splitlines() if not PROGRESS.match(line)]
    assert lines and all(line.startswith("refused: ") for line in lines), [x for x in lines
                                                                           if not x.startswith("refused: ")][:5]
    assert all(len(line) < 600 for line in lines)
    unrefused = []
    for it in items:
        top = str(out / it["path"].split("/")[0])
        if not any(line.startswith(f"refused: {top}/") or line.startswith(f"refused: {top}:") for line in lines):
            unrefused.append(it)
    assert unrefused == []
    assert f"1 runs added, 0 updated, 0 unchanged, 3 records read, {len(lines)} refused" in res.stdout
    # nothing written outside the store: the corpus, the sandbox (but the store) and /tmp are as they were
    assert _snapshot(out) == before_corpus
    after = _snapshot(sandbox)
    changed = {k for k in set(after) | set(before_sandbox) if after.get(k) != before_sandbox.get(k)}
    assert changed and all(k.startswith(str(sandbox / "store")) for k in changed), sorted(changed)[:5]
    assert not ESCAPE.exists()


def test_single_hostile_sources_exit_1_with_one_line(tmp_path, corpus):
    out, items, _ = corpus
    by_category = {}
    for it in items:
        by_category.setdefault(it["category"], it)
    sandbox = tmp_path / "sandbox"
    (sandbox / "tmp").mkdir(parents=True)
    (sandbox / "store").mkdir()
    picked = [by_category[c] for c in ("symlink", "fifo", "tar-traversal", "decompression-bomb", "record-deep",
                                       "run-json-nonfinite", "record-nonfinite")]
    for it in picked:
        res = _collect(sandbox, [str(out / it["path"])])
        assert res.returncode == 1, (it, res.stderr)
        assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith("refused: "), (it, res.stderr)
        assert "0 runs added" in res.stdout


@pytest.mark.slow
def test_every_scenario_is_refused_cleanly_where_it_enters(corpus):
    """Resume, repro, machine names, command-line numbers and paths, damaged stores, partial copies, duplicated
    lines, half-bad archives, the gate's no-data code and the terminal: each scenario run in a forked child with
    a time and memory limit; none may print a traceback, hang, write outside, lose or duplicate a record."""
    out, _, mod = corpus
    summary = mod.tally(out, collect_items=False)
    assert summary["tried"] == summary["scenarios"] >= 140
    assert summary["failed"] == []
    assert summary["refused cleanly"] == summary["tried"]


def test_the_tally_blames_the_scenario_that_writes_outside_its_folder_and_only_it(tmp_path):
    """The tally's own check can fail: a command that leaves a store beside the corpus is "written outside"; the
    clean scenarios before and after it are not blamed for it."""
    mod = _corpus_module()
    out = tmp_path / "corpus"
    sc = mod.Scenarios(out)
    (out / "beside").mkdir(parents=True)
    for n, store in enumerate(("{dir}/s.sqlite", str(out / "beside" / "s.sqlite"), "{dir}/s.sqlite")):
        d = sc.add("paths", f"collect number {n}", ["collect", "{dir}/results", "--store", store], (0,),
                   setup=mod._write_run)
        assert d.is_dir()
    (out / "scenarios.json").write_text(json.dumps(sc.items))
    summary = mod.tally(out, collect_items=False)
    assert summary["tried"] == 3
    assert [(f["why"], f["outcome"]) for f in summary["failed"]] == [("collect number 1", "written outside")]


def test_every_hostile_run_is_refused_on_the_plain_path_in_the_general_paths_words(corpus):
    """collect's plain path (real lines and rankings checked per run, collect/columns.py) refuses each hostile run
    of the corpus as the general path (check_record on every line) does, in the same words, with the identities
    of its good lines verified beforehand so that its lines may take the plain path."""
    out, items, mod = corpus
    good = RawRun("good", json.dumps(mod.valid_meta()).encode(), b"".join(mod.GOOD_LINES), None)
    col.parse_journal(good, col.journal_identity(good)[0])

    def outcome(raw, full):
        try:
            p = col._parse_journal(col.plain(raw), meta, True) if full else col.parse_journal(raw, meta)
        except Refused as exc:
            return str(exc)
        return p.run, p.combos, p.records, p.rankings

    compared = 0
    for it in items:
        if not it["category"].startswith(("record", "ranking", "journal")):
            continue
        for found in discover([out / it["path"].split("/")[0]]):
            runs = [x for x in found.items if isinstance(x, RawRun)] if isinstance(found, Archive) else []
            if isinstance(found, tuple):
                try:
                    runs = [dir_run(found[1])]
                except Hostile:
                    continue
            for raw in runs:
                try:
                    meta = col.journal_identity(raw)[0]
                except Refused:
                    continue
                assert outcome(raw, False) == outcome(raw, True), it
                compared += 1
    assert compared >= 500
