"""Writes docs/cli.md, the reference of every command and option, from the parser itself (harness/cli), so the
page cannot drift from what `--help` prints; tests/test_cli_reference.py fails when the committed page is stale.

    python scripts/cli_reference.py            rewrite docs/cli.md
    python scripts/cli_reference.py --check    exit 1 if docs/cli.md differs from the parser
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's harness, not an installed one
PAGE = ROOT / "docs" / "cli.md"


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("convbench",)):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    metavar = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
    return ", ".join(f"`{flag}{metavar}`" for flag in action.option_strings)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction)):
            continue
        default = action.default
        if isinstance(default, (tuple, list)):
            default = ",".join(map(str, default))
        shown = "" if default in (None, False, "", argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
        rows.append(f"| {_flags(action)} | {_cell(action.help or '')} | {shown} |")
    if not rows:
        return []
    return ["| option | what it does | default |", "|---|---|---|", *rows, ""]


def page() -> str:
    from harness.cli import build_parser

    os.environ["COLUMNS"] = "120"  # argparse wraps usage lines to the terminal: the page must not depend on it
    top = build_parser()
    out = ["# Command reference", "",
           "Every command and option, as `--help` prints them; generated from the parser by",
           "`python scripts/cli_reference.py` (tests/test_cli_reference.py checks it is current). Exit codes, environment",
           "variables and file formats: [reference.md](reference.md).", "",
           "```", top.format_usage().strip(), "```", ""]
    for path, parser in _commands(top):
        out += [f"## `{' '.join(path)}`", "", " ".join((parser.description or "").split()), "",
                "```", parser.format_usage().strip(), "```", ""]
        out += _options(parser)
        if parser.epilog:
            out += ["```", parser.epilog.strip(), "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md differs from the parser")
    args = ap.parse_args()
    text = page()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
