#!/usr/bin/env bash
# One nightly stage run twice on one GPU in one job: first by a baseline tree (a copy of main's code, made here
# with `scripts/gpu/side_by_side.sh --pack REV`), then by this tree; then the two runs side by side
# (scripts/run_breakdown.py --against) and each side's end.json (wall, sweep, asv phase).
#   scripts/gpu/side_by_side.sh --pack REV      (here: .baseline/ holds REV's code, no fixtures; carry it)
#   OUT=dir bash scripts/gpu/side_by_side.sh fwd   (on the GPU host, asv on PYTHONPATH)
#     asv travels as an overlay: `scripts/gpu/pack_stack.sh asv WHEEL_DIR 'virtualenv' 'virtualenv-*'` here
#     (asv.conf.json's environment is convbench's own plugin, so virtualenv, 5.8 of the 8.2 MB of asv's wheels, is
#     never imported), then `bash .devwheels/asv/unpack.sh` there and ASV_PATH=/tmp/stack-asv
#   OUT=dir bash scripts/gpu/side_by_side.sh fidelity   (the two timers' bench_fidelity.py, then both side by side)
#     both sides run this tree's bench_fidelity.py, each with its own harness: one protocol for both timers. With
#     each round after 1 s of idle a side takes about 350 s, so run SIDES=base and SIDES=new in two calls and put
#     the two JSON side by side here (bench_fidelity.py --against)
# AGAIN=1 runs this tree's stage a second time (side new2): with the first, an A/A pair of the new code on
# the same GPU, to be compared where the runs come back. SIDES (default "base new") runs one side only.
# The device returns at most 8 files from $OUT: each side's stage writes under $SBS_WORK/convbench-sbs/SIDE, and $OUT
# gets SIDE-STAGE-run.tgz and SIDE-STAGE.log (its console, breakdown included) a side, against.txt and
# side-by-side.txt: 8 files with AGAIN=1 (fidelity: SIDE-fidelity.json and its log).
set -uo pipefail
if [ "${1:-}" = "--pack" ]; then
  rev=${2:?REV}; rm -rf .baseline && mkdir .baseline
  git archive "$rev" harness benchmarks scripts ':(glob)tests/*.py' asv.conf.json pyproject.toml setup.py \
    | tar -x -C .baseline
  git rev-parse --short "$rev" > .baseline/REVISION
  du -sh .baseline; exit 0
fi
stage=${1:?stage: fwd or bwd}
OUT=${OUT:-/tmp/convbench-out}
WORK=${SBS_WORK:-/tmp}  # the baseline's copy, each side's scratch and its run's path, kept between calls
mkdir -p "$WORK"
[ -f .baseline/REVISION ] || { echo "side_by_side: no .baseline/ (make it with --pack REV and carry it)" >&2; exit 2; }
here=$PWD
export CONVBENCH_MACHINE=${CONVBENCH_MACHINE:-h200-lent-gpu0}
export FIDELITY_TIMEOUT=${FIDELITY_TIMEOUT:-480}  # an older tree's nightly.sh allowed 300 s, before the 1 s idle
newest() { ls -td /tmp/convbench-results/$CONVBENCH_MACHINE/*/ | head -1; }
# SIDES="base" then SIDES="new" in two calls on the warm machine: a backward job each, as one call holds only one;
# each side's run is remembered under $WORK, so the second call puts them side by side.
SCRATCH=$WORK/convbench-sbs
# one side's stage: its console to $OUT/SIDE-STAGE.log (and here), its tarball or JSON copied to $OUT
run_side() {
  local side=$1 tree=$2; local out=$SCRATCH/$side
  rm -rf "$out"; mkdir -p "$out"
  ( cd "$tree" && OUT="$out" PYTHONPATH="${ASV_PATH:-}:$tree" bash scripts/gpu/nightly.sh "$stage" ) 2>&1 \
    | tee "$OUT/$side-$stage.log"
  for f in "$stage-run.tgz" fidelity.json; do [ -f "$out/$f" ] && cp "$out/$f" "$OUT/$side-$f"; done
  [ "$stage" = fidelity ] || newest > "$WORK/convbench-side-$stage-$side"
}
mkdir -p "$OUT"
for side in ${SIDES:-base new}; do
  if [ "$side" = base ]; then
    base_tree=$WORK/convbench-baseline; rm -rf "$base_tree"; cp -r .baseline "$base_tree"
    [ "$stage" = fidelity ] && cp "$here/scripts/bench_fidelity.py" "$base_tree/scripts/"  # one protocol, two timers
    CONVBENCH_REVISION="$(cat "$base_tree/REVISION")" run_side base "$base_tree"
  else
    run_side "$side" "$here"
  fi
done
if [ "$stage" = fidelity ]; then  # no run directory: the two benchmarks' JSON side by side
  [ -f "$SCRATCH/base/fidelity.json" ] && [ -f "$SCRATCH/new/fidelity.json" ] || exit 0
  python3 scripts/bench_fidelity.py --against "$SCRATCH/base/fidelity.json" "$SCRATCH/new/fidelity.json" \
    | tee "$OUT/against.txt"
  exit 0
fi
[ "${AGAIN:-0}" = 1 ] && run_side new2 "$here"
[ -f "$WORK/convbench-side-$stage-base" ] && [ -f "$WORK/convbench-side-$stage-new" ] || exit 0
base_run=$(cat "$WORK/convbench-side-$stage-base"); new_run=$(cat "$WORK/convbench-side-$stage-new")
python3 scripts/run_breakdown.py "$new_run" --against "$base_run" | tee "$OUT/against.txt"
for side in base_run new_run; do
  echo "$side $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in ('seconds','sweep_seconds','asv_seconds','ok')})" "${!side}end.json")"
done | tee "$OUT/side-by-side.txt"
