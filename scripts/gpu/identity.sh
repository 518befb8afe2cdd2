#!/usr/bin/env bash
# A machine's identity on a real GPU: two nights of `convbench run --no-docker` on GPU 0 of the lent host, the
# node named as a scheduler would (--host-name), then the nightly gate between them and a morning report.
# Shows what NVML gives a run (GPU UUID, index, slot) and that two nights are one machine on real hardware.
# Usage (repo root): OUT=/some/dir bash scripts/gpu/identity.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-/tmp/convbench-out}; mkdir -p "$OUT"
RES=/tmp/convbench-identity; rm -rf "$RES"
NODE=${NODE:-lent-h200}
for night in 1 2; do
  t0=$(date +%s)
  python3 -m harness.cli run --no-docker --gpus 0 --host-name "$NODE" --job sweep --backends cudnn,torch \
    --cases quick.seed --results "$RES" -- --dtypes fp32,fp16 --layouts NCHW 2>&1 | tail -4
  echo "identity: night $night: exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
done
runs=( "$RES"/*/*/ )
echo "identity: ${#runs[@]} run(s): ${runs[*]}"
python3 - "$RES" <<'PY'
import json, pathlib, sys
from harness.analysis.compare import machine_identity
for run in sorted(pathlib.Path(sys.argv[1]).glob("*/*/run.json")):
    fp = json.loads(run.read_text())["fingerprint"]
    gpu = fp.get("gpu") or {}
    print(f"identity: {run.parent.parent.name}/{run.parent.name}: node {fp.get('node')}, slot {fp.get('slot')}, "
          f"gpu {gpu.get('name')} {gpu.get('uuid')} index {gpu.get('index')}, hostname {fp.get('hostname')}, "
          f"machine {machine_identity(fp)}")
PY
python3 -m harness.cli compare "${runs[0]}" "${runs[1]}"; echo "identity: compare exit $?"
python3 -m harness.cli collect "$RES" --store "$RES/store.sqlite" -q
python3 -m harness.cli report --store "$RES/store.sqlite" --out "$RES/site" >/dev/null; echo "identity: report exit $?"
tar czf "$OUT/identity-runs.tar.gz" -C "$RES" --exclude store.sqlite --exclude site .
cp "$RES/site/index.html" "$OUT/identity-index.html" 2>/dev/null
