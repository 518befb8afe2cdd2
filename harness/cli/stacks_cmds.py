"""Subcommands ``stacks list|download|install``: stacks without Docker, pinned wheel overlays over this host's Python."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import EXIT_ENVIRONMENT, UserError
from .helptext import command
from .images_cmds import matrix_of
from .jsonout import add_json, emit


def register(sub) -> None:
    p = command(sub, "stacks", help="stacks without Docker: pinned wheel overlays over this host's own Python",
                description="Stacks for hosts without Docker: a declared overlay's locked wheels installed into a "
                            "folder over this host's own Python, named by `convbench run --stacks` and "
                            "`convbench upgrade`.",
                examples=["convbench stacks list", "convbench stacks download cudnn91 --wheelhouse wh/",
                          "convbench stacks install cudnn91 --wheelhouse wh/"])
    p.add_argument("--matrix", type=Path, default=None, help="matrix file (default: docker/matrix.toml)")
    ssub = p.add_subparsers(dest="stacks_command", metavar="SUBCOMMAND")
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])
    q = command(ssub, "list", help="the declared overlays, the rows they stand in for, and which are installed",
                description="List the overlays declared in the matrix, the image rows they stand in for, and "
                            "which are installed in the stacks folder.",
                examples=["convbench stacks list", "convbench stacks list --json"])
    add_json(q)
    q.set_defaults(handler=stacks_list)
    q = command(ssub, "download", help="fetch an overlay's locked wheels into a wheelhouse (needs the index)",
                description="Download an overlay's locked wheels, checked by sha256, into a folder to copy to a "
                            "GPU host that has no package index.",
                examples=["convbench stacks download cudnn91 --wheelhouse wh/"])
    q.add_argument("name", help="the overlay's name (`convbench stacks list`)")
    q.add_argument("--wheelhouse", type=Path, required=True, help="folder to download the wheels into")
    q.set_defaults(handler=stacks_download)
    q = command(ssub, "install", help="install an overlay offline from a wheelhouse (hashes from its lock)",
                description="Install an overlay from a wheelhouse with no network, each wheel checked against "
                            "its lock's sha256, into the stacks folder.",
                examples=["convbench stacks install cudnn91 --wheelhouse wh/",
                          "convbench stacks install cudnn91 --wheelhouse wh/ --into /opt/convbench/stacks"])
    q.add_argument("name", help="the overlay's name (`convbench stacks list`)")
    q.add_argument("--wheelhouse", type=Path, required=True, help="folder holding the overlay's locked wheels")
    q.add_argument("--into", type=Path, default=None,
                   help="stacks folder (default: $CONVBENCH_STACKS or ~/.local/share/convbench/stacks)")
    q.set_defaults(handler=stacks_install)


def _overlay(matrix, name):
    if name not in matrix.overlays:
        raise UserError(f"no overlay {name!r} in {matrix.path}; declared: {', '.join(matrix.overlays) or 'none'}")
    return matrix.overlays[name]


def stacks_list(args) -> int:
    from ..deploy import stacks

    matrix = matrix_of(args)
    where = stacks.stacks_dir()
    found = [{"name": ov.name, "libraries": list(ov.libraries), "over": ov.host,
              "stands_in_for": list(ov.stands_in_for), "installed": (where / ov.name / stacks.MANIFEST).is_file(),
              "path": str(where / ov.name)} for ov in matrix.overlays.values()]
    if args.json:
        emit({"stacks_dir": str(where), "overlays": found})
        return 0
    for ov in found:
        print(f"{ov['name']:12s} {', '.join(ov['libraries'])}; over {ov['over']}; stands in for "
              f"{', '.join(ov['stands_in_for'])}; {'installed' if ov['installed'] else 'not installed'} ({ov['path']})")
    return 0


def stacks_download(args) -> int:
    from ..deploy import imagematrix, wheels

    matrix = matrix_of(args)
    overlay = _overlay(matrix, args.name)
    try:
        wheels.overlay_lock(overlay)
        dest, lock = wheels.wheelhouse(matrix, overlay, args.wheelhouse)
    except imagematrix.MatrixError as exc:
        raise UserError(str(exc), EXIT_ENVIRONMENT) from None
    print(f"{len(lock.pins)} locked wheels of {overlay.name} in {dest}; copy that folder to the GPU host and run "
          f"`convbench stacks install {overlay.name} --wheelhouse {dest}`")
    return 0


def stacks_install(args) -> int:
    from ..deploy import stacks

    matrix = matrix_of(args)
    stack = stacks.install(_overlay(matrix, args.name), args.wheelhouse, args.into)
    print(f"stack {stack.name} installed in {stack.prefix}: libraries {', '.join(stack.library_dirs()) or 'none'}")
    return 0
