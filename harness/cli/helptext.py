"""Every subcommand's ``--help`` in one shape: what it is for, then examples to copy.

One helper so that no subcommand can be registered without a description and an example
(tests/test_cli_help.py walks the parser and holds every command and option to it).
"""

from __future__ import annotations

import argparse


def command(sub, name: str, *, help: str, description: str, examples: list[str]) -> argparse.ArgumentParser:
    """A subparser of ``sub`` with a one-line ``help`` (the command list), a ``description`` and examples."""
    epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    return sub.add_parser(name, help=help, description=description, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
