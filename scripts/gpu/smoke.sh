#!/usr/bin/env bash
# First contact with a GPU host: doctor, a small sweep in all three directions, and one asv class.
# Usage (repo root): OUT=/some/dir bash scripts/gpu/smoke.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-/tmp/convbench-out}; mkdir -p "$OUT"
python3 -m harness.cli doctor
python3 - <<'PY'
import torch; print("torch", torch.__version__, torch.cuda.get_device_name(), torch.backends.cudnn.version())
PY
t0=$(date +%s)
python3 -m harness.cli sweep --cases seed.c64,resnet50.layer4.1.conv2.n32,quick.seed,quick.depthwise \
  --directions fwd,bwd_data,bwd_filter --results /tmp/res 2>&1 | tail -25
echo "sweep seconds: $(( $(date +%s) - t0 ))"
t0=$(date +%s)
[ -d .git ] || { git init -q && git add -A && git -c user.email=ci@convbench -c user.name=ci commit -qm snapshot; }
python3 -m asv machine --yes --machine h200 >/dev/null 2>&1
CONVBENCH_CASES=seed.c8 CONVBENCH_RESULTS=/tmp/res-asv timeout 240 python3 -m asv run -E existing:$(which python3) \
  --machine h200 -b CudnnForward --show-stderr 2>&1 | tail -15
echo "asv seconds: $(( $(date +%s) - t0 ))"
tar czf "$OUT/smoke-results.tgz" -C /tmp res res-asv .asv 2>/dev/null || tar czf "$OUT/smoke-results.tgz" -C /tmp res
cp -r .asv/results "$OUT/asv-results" 2>/dev/null
python3 - <<'PY'
import json, glob, collections, os
from harness.run.journal import iter_journal
for f in glob.glob('/tmp/res/*/*/run.json'):
    f = os.path.join(os.path.dirname(f), 'records.jsonl')  # read from records.jsonl.gz once the run is finished
    st = collections.Counter(); cls = collections.Counter()
    for d in iter_journal(f):
        if d.get('kind') != 'measurement': continue
        st[(d['backend'], d['direction'], d['status'])] += 1
        if d['accuracy']: cls[(d['backend'], d['direction'], d['dtype'], d['math'], d['accuracy']['precision_class'])] += 1
    for k, v in sorted(st.items()): print('status', k, v)
    for k, v in sorted(cls.items()): print('class', k, v)
PY
