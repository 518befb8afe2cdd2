"""The measuring commands under real signals on real subprocesses (CPU, the fault-injecting test backend): a sweep
(in process and isolated), `convbench run`'s worker processes and the fresh session processes each end within
seconds of SIGINT (to the whole process group, as a terminal sends it), SIGTERM or SIGHUP, with one line, no
traceback, no process left and every journal line written before the signal intact; a SIGKILLed worker (the OOM
killer) costs its combination, and a SIGKILLed `run` worker costs its GPU slot, never the command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.run.journal import read_journal

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           CONVBENCH_TEST_BACKENDS="1", CONVBENCH_FAULTS="quick.seed=hang")
ENDS_S = 10  # "within seconds": the command's own cleanup, not a watchdog or the 10 s fallback of core/children
# A SIGKILLed run's workers learn it from PR_SET_PDEATHSIG's SIGTERM, which Python answers between bytecodes: a
# worker inside a long import answers once the import returns. Under the whole suite's load (CI, three workers
# beside Docker and Slurm) two workers once outlived 10 s, where alone and beside four busy processes on the
# 2-core development VM the test passed every time (8 of 8); the message names any survivor and what it was running.
ORPHANS_S = 20
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_process_outlives_a_test():
    """A test that fails half way still ends what it started (each worker is in a session of its own)."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        for pid in [proc.pid, *_descendants(proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        proc.communicate()


def _start(args: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *args], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    _STARTED.append(proc)
    return proc


def _what(pid: int) -> str:
    """A process's id, state and command line, for a failure's message."""
    try:
        state = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("State:"))
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
    except (OSError, StopIteration):
        return f"{pid} (gone)"
    return f"{pid} {state.split(':', 1)[1].strip()} {cmd}"


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = set()
        for task in Path(f"/proc/{p}/task").glob("*"):  # a thread's children are listed under that thread
            try:
                kids |= {int(x) for x in (task / "children").read_text().split()}
            except OSError:
                pass
        todo.extend(kids - out)
        out |= kids
    return out


def _alive(pid: int) -> bool:
    """Running, or a zombie nobody reaped (a defunct child is a leftover too)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return bool(f.read())
    except OSError:
        return False


def _journals(results: Path) -> list[Path]:
    """Each run's records.jsonl (read from records.jsonl.gz once the run is finished: _lines)."""
    return sorted(p.with_name("records.jsonl") for p in results.glob("*/*/run.json"))


def _lines(path: Path) -> list[bytes]:
    return read_journal(path.parent).splitlines(keepends=True)


def _wait_for(cond, what: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"never {what}: {proc.communicate()[1][-3000:]}")
        time.sleep(0.05)


def _measured(results: Path, journals: int, lines: int) -> bool:
    found = _journals(results)
    return len(found) >= journals and all(len(_lines(j)) >= lines for j in found)


def _ended(proc: subprocess.Popen, started: float) -> tuple[str, str, float]:
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("did not end within 60 s of the signal")
    return out, err, time.monotonic() - started


def _check_stop(proc, sig, results: Path, command: str, journals: int) -> None:
    before = {j: _lines(j) for j in _journals(results)}
    family = _descendants(proc.pid)
    assert family, "the command measures in worker processes"
    started = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # Ctrl-C: the terminal signals the whole foreground group
    else:
        os.kill(proc.pid, sig)
    _, err, took = _ended(proc, started)
    assert took < ENDS_S, f"took {took:.1f} s"
    assert proc.returncode == 128 + sig
    assert "Traceback" not in err
    said = [ln for ln in err.splitlines() if ln.startswith(f"convbench {command}: ")]
    word = "interrupted" if sig == signal.SIGINT else f"stopped by signal {int(sig)}"
    assert len(said) == 1 and word in said[0] and err.rstrip().endswith(said[0]), err
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in family) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in family if _alive(p)], "a process outlived the command"
    assert len(before) == journals
    for path, lines in before.items():  # what was journaled before the signal is there, every line whole
        after = _lines(path)
        assert after[:len(lines)] == lines
        keys = [json.loads(line)["algo"] for line in after if line.endswith(b"\n")]
        assert len(keys) == len(set(keys)) and {"ok0", "ok1"} <= set(keys)


@pytest.mark.parametrize("isolate", ["--isolate", "--no-isolate"])
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_sweep_ends_within_seconds_of_a_signal(tmp_path, sig, isolate):
    proc = _start(["sweep", "--cases", "quick.seed", "--backends", "faulty", isolate, "--results", str(tmp_path)])
    _wait_for(lambda: _measured(tmp_path, 1, 2), "journaled ok0 and ok1", proc)  # then it hangs on the fault
    if isolate == "--no-isolate":  # the sweep measures in its own process
        started = time.monotonic()
        os.killpg(proc.pid, sig) if sig == signal.SIGINT else os.kill(proc.pid, sig)
        _, err, took = _ended(proc, started)
        assert took < ENDS_S and proc.returncode == 128 + sig and "Traceback" not in err
        assert err.rstrip().splitlines()[-1].startswith("convbench sweep: ")
        return
    _check_stop(proc, sig, tmp_path, "sweep", journals=1)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_run_stops_and_reaps_its_workers(tmp_path, sig):
    proc = _start(["run", "--no-docker", "--gpus", "0,1", "--job", "sweep", "--cases", "quick.seed",
                   "--backends", "faulty", "--results", str(tmp_path), "--", "--isolate"])
    _wait_for(lambda: _measured(tmp_path, 2, 2), "journaled two slots", proc)
    _check_stop(proc, sig, tmp_path, "run", journals=2)


def test_a_killed_worker_costs_its_combination_and_the_sweep_goes_on(tmp_path):
    proc = _start(["sweep", "--cases", "quick.seed", "--backends", "faulty", "--isolate", "--results",
                   str(tmp_path)])
    _wait_for(lambda: _measured(tmp_path, 1, 2), "journaled ok0 and ok1", proc)
    (worker,) = _descendants(proc.pid)
    started = time.monotonic()
    os.kill(worker, signal.SIGKILL)  # as the OOM killer ends it, while it hangs in the fault
    _, err, took = _ended(proc, started)
    assert proc.returncode == 0 and took < 30 and "Traceback" not in err, err
    (journal,) = _journals(tmp_path)
    recs = {r["algo"]: r for r in map(json.loads, _lines(journal)) if r.get("kind") == "measurement"}
    assert set(recs) == {"ok0", "ok1", "hang", "ok2"}
    assert recs["hang"]["status"] == "crashed" and "SIGKILL" in recs["hang"]["reason"]
    assert all(recs[a]["status"] == "ok" for a in ("ok0", "ok1", "ok2"))
    assert (journal.parent / "end.json").exists()
    assert not [p for p in _descendants(proc.pid) if _alive(p)]


def test_a_killed_run_worker_costs_its_slot_only(tmp_path):
    proc = _start(["run", "--no-docker", "--gpus", "0,1", "--job", "sweep", "--cases", "quick.seed",
                   "--backends", "faulty", "--results", str(tmp_path), "--", "--isolate", "--timeout", "3"])
    _wait_for(lambda: _measured(tmp_path, 2, 2), "journaled two slots", proc)
    sweeps = sorted(p for p in _descendants(proc.pid) if b"sweep" in Path(f"/proc/{p}/cmdline").read_bytes())
    assert len(sweeps) == 2
    family = _descendants(proc.pid)
    victim = sweeps[0]
    env = Path(f"/proc/{victim}/environ").read_bytes().split(b"\0")
    slot = next(e for e in env if e.startswith(b"CONVBENCH_MACHINE=")).split(b"=", 1)[1].decode()
    os.kill(victim, signal.SIGKILL)
    out, err, took = _ended(proc, time.monotonic())
    assert proc.returncode == 1 and took < 40 and "Traceback" not in out + err, out + err
    failed = [ln for ln in out.splitlines() if "FAILED" in ln]
    assert len(failed) == 1 and "exited -9" in failed[0], out
    done = [j for j in _journals(tmp_path) if (j.parent / "end.json").exists()]
    assert len(done) == 1 and slot not in str(done[0])  # the other slot finished (its hang: a 3 s timeout)
    for j in _journals(tmp_path):
        assert all(json.loads(line) for line in _lines(j) if line.endswith(b"\n"))
    assert not [p for p in family if _alive(p)]


def test_a_killed_run_takes_its_workers_with_it(tmp_path):
    proc = _start(["run", "--no-docker", "--gpus", "0,1", "--job", "sweep", "--cases", "quick.seed",
                   "--backends", "faulty", "--results", str(tmp_path), "--", "--isolate"])
    _wait_for(lambda: _measured(tmp_path, 2, 2), "journaled two slots", proc)
    family = _descendants(proc.pid)
    before = {j: _lines(j) for j in _journals(tmp_path)}
    os.kill(proc.pid, signal.SIGKILL)  # nothing of the command runs: its workers end by themselves
    proc.communicate()
    deadline = time.monotonic() + ORPHANS_S
    while any(_alive(p) for p in family) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in family if _alive(p)]
    assert not left, "a worker outlived its killed run: " + "; ".join(_what(p) for p in left)
    for path, lines in before.items():
        assert _lines(path)[:len(lines)] == lines


# FreshProcesses (run/fresh.py) as onnxruntime's backend drives it, in threads, with a stop handled as a command's
_FRESH = """
import sys, types
from harness.core import children
from harness.run.pool import FreshProcesses
children.exit_on_signals()
runs = [types.SimpleNamespace(function="faulty_backend:faulty_session", job={"name": f"s{i}"}, env=None,
                              name=f"s{i}") for i in range(4)]
try:
    FreshProcesses(log=print)(runs, parallel=int(sys.argv[1]))
except KeyboardInterrupt:
    print("fresh: interrupted", file=sys.stderr)
    sys.exit(130)
except SystemExit as exc:
    print(f"fresh: stopped by signal {exc.code - 128}", file=sys.stderr)
    raise
"""


@pytest.mark.parametrize("parallel", [1, 2])
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_fresh_processes_end_with_their_caller(tmp_path, sig, parallel):
    env = dict(ENV, CONVBENCH_FAULTS=",".join(f"s{i}=hang" for i in range(4)))
    proc = subprocess.Popen([sys.executable, "-c", _FRESH, str(parallel)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for(lambda: len(_descendants(proc.pid)) >= parallel, f"started {parallel} processes", proc)
    time.sleep(1)  # each is in its session function (hanging), not starting
    family = _descendants(proc.pid)
    started = time.monotonic()
    os.killpg(proc.pid, sig) if sig == signal.SIGINT else os.kill(proc.pid, sig)
    out, err, took = _ended(proc, started)
    assert took < ENDS_S and proc.returncode == 128 + sig, (took, proc.returncode, err)
    assert err.strip().startswith("fresh: ") and len(err.strip().splitlines()) == 1, err
    assert out == ""  # no process's failure is said after the stop
    assert not [p for p in family if _alive(p)]
