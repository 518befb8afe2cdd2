"""docs/cli.md is the parser's own reference (scripts/cli_reference.py): it lists every command and option and
cannot drift from what --help prints."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_command_reference_is_what_the_parser_says():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "cli_reference.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_the_reference_names_every_command_and_option():
    import argparse

    from harness.cli import build_parser

    text = (ROOT / "docs" / "cli.md").read_text()
    stack = [(("convbench",), build_parser())]
    while stack:
        path, parser = stack.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack += [((*path, name), sub) for name, sub in action.choices.items()]
            elif len(path) > 1 and not isinstance(action, argparse._HelpAction):
                assert any(flag in text for flag in action.option_strings or [action.dest]), (path, action.dest)
        if len(path) > 1:
            assert f"## `{' '.join(path)}`" in text, path


def test_every_environment_variable_the_code_reads_is_in_the_reference():
    import re

    code = "".join(p.read_text() for folder in ("harness", "benchmarks", "convbench") for p in
                   (ROOT / folder).rglob("*.py"))
    code += "".join(p.read_text() for p in (ROOT / "scripts").glob("*.sh"))
    named = set(re.findall(r"CONVBENCH_[A-Z0-9_]*[A-Z0-9]", code))
    reference = (ROOT / "docs" / "reference.md").read_text()
    assert len(named) > 20 and not {v for v in named if f"`{v}`" not in reference}
