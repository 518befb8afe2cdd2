"""Inputs for the fleet tests: real runs where they exist, small hand-built records for logic tests.

Real runs come from the committed fixtures (tests/fixtures/runs/*.tar.gz, H200 and CPU run directories) or,
when none are committed, from a real `convbench sweep` of the quick cases on this CPU. Hand-built records are
only used to test comparison and parsing logic; they never feed a sample report.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness import cli
from harness.core.records import SCHEMA_VERSION, Accuracy, Determinism, Record, Timing, dumps

FIXTURES = Path(__file__).parent / "fixtures" / "runs"


def fixture_tarballs() -> list[Path]:
    return sorted(FIXTURES.glob("*.tar.gz")) if FIXTURES.is_dir() else []


def run_tarball(name: str | Path) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
    """(run.json, end.json or None, record lines) of the one run in tests/fixtures/runs/<name>.tar.gz, or in the
    tarball ``name`` where it is a Path."""
    meta = end = None
    recs: list[dict[str, Any]] = []
    with tarfile.open(name if isinstance(name, Path) else FIXTURES / f"{name}.tar.gz") as tar:
        for m in tar.getmembers():
            if m.name.endswith("run.json"):
                meta = json.load(tar.extractfile(m))
            elif m.name.endswith("end.json"):
                end = json.load(tar.extractfile(m))
            elif m.name.endswith("records.jsonl"):
                recs = [json.loads(line) for line in tar.extractfile(m)]
    return meta, end, recs


def worded_today(explanation: str | None) -> str | None:
    """A journaled explanation in today's words: runs made before cuDNN's repeats went round the placements said
    "repeats in place" (core/explain.py); nothing else of the rules changed."""
    return explanation and explanation.replace("over repeats in place", "over repeats")


def records_of(recs: list[dict[str, Any]], kind: str = "measurement", **match: Any) -> list[Record]:
    """The records of ``kind`` whose fields equal ``match``, as Record objects."""
    return [Record.from_dict(r) for r in recs if r["kind"] == kind and all(r[k] == v for k, v in match.items())]


def sweep_cpu_runs(results: Path, n: int = 2, dtypes: str = "fp32,bf16") -> list[Path]:
    """Real CPU runs of the quick cases (torch backend) into ``results``; about a second each."""
    for _ in range(n):
        time.sleep(1.05 - time.time() % 1)  # run ids carry the second and the pid: one run per second here
        code = cli.main(["sweep", "--cases", "quick", "--backends", "torch", "--dtypes", dtypes,
                         "--budget-ms", "5", "--results", str(results)])
        assert code == 0, f"convbench sweep failed with {code}"
    return sorted(p.parent for p in results.glob("*/*/run.json"))


def real_sources(tmp: Path) -> tuple[list[Path], str]:
    """(paths to collect, description of the hardware they came from)."""
    tars = fixture_tarballs()
    if tars:
        return tars, "committed fixtures: " + ", ".join(t.name for t in tars)
    runs = sweep_cpu_runs(tmp / "results")
    return [tmp / "results"], f"{len(runs)} CPU runs swept by this test (torch backend, quick cases)"


# ---- hand-built records for logic tests ------------------------------------------------------------------------

def record(case: str = "c1", *, backend: str = "cudnn", algo: str = "IMPLICIT_GEMM", math: str = "DEFAULT",
           dtype: str = "fp32", direction: str = "fwd", layout: str = "NCHW", status: str = "ok",
           median: float = 1.0, samples: list[float] | None = None, err: float = 1e-7, cls: str = "fp32",
           hash_: str = "00112233445566778899aabbccddeeff", repeat_equal: bool | None = True,
           fresh_equal: bool | None = True, chosen: str | None = None, settings: dict[str, Any] | None = None,
           explanation: str | None = None, reason: str | None = None, distinct: int = 1,
           clock: dict[str, Any] | None = None) -> Record:
    ok = status == "ok"
    samples = samples if samples is not None else [median] * 9
    return Record(case=case, backend=backend, direction=direction, algo=algo, math=math, dtype=dtype, layout=layout,
                  status=status, reason=reason, device="cuda:0", settings=settings or {},
                  time=Timing(median, 0.01 * median, len(samples), "hot", "cuda_event", min(samples), samples,
                              clock) if ok else None,
                  accuracy=Accuracy(err, err, err, 0, 0, 0, cls) if ok else None,
                  determinism=Determinism(hash_, "polyhash2x64-v1", 2, repeat_equal, fresh_equal, distinct)
                  if ok else None,
                  chosen_algo=chosen, explanation=explanation)


def timed(samples: list[float] | None = None, *, median: float | None = None, iqr: float = 0.0,
          extra: dict[str, Any] | None = None) -> Record:
    """A record with a time only, as compare's time test reads one: its samples as the store gives them back (a
    float64 array; None for none), its median theirs unless given."""
    s = None if samples is None else np.array(samples, dtype=np.float64)
    med = float(np.median(s)) if median is None else median
    return Record(case="c", backend="cudnn", direction="fwd", algo="IMPLICIT_GEMM", math="DEFAULT", dtype="fp32",
                  layout="NCHW", time=Timing(med, iqr, None if s is None else len(s), "hot", "cuda_event",
                                             samples_ms=s), extra=extra or {})


def noisy(median: float, n: int = 15, rel: float = 0.01, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in median * (1 + rel * rng.standard_normal(n))]


def write_run(results: Path, machine: str, image: str, started: dt.datetime, records: list[Record], *,
              gpu: str | None = "NVIDIA H200", schema: int = SCHEMA_VERSION, finished: bool = True,
              run_id: str | None = None) -> Path:
    run_id = run_id or f"{started:%Y%m%dT%H%M%SZ}-{image}-test"
    d = results / machine / run_id
    d.mkdir(parents=True)
    fp = {"hostname": machine, "gpu": {"name": gpu, "sm": "9.0", "index": 0} if gpu else None, "image": image,
          "cpu": "x86_64", "cpu_count": 2, "software": {"python": "3.12"}}
    meta = {"schema": schema, "run_id": run_id, "machine": machine, "image": image, "started": started.isoformat(),
            "suite_revision": "test", "fingerprint": fp, "options": {}}
    (d / "run.json").write_text(json.dumps(meta))
    (d / "records.jsonl").write_text("".join(dumps(r) + "\n" for r in records))
    if finished:
        (d / "end.json").write_text(json.dumps({"counts": {"ok": len(records)}}))
    return d


def journal_lines(run_dir: Path) -> list[str]:
    """A run's journal lines, finished (records.jsonl.gz) or not."""
    from harness.run.journal import read_journal

    return read_journal(run_dir).decode().splitlines()


def as_killed(run_dir: Path, text: str) -> None:
    """A finished run made what a run killed mid-way leaves: ``text`` as its records.jsonl, no end.json, and
    neither its compressed journal nor its packed copy (both are written only at a run's end)."""
    for name in ("end.json", "records.jsonl.gz", "records.packed"):
        (run_dir / name).unlink(missing_ok=True)
    (run_dir / "records.jsonl").write_text(text)


def tar_runs(run_dirs: list[Path], dest: Path) -> Path:
    with tarfile.open(dest, "w:gz") as tar:
        for d in run_dirs:
            tar.add(d, arcname=f"{d.parent.name}/{d.name}")
    return dest


def copy_run(src: Path, results: Path, **meta_changes: Any) -> Path:
    """A copy of a run directory with run.json fields replaced (machine names for the escaping test)."""
    meta = json.loads((src / "run.json").read_text())
    meta.update(meta_changes)
    safe = "".join(ch if ch.isalnum() else "_" for ch in meta["machine"])
    dest = results / safe / meta["run_id"]
    shutil.copytree(src, dest)
    (dest / "run.json").write_text(json.dumps(meta))
    return dest


EVIL_NAME = "<script>alert(1)</script>"


def fixture_records(kinds: tuple[str, ...] | None = None, backend: str | None = None,
                    ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run.json, record) of every record line in the committed fixture tarballs (of ``kinds``, of ``backend``),
    read straight from the files (not through collect), so that tests can check the report against the fixtures
    independently. The run dict has ``end_json_present`` when the run wrote end.json (an interrupted run did not).
    Parsing every line takes 16 CPU-s: a line whose text cannot hold the kind or backend asked for is not parsed."""
    out = []
    every_run: list[dict[str, Any]] = []
    wanted = [json.dumps(k).encode() for k in kinds] if kinds is not None else None
    named = json.dumps(backend).encode() if backend is not None else None
    for tar_path in fixture_tarballs():
        runs: dict[str, dict[str, Any]] = {}
        lines: dict[str, bytes] = {}
        with tarfile.open(tar_path) as tar:
            for m in tar.getmembers():
                if not m.isfile():
                    continue
                parent, _, base = m.name.rpartition("/")
                if base == "run.json":
                    runs.setdefault(parent, {}).update(json.loads(tar.extractfile(m).read()))
                elif base == "end.json":
                    runs.setdefault(parent, {})["end_json_present"] = True
                elif base == "records.jsonl":
                    lines[parent] = tar.extractfile(m).read()
        for parent, data in lines.items():
            for line in data.splitlines():
                if (wanted and not any(k in line for k in wanted)) or (named and named not in line):
                    continue  # its kind or backend is not one asked for: a JSON string value holds its quoted text
                try:
                    d = json.loads(line)
                except ValueError:  # a torn last line of an interrupted run
                    continue
                if (kinds is None or d.get("kind") in kinds) and (backend is None or d.get("backend") == backend):
                    out.append((runs[parent], d))
        every_run += runs.values()
    as_the_report_names(every_run)
    return out


def fixture_runs() -> list[dict[str, Any]]:
    """Every run.json in the committed fixture tarballs, named as the report names them (not their records)."""
    runs = []
    for tar_path in fixture_tarballs():
        with tarfile.open(tar_path) as tar:
            runs += [json.loads(tar.extractfile(m).read()) for m in tar.getmembers()
                     if m.isfile() and m.name.rpartition("/")[2] == "run.json"]
    as_the_report_names(runs)
    return runs


def named_runs(store: Any) -> list[dict[str, Any]]:
    """A store's runs, each machine named as the report names it (as_the_report_names)."""
    runs, info = store.runs(), store.run_jsons()
    for r in runs:
        r["fingerprint"] = info[r["id"]]["fingerprint"]
    as_the_report_names(runs)
    return runs


def as_the_report_names(runs: list[dict[str, Any]]) -> None:
    """Each run.json's machine renamed as the report's pages name it (docs/harness.md, written out here rather
    than imported): a machine is its GPU on its host, so a name that covers several GPUs becomes
    `NAME (GPU-xxxxxxxx)` per GPU (the host in front where the hosts differ), `NAME (no GPU UUID)` without one."""
    def key(r: dict[str, Any]) -> str:
        fp = r.get("fingerprint") or {}
        uuid = (fp.get("gpu") or {}).get("uuid")
        return f"{fp.get('hostname') or '?'}/{uuid}" if uuid else ""
    names: dict[str, set[str]] = {}
    for r in runs:
        names.setdefault(r["machine"], set()).add(key(r))
    for r in runs:
        ids = names[r["machine"]]
        if len(ids) < 2:
            continue
        host, _, uuid = key(r).partition("/")
        hosts = {i.partition("/")[0] for i in ids if i}
        suffix = "no GPU UUID" if not uuid else f"{host}/{uuid[:12]}" if len(hosts) > 1 else uuid[:12]
        r["machine"] += f" ({suffix})"


def newest_per_combination(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[tuple[dict[str, Any], dict]]:
    """Of (run.json, record) pairs, the newest record of every combination per machine and image: what the
    report's pages show as current (a later run of the same combination replaces an earlier one)."""
    newest: dict[tuple, tuple[dict[str, Any], dict[str, Any]]] = {}
    for run, d in sorted(pairs, key=lambda p: p[0]["started"]):
        key = (run["machine"], run["image"], d["case"], d["backend"], d["direction"], d["algo"], d["math"],
               d["dtype"], d["layout"], json.dumps(d["settings"], sort_keys=True))
        newest[key] = (run, d)
    return list(newest.values())


def slower_nights(results: Path, nights: list[tuple[str, float]], started: dt.datetime, cases: int = 12) -> None:
    """One machine's nights (image, slowdown), each a night after the other, of ``cases`` combinations whose
    medians step by a tenth: a slowdown of 3 makes every one of them a regression the gate decides."""
    names = [f"c{i:02d}" for i in range(cases)]
    for night, (image, slow) in enumerate(nights):
        write_run(results, "h200", image, started + dt.timedelta(days=night),
                  [record(c, median=(1.0 + i / 10) * slow, samples=noisy((1.0 + i / 10) * slow, seed=night * 50 + i))
                   for i, c in enumerate(names)])


def degraded_journal(text: str, backend: str | None = None) -> tuple[str, dict[str, Any]]:
    """An injected regression: the journal ``text`` with its first ok measurement (of ``backend``, if given)
    made 1000x less accurate (max_abs, rel_l2, max_norm_err), and that record."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        rec = json.loads(line)
        if rec.get("kind") == "measurement" and rec.get("status") == "ok" and backend in (None, rec.get("backend")):
            for k in ("max_abs", "rel_l2", "max_norm_err"):
                rec["accuracy"][k] *= 1000.0
            lines[i] = json.dumps(rec, sort_keys=True)
            return "\n".join(lines) + "\n", rec
    raise ValueError(f"no ok {backend or ''} measurement to degrade")

