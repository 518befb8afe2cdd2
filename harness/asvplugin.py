"""asv plugin (asv.conf.json ``"plugins": [".harness.asvplugin"]``): the interpreter asv runs in, as an environment
whose results asv saves, and the baked suite revision as a repository where there is no git.

asv's own ``existing`` environment benchmarks the interpreter as it is but never saves results unless given
``--set-commit-hash``, so a plain ``asv run`` printed its tables and kept nothing. A GPU host's torch, cuDNN and
onnxruntime live in that interpreter (a venv, conda env or image), and building a fresh environment per commit
would bring pip's stack instead of the one under test. ``convbench`` (``environment_type``) is that interpreter,
with the project already installed: it benchmarks the commit the checkout is at (or the revision baked into the
installed wheel), and says so instead of benchmarking another commit's name with this code.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from asv import environment, util
from asv import results as asv_results
from asv.commands import compare as asv_compare
from asv.machine import Machine, MachineCollection
from asv.repo import NoSuchNameError, Repo

from .deploy import resources


def _installed_revision() -> str | None:
    """The commit of the convbench this interpreter imports: its checkout's full git hash, else the revision
    baked into the wheel (never the HEAD of some other repository the results happen to sit in)."""
    if resources.in_checkout() and resources.git_revision(resources.CHECKOUT):
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=resources.CHECKOUT, capture_output=True, text=True)
        return out.stdout.strip()
    rev = resources.revision()
    return None if rev == "unknown" else rev


def project(folder: Path) -> Path:
    """An asv project for an installed convbench (no checkout, no git): asv.conf.json in ``folder``, which must
    be writable, pointing at the shipped suite (read-only is fine) and keeping results, asv's machine file
    (HOME=folder/home) and environments under ``folder``. Returns the configuration's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "home").mkdir(exist_ok=True)
    conf = {"version": 1, "project": "convbench", "repo": str(resources.root()), "dvcs": RevisionRepo.dvcs,
            "branches": ["HEAD"], "environment_type": HostEnvironment.tool_name, "plugins": [".harness.asvplugin"],
            "benchmark_dir": str(resources.root() / "benchmarks"), "results_dir": str(folder / "results"),
            "html_dir": str(folder / "html"), "env_dir": str(folder / "env"), "launch_method": "forkserver",
            "build_command": [], "install_command": [], "uninstall_command": []}
    path = folder / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1) + "\n")
    return path


class HostEnvironment(environment.Environment):
    """This very interpreter (sys.executable), with convbench installed in it; results are saved.

    The commit the interpreter imports is benchmarked as installed. Another commit (`asv continuous`, `asv run
    A..B`) is checked out into the environment's build folder and run by the same interpreter, with that checkout
    first on the path and its own benchmarks/ as the suite: the host's torch, cuDNN and onnxruntime stay the ones
    under test, the suite's code is the commit's."""

    tool_name = "convbench"
    matches_python_fallback = False

    def __init__(self, conf, python, requirements, tagged_env_vars):
        self._executable = sys.executable
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        self._installed = self._active = _installed_revision()
        self._suite_dir = str(Path(conf.benchmark_dir).resolve())
        self._code: Path | None = None  # the checkout of the active commit, when it is not the installed one
        self._python, self._requirements, self._tagged_env_vars = version, {}, tagged_env_vars
        super().__init__(conf, version, {}, tagged_env_vars)

    @classmethod
    def matches(cls, python):
        return python in (None, "same", f"{sys.version_info[0]}.{sys.version_info[1]}")

    @property
    def installed_commit_hash(self):
        return self._active

    def check_presence(self):
        return True

    def create(self):
        pass

    def _setup(self):
        pass

    def can_install_project(self):
        return True

    def install_project(self, conf, repo, commit_hash=None):
        if commit_hash is None or commit_hash == self._installed:
            self._code = None
        elif self._installed is None:
            raise util.UserError("environment 'convbench' cannot tell which commit this interpreter's convbench "
                                 "is, so it cannot run another one beside it")
        else:
            self._code = Path(self._build_root)
            repo.checkout(str(self._code), commit_hash)
            if not (self._code / "benchmarks" / "_bridge.py").is_file():
                raise util.UserError(f"commit {commit_hash[:12]} has no convbench asv suite (benchmarks/_bridge.py)")
        self._active = commit_hash or self._installed
        self._set_commit_hash(commit_hash)

    def run(self, args, **kwargs):
        if self._code is not None:  # the active commit's suite and harness, not the working tree's
            suite = str(self._code / "benchmarks")
            args = [suite if a == self._suite_dir else a for a in args]
            env = dict(kwargs.pop("env", None) or os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self._code), env.get("PYTHONPATH")) if p)
            kwargs["env"] = env
        return util.check_output([self._executable] + args, **kwargs)


class RevisionRepo(Repo):
    """An installed convbench without git (an image): one commit, the suite revision baked into the wheel."""

    dvcs = "convbench-revision"

    def __init__(self, url, mirror_path):
        self._path = url
        self._revision = resources.revision()
        self._date = resources.revision_time() * 1000

    @classmethod
    def url_match(cls, url):
        return False

    def _check(self, name):
        if name not in (None, "HEAD", "main", self._revision):
            raise NoSuchNameError(name)
        return self._revision

    def checkout(self, path, commit_hash):
        pass

    def pull(self):
        pass

    def get_date(self, hash):
        return self._date

    def get_date_from_name(self, name):
        return self._date

    def get_hashes_from_range(self, range):
        return [self._revision]

    def get_hash_from_name(self, name):
        return self._check(name)

    def get_hash_from_parent(self, name):
        raise NoSuchNameError(f"{name}^")

    def get_name_from_hash(self, commit):
        return None

    def get_tags(self):
        return {}

    def get_branch_commits(self, branch):
        return [self._revision]

    def get_new_branch_commits(self, branches, existing):
        return [] if self._revision in existing else [self._revision]

    def get_revisions(self, commits):
        return {c: i for i, c in enumerate(commits)}


def register_machine() -> str | None:
    """asv's machine for this host, named as convbench names it (``vm-cpu``, ``n1-gpu0-nvidia-h200``; the
    same in `convbench bench` and a plain `asv run`) and registered with asv's own defaults the first time, so
    that the first `asv run` neither stops to ask (`asv machine --yes`) nor files results under the hostname."""
    from .core.errors import UserError
    from .measurement import fingerprint

    try:
        name = fingerprint.this_machine()
    except (UserError, OSError):  # a container with nothing naming its node: asv's own question stands
        return None
    Machine.hardcoded_machine_name = name
    try:
        MachineCollection.load(name)
    except util.UserError:
        MachineCollection.save(name, {**Machine.get_defaults(), "machine": name})
    return name


def _is_na(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def trim_tables() -> None:
    """Only parameter sets with data in asv's printed tables. asv prints a parametrised benchmark as a table of every parameter set; the suite's case parameter is the
    whole catalogue (so that `asv publish` shows every run's cases), so a run of 2 cases printed a row per
    catalogue case, almost all n/a (13,548 of 13,723 lines of one run). The cases without data in this run are
    left out of the printed table, and a line says how many; asv's results files are untouched."""
    original = asv_results._format_benchmark_result
    if getattr(original, "convbench_trimmed", False):
        return

    def without_empty_cases(result, benchmark, max_width=None):
        params = benchmark.get("params") or []
        if len(params) < 2 or not result:
            return original(result, benchmark, max_width)
        block = math.prod(len(p) for p in params[1:])
        keep = [i for i in range(len(params[0]))
                if not all(_is_na(v) for v, _ in result[i * block:(i + 1) * block])]
        if len(keep) == len(params[0]):
            return original(result, benchmark, max_width)
        left_out = f"({len(params[0]) - len(keep)} {benchmark['param_names'][0]} values without data in this " \
                   "run not shown)"
        if not keep:
            return [left_out]
        trimmed = dict(benchmark, params=[[params[0][i] for i in keep], *params[1:]])
        rows = [r for i in keep for r in result[i * block:(i + 1) * block]]
        return original(rows, trimmed, max_width) + [left_out]

    without_empty_cases.convbench_trimmed = True
    asv_results._format_benchmark_result = without_empty_cases

    # asv compare: a parameter set n/a on a side (not measured there) is left out of that side, so a row is
    # printed where either side has a number, not one per catalogue case on both sides
    unroll = asv_compare.unroll_result

    def measured_only(benchmark_name, params, *values):
        for name, value, *rest in unroll(benchmark_name, params, *values):
            if not _is_na(value):
                yield (name, value, *rest)

    asv_compare.unroll_result = measured_only


def _in_asv() -> bool:
    """Whether this process is asv's own (`asv ...` or `python -m asv ...`), which loads this plugin before any
    command runs; `convbench bench` imports it too, and registers its machine itself."""
    return getattr(sys.modules.get("__main__"), "__package__", None) == "asv" or Path(sys.argv[0]).name == "asv"


if _in_asv():
    trim_tables()
    register_machine()
