"""Slurm nights as rendered (harness/deploy/slurm.py): the job's shape, values checked and quoted, and the rendered
script RUN under bash with stand-ins for srun, convbench and docker: per-slot shipping, exit codes, and hostile
values that reach convbench byte for byte and never run (issue 42). The real cluster: tests/test_slurm_cluster.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from harness.cli import main
from harness.deploy import imagematrix, slurm

FLEET_MATRIX = Path(__file__).parent / "fixtures" / "fleet_matrix.toml"

# srun's stand-in: the command once per node of $FAKE_NODES (or the one --nodelist names), each with its node name
# and two GPU slots
FAKE_SRUN = """#!/bin/bash
only=
while [[ "${1:-}" == --* ]]; do case "$1" in --nodelist=*) only=${1#--nodelist=};; esac; shift; done
rc=0
for n in $FAKE_NODES; do
  if [ -n "$only" ] && [ "$n" != "$only" ]; then continue; fi
  # a node in $FAKE_DEAD dies before it ends: real srun says "Node failure" and still exits 0 under --no-kill
  if [ "$n" = "${FAKE_DEAD:-}" ]; then echo "srun: error: Node failure on $n" >&2; continue; fi
  SLURMD_NODENAME=$n CUDA_VISIBLE_DEVICES=0,1 "$@" || rc=$?
done
exit $rc
"""
# convbench's stand-in: records its argv, writes one machine folder per GPU slot as the contract says
FAKE_CONVBENCH = """#!/usr/bin/env python3
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
def opt(name):
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a[len(name) + 1:]
        if a == name:
            return args[i + 1]
log = Path(os.environ["FAKE_LOG"])
log.mkdir(parents=True, exist_ok=True)
(log / (opt("--host-name") + "-" + str(len(list(log.iterdir()))) + ".json")).write_text(json.dumps(args))
results = Path(opt("--results"))
for slot in opt("--gpus").split(","):
    run = results / f"{opt('--host-name')}-slot{slot}-cpu" / f"run-{opt('--rows') or 'native'}"
    run.mkdir(parents=True, exist_ok=True)
    (run / "records.jsonl").write_text("{}\\n")
sys.exit(int(os.environ.get("FAKE_EXIT_" + opt("--host-name"), "0")))
"""
FAKE_DOCKER = "#!/bin/bash\nexit 0\n"
# scontrol's stand-in: the job's nodes, one a line
FAKE_SCONTROL = """#!/bin/bash
[ "$1 $2" = "show hostnames" ] && printf '%s\\n' $FAKE_NODES
"""


def render(tmp_path: Path, **kw) -> str:
    m = imagematrix.load_matrix(FLEET_MATRIX)
    kw.setdefault("results", str(tmp_path / "node-local"))
    kw.setdefault("outbox", str(tmp_path / "outbox"))
    rows = [] if kw.get("docker") is False else list(m.rows.values())
    return slurm.render_slurm(m, rows, **kw)["slurm/convbench-ci.sbatch"]


def stubs(tmp_path: Path, convbench_dir: Path | None = None) -> tuple[dict, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("srun", FAKE_SRUN), ("docker", FAKE_DOCKER), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    cb = (convbench_dir or bin_dir) / "convbench"
    cb.parent.mkdir(parents=True, exist_ok=True)
    cb.write_text(FAKE_CONVBENCH)
    cb.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_NODES="n1 n2", SLURM_JOB_ID="77",
               SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="n[1-2]",
               FAKE_LOG=str(tmp_path / "argv"))
    return env, cb


def run_script(tmp_path: Path, text: str, env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "night.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    return subprocess.run(["bash", str(script)], env=env, cwd=cwd or tmp_path, capture_output=True, text=True,
                          timeout=60)


def argv_seen(tmp_path: Path) -> list[list[str]]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "argv").iterdir())]


def tarballs(outbox: Path) -> dict[str, list[str]]:
    out = {}
    for p in sorted(outbox.glob("*.tar.gz")):
        with tarfile.open(p) as tf:
            out[p.name] = sorted(n for n in tf.getnames() if n.count("/") == 0)
    return out


def test_one_job_takes_every_gpu_of_every_node_of_the_pool(tmp_path):
    text = render(tmp_path, docker=False, convbench="/site/venv/bin/convbench")
    for line in ("#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1", "#SBATCH --exclusive",
                 "#SBATCH --gres=gpu:2", "#SBATCH --no-kill", "#SBATCH --partition=gpu"):
        assert line in text.splitlines()
    assert "--array" not in text
    # one job step per node, so that a node that dies ends its own step only
    assert re.search(r"^  \( srun --nodes=1 --ntasks=1 --nodelist=\"\$node\" --kill-on-bad-exit=0 bash -c 'convbench_node'",
                     text, re.M)
    assert '"$convbench" run --no-docker --gpus "$gpus" --host-name "$node"' in text
    assert "local convbench=/site/venv/bin/convbench" in text


def test_the_default_matrix_renders_per_pool_with_its_rows(tmp_path):
    m = imagematrix.load_matrix()
    files = slurm.render_slurm(m, list(m.rows.values()), results="/r", outbox="/box")
    p40 = files["slurm/convbench-p40.sbatch"]
    rows_line = next(ln for ln in p40.splitlines() if "rows=(" in ln)
    assert "cu118-cudnn8-torch23" in rows_line and "cu130" not in rows_line and "cpu" not in rows_line
    assert f"#SBATCH --nodes={m.pools['p40'].nodes}" in p40 and "#SBATCH --gres=gpu:4" in p40
    h200 = files["slurm/convbench-h200.sbatch"]
    assert '"$convbench" run --rows "$row" --gpus "$gpus" --host-name "$node"' in h200
    assert "--gres=gpu:8" in h200
    for name, text in files.items():
        path = tmp_path / name.replace("/", "-")
        path.write_text(text)
        if name.endswith(".sbatch"):
            assert subprocess.run(["bash", "-n", str(path)]).returncode == 0, name
    cron = files["slurm/convbench-h200.scrontab"].splitlines()
    assert "#SCRON --partition=gpu-h200" in cron
    assert "0 1 * * * sbatch /shared/convbench/fleet/slurm/convbench-h200.sbatch" in cron


def test_pool_nodes_is_a_positive_integer(tmp_path):
    text = FLEET_MATRIX.read_text()
    bad = tmp_path / "m.toml"
    bad.write_text(text.replace("nodes = 3", "nodes = 0"))
    with pytest.raises(imagematrix.MatrixError, match="'nodes' must be a positive integer"):
        imagematrix.load_matrix(bad)
    bad.write_text(text.replace("nodes = 3", 'nodes = "3"'))
    with pytest.raises(imagematrix.MatrixError, match="positive integer"):
        imagematrix.load_matrix(bad)
    bad.write_text(text.replace("nodes = 3\n", ""))
    assert imagematrix.load_matrix(bad).pools["ci"].nodes == 1  # the default: one node


@pytest.mark.parametrize("flag, value", [("--results", "/r\nrm -rf /"), ("--outbox", "/box\r"),
                                         ("--cases", "quick\x1b[2J"), ("--convbench", "conv\tbench"),
                                         ("--fleet-dir", "/a dir"), ("--schedule", "0 1 * *"), ("--time", "8h")])
def test_a_bad_value_is_one_line_and_exit_2(tmp_path, capsys, flag, value):
    code = main(["images", "--matrix", str(FLEET_MATRIX), "render", "--slurm", "--no-docker",
                 f"{flag}={value}", "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err
    assert not (tmp_path / "slurm").exists()


def test_no_docker_refuses_rows(capsys):
    assert main(["images", "--matrix", str(FLEET_MATRIX), "render", "--slurm", "--no-docker", "cpu"]) == 2


@pytest.mark.parametrize("docker", [False, True])
def test_each_gpu_slot_ships_as_its_own_tarball(tmp_path, docker):
    """(d) the Docker variant too: run with stand-ins, each node's two slots land as two tarballs."""
    (tmp_path / "outbox").mkdir()
    env, cb = stubs(tmp_path)
    out = run_script(tmp_path, render(tmp_path, docker=docker, convbench=str(cb)), env)
    assert out.returncode == 0, out.stderr
    got = tarballs(tmp_path / "outbox")
    assert got == {f"convbench-ci-77-{n}-slot{s}-cpu.tar.gz": [f"{n}-slot{s}-cpu"]
                   for n in ("n1", "n2") for s in (0, 1)}
    assert not list((tmp_path / "outbox").glob(".*"))  # no .part left
    seen = argv_seen(tmp_path)
    if docker:
        assert [a[a.index("--rows") + 1] for a in seen] == ["cu130-cudnn919-torch211"] * 2  # the pool's row
        assert "--no-docker" not in seen[0]
    else:
        assert seen[0][:2] == ["run", "--no-docker"] and "--rows" not in seen[0]
    assert all(a[a.index("--gpus") + 1] == "0,1" for a in seen)
    assert sorted(a[a.index("--host-name") + 1] for a in seen) == ["n1", "n2"]


def test_an_unwritable_outbox_fails_the_night_and_keeps_the_runs(tmp_path):
    (tmp_path / "outbox").write_text("a file where the outbox should be")
    env, cb = stubs(tmp_path)
    out = run_script(tmp_path, render(tmp_path, docker=False, convbench=str(cb)), env)
    assert out.returncode == 4
    assert "could not ship GPU slot n1-slot0-cpu" in out.stdout  # the nodes' lines, stderr too, go to the job log
    assert sorted(p.name for p in (tmp_path / "node-local" / "77-n2").iterdir()) == ["n2-slot0-cpu", "n2-slot1-cpu"]


def test_a_failed_run_is_shipped_and_fails_the_node(tmp_path):
    (tmp_path / "outbox").mkdir()
    env, cb = stubs(tmp_path)
    env["FAKE_EXIT_n2"] = "1"
    out = run_script(tmp_path, render(tmp_path, docker=False, convbench=str(cb)), env)
    assert out.returncode == 1
    assert len(tarballs(tmp_path / "outbox")) == 4  # what n2 measured is shipped all the same


def test_a_node_that_never_ends_fails_the_job_though_srun_exits_0(tmp_path):
    (tmp_path / "outbox").mkdir()
    env, cb = stubs(tmp_path)
    env["FAKE_DEAD"] = "n2"
    out = run_script(tmp_path, render(tmp_path, docker=False, convbench=str(cb)), env)
    assert out.returncode == 5
    assert "1 of 2 node(s) done with exit 0; srun exit 0" in out.stdout
    assert len(tarballs(tmp_path / "outbox")) == 2


def test_a_missing_image_fails_the_node(tmp_path):
    (tmp_path / "outbox").mkdir()
    env, cb = stubs(tmp_path)
    (tmp_path / "bin" / "docker").write_text("#!/bin/bash\nexit 1\n")
    out = run_script(tmp_path, render(tmp_path, docker=True, convbench=str(cb)), env)
    assert out.returncode == 3 and "not loadable" in out.stdout
    assert not (tmp_path / "argv").exists()


HOSTILE = [";touch {canary};#", "$(touch {canary})", "`touch {canary}`", "a b  c", "it's", 'say "hi"',
           "-rf", "$HOME", "*", "a\\b", "{{x}}", "' ; touch {canary} ; '", "&& touch {canary}", "| tee {canary}",
           "> {canary}"]


def _night_with(tmp_path: Path, value: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Every value the script takes set to `value` (within a folder where it is a path); what convbench saw."""
    canary = tmp_path / "canary"
    value = value.replace("{canary}", str(canary))
    results = tmp_path / "res" / value.replace("/", "_") if value.replace("/", "_") not in (".", "..") else tmp_path
    outbox = tmp_path / ("box " + value.replace("/", "_"))
    outbox.mkdir(parents=True)
    env, cb = stubs(tmp_path, tmp_path / ("bin " + value.replace("/", "_")))
    text = render(tmp_path, docker=False, convbench=str(cb), results=str(results), outbox=str(outbox),
                  cases=value, stacks=value, job="sweep", backends=value)
    out = run_script(tmp_path, text, env)
    assert not canary.exists(), f"the value {value!r} ran a command"
    assert out.returncode == 0, out.stderr
    seen = argv_seen(tmp_path)
    assert len(seen) == 2
    for args in seen:
        node = args[args.index("--host-name") + 1]
        assert f"--cases={value}" in args and f"--backends={value}" in args and f"--stacks={value}" in args
        assert f"--results={results}/77-{node}" in args
    assert len(tarballs(outbox)) == 4
    return out, {"results": results, "outbox": outbox}


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_reach_convbench_unchanged_and_never_run(tmp_path, value):
    _night_with(tmp_path, value)


def test_a_results_folder_starting_with_a_dash(tmp_path):
    (tmp_path / "outbox").mkdir()
    env, cb = stubs(tmp_path)
    out = run_script(tmp_path, render(tmp_path, docker=False, convbench=str(cb), results="-rf x"), env)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "-rf x" / "77-n1" / "n1-slot0-cpu").is_dir()
    assert any("--results=-rf x/77-n1" in a for a in argv_seen(tmp_path))
    assert len(tarballs(tmp_path / "outbox")) == 4


def test_generated_hostile_values(tmp_path_factory):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    alphabet = st.sampled_from(list(" !\"#$%&'()*+,-.:;<=>?@[\\]^_`{|}~aZ9\u00e9\u2603"))

    @hypothesis.settings(max_examples=25, deadline=None, database=None)
    @hypothesis.given(st.text(alphabet, min_size=1, max_size=24))
    def night(value):
        _night_with(tmp_path_factory.mktemp("h"), value)

    night()


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_in_a_docker_night_never_run(tmp_path, value):
    """The Docker variant: the images folder (given to `docker load`) and the cases hold the value; the images
    are loaded from exactly that folder and nothing injected runs."""
    canary = tmp_path / "canary"
    value = value.replace("{canary}", str(canary))
    images = tmp_path / ("images " + value.replace("/", "_"))
    (tmp_path / "outbox").mkdir()
    env, cb = stubs(tmp_path)
    docker_log = tmp_path / "docker-calls"
    docker_log.mkdir()
    (tmp_path / "bin" / "docker").write_text(  # no image is there yet: each node loads it, side by side, so
        # each call writes its own file (lines appended by two nodes at once would interleave)
        '#!/bin/bash\n[ "$1" = image ] && exit 1\nprintf "%s\\n" "$@" > "$(mktemp "$DOCKER_LOG/call.XXXXXX")"\n')
    env["DOCKER_LOG"] = str(docker_log)
    out = run_script(tmp_path, render(tmp_path, docker=True, convbench=str(cb), images_dir=str(images),
                                      cases=value), env)
    assert not canary.exists(), f"the value {value!r} ran a command"
    assert out.returncode == 0, out.stderr
    row = "cu130-cudnn919-torch211"
    calls = [p.read_text().splitlines() for p in docker_log.iterdir()]
    assert calls == [["load", "-i", f"{images}/{row}.tar"]] * 2
    assert all(f"--cases={value}" in a and a[a.index("--rows") + 1] == row for a in argv_seen(tmp_path))
