"""Every command's --help is written for a user: a description, an example to copy, and help on every option."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _subparsers(parser: argparse.ArgumentParser, path=("convbench",)):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _subparsers(sub, (*path, name))


COMMANDS = list(_subparsers(build_parser()))


def test_the_walk_sees_every_command():
    names = {" ".join(p[1:]) for p, _ in COMMANDS}
    assert {"doctor", "cases", "sweep", "bench", "collect", "compare", "report", "images list", "stacks install",
            "run", "upgrade", "autotune", "repro"} <= names


@pytest.mark.parametrize("path, parser", COMMANDS, ids=[" ".join(p[1:]) for p, _ in COMMANDS])
def test_every_command_has_a_description_an_example_and_option_help(path, parser):
    assert parser.description and len(parser.description) > 40, path
    assert parser.epilog and "examples:" in parser.epilog, path
    assert f"convbench {path[1]}" in parser.epilog, path  # an example runs this very command
    assert parser.formatter_class is argparse.RawDescriptionHelpFormatter, path  # examples keep their lines
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        assert action.help and action.help != argparse.SUPPRESS, (path, action.dest)


def test_top_level_help_is_for_users():
    parser = build_parser()
    text = parser.format_help()
    assert "the usual night" in text and "exit codes" in text and "convbench bench" in text
    assert "registered by the module" not in text  # not the developer docstring


def test_bench_takes_directions_from_the_flag_or_the_variable():
    args = build_parser().parse_args(["bench", "--directions", "fwd,bwd_data"])
    assert args.directions == ("fwd", "bwd_data")
    assert build_parser().parse_args(["bench"]).directions is None  # then $CONVBENCH_DIRECTIONS, else fwd


def test_one_default_store_and_case_set_everywhere():
    from harness.core.cases import DEFAULT_SET
    from harness.core.paths import DEFAULT_STORE

    parser = build_parser()
    for cmd in (["collect", "x"], ["compare", "a", "b"], ["report"]):
        assert parser.parse_args(cmd).store == DEFAULT_STORE == "results/convbench.sqlite"
    for cmd in (["sweep"], ["bench"], ["run"], ["autotune"], ["upgrade", "--a", "host", "--b", "host"]):
        assert parser.parse_args(cmd).cases == DEFAULT_SET == "default", cmd
    script = (ROOT / "scripts" / "bench.sh").read_text()
    assert "--store" not in script and "convbench\" collect results" in script  # bench.sh uses the defaults


def test_help_runs_as_a_process():
    res = subprocess.run([sys.executable, "-m", "harness.cli", "compare", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "examples:\n  convbench compare" in res.stdout
