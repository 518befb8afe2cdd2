"""The ``convbench`` command: one subcommand per task, each registered by the module that owns it.

Errors a user can cause (a bad flag, an unknown case, a missing GPU or engine, a malformed file) end in one
line on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from harness.core import children
from harness.core.errors import EXIT_USAGE, UserError, printable
from harness.core.paths import DEFAULT_STORE, RESULTS_DIR

# Each module exposes register(subparsers); a subcommand's handler returns the exit code.
COMMAND_MODULES = ("harness.cli.measure_cmds", "harness.cli.bench_cmds", "harness.cli.ort_cmds", "harness.cli.store_cmds",
                   "harness.cli.images_cmds", "harness.cli.stacks_cmds", "harness.cli.upgrade_cmds")

USAGE = """\
Benchmark the convolutions of cuDNN, PyTorch and onnxruntime on this host (speed, accuracy against a
float64 reference, determinism), gather runs from many hosts into one store, gate a night against the one
before, and render a static report."""

EPILOG = f"""\
the usual night:
  convbench doctor                      what this host can run
  convbench bench                       measure (the asv suite; results under {RESULTS_DIR}/)
  convbench collect {RESULTS_DIR}             gather the runs into {DEFAULT_STORE}
  convbench compare BASE HEAD           exit 1 on a regression (the CI gate)
  convbench report                      write reports/site/index.html

`convbench COMMAND --help` has each command's options and examples.
exit codes: 0 ok, 1 failure or regression, 2 usage, 3 the host lacks something, 4 nothing to decide on."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors in one line (no usage block): `-inf` read as a flag, a missing value..."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {printable(message)} (see {self.prog} --help)\n")


def version_line() -> str:
    """What --version says: the release and the suite revision it was built from (baked into a wheel)."""
    from harness import __version__
    from harness.deploy.resources import revision

    return f"convbench {__version__} (suite revision {revision()})"


class _Version(argparse.Action):
    """argparse's version action, but the revision is only looked up (git) when --version is given."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="convbench", description=USAGE, epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and suite revision, exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # a command family not present in this build
        module.register(sub)
    return parser


# what a stopped command leaves, said after "interrupted" (the measuring commands journal as they go)
_KEPT = {**dict.fromkeys(("run", "sweep", "autotune", "repro", "bench", "upgrade", "ort-grid"),
                         "; what was measured is in the journal"),
         "collect": "; a store being built was removed, one collected into keeps the runs stored before",
         "report": "; the last report, if any, is as it was"}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    replaced = children.exit_on_signals()  # SIGTERM, SIGHUP: SystemExit, so every command's cleanup runs
    try:
        code = int(args.handler(args) or 0)
        children.raise_again()  # a stop Python dropped on the way still ends the command as stopped
        return code
    except UserError as exc:
        print(f"convbench {args.command}: error: {printable(exc)}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:  # `convbench cases --json | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"convbench {args.command}: interrupted{_KEPT.get(args.command, '')}", file=sys.stderr)
        return 130
    except SystemExit as exc:
        if isinstance(exc.code, int) and exc.code > 128:  # a signal (children.raise_exit): said in one line
            print(f"convbench {args.command}: stopped by signal {exc.code - 128}{_KEPT.get(args.command, '')}",
                  file=sys.stderr)
        raise
    finally:
        children.restore(replaced)


if __name__ == "__main__":
    sys.exit(main())
