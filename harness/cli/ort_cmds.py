"""``convbench ort-grid``: onnxruntime's models under every setting, with the seed question's answer."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.errors import UserError
from .helptext import command


def register(sub) -> None:
    p = command(sub, "ort-grid", help="onnxruntime's models under every search mode x TF32 x max workspace",
                description="Run ResNet-50 and MobileNetV2 through onnxruntime under every cuDNN search mode, TF32 "
                            "and max-workspace setting (and the CPU EP), each in fresh sessions and fresh processes, "
                            "into one run journal; then print how many distinct outputs each setting gave and which "
                            "conv engines differed. Exits 1 when every record of a model failed, 3 without "
                            "onnxruntime (or its CUDA EP with --device cuda).",
                examples=["convbench ort-grid --out results",
                          "convbench ort-grid --out results --device cpu --models mobilenetv2 --sessions 1",
                          "convbench ort-grid --resume results/MACHINE/RUN_ID",
                          "convbench ort-grid --summarize results/MACHINE/RUN_ID"])
    p.add_argument("--out", type=Path, help="results directory (a run directory is made inside; required to measure)")
    p.add_argument("--models", default=None, help="comma-separated, of resnet50, mobilenetv2 (default: both)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="execution provider (default: cuda)")
    p.add_argument("--batch", type=int, default=1, help="images per inference (default: 1)")
    p.add_argument("--sessions", type=int, default=5, help="fresh sessions in one process per setting (default: 5)")
    p.add_argument("--processes", type=int, default=5, help="fresh processes per setting (default: 5)")
    p.add_argument("--parallel", type=int, default=None, help="concurrent drift workers (default: automatic)")
    p.add_argument("--no-cpu-ep", action="store_true", help="on a GPU host, skip the CPU EP cross-check")
    p.add_argument("--no-logs", action="store_true", help="do not capture cuDNN logs")
    p.add_argument("--api-log", choices=("setting", "mode"), default="setting",
                   help="cuDNN's API log in the 5-session process of every setting (default) or only of the "
                        "first setting per search mode (faster; the frontend log still names every engine)")
    p.add_argument("--summarize", type=Path, metavar="RUN_DIR",
                   help="measure nothing: print the seed table of an existing run directory")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR",
                   help="continue an interrupted run: what its journal holds is not measured again")
    iso = p.add_mutually_exclusive_group()
    iso.add_argument("--isolate", dest="isolate", action="store_true", default=None,
                     help="each model in the sweep's worker pool (the default on CUDA)")
    iso.add_argument("--no-isolate", dest="isolate", action="store_false",
                     help="each model in this process (the default on the CPU)")
    p.set_defaults(handler=ort_grid)


def ort_grid(args: argparse.Namespace) -> int:
    from ..run import ort_grid as grid

    if args.summarize:
        print("\n".join(grid.summary_lines(args.summarize)))
        return 0
    models = {"models": tuple(m for m in args.models.split(",") if m)} if args.models else {}
    result = grid.run_grid(grid.GridOptions(
        out=args.out, **models, device=args.device, batch=args.batch,
        sessions=args.sessions, processes=args.processes, parallel=args.parallel, cpu_ep=not args.no_cpu_ep,
        logs=not args.no_logs, api_log=args.api_log, resume=args.resume, isolate=args.isolate))
    print(f"\n{len(result.records)} records in {result.seconds:.0f} s ({result.counts}); distinct outputs of the "
          "image input:")
    print("\n".join("  " + line for line in grid.seed_table(result.records)))
    failed = result.wholly_failed()
    if failed:
        first = next(r for r in result.records if r.case == failed[0])
        raise UserError(f"every record of {', '.join(failed)} failed (first: {first.reason})", 1)
    return 0
