"""Every command docs/images.md and docs/fleet.md give a reader: each is run here as written (placeholders filled,
optional parts left out), or named with the test that runs it, or named with why it cannot run on this machine.
A command added to the docs that is none of these fails this test."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

from tests._docs_commands import blocks

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "docs" / "images.md", ROOT / "docs" / "fleet.md"]
CONVBENCH = [sys.executable, "-m", "harness.cli"]

# run here, as written (after PLACEHOLDERS), by test_the_docs_commands_run_as_written
RUN_HERE = (
    "convbench images list", "convbench images render [ROW...]", "convbench stacks list",
    "convbench images render --slurm --out fleet/", "convbench images render --k8s --out fleet/",
    "convbench images render --k8s --out fleet/ --registry registry.example/convbench",
    "convbench collect /shared/convbench/inbox/*.tar.gz /mnt/convbench-results --store fleet.sqlite",
    "convbench compare <last night> <tonight> --store fleet.sqlite", "convbench report --store fleet.sqlite --out reports/",
)
# run by another test, which the docs' command names
ELSEWHERE = {
    "convbench images build [ROW...]": "tests/test_docker_integration.py::cpu_image",
    "convbench images base [BASE...]": "tests/test_docker_integration.py::cpu_image",
    "mkdir -p results": "tests/test_docker_integration.py::test_two_plain_docker_run_nights_as_the_docs_write_them",
    "docker run --rm --network none": "tests/test_docker_integration.py::test_two_plain_docker_run_nights_as_the_docs_write_them",
    ".venv/bin/python scripts/fleet_night.py [--work DIR]": "tests/test_fleet_night.py::test_the_fleet_night_in_one_command",
    "sbatch fleet/slurm/convbench-<pool>.sbatch": "tests/test_slurm_cluster.py::test_a_night_measures_every_gpu_slot",
    "convbench images render --slurm --out fleet/ [--no-docker": "tests/test_slurm_cluster.py::test_a_night_measures_every_gpu_slot",
}
# cannot run on a 2-core CPU machine without a cluster, and why
NOT_HERE = {
    "convbench images lock [ROW...]": "resolves every row's closure from PyPI and PyTorch's index (network, minutes)",
    "convbench images lock cudnn927 ort1192": "resolves from PyPI's index (network)",
    "convbench stacks download ort1192": "downloads CUDA wheels (gigabytes)",
    "convbench stacks install ort1192": "needs those CUDA wheels; installs are tested with a local wheel (tests/test_overlays.py)",
    "convbench run --no-docker --stacks host,cudnn927,ort1192": "needs a GPU and the installed overlays",
    "scrontab ": "Debian 12's slurm-client has no scrontab; the line it runs is tested (tests/test_slurm_cluster.py)",
    "kubectl ": "no Kubernetes cluster here; the manifests are validated against the API schema (tests/test_k8s.py)",
    "python scripts/bench_multigpu.py": "needs two GPUs",
}


def commands() -> list[str]:
    """Each command of the two docs' fenced blocks, continuation lines joined, comments dropped."""
    out = []
    for path in DOCS:
        for _heading, text in blocks(path):
            joined = re.sub(r"\\\n\s*", " ", text)
            lines = []
            for line in joined.splitlines():
                line = re.sub(r"\s+#\s.*$", "", line).rstrip()
                if line.startswith("    [") and lines:  # an indented line of optional flags continues the command
                    lines[-1] += " " + line.strip()
                elif line.strip():
                    lines.append(line.strip())
            lines = [" ".join(c.split()) for c in lines]
            out += lines
    return out


def where(command: str) -> str:
    for known in RUN_HERE:
        if command == known or command.startswith(known + " ["):
            return "here"
    for table, what in ((ELSEWHERE, "elsewhere"), (NOT_HERE, "not here")):
        if any(command.startswith(k) for k in table):
            return what
    return "unaccounted"


def test_every_command_in_the_docs_is_run_or_says_why_not():
    found = commands()
    assert len(found) >= 20, found
    missing = [c for c in found if where(c) == "unaccounted"]
    assert not missing, "commands in the docs that no test runs and nothing explains:\n" + "\n".join(missing)
    for command, test in ELSEWHERE.items():
        file, name = test.split("::")
        assert name in (ROOT / file).read_text(), f"{command}: {test} does not exist"
    unused = [k for k in (*RUN_HERE, *ELSEWHERE, *NOT_HERE) if not any(c.startswith(k.rstrip()) for c in found)]
    assert not unused, f"no longer in the docs, drop them here: {unused}"


def test_the_docs_commands_run_as_written(tmp_path):
    """The commands runnable here, run in a shell from a scratch folder: the collecting host's morning on a
    committed CPU run (its tarball in the inbox, collected, rendered) and two committed H200 nights compared."""
    import shutil

    inbox = tmp_path / "shared" / "convbench" / "inbox"
    inbox.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "fixtures" / "runs" / "cpu-quick.tar.gz", inbox / "night.tar.gz")
    volume = tmp_path / "mnt" / "convbench-results"  # the Kubernetes results volume, as the collector sees it
    volume.mkdir(parents=True)
    with tarfile.open(ROOT / "tests" / "fixtures" / "runs" / "cpu-quick.tar.gz") as tar:
        tar.extractall(volume, filter="data")
    fills = {"/shared/": f"{tmp_path}/shared/", "/mnt/": f"{tmp_path}/mnt/",
             # two nights of one H200 (an A/A pair): a run compared with itself is refused (exit 2)
             "<last night> <tonight>": " ".join(str(ROOT / "tests" / "fixtures" / "runs" / f"h200-aa2-fwd-{i}.tar.gz")
                                               for i in (1, 2))}
    for command in commands():
        if where(command) != "here":
            continue
        text = command
        while "[" in text:  # optional parts left out, innermost first
            text = re.sub(r"\s*\[[^\[\]]*\]", "", text)
        for k, v in fills.items():
            text = text.replace(k, v)
        argv = shlex.split(text)
        assert argv[0] == "convbench", command
        argv = CONVBENCH + argv[1:]
        if "*" in text:
            argv = [str(p) for a in argv for p in (sorted(Path("/").glob(a.lstrip("/"))) if "*" in a else [a])]
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                              env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, f"{command}\n{done.stdout[-1500:]}{done.stderr[-1500:]}"
    assert (tmp_path / "fleet" / "slurm").is_dir() and (tmp_path / "fleet" / "k8s").is_dir()
    assert (tmp_path / "reports" / "index.html").is_file()

