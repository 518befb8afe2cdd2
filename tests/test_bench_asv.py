"""`convbench bench` end to end through a real `asv run` on the CPU: asv's results and the run journal."""

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from _fleet_data import journal_lines

from harness.core.cases import CATALOGUE

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_runs_the_asv_suite_on_the_cpu(tmp_path):
    pytest.importorskip("asv")
    if not (ROOT / ".git").exists():
        pytest.skip("asv records results per commit: needs a git checkout")
    machine = "convbench-test-cpu"
    (tmp_path / "home").mkdir()  # asv's machine file goes there, not into the user's home
    env = dict(os.environ, CONVBENCH_MACHINE=machine, PYTHONPATH=str(ROOT), HOME=str(tmp_path / "home"))
    res = subprocess.run([sys.executable, "-m", "harness.cli", "bench", "--cases", "quick.seed,quick.grouped",
                          "--results", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no GPU here: running the CPU backends" in res.stdout
    run_dir = next((tmp_path / machine).iterdir())
    end = json.loads((run_dir / "end.json").read_text())
    # every class of the suite ran without a failure; the conv records are the torch CPU ones
    assert end["asv_returncode"] == 0 and end["counts"]["skipped"] == 2 * 192
    # measured before asv started, in one sweep: asv's setup_cache only read the journal
    assert end["sweep_seconds"] + end["asv_seconds"] == pytest.approx(end["seconds"], abs=0.2)
    assert "cudnn quick.seed" in res.stderr and "torch quick.grouped" in res.stderr
    torch_ok = [r for r in (json.loads(x) for x in journal_lines(run_dir))
                if r["backend"] == "torch" and r["status"] == "ok"]
    assert len(torch_ok) == 2 * 3 * 2
    asv_dir = ROOT / ".asv" / "results" / machine
    try:
        result_files = [p for p in asv_dir.glob("*.json") if p.name != "machine.json"]
        assert result_files, "asv wrote no results"
        data = json.loads(result_files[0].read_text())
        names = data["result_columns"]
        track = data["results"]["bench_torch.TorchForward.time_conv"]
        values = track[names.index("result")]
        measured = [v for v in values if v is not None and v == v]  # asv stores n/a as NaN
        # On a CPU the grid is one setting per case x dtype x layout; asv's parameters hold every case of the
        # catalogue (so that publish shows every run's cases), the ones this run did not measure n/a.
        assert len(values) == len(CATALOGUE) * 3 * 2
        assert len(measured) == 2 * 3 * 2 and all(0 < v < 1 for v in measured)
        journal = [json.loads(line) for line in journal_lines(run_dir)]
        # asv's value is the median of the samples it took, which are the samples each record kept (the whole
        # series, or evenly spread over it where it was longer): the record's median of those
        medians = sorted(statistics.median(r["time"]["samples_ms"]) / 1e3 for r in journal
                         if r["backend"] == "torch" and r["status"] == "ok")
        assert sorted(measured) == pytest.approx(medians)
        # asv's own samples and statistics are the records' device-event samples (benchmarks/_bridge.replay)
        samples = [s for s in track[names.index("samples")] if s]
        recorded = sorted(sorted(s / 1e3 for s in r["time"]["samples_ms"]) for r in journal
                          if r["backend"] == "torch" and r["status"] == "ok")
        got = sorted(sorted(s) for s in samples)
        assert len(got) == len(recorded) and all(a == pytest.approx(b) for a, b in zip(got, recorded, strict=True))
        assert all(q is None or q == q for q in track[names.index("stats_q_25")])
        assert sum(1 for v in track[names.index("stats_ci_99_a")] if v is not None and v == v) == len(measured)
    finally:
        shutil.rmtree(asv_dir, ignore_errors=True)


def test_bench_sweeps_what_the_selected_classes_read(monkeypatch):
    """`convbench bench -b` maps asv's selection to the sweep it measures first; a selection of nothing is an error."""
    from harness.cli import UserError
    from harness.run.asvselect import sweeps as asv_sweeps

    monkeypatch.delenv("CONVBENCH_DIRECTIONS", raising=False)
    assert asv_sweeps([]) == {"cudnn": ("fwd",), "torch": ("fwd",)}
    assert asv_sweeps(["CudnnForward"]) == {"cudnn": ("fwd",)}
    assert asv_sweeps(["OrtModels"]) == {}  # selected, but it does its own work in setup_cache
    with pytest.raises(UserError, match="selects no benchmark"):
        asv_sweeps(["CudnnBackwardData"])  # a backward class exists only with CONVBENCH_DIRECTIONS
    monkeypatch.setenv("CONVBENCH_DIRECTIONS", "bwd_data,bwd_filter")
    assert asv_sweeps(["Backward"]) == {"cudnn": ("bwd_data", "bwd_filter"), "torch": ("bwd_data", "bwd_filter")}
    assert asv_sweeps([r"TorchBackwardFilter\."]) == {"torch": ("bwd_filter",)}
    assert asv_sweeps(["Backward"], ("bwd_data",)) == {"cudnn": ("bwd_data",), "torch": ("bwd_data",)}
    with pytest.raises(UserError, match="not a regular expression"):
        asv_sweeps(["Cudnn("])


def test_bench_times_in_the_processes_asked_for():
    """`convbench bench --processes 1` times a sweep in one process; without it every direction takes two
    (backends.command_options: the backward sweep fits its 10 minutes in two since 2026-12-01 evening)."""
    from harness.cli import build_parser
    from harness.cli.measure_cmds import sweep_setup
    from harness.run.nightly import bench_options

    assert bench_options(("fwd",), True, None).processes == 2
    assert bench_options(("bwd_data", "bwd_filter"), True, None).processes == 2
    assert bench_options(("bwd_data", "bwd_filter"), True, 1).processes == 1
    for argv, processes in (([], 2), (["--directions", "bwd_data,bwd_filter"], 2), (["--processes", "1"], 1)):
        _, options = sweep_setup(build_parser().parse_args(["sweep", "--cases", "seed.c4", *argv]))
        assert options.processes == processes, argv
    assert bench_options(("fwd",), False, None).device == "cpu"
    args = build_parser().parse_args(["bench", "--processes", "2", "-b", "Backward"])
    assert args.processes == 2 and args.bench == ["Backward"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--processes", "3"])


def test_find_ranking_is_forward_only_unless_asked():
    """Find's ranking times every algorithm again: a sweep with a backward direction records Get_v7's alone unless
    --find asks for Find's too; a forward sweep records both unless --no-find (backends.default_find)."""
    from harness.cli import build_parser
    from harness.cli.measure_cmds import sweep_setup
    from harness.run.nightly import bench_options

    assert bench_options(("fwd",), True, None).find
    assert not bench_options(("bwd_data", "bwd_filter"), True, None).find
    assert bench_options(("bwd_data", "bwd_filter"), True, None, find=True).find
    assert build_parser().parse_args(["bench", "--find"]).find is True
    parse = build_parser().parse_args
    for argv, find in ((["--directions", "fwd"], True), (["--directions", "fwd,bwd_data"], False),
                       (["--directions", "bwd_filter", "--find"], True), (["--no-find"], False)):
        _, options = sweep_setup(parse(["sweep", "--cases", "seed.c4", *argv]))
        assert options.find is find, argv


def test_ort_class_on_a_gpu_host_without_the_cuda_ep_journals_why(tmp_path, monkeypatch):
    """Seen on the H200: asv's environment did not see onnxruntime-gpu, and every CUDA setting went n/a
    with no word in the journal. Now each becomes a skipped record naming the cause, and asv says it too."""
    pytest.importorskip("onnxruntime")
    from benchmarks import bench_ort
    from harness.backends import ort
    from harness.measurement import fingerprint
    from harness.run.journal import JOURNAL_FILE, iter_journal

    if ort.OrtBackend().cuda_reason() is None:
        pytest.skip("this onnxruntime has the CUDA EP")
    monkeypatch.setattr(fingerprint, "gpus", lambda: ([{"index": 0, "name": "a GPU seen by NVML"}], None))
    monkeypatch.setattr(fingerprint, "take", lambda index=None: {"gpu": {"index": index}})

    class CudaOnly(ort.ModelOptions):  # the CPU EP cross-check is not what this test is about
        def __init__(self, **kw):
            super().__init__(**kw, cpu_ep=False)

    monkeypatch.setattr(ort, "ModelOptions", CudaOnly)
    monkeypatch.setattr(bench_ort, "MODELS", ["resnet50"])
    monkeypatch.setenv("CONVBENCH_RESULTS", str(tmp_path))
    monkeypatch.setenv("CONVBENCH_MACHINE", "test-gpu0")  # the stand-in fingerprint names no node
    monkeypatch.delenv("CONVBENCH_RUN_DIR", raising=False)
    table = bench_ort.run_grid()
    assert len(table) == 12 * 2 and {row["status"] for row in table.values()} == {"skipped"}
    (run,) = tmp_path.rglob("run.json")
    recs = list(iter_journal(run.parent / JOURNAL_FILE))
    assert len(recs) == 24 and all("no CUDA EP" in r["reason"] for r in recs)
    with pytest.raises(NotImplementedError, match="skipped: this onnxruntime .* has no CUDA EP"):
        bench_ort.OrtModels().setup(table, "resnet50", bench_ort.SETTINGS[0])


def test_asv_keeps_the_pythonpath_that_convbench_runs_with():
    from harness.run.nightly import asv_env

    env = asv_env({"PYTHONPATH": "/opt/ort-gpu:/x", "HOME": "/h"}, CONVBENCH_CASES="seed")
    assert env["ASV_PYTHONPATH"] == "/opt/ort-gpu:/x" and env["CONVBENCH_CASES"] == "seed" and env["HOME"] == "/h"
    assert asv_env({"PYTHONPATH": "/a", "ASV_PYTHONPATH": "/b"})["ASV_PYTHONPATH"] == "/b"  # the user's wins
    assert "ASV_PYTHONPATH" not in asv_env({"HOME": "/h"})


def test_torch_asv_parameters_match_the_h200_records_one_to_one():
    """Every PyTorch record of the real H200 runs falls in a parameter set of its classes and every time set of a
    finished case has data: no parameter set is n/a by construction (each costs asv about 10 ms)."""
    import itertools

    from _fleet_data import run_tarball

    from harness.run import suiteshape

    for fixture, directions in (("h200-fwd-asv", ("fwd",)), ("h200-bwd-asv", ("bwd_data", "bwd_filter"))):
        _, _, recs = run_tarball(fixture)
        for direction in directions:
            torch = [r for r in recs if r["kind"] == "measurement" and r["backend"] == "torch"
                     and r["direction"] == direction]
            (shape,) = [c for c in suiteshape.classes((direction,), "bench_torch") if c.kind == suiteshape.TIME]
            _, precisions, layouts = shape.params(gpu=True)
            have = {(r["case"], suiteshape.precision_of(r), r["layout"]) for r in torch}
            assert {p for _, p, _ in have} <= set(precisions) and {lay for _, _, lay in have} <= set(layouts)
            per_case = {c: sum(1 for r in torch if r["case"] == c) for c in {r["case"] for r in torch}}
            complete = {c for c, n in per_case.items() if n == 4 * 2 * 4}  # cases the run finished
            want = set(itertools.product(complete, precisions, layouts))
            assert want == {k for k in have if k[0] in complete}, (fixture, direction)


def _asv_listing() -> list[dict]:
    """The suite's benchmarks as asv's discovery lists them (name, params as reprs), discovered by asv_runner
    itself in a process that sees a GPU through NVML (the classes' parameters on a GPU host)."""
    code = ("import json, sys\n"
            "import harness.measurement.fingerprint as fp\n"
            "fp.gpus = lambda: ([{'index': 0}], None)\n"
            "from asv_runner.discovery import disc_benchmarks\n"
            "print(json.dumps([{'name': b.name, 'params': b.params} for b in disc_benchmarks(sys.argv[1])]))")
    env = dict(os.environ, PYTHONPATH=str(ROOT), CONVBENCH_DIRECTIONS="fwd")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks")], env=env, capture_output=True,
                         text=True, check=True, timeout=120).stdout
    return json.loads(out)


def test_asv_runs_exactly_the_parameter_sets_that_have_data(tmp_path, monkeypatch):
    """On the H200 forward run, the -b selection handed to asv picks, by asv's own matching, each time set whose
    group has an ok record and no other; numerics and stability groups with data; and it is derived from the
    library's table of the suite (suiteshape), which the suite's own discovery agrees with."""
    pytest.importorskip("asv")
    import ast
    import itertools
    import tarfile

    from _fleet_data import FIXTURES, run_tarball
    from asv.benchmarks import Benchmarks

    from harness.run import asvselect, suite, suiteshape

    _, _, recs = run_tarball("h200-fwd-asv")
    with tarfile.open(FIXTURES / "h200-fwd-asv.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    run_dir = next(tmp_path.glob("*/*/records.jsonl")).parent
    cases = sorted({r["case"] for r in recs})
    monkeypatch.delenv("CONVBENCH_DIRECTIONS", raising=False)
    data = suite.read_sweeps(run_dir)
    chosen_by_lib = asvselect.selection(["CudnnForward|TorchForward"], data, gpu=True)
    listed = _asv_listing()  # asv's own discovery of the suite: the same classes, methods and params as the table
    shaped = [{"name": n, "params": [[repr(v) for v in p] for p in c.params(True, suiteshape.ort_models())]}
              for c in suiteshape.classes(("fwd",)) for n in c.benchmark_names()]
    assert sorted(listed, key=lambda b: b["name"]) == sorted(shaped, key=lambda b: b["name"])
    conf = type("Conf", (), {"benchmark_dir": str(ROOT / "benchmarks")})()
    chosen = Benchmarks(conf, listed, regex=chosen_by_lib.regexes).benchmark_selection
    ok = [r for r in recs if r["kind"] == "measurement" and r["status"] == "ok"]
    cudnn_groups = {(r["case"], r["dtype"], r["layout"]) for r in ok if r["backend"] == "cudnn"}
    assert len(chosen["bench_cudnn.CudnnForward.time_conv"]) == len(cudnn_groups) == 26 * 3 * 2
    assert len(chosen["bench_torch.TorchForward.time_conv"]) == len(cases) * 4 * 2
    assert len(chosen["bench_cudnn.CudnnForwardNumerics.track_worst_rel_l2_error"]) == len(cases) * 3
    assert len(chosen["bench_torch.TorchForwardStability.track_unstable_combinations"]) == len(cases)
    # Left out: every set of the catalogue's cases this run did not measure (asv's parameters are the catalogue)
    per_case = {b["name"]: len(list(itertools.product(*b["params"][1:]))) for b in listed if "Forward" in b["name"]}
    assert all(b["params"][0] == [repr(c) for c in CATALOGUE] for b in listed if "Forward" in b["name"])
    assert chosen_by_lib.left_out == (len(CATALOGUE) - len(cases)) * sum(per_case.values())
    assert sum(len(v or [0]) for k, v in chosen.items() if "Forward" in k) == chosen_by_lib.sets
    assert all(len(r) < asvselect.MAX_REGEX_CHARS for r in chosen_by_lib.regexes)
    # each chosen cuDNN time set is a group with an ok record, and what asv replays is that group's fastest
    params = next(b for b in listed if b["name"] == "bench_cudnn.CudnnForward.time_conv")["params"]
    product = list(itertools.product(*params))
    picked = {tuple(ast.literal_eval(v) for v in product[i]) for i in chosen["bench_cudnn.CudnnForward.time_conv"]}
    assert picked == cudnn_groups
    fastest = {}
    for r in ok:
        if r["backend"] == "cudnn":
            key = (r["case"], r["dtype"], r["layout"])
            fastest[key] = min(fastest.get(key, float("inf")), r["time"]["median_ms"] / 1e3)
    times = data["cudnn", "fwd"].groups[suiteshape.TIME]
    assert {k: v[0] for k, v in times.items()} == fastest
    # and bench's selection reads the journal once and leaves what it read for asv's setup_cache
    shared = asvselect.bench_selection(["CudnnForward|TorchForward"], run_dir)
    assert (run_dir / suite.SWEEP_DATA_FILE).is_file()
    assert shared == asvselect.selection(["CudnnForward|TorchForward"], data, suite.gpus_seen())


@pytest.mark.slow
def test_plain_asv_run_saves_publishes_every_case_and_compares_commits(tmp_path):
    """asv itself, as asv users drive it, in a clone of this checkout: `asv run` (no flags) saves its results;
    a second commit measured with other cases; `asv publish` shows the cases of both; `asv compare` works."""
    pytest.importorskip("asv")
    if not (ROOT / ".git").exists():
        pytest.skip("asv records results per commit: needs a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True, timeout=120)
    env = dict(os.environ, PYTHONPATH=str(clone), HOME=str(tmp_path / "home"), CONVBENCH_RESULTS=str(tmp_path / "r"),
               CONVBENCH_MACHINE="ci",
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    (tmp_path / "home").mkdir()

    def asv(*args, cases=None):
        run_env = dict(env, CONVBENCH_CASES=cases) if cases else env
        res = subprocess.run([sys.executable, "-m", "asv", *args], cwd=clone, env=run_env, capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        return res.stdout

    def head():
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()

    # no `asv machine` first: the plugin registers this host's machine under convbench's name for it
    out = asv("run", "-b", "TorchForward.time_conv", cases="quick.seed")
    assert "n/a" not in out and "case values without data in this run not shown" in out, out[-2000:]
    assert '"ci"' in (tmp_path / "home" / ".asv-machine.json").read_text()
    first = head()
    subprocess.run(["git", "commit", "--quiet", "--allow-empty", "-m", "second"], cwd=clone, env=env, check=True)
    second = head()
    asv("run", "-b", "TorchForward.time_conv", cases="quick.grouped")
    results = clone / ".asv" / "results" / "ci"
    saved = sorted(p.name for p in results.glob("*.json") if p.name != "machine.json")
    assert [n[:8] for n in saved] == sorted([first[:8], second[:8]]), saved

    assert "Traceback" not in asv("check")  # asv's own import check of the suite, in environment 'convbench'
    asv("publish")
    graphs = list((clone / ".asv" / "html" / "graphs").rglob("bench_torch.TorchForward.time_conv.json"))
    (graph,) = [g for g in graphs if "machine-ci" in str(g)]
    index = json.loads((clone / ".asv" / "html" / "index.json").read_text())
    cases = [ast_eval(v) for v in index["benchmarks"]["bench_torch.TorchForward.time_conv"]["params"][0]]
    assert cases == list(CATALOGUE)  # every case listed, whichever run wrote benchmarks.json last
    points = json.loads(graph.read_text())  # [[revision, [value per parameter set]], ...]
    measured = {cases[i // (3 * 2)] for _, values in points for i, v in enumerate(values or [])
                if v is not None and v == v}
    assert measured == {"quick.seed", "quick.grouped"}  # both runs' cases shown

    out = asv("compare", first, second, "--machine", "ci")
    # the two commits measured different cases: each case's row is there, n/a on the side that lacks it
    rows = [ln for ln in out.splitlines() if "TorchForward.time_conv" in ln]
    assert any("quick.seed" in ln for ln in rows) and any("quick.grouped" in ln for ln in rows), out[-2000:]
    assert len(rows) == 2 * 3 * 2  # rows n/a on both sides (the catalogue's other cases) are left out
    assert any("±" in ln for ln in rows)  # asv's own statistics: the records' noise


def ast_eval(text: str):
    import ast

    return ast.literal_eval(text)


def test_bench_script_uses_the_hosts_python_environment_as_it_is(tmp_path):
    """scripts/bench.sh on a GPU host picks the active venv (or the interpreter named) and says so, instead of a
    fresh venv that cannot see the host's torch. A stand-in torch reports a usable CUDA GPU."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '2.11.0+cu130'\n"
                                      "class version:\n    cuda = '13.0'\n"
                                      "class cuda:\n    is_available = staticmethod(lambda: True)\n")
    base = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    base["PYTHONPATH"] = str(tmp_path / "site")

    def which(*args, **env):
        res = subprocess.run(["bash", str(ROOT / "scripts" / "bench.sh"), *args, "--which"], env=dict(base, **env),
                             capture_output=True, text=True, timeout=60)
        return res.returncode, res.stdout + res.stderr

    code, out = which(VIRTUAL_ENV=sys.prefix)
    assert code == 0 and "CUDA GPU found: using" in out and "the active virtual environment" in out, out
    assert f"environment {sys.prefix}" in out and "torch 2.11.0+cu130 CUDA 13.0" in out
    code, out = which("--python", sys.executable)
    assert code == 0 and "named by --python" in out, out
    code, out = which("--python", str(tmp_path / "no-python"))
    assert code == 3 and "no usable Python interpreter" in out
    code, out = which("--wheelhouse", str(tmp_path / "none"))
    assert code == 2 and "is not a folder" in out
