"""Long commands under real signals on real subprocesses: a collect whose parser is SIGKILLed (the OOM killer)
ends within seconds; SIGHUP, SIGTERM and Ctrl-C (SIGINT to the whole process group, as a terminal sends it) end
a collect building a new store with one line, no traceback and no hidden ``.NAME.new-*`` store; a report whose
judge is killed still ends, and a report stopped by a signal leaves no build folder and no child behind; a pool
ended while it was still starting a worker stops that worker too; a worker killed while it counted itself is a
death, not a wait without end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _fleet_data import record, write_run

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


# the CLI with every thread's stack dumped on SIGUSR1: a command that does not end says where it waits
_CLI = ("import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
        "from harness.cli import main; sys.exit(main(sys.argv[1:]))")


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CLI, *args], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _ended(p: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
    """(stdout, stderr) once ``p`` ended; a failure with its threads' stacks if it did not within ``timeout``."""
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGUSR1)
        time.sleep(1)
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"did not end within {timeout} s; its stacks:\n{err[-8000:]}")


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _busy(pid: int, ticks: int = 5) -> bool:
    """Whether ``pid`` has used ``ticks`` clock ticks of CPU (a parser at work, past its start)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        return int(fields[11]) + int(fields[12]) >= ticks
    except (OSError, IndexError, ValueError):
        return False


def _state(pid: int) -> str | None:
    """A process's state and parent (R, S, Z...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        return f"{fields[0]} (parent {fields[1]})"
    except OSError:
        return None


def _zombies_of(pid: int) -> list[int]:
    out = []
    for child in _children(pid):
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):
                    out.append(child)
        except OSError:
            pass
    return out


def _wait_for(what, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while not what():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    """240 runs of 400 records (a second or two of parsing on two cores): one written, the rest its copies."""
    import datetime as dt
    import json
    import shutil

    root = tmp_path_factory.mktemp("fleet") / "r"
    t0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
    first = write_run(root, "m0", "img", t0, [record(f"case{i}", median=1.0 + i) for i in range(400)], run_id="n0")
    for i in range(1, 240):
        machine, night = f"m{i % 24}", i // 24
        d = root / machine / f"n{night}"
        shutil.copytree(first, d)
        meta = json.loads((d / "run.json").read_text())
        meta.update(machine=machine, run_id=f"n{night}", started=(t0 + dt.timedelta(days=night)).isoformat())
        (d / "run.json").write_text(json.dumps(meta))
    return root


@pytest.mark.parametrize("jobs", [2])
def test_a_collect_whose_parser_is_killed_ends_in_seconds(tmp_path, fleet, jobs):
    db = tmp_path / "s.sqlite"
    p = _start("collect", str(fleet), "--store", str(db), "--jobs", str(jobs), "-q")
    _wait_for(lambda: any(map(_busy, _children(p.pid))) or p.poll() is not None)
    assert p.poll() is None, "the collect ended before a parser could be killed: give it more runs"
    os.kill(next(c for c in _children(p.pid) if _busy(c)), signal.SIGKILL)  # a parser at work, as the OOM killer
    t0 = time.monotonic()
    out, err = _ended(p)
    assert time.monotonic() - t0 < 20
    if p.returncode != 3 or "Traceback" in err:
        pytest.fail(f"exit {p.returncode}, stderr in full:\n{err}")
    assert len(err.strip().splitlines()) == 1 and "a worker process" in err and "nothing was stored" in err
    assert sorted(os.listdir(tmp_path)) == []  # the store being built is gone, nothing hidden left


@pytest.mark.parametrize("how", ["SIGHUP", "SIGTERM", "SIGINT to the group"])
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_collect_stopped_by_a_signal_leaves_nothing(tmp_path, fleet, how, jobs):
    db = tmp_path / "s.sqlite"
    p = _start("collect", str(fleet), "--store", str(db), "--jobs", str(jobs), "-q")
    _wait_for(lambda: any(n.startswith(".s.sqlite.new-") for n in os.listdir(tmp_path)) or p.poll() is not None)
    assert p.poll() is None, "the collect ended before it could be stopped: give it more runs"
    if how == "SIGINT to the group":
        os.killpg(p.pid, signal.SIGINT)
        code = 130
    else:
        sig = getattr(signal, how)
        p.send_signal(sig)
        code = 128 + sig
    out, err = _ended(p)
    assert p.returncode == code and "Traceback" not in err, (p.returncode, err)
    assert len(err.strip().splitlines()) == 1, err
    assert sorted(os.listdir(tmp_path)) == []


@pytest.fixture(scope="module")
def big_store(tmp_path_factory, fleet) -> Path:
    """A store of 400 runs: a report of it judges in a pool of processes (POOL_FROM_RUNS)."""
    from harness.collect.ingest import collect

    db = tmp_path_factory.mktemp("store") / "s.sqlite"
    collect(db, [fleet], jobs=2)
    return db


def test_a_report_whose_judge_is_killed_still_ends(tmp_path, big_store):
    out = tmp_path / "site"
    p = _start("report", "--store", str(big_store), "--out", str(out))
    _wait_for(lambda: len(_children(p.pid)) >= 1 or p.poll() is not None)
    if p.poll() is None:
        os.kill(_children(p.pid)[0], signal.SIGKILL)
    o, err = _ended(p, 120)
    assert p.returncode == 0 and "Traceback" not in err, err
    assert (out / "index.html").is_file()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_report_stopped_by_a_signal_leaves_no_folder_and_no_child(tmp_path, big_store, sig):
    out = tmp_path / "site"
    p = _start("report", "--store", str(big_store), "--out", str(out))
    _wait_for(lambda: any(n.startswith(".site.new-") for n in os.listdir(tmp_path)) or p.poll() is not None)
    kids = _children(p.pid)
    assert p.poll() is None, "the report ended before it could be stopped"
    p.send_signal(sig)
    o, err = _ended(p)
    # 128 + sig: its cleanup ran; -sig: the signal came again (children.FALLBACK_S) after Python dropped it
    assert p.returncode in (128 + sig, -sig) and "Traceback (most recent" not in err, (p.returncode, err)
    assert sorted(os.listdir(tmp_path)) == []  # no build folder, no report
    time.sleep(0.5)
    alive = {k: _state(k) for k in kids if _state(k)}
    assert alive == {}, f"children left: {alive}"


def test_a_worker_the_pool_was_still_starting_is_stopped_too():
    """shut() on a pool whose worker handler starts a replacement after the first second shut waits (a loaded
    host): that worker is stopped as well, not left to outlive the command (it would open the store its collect
    had just removed, and print a traceback)."""
    import multiprocessing as mp
    import threading
    from multiprocessing import pool as mp_pool
    from types import SimpleNamespace

    from harness.core import children

    late: list = []

    def start_late() -> None:  # the pool's worker handler, slow to fork the worker that replaces a dead one
        time.sleep(1.5)
        w = mp.get_context("fork").Process(target=time.sleep, args=(60,), daemon=True)
        w.start()
        late.append(w)
        pool._pool.append(w)

    handler = threading.Thread(target=start_late, daemon=True)
    handler._state = mp_pool.RUN
    pool = SimpleNamespace(_state=mp_pool.RUN, _worker_handler=handler, _terminate=SimpleNamespace(cancel=lambda: None),
                           _pool=[])
    handler.start()
    t0 = time.monotonic()
    children.shut(pool, hard=True)
    assert late and late[0].exitcode is not None, "the worker started late outlived shut()"
    assert time.monotonic() - t0 < 10


def test_a_worker_started_in_place_of_a_dead_one_leaves_without_its_initializer(tmp_path, capfd):
    """A parser killed mid-write tears the store being built; the pool forks workers in its place until the collect
    ends it, and each opened that store in its initializer and printed a traceback (8 of them in one clean-clone
    run). A worker past the pool's size leaves at once: the initializer runs only in the workers the pool started
    with, and nothing is printed."""
    import multiprocessing as mp

    from harness.core import children

    opened = tmp_path / "opened"

    def open_store(path: str) -> None:  # stands for ingest._worker_init: counts itself, fails once the store is torn
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")
        if os.path.exists(path + ".torn"):
            raise RuntimeError("database disk image is malformed")

    pool = children.start_pool(mp.get_context("fork"), 2, open_store, (str(opened),))
    try:
        deadline = time.monotonic() + 30
        while (not opened.exists() or len(opened.read_text().split()) < 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        Path(str(opened) + ".torn").touch()
        os.kill(pool._pool[0].pid, signal.SIGKILL)  # a parser at work, as the OOM killer
        while pool.convbench_started.value < 4 and time.monotonic() < deadline:  # two workers forked in its place
            time.sleep(0.05)
    finally:
        children.shut(pool, hard=True)
    assert pool.convbench_started.value >= 4
    assert len(opened.read_text().split()) == 2  # the two the pool started with, no replacement
    err = capfd.readouterr().err
    assert "Traceback" not in err and "malformed" not in err, err


def test_a_worker_killed_holding_the_count_is_a_death_not_a_wait_without_end(tmp_path, monkeypatch):
    """A report's judge killed right as it started (the report test above kills its first child at once) can die
    inside its count of itself, holding the counter's lock: every other worker, and the one forked in its place,
    then waits on that lock for ever with the count short of a death, and a report hung for 120 s in a clean-clone
    CI run. A worker that was not among those forked first means one died."""
    import multiprocessing as mp
    import threading

    from harness.core import children

    first = tmp_path / "first"

    def dies_holding_the_count(started, size, initializer, initargs):  # stands in for children._counted
        with started.get_lock():
            try:
                os.close(os.open(first, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                started.value += 1
            else:
                os.kill(os.getpid(), signal.SIGKILL)  # the first worker dies with the lock held

    monkeypatch.setattr(children, "_counted", dies_holding_the_count)
    pool = children.start_pool(mp.get_context("fork"), 2)
    raised: list = []
    try:
        pending = pool.apply_async(int, ("1",))
        waiter = threading.Thread(target=lambda: raised.append(_raised(children.wait, pending)), daemon=True)
        waiter.start()
        waiter.join(30)
        assert not waiter.is_alive(), "the wait did not end"
    finally:
        children.shut(pool, hard=True)
    assert raised and isinstance(raised[0], children.ChildDied), raised


def _raised(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the test reads which
        return exc


# A stop raised where Python drops exceptions: a handler (children.raise_exit) that ran inside a __del__ or a weakref
# callback, as a SIGHUP did inside importlib's during a collect on the 2-core VM, which then linked its store in.
_DROPPED = """
import os, signal, sys
from harness.core import children

class Dropped:
    def __del__(self):
        children.raise_exit(signal.SIGHUP, None)
"""


def test_a_stop_python_dropped_while_a_store_is_built_still_stops_it(tmp_path):
    script = _DROPPED + """
from harness.collect import fresh
children.exit_on_signals()

def fill(hidden):
    Dropped()
    print("filled", flush=True)

try:
    fresh.build(sys.argv[1], fill)
except SystemExit as exc:
    print("stopped", exc.code, sorted(os.listdir(os.path.dirname(sys.argv[1]))), flush=True)
    os._exit(0)  # before raise_exit's fallback
print("built", flush=True)
"""
    res = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s.sqlite")], env=ENV, capture_output=True,
                         text=True, timeout=60)
    assert res.stdout.splitlines() == ["filled", "stopped 129 []"] and res.stderr == "", (res.stdout, res.stderr)


def test_a_command_a_dropped_stop_did_not_end_still_exits_as_stopped():
    script = _DROPPED + """
from harness import cli
from harness.core import cases
select = cases.select
cases.select = lambda *a, **k: (Dropped(), select(*a, **k))[1]
sys.exit(cli.main(["cases", "quick"]))
"""
    res = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True, text=True, timeout=60)
    assert res.returncode == 129 and "quick.seed" in res.stdout, (res.returncode, res.stdout, res.stderr)
    assert res.stderr == "convbench cases: stopped by signal 1\n", res.stderr
