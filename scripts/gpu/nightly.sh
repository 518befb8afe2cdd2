#!/usr/bin/env bash
# The whole GPU job for one lent machine, in two stages that each fit one 10-minute call:
#   stage a: the default forward sweep through asv (timed), fresh-process repro, timing fidelity, GPU tests
#   stage b: autotuner stability (K=5), the onnxruntime grid and its profiler check, a backward sweep
# Usage (repo root, wheels installed on PYTHONPATH): OUT=dir bash scripts/gpu/nightly.sh a|b
# Everything lands under $OUT as it is made, so a stage cut short still returns what it measured.
set -uo pipefail
stage=${1:?stage a or b}
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-/tmp/convbench-out}; mkdir -p "$OUT"
RES=/tmp/convbench-results; mkdir -p "$RES"
export CONVBENCH_MACHINE=${CONVBENCH_MACHINE:-h200-lent-gpu0}
# asv records results per commit of branch main: the copied tree gets a one-commit repository of its own;
# the real suite revision travels in CONVBENCH_REVISION.
git config --global --add safe.directory '*'
rm -rf .git && git init -q -b main && git add -A &&
  git -c user.email=gpu@convbench -c user.name=gpu commit -qm "snapshot of ${CONVBENCH_REVISION:-the working tree}"
t() { local s=$(date +%s); "$@"; local rc=$?; echo "[timing] $* : $(( $(date +%s) - s )) s (rc=$rc)"; return $rc; }
pack() { tar czf "$OUT/results-$stage.tgz" -C "$RES" . 2>/dev/null; }
case $stage in
a)
  python3 -m harness.cli doctor
  t python3 -m harness.cli bench --results "$RES" -b "CudnnForward|TorchForward" 2>&1 | tail -3
  pack
  run=$(ls -d "$RES/$CONVBENCH_MACHINE"/*/ | tail -1)
  python3 scripts/run_breakdown.py "$run"
  t python3 -m harness.cli repro "$run" 2>&1 | tail -5
  pack
  mkdir -p "$RES/asv-results" && cp -r .asv/results/. "$RES/asv-results/" && pack
  t timeout 200 python3 scripts/bench_fidelity.py --json "$OUT/fidelity.json" > "$OUT/fidelity.log" 2>&1
  tail -14 "$OUT/fidelity.log"
  t timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_ort_gpu.py -rs 2>&1 | tail -5
  ;;
b)
  t timeout 160 python3 -m harness.cli autotune --cases default -k 5 --results "$RES" 2>&1 | tail -25
  pack
  t timeout 250 python3 -m harness.ort_grid --out "$RES" --parallel 8 2>&1 | tail -25
  pack
  t timeout 40 python3 -m pytest -q -m gpu tests/test_ort_gpu.py -rs 2>&1 | tail -4
  t timeout 60 python3 scripts/bench_ort.py > "$OUT/bench_ort.log" 2>&1; tail -8 "$OUT/bench_ort.log"
  t timeout 60 python3 -m harness.cli sweep --results "$RES" --directions bwd_data,bwd_filter \
    --cases seed.c64,resnet50.layer4.1.conv2.n32 2>&1 | tail -3
  pack
  ;;
esac
ls -la "$OUT"
