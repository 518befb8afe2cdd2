"""Fault isolation for real: a test backend segfaults, aborts, hangs, exhausts memory, raises and exits inside
worker processes; each fault costs its own combination, the sweep goes on in a fresh worker, nothing is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _fleet_data import as_killed, journal_lines

from harness.backends import SweepOptions
from harness.core import cases
from harness.core.errors import UserError
from harness.core.records import CRASHED, ERROR, OK, OOM, TIMEOUT, Record
from harness.measurement.timing import TimingPolicy
from harness.run import pool as pool_module
from harness.run import sweep
from harness.run.journal import JOURNAL_FILE, iter_journal
from harness.run.pool import WorkerPool, _Child, classify

FAULT_PLAN = {  # case -> injected fault -> the status its combination must end with
    "quick.seed": ("segv", CRASHED),
    "quick.stem7x7": ("hang", TIMEOUT),
    "quick.pointwise": ("exhaust_memory", OOM),
    "quick.depthwise": ("raise_oom", OOM),
    "quick.grouped": ("abort", CRASHED),
    "quick.dilated": ("raise", ERROR),
}


def _measurements(journal) -> list[Record]:
    return [Record.from_dict(d) for d in iter_journal(journal.path / JOURNAL_FILE) if d["kind"] == "measurement"]


def test_every_injected_fault_costs_one_combination_and_the_sweep_goes_on(tmp_path, faults):
    faults({c: f for c, (f, _) in FAULT_PLAN.items()})
    seen, lines = [], []
    t0 = time.monotonic()
    journal = sweep.run(cases.select("quick"), ["faulty"], SweepOptions(device="cpu"), tmp_path, isolate=True,
                        timeout_s=3, memory_limit=256 << 20, on_record=seen.append, log=lines.append)
    elapsed = time.monotonic() - t0
    recs = _measurements(journal)
    assert len(recs) == len({r.key() for r in recs}) == 6 * 4  # every combination once, none twice
    by = {(r.case, r.algo): r for r in recs}
    for case_id, (fault, status) in FAULT_PLAN.items():
        bad = by[(case_id, fault)]
        assert bad.status == status, bad
        assert bad.reason and "\n" not in bad.reason and bad.explanation
        for algo in ("ok0", "ok1", "ok2"):  # before the fault (same worker) and after it (a fresh worker)
            assert by[(case_id, algo)].status == OK, by[(case_id, algo)]
    assert "SIGSEGV" in by[("quick.seed", "segv")].reason
    assert "SIGABRT" in by[("quick.grouped", "abort")].reason
    assert "watchdog" in by[("quick.stem7x7", "hang")].reason
    assert "MemoryError" in by[("quick.pointwise", "exhaust_memory")].reason
    assert "OutOfMemoryError" in by[("quick.depthwise", "raise_oom")].reason
    assert "KeyError" in by[("quick.dilated", "raise")].reason
    # on_record saw exactly what the journal holds (the asv bridge reads records this way)
    assert sorted(r.key() for r in seen if r.kind == "measurement") == sorted(r.key() for r in recs)
    end = json.loads((journal.path / "end.json").read_text())
    assert end["counts"] == {OK: 18, CRASHED: 2, TIMEOUT: 1, OOM: 2, ERROR: 1}
    assert len(end["worker_failures"]) == 5  # raise_oom is caught by the backend: an error record, not a death
    assert elapsed < 60 and any("timeout" in line for line in lines)


def test_retries_are_bounded_the_rest_of_the_case_says_why(tmp_path, faults):
    faults({"quick.seed": "exit"})
    journal = sweep.run(cases.select("quick.seed"), ["faulty"], SweepOptions(device="cpu"), tmp_path,
                        isolate=True, retries=0, log=lambda m: None)
    by = {r.algo: r for r in _measurements(journal)}
    assert by["ok0"].status == by["ok1"].status == OK
    assert by["exit"].status == CRASHED and "exited with code 7" in by["exit"].reason
    assert by["ok2"].status == CRASHED and by["ok2"].reason.startswith("not measured: the worker for this case "
                                                                       "failed 1 times")


def test_a_worker_dead_before_it_gets_its_slice_is_a_crash_record(tmp_path, faults):
    """The worker can die between its start and the parent's message (killed from outside): the parent's send
    then meets a broken pipe, which is judged as any death is, not raised out of the sweep."""
    faults({})
    from faulty_backend import FaultyBackend

    case, opts = cases.get("quick.seed"), SweepOptions(device="cpu")
    with WorkerPool(sweep.new_journal(tmp_path, opts, [case], ["faulty"], {}), timeout_s=5) as pool:
        pool.child = _Child(())
        pool.child.proc.kill()
        pool.child.proc.wait()
        recs = list(pool.run_slice("faulty", case, FaultyBackend().combos(case, opts), opts))
    assert [r.status for r in recs] == [CRASHED, OK, OK, OK] and "SIGKILL" in recs[0].reason


def test_out_of_memory_errors_from_a_backend_get_their_status():
    rec = Record("c", "torch", "fwd", "auto", "DEFAULT", "fp32", "NCHW", status=ERROR,
                 reason="OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert classify(rec).status == OOM
    other = Record("c", "torch", "fwd", "auto", "DEFAULT", "fp32", "NCHW", status=ERROR, reason="RuntimeError: x")
    assert classify(other).status == ERROR


def test_isolated_torch_sweep_matches_in_process(tmp_path):
    fast = TimingPolicy(budget_ms=2.0, min_samples=3, max_samples=10)
    opts = dict(device="cpu", timing=fast, dtypes=("fp32",))
    a = sweep.run(cases.select("quick.seed,quick.grouped"), ["torch"], SweepOptions(**opts), tmp_path / "a",
                  isolate=True, log=lambda m: None)
    b = sweep.run(cases.select("quick.seed,quick.grouped"), ["torch"], SweepOptions(**opts), tmp_path / "b",
                  isolate=False, log=lambda m: None)
    ra, rb = _measurements(a), _measurements(b)
    assert sorted(r.key() for r in ra) == sorted(r.key() for r in rb) and len(ra) == 4
    assert all(r.status == OK for r in ra)
    # same inputs, same CPU kernels: the worker computes the very same bits
    assert {r.key(): r.determinism.hash for r in ra} == {r.key(): r.determinism.hash for r in rb}


def test_each_slice_names_the_next_case(tmp_path, monkeypatch):
    """The sweep hands every slice the case it measures next, for the worker to make ahead (the test below)."""
    from harness.run import replicas

    handed = []
    real = replicas.measure_slice
    monkeypatch.setattr(replicas, "measure_slice", lambda *a: handed.append((a[4].id, a[7] and a[7].id)) or real(*a))
    fast = TimingPolicy(budget_ms=2.0, min_samples=3, max_samples=10)
    chosen = cases.select("quick.seed,quick.grouped,quick.pointwise")
    sweep.run(chosen, ["torch"], SweepOptions(device="cpu", timing=fast, dtypes=("fp32",)), tmp_path / "r",
              isolate=True, log=lambda m: None)
    ids = [c.id for c in chosen]
    assert handed == [(ids[0], ids[1]), (ids[1], ids[2]), (ids[2], None)]


def test_a_worker_makes_the_next_case_ahead_only_while_no_slice_waits(monkeypatch):
    """After its reply a worker draws the next case's operands and makes what its backend makes ahead (cuDNN's
    answers, fresh handles), a short step at a time, and only while no message waits: a slice that comes takes
    its turn and the steps left go on after it; the steps for the case a slice is about to measure are dropped."""
    import multiprocessing
    import threading

    from harness.run import poolchild

    parent, child = multiprocessing.Pipe()
    order, holds = [], {name: threading.Event() for name in ("torch", "cudnn")}
    monkeypatch.setattr(poolchild, "_die_with_parent", lambda pid: None)
    monkeypatch.setattr(poolchild.signal, "signal", lambda *a: None)  # a thread sets no handlers; the worker ignores
    waits = []
    monkeypatch.setattr(poolchild, "_run_slice", lambda msg: order.append(("measured", msg["case"])) or
                        waits.append(msg["waited_s"]) or ("done", None))
    monkeypatch.setattr(poolchild.accuracy, "draw_ahead",
                        lambda case, directions: order.append(("drew", case, directions)))

    class MakesAhead:  # what cuDNN makes ahead, as many as the slice had combinations; its first step is held
        def ahead(self, case, count, options):
            try:
                for step in range(3):
                    order.append(("step", case, count, step))
                    if step == 0:
                        assert holds[case].wait(10)
                    yield
            finally:
                order.append(("closed", case))

    monkeypatch.setattr(poolchild, "resolve_backend", lambda name: MakesAhead() if name == "cudnn" else object())
    options = SweepOptions(device="cpu", directions=("bwd_data", "bwd_filter"))
    dirs = options.directions

    def wait_for(item):
        deadline = time.monotonic() + 10
        while item not in order:
            assert time.monotonic() < deadline, order
            time.sleep(0.01)

    worker = threading.Thread(target=poolchild.child_main, args=(os.dup(child.fileno()), os.getpid()))
    worker.start()
    try:
        parent.send({"case": "cudnn", "backend": "cudnn", "combos": [1, 2, 3], "options": options,
                     "ahead": "torch", "sent_at": time.monotonic() - 5})
        assert parent.recv() == ("done", None)
        wait_for(("step", "torch", 3, 0))  # the reply went first; the steps run while nothing waits
        parent.send({"case": "PyTorch's slice", "backend": "torch", "combos": [1], "options": options,
                     "ahead": "torch"})
        holds["torch"].set()  # the message waits when the held step ends: its slice goes first
        assert parent.recv() == ("done", None)
        wait_for(("closed", "torch"))
        parent.send({"case": "PyTorch's last", "backend": "cudnn", "combos": [1, 2], "options": options,
                     "ahead": "cudnn"})
        assert parent.recv() == ("done", None)
        wait_for(("step", "cudnn", 2, 0))
        parent.send({"case": "cudnn", "backend": "torch", "combos": [1], "options": options, "ahead": None})
        holds["cudnn"].set()
        assert parent.recv() == ("done", None)
        parent.send(None)
    finally:
        holds["torch"].set(), holds["cudnn"].set()
        worker.join(10)
    assert not worker.is_alive()
    assert waits[0] >= 5 and all(w == 0 for w in waits[1:])  # a message with no time sent waited for nothing
    assert order == [
        ("measured", "cudnn"), ("drew", "torch", dirs), ("step", "torch", 3, 0),
        ("measured", "PyTorch's slice"),
        ("step", "torch", 3, 1), ("step", "torch", 3, 2), ("closed", "torch"), ("drew", "torch", dirs),
        ("measured", "PyTorch's last"), ("drew", "cudnn", dirs), ("step", "cudnn", 2, 0),
        ("closed", "cudnn"), ("measured", "cudnn"),  # the slice of the case its steps were for: they are dropped
    ]


def test_resume_of_an_isolated_sweep_measures_nothing_twice(tmp_path, faults):
    faults({"quick.seed": "segv"})
    journal = sweep.run(cases.select("quick.seed,quick.grouped"), ["faulty"], SweepOptions(device="cpu"),
                        tmp_path, isolate=True, log=lambda m: None)
    lines = journal_lines(journal.path)
    as_killed(journal.path, "\n".join(lines[:3]) + "\n" + lines[3][:25])  # killed mid-write after three records
    resumed = sweep.run(cases.select("quick.seed,quick.grouped"), ["faulty"], SweepOptions(device="cpu"),
                        tmp_path, resume=journal.path, isolate=True, log=lambda m: None)
    keys = [r.key() for r in _measurements(resumed)]
    assert len(keys) == len(set(keys)) == 8


def test_a_run_is_written_by_one_sweep_at_a_time(tmp_path):
    journal = sweep.run(cases.select("quick.seed"), ["cudnn"], SweepOptions(device="cpu"), tmp_path,
                        log=lambda m: None)
    fd = sweep.lock_run(journal.path)
    try:
        with pytest.raises(UserError, match="another sweep is writing this run"):
            sweep.lock_run(journal.path, wait_s=0.3)
    finally:
        os.close(fd)
    os.close(sweep.lock_run(journal.path, wait_s=0))  # released with its fd


def test_worker_dies_with_a_killed_sweep(tmp_path):
    """kill -9 of the sweep must not leave a worker writing into the run (PR_SET_PDEATHSIG)."""
    env = dict(os.environ, CONVBENCH_TEST_BACKENDS="1", CONVBENCH_FAULTS="quick.seed=hang",
               PYTHONPATH=os.pathsep.join([str(Path(pool_module.__file__).parents[1]),
                                           os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "sweep", "--cases", "quick.seed",
                             "--backends", "faulty", "--isolate", "--results", str(tmp_path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run_dir = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and run_dir is None:  # wait until the worker journaled ok0 and ok1
        found = list(tmp_path.glob(f"*/*/{JOURNAL_FILE}"))
        if found and len(found[0].read_text().splitlines()) >= 2:
            run_dir = found[0].parent
        time.sleep(0.1)
    assert run_dir is not None, proc.stderr
    children = _children(proc.pid)
    assert children, "the sweep runs its slices in a worker process"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in children)
    fd = sweep.lock_run(run_dir, wait_s=5)  # nobody holds the run any more
    os.close(fd)


def _children(pid: int) -> list[int]:
    try:
        text = open(f"/proc/{pid}/task/{pid}/children").read()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_test_backend_needs_the_switch():
    env = {k: v for k, v in os.environ.items() if k != "CONVBENCH_TEST_BACKENDS"}
    res = subprocess.run([sys.executable, "-m", "harness.cli", "sweep", "--backends", "faulty"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 2 and "unknown backend faulty" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.gpu
def test_a_real_kernel_fault_on_the_gpu_costs_one_combination(tmp_path, faults):
    """An out-of-bounds store by a real CUDA kernel corrupts the context; the worker is replaced."""
    faults({"quick.seed": "cuda_illegal_address"})
    journal = sweep.run(cases.select("quick.seed,quick.grouped"), ["faulty", "torch"],
                        SweepOptions(device="cuda", dtypes=("fp32",), layouts=("NCHW",)), tmp_path,
                        isolate=True, timeout_s=120, log=print)
    recs = _measurements(journal)
    by = {(r.case, r.backend, r.algo): r for r in recs}
    bad = by[("quick.seed", "faulty", "cuda_illegal_address")]
    assert bad.status == CRASHED and "CUDA context" in bad.reason and "illegal" in bad.reason.lower(), bad
    assert by[("quick.seed", "faulty", "ok2")].status == OK  # after the fault, in a fresh worker
    torch_recs = [r for r in recs if r.backend == "torch"]
    assert torch_recs and all(r.status == OK and r.device == "cuda" for r in torch_recs)
    assert len(recs) == len({r.key() for r in recs})


class _FakeCudnn:
    """The three calls a handle makes, recorded: which handle was created, pointed where, destroyed."""

    def __init__(self, path):
        self.path, self.calls, self.made = path, [], 0
        self.lib = self

    def check(self, code, call):
        assert code == 0

    def cudnnCreate(self, ref):
        self.made += 1
        ref._obj.value = self.made
        return 0

    def cudnnSetStream(self, handle, stream):
        self.calls.append(("stream", handle.value, stream.value))
        return 0

    def cudnnDestroy(self, handle):
        self.calls.append(("destroy", handle.value))
        return 0


def test_fresh_handles_made_ahead_are_taken_before_new_ones_and_never_from_another_library(monkeypatch):
    from harness.backends import cudnn_lib as cudnn

    monkeypatch.setattr(cudnn, "_fresh_handles", [])
    monkeypatch.setattr(cudnn, "FRESH_HANDLES_AHEAD", 3)
    lib = _FakeCudnn("/lib/libcudnn.so.9")
    list(cudnn.make_fresh_handles(lib, 5))
    assert lib.made == 3  # at most FRESH_HANDLES_AHEAD wait
    list(cudnn.make_fresh_handles(lib, 2))
    assert lib.made == 3  # enough wait already
    taken = cudnn.fresh_handle(lib, 77)
    assert taken.ptr.value in (1, 2, 3) and lib.calls[-1] == ("stream", taken.ptr.value, 77)
    assert len(cudnn._fresh_handles) == 2
    other = _FakeCudnn("/lib/libcudnn.so.8")
    new = cudnn.fresh_handle(other, 5)  # another library's handles are closed, not used
    assert new.cudnn is other and other.made == 1 and cudnn._fresh_handles == []
    assert sorted(c[1] for c in lib.calls if c[0] == "destroy") == sorted({1, 2, 3} - {taken.ptr.value})


def test_cudnn_answers_asked_ahead_are_taken_once_by_their_library_and_a_refusal_comes_back(monkeypatch):
    """The next case's workspaces and rankings, asked while the other process measures (cudnn_queries): the
    slice takes each answer once instead of asking, a refusal asked ahead is raised as cuDNN raised it, and what
    another library, problem or math type asks is asked then."""
    from types import SimpleNamespace

    from harness.backends import cudnn_queries as queries
    from harness.backends.cudnn_lib import CudnnError
    from harness.core.cases import ALGOS

    asked, rows = [], [{"rank": 0, "algo": "ALGO_1"}]

    class Desc:
        def __init__(self, cudnn, case, dtype, layout):
            self.math = None

        def set_math(self, math):
            self.math = math

        def close(self):
            asked.append("closed")

    class Conv:
        def __init__(self, cudnn, handle, desc, direction, ptrs):
            self.desc, self.direction = desc, direction

        def workspace_size(self, algo):
            asked.append(("workspace", self.direction, self.desc.math, algo))
            if algo == 1:
                raise CudnnError("CUDNN_STATUS_NOT_SUPPORTED", "cudnnGetConvolutionBackwardFilterWorkspaceSize")
            return 100 * algo

        def get_v7(self):
            asked.append(("get_v7", self.direction, self.desc.math))
            return rows

    monkeypatch.setattr(queries, "ConvDescriptors", Desc)
    monkeypatch.setattr(queries, "Conv", Conv)
    monkeypatch.setattr(queries, "Handle", lambda cudnn, stream: object())
    monkeypatch.setattr(queries, "_answers", {})
    monkeypatch.setattr(queries, "_handles", {})
    lib, seed = SimpleNamespace(path="/lib/libcudnn.so.9"), cases.get("quick.seed")
    problem = ("bwd_filter", "fp16", "NHWC")
    list(queries.ask_ahead(lib, seed, [(*problem, "FMA")], rankings=True))
    n_algos = len(ALGOS["bwd_filter"])
    assert len(asked) == n_algos + 2 and asked[-1] == "closed"

    def never():
        raise AssertionError("asked again although it was asked ahead")

    assert queries.answer(lib, seed, *problem, "FMA", queries.WORKSPACE, 2, never) == 200
    with pytest.raises(CudnnError, match="NOT_SUPPORTED"):
        queries.answer(lib, seed, *problem, "FMA", queries.WORKSPACE, 1, never)
    assert queries.answer(lib, seed, *problem, "FMA", queries.GET_V7, None, never) is rows
    assert queries.answer(lib, seed, *problem, "FMA", queries.WORKSPACE, 2, lambda: "now") == "now"  # once
    other = SimpleNamespace(path="/lib/libcudnn.so.8")
    assert queries.answer(other, seed, *problem, "FMA", queries.WORKSPACE, 3, lambda: "now") == "now"
    assert queries.answer(lib, seed, *problem, "DEFAULT", queries.WORKSPACE, 3, lambda: "now") == "now"
    assert queries.answer(lib, cases.get("quick.grouped"), *problem, "FMA", queries.WORKSPACE, 3,
                          lambda: "now") == "now"
    # a timing-only process asks no ranking; asking for the next case drops what the last one left
    list(queries.ask_ahead(lib, cases.get("quick.grouped"), [("fwd", "fp32", "NCHW", "DEFAULT")],
                          rankings=False))
    assert queries.answer(lib, seed, *problem, "FMA", queries.WORKSPACE, 3, lambda: "now") == "now"
    assert {k[6] for k in queries._answers} == {queries.WORKSPACE} and len(queries._answers) == len(ALGOS["fwd"])


def test_a_refusal_asked_ahead_leaves_no_cycle_holding_the_session_that_met_it(monkeypatch):
    """A session that meets a refusal asked ahead is freed the moment it is dropped, with its device buffers,
    as when it asked cuDNN itself: a kept exception raised again held the session's frames in a cycle, and a
    backward night ran out of device memory (cudnn_queries.Refused)."""
    import gc
    import weakref
    from types import SimpleNamespace

    from harness.backends import cudnn_queries as queries
    from harness.backends.cudnn_lib import CudnnError

    monkeypatch.setattr(queries, "_answers", {})
    lib, seed = SimpleNamespace(path="/lib/libcudnn.so.9"), cases.get("quick.seed")
    key = ("bwd_data", "fp32", "NCHW", "DEFAULT", queries.WORKSPACE)

    def refuse(algo):
        raise CudnnError("CUDNN_STATUS_NOT_SUPPORTED", "cudnnGetConvolutionBackwardDataWorkspaceSize")

    class Session:  # what ConvSession.bind does with an answer: it holds the device buffers
        def bind(self, algo):
            try:
                return queries.answer(lib, seed, *key, algo, lambda: refuse(algo))
            except CudnnError as exc:
                return exc.status

    for algo in range(2):
        queries._keep((lib.path, seed, *key, algo), refuse, algo)
    gc.disable()
    try:
        for algo in range(2):
            session = Session()
            gone = weakref.ref(session)
            assert session.bind(algo) == "CUDNN_STATUS_NOT_SUPPORTED"
            del session
            assert gone() is None
    finally:
        gc.enable()


def test_a_replicas_timing_pass_writes_its_slice_line_with_the_wait_before_it(tmp_path):
    """A replica journals no record, yet its pass is a slice of the night: it writes its slice line (kind
    "replica") with how long its message waited for the worker, as the main worker's slices do."""
    from harness.backends.pytorch import TorchBackend
    from harness.run import poolchild, slicetime

    case = cases.get("quick.seed")
    options = SweepOptions(device="cpu", timing=TimingPolicy(budget_ms=1.0, min_samples=3, max_samples=5),
                           dtypes=("fp32",), timing_only=True)
    combos = TorchBackend().combos(case, options)[:2]
    reply = poolchild._run_slice({"collect": True, "backend": "torch", "case": case, "combos": combos,
                                  "options": options, "run_dir": str(tmp_path), "waited_s": 0.25})
    assert reply[0] == "done" and len(reply[2]) == 2
    (line,) = slicetime.read(tmp_path)
    assert line["kind"] == slicetime.REPLICA and line["records"] == 2 and line["waited_s"] == 0.25
    assert line["backend"] == "torch" and line["case"] == case.id and line["measure_s"] > 0
