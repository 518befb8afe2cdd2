#!/usr/bin/env bash
# The whole GPU job for one lent machine, in stages that each fit one 10-minute call:
#   fwd    the default forward sweep through asv (timed), then a real kernel fault under the worker watchdog
#   bwd    the default backward sweep (backward-data and backward-filter) through asv (timed); BENCH_ARGS go to
#          `convbench bench` (fwd too), e.g. BENCH_ARGS="--processes 1"
#   check  the backward run replayed in a fresh process (hashes compared), the GPU tests
#   ort    the default onnxruntime grid through asv (timed), its GPU tests, latency vs onnxruntime's profiler
#   fidelity  the suite's timer against triton's do_bench (scripts/bench_fidelity.py), FIDELITY_TIMEOUT s at most
#   probe  diagnosis, not the nightly job: a profiled in-process backward sweep of four heavy cases
#   verify   after a change of the code the CPU tests cannot reach: the GPU tests, the seed cases through asv in
#            every direction, and the run collected and reported
#   profile  diagnosis: the default sweep of PROFILE_DIRECTIONS (fwd) with every worker under cProfile
#            (CONVBENCH_PROFILE_DIR), split into phases by scripts/night_profile.py; PROFILE_CASES narrows it
#   probe-replica  diagnosis: the same four cases' replica pass (timing only), profiled (scripts/gpu/replica_probe.py)
#   power  the gate's detection power: +5 %/+10 % device-side slowdowns injected (scripts/gpu/detection_power.py)
#   aa     an A/A study through `convbench upgrade` (the host stack against itself, ABBA), forward default
#   upgrade  `convbench upgrade` of the host stack against the overlay $STACK_B (/tmp/stack-NAME), UPGRADE_ARGS
#   repeat  REPEAT_RUNS (8) forward sweeps of REPEAT_CASES, one stack on one GPU, back to back: the change-point
#           false-alarm rate (scripts/changepoint_false_alarms.py) and A/A pairs, read here afterwards
#   autotune the autotuner study on the host stack and on $STACK_B, both GPUs (0 and 1) each, swapped in two rounds
#   ortold   the onnxruntime grid on the overlay /tmp/stack-ort1192 (onnxruntime-gpu 1.19.2, CUDA 12 libraries,
#            torch's own cuDNN), as on the host's onnxruntime
# Usage (repo root, asv and onnxruntime on PYTHONPATH): OUT=dir bash scripts/gpu/nightly.sh STAGE
# Everything lands under $OUT as it is made, so a stage cut short still returns what it measured;
# results stay under /tmp/convbench-results while the machine is warm, so `check` finds `bwd`'s run.
set -uo pipefail
stage=${1:?stage: fwd, bwd, check, ort, fidelity or probe}
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-/tmp/convbench-out}; mkdir -p "$OUT"
RES=/tmp/convbench-results; mkdir -p "$RES"
export CONVBENCH_MACHINE=${CONVBENCH_MACHINE:-h200-lent-gpu0}
# Bytecode written to a place that outlives each process. On the lent machine torch's package
# directory is writable yet had no __pycache__ after two imports, and a profiled process compiled 1,274 modules
# on import (5.9 s): bytecode is not being written there. The gain of this was not measured separately.
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/convbench-pycache}
unset PYTHONDONTWRITEBYTECODE
# asv records results per commit of branch main: the copied tree gets a one-commit repository of its own;
# the real suite revision travels in CONVBENCH_REVISION.
# Only the stages that run asv make it: two stages may run side by side on a two-GPU host (one per GPU), and a
# second snapshot would pull the repository from under the first one's asv.
case $stage in fwd|bwd|ort|verify)
  git config --global --add safe.directory '*'
  rm -rf .git && git init -q -b main && git add -A &&
    git -c user.email=gpu@convbench -c user.name=gpu commit -qm "snapshot of ${CONVBENCH_REVISION:-the working tree}" ;;
esac
t() { local s=$(date +%s); "$@"; local rc=$?; echo "[timing] $* : $(( $(date +%s) - s )) s (rc=$rc)"; return $rc; }
newest() { ls -td "$RES/$CONVBENCH_MACHINE"/*/ | head -1; }
# One tarball per stage: its run directory and asv's results (cuDNN API logs left out: tens of MB).
pack() { tar czf "$OUT/$stage-run.tgz" --exclude=cudnn_logs -C "$RES" "${1#$RES/}" asv-results 2>/dev/null; }
asv_copy() { mkdir -p "$RES/asv-results" && cp -r .asv/results/. "$RES/asv-results/"; }
case $stage in
fwd)
  python3 -m harness.cli doctor > "$OUT/doctor.txt" 2>&1; head -30 "$OUT/doctor.txt"
  t python3 -m harness.cli bench --results "$RES" -b "CudnnForward|TorchForward" ${BENCH_ARGS:-} 2>&1 | tail -3
  run=$(newest); asv_copy; pack "$run"
  python3 scripts/run_breakdown.py "$run" | tee "$OUT/fwd-breakdown.txt"
  [ "${FAULT_CHECK:-1}" = 1 ] || exit 0  # FAULT_CHECK=0: the timed job alone (side-by-side runs)
  t env CONVBENCH_TEST_BACKENDS=1 timeout 120 python3 -m pytest -q -s -rs tests/test_worker.py -k real_kernel_fault \
    > "$OUT/kernel-fault.log" 2>&1; tail -15 "$OUT/kernel-fault.log"
  ;;
bwd)
  t env CONVBENCH_DIRECTIONS=bwd_data,bwd_filter timeout "${BWD_TIMEOUT:-555}" python3 -m harness.cli bench --results "$RES" \
    -b "Backward" ${BENCH_ARGS:-} 2>&1 | tail -3
  run=$(newest); asv_copy; pack "$run"
  python3 scripts/run_breakdown.py "$run" | tee "$OUT/bwd-breakdown.txt"
  ;;
check)
  run=$(newest)
  t timeout 300 python3 -m harness.cli repro "$run" 2>&1 | tail -8
  pack "$run"
  t timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py -rs 2>&1 | tail -8
  ;;
ort)
  t timeout 400 python3 -m harness.cli bench --cases seed.c8 --results "$RES" -b OrtModels 2>&1 | tail -3
  run=$(newest); asv_copy; pack "$run"
  python3 -m harness.cli ort-grid --summarize "$run" 2>/dev/null | tail -30
  t timeout 100 python3 -m pytest -q -m gpu tests/test_ort_gpu.py -rs 2>&1 | tail -6
  t timeout 80 python3 scripts/bench_ort.py --skip-grid > "$OUT/bench_ort.log" 2>&1; tail -10 "$OUT/bench_ort.log"
  ;;
fidelity)
  t timeout "${FIDELITY_TIMEOUT:-480}" python3 scripts/bench_fidelity.py ${FIDELITY_ARGS:-} --json "$OUT/fidelity.json" \
    > "$OUT/fidelity.log" 2>&1; tail -22 "$OUT/fidelity.log"
  ;;
probe)
  t timeout 300 python3 -m cProfile -o "$OUT/bwd-sweep.prof" -m harness.cli sweep --no-isolate --results "$RES" \
    --cases seed.c64,resnet50.conv1.n32,resnet50.layer1.1.conv1.n32,resnet50.layer3.1.conv2.n32 \
    --directions bwd_data,bwd_filter 2>&1 | tail -2
  run=$(newest); pack "$run"
  python3 scripts/run_breakdown.py "$run" | tee "$OUT/probe-breakdown.txt"
  python3 -c "import pstats,sys; p=pstats.Stats(sys.argv[1]); p.sort_stats('tottime').print_stats(30); \
    p.sort_stats('cumulative').print_stats(45)" "$OUT/bwd-sweep.prof" > "$OUT/bwd-sweep-profile.txt"
  grep -A32 "Ordered by: internal" "$OUT/bwd-sweep-profile.txt" | cut -c1-150
  ;;
verify)
  t timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_ort_gpu.py -rs -p no:cacheprovider 2>&1 | tail -6
  t env CONVBENCH_DIRECTIONS=fwd,bwd_data,bwd_filter timeout 200 python3 -m harness.cli bench --results "$RES" \
    --cases seed -b "CudnnForward|TorchForward|Backward" 2>&1 | tail -4
  run=$(newest); pack "$run"
  t python3 -m harness.cli collect "$run" --store "$OUT/verify.sqlite" 2>&1 | tail -2
  t python3 -m harness.cli report --store "$OUT/verify.sqlite" --out /tmp/verify-site 2>&1 | tail -2
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in ('seconds','sweep_seconds','asv_seconds','counts')})" "${run}end.json"
  ls .asv/results/*/ | head
  ;;
profile)
  dirs=${PROFILE_DIRECTIONS:-fwd}; d=${dirs//,/-}  # file names without commas: the device tool drops those
  t timeout "${PROFILE_TIMEOUT:-540}" env CONVBENCH_PROFILE_DIR="$OUT/prof-$d" python3 -m harness.cli sweep \
    --results "$RES" --cases "${PROFILE_CASES:-default}" --directions "$dirs" 2>&1 | tail -2
  run=$(newest); pack "$run"
  python3 scripts/run_breakdown.py "$run" | tee "$OUT/profile-$d-breakdown.txt"
  python3 scripts/night_profile.py "$OUT/prof-$d" --top 40 | tee "$OUT/profile-$d.txt" | head -70 | cut -c1-150
  tar czf "$OUT/prof-$d.tgz" -C "$OUT" "prof-$d" && rm -rf "${OUT:?}/prof-$d"
  ;;
probe-replica)
  t timeout 300 python3 scripts/gpu/replica_probe.py --profile "$OUT/replica.prof" > "$OUT/replica-probe.txt" 2>&1
  head -60 "$OUT/replica-probe.txt" | cut -c1-150
  ;;
power)  # two processes one after the other on each GPU (a run's two), the GPUs in parallel
  for g in ${POWER_GPUS:-0}; do
    ( for part in 1 2; do
        t env CUDA_VISIBLE_DEVICES=$g timeout ${POWER_TIMEOUT:-270} python3 scripts/gpu/detection_power.py \
          --part $part --json "$OUT/power-gpu$g-part$part.json" >> "$OUT/power-gpu$g.log" 2>&1
      done ) &
  done
  wait
  for g in ${POWER_GPUS:-0}; do
    tail -n 4 "$OUT/power-gpu$g.log"
    python3 scripts/gpu/detection_power.py --judge "$OUT"/power-gpu$g-part1.json "$OUT"/power-gpu$g-part2.json \
      --json "$OUT/detection-power-gpu$g.json" | cut -c1-300
    python3 -c "import lzma, os, sys; [(open(p + '.xz', 'wb').write(lzma.compress(open(p, 'rb').read())), os.remove(p)) for p in sys.argv[1:]]" "$OUT"/power-gpu$g-part*.json
  done
  ;;
aa|upgrade)
  b=host; [ "$stage" = upgrade ] && b=${STACK_B:?STACK_B=NAME=/tmp/stack-NAME}
  t timeout "${UPGRADE_TIMEOUT:-560}" python3 -m harness.cli upgrade --a host --b "$b" --results "$RES" \
    --json "$OUT/$stage.json" ${UPGRADE_ARGS:-} 2>&1 | grep -v "^GPU [0-9]* " | tail -8
  python3 - "$OUT/$stage.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for g, leg in d["legs"].items():
    for r, p in leg["runs"].items():
        print(g, r, p)
PY
  tar czf "$OUT/$stage-runs.tgz" --exclude=cudnn_logs -C "$RES" $(python3 -c "import json,sys,os; d=json.load(open(sys.argv[1])); print(' '.join(os.path.relpath(p, sys.argv[2]) for l in d['legs'].values() for p in l['runs'].values()))" "$OUT/$stage.json" "$RES")
  ;;
repeat)
  cases=${REPEAT_CASES:-seed.c8,resnet50.conv1.n32,resnet50.layer1.0.conv2.n32,resnet50.layer2.0.conv3.n32,resnet50.layer3.0.conv2.n32,resnet50.layer4.0.downsample.n32}
  s0=$(date +%s); : > "$OUT/repeat-runs.txt"
  for i in $(seq 1 "${REPEAT_RUNS:-8}"); do  # no new run once REPEAT_BUDGET s are spent: each run lands whole
    [ $(( $(date +%s) - s0 )) -lt "${REPEAT_BUDGET:-470}" ] || break
    t timeout 200 python3 -m harness.cli sweep --cases "$cases" --directions fwd --no-rankings --results "$RES" \
      2>&1 | tail -1
    newest >> "$OUT/repeat-runs.txt"
  done
  tar czf "$OUT/repeat-runs.tgz" --exclude=cudnn_logs -C "$RES" $(sed "s|^$RES/||" "$OUT/repeat-runs.txt")
  python3 scripts/changepoint_false_alarms.py $(cat "$OUT/repeat-runs.txt") 2>&1 | tee "$OUT/changepoint.txt" | tail -3
  ;;
autotune)
  b=${STACK_B:?STACK_B=NAME=/tmp/stack-NAME}
  benv=$(python3 -c "import sys; from harness.deploy import stacks; e = stacks.resolve(sys.argv[1]).env({}); \
print(' '.join(f'{k}={v}' for k, v in e.items()))" "$b")
  for round in 0 1; do  # round 0: host on GPU 0, B on GPU 1; round 1 swapped
    g_host=$round; g_b=$((1 - round))
    t env CUDA_VISIBLE_DEVICES=$g_host CONVBENCH_MACHINE=$CONVBENCH_MACHINE-at$g_host timeout 270 \
      python3 -m harness.cli autotune --results "$RES/autotune" > "$OUT/autotune-host-gpu$g_host.log" 2>&1 &
    t env $benv CUDA_VISIBLE_DEVICES=$g_b CONVBENCH_MACHINE=$CONVBENCH_MACHINE-at$g_b timeout 270 \
      python3 -m harness.cli autotune --results "$RES/autotune" > "$OUT/autotune-b-gpu$g_b.log" 2>&1 &
    wait
  done
  tail -n 3 "$OUT"/autotune-*.log
  tar czf "$OUT/autotune-runs.tgz" --exclude=cudnn_logs -C "$RES" autotune
  ;;
ortold)
  st=/tmp/stack-ort1192; site=/opt/torch/.venv/lib/python3.12/site-packages
  export LD_LIBRARY_PATH=$st/nvidia/cublas/lib:$st/nvidia/cufft/lib:$st/nvidia/curand/lib:$st/nvidia/cuda_runtime/lib:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PYTHONPATH=$st:$PYTHONPATH CONVBENCH_STACK=ort1192
  python3 -c "import onnxruntime as o; print(o.__version__, o.get_available_providers())"
  t timeout 560 python3 -m harness.cli ort-grid --out "$RES" ${ORT_ARGS:-} 2>&1 | tail -25
  run=$(ls -td "$RES"/*/*/ | head -1); tar czf "$OUT/ortold-run.tgz" -C "$RES" "${run#$RES/}"
  ;;
*) echo "unknown stage $stage: fwd, bwd, check, ort, fidelity, probe, power, aa, upgrade, repeat, autotune or ortold" >&2; exit 2 ;;
esac
ls -la "$OUT"
