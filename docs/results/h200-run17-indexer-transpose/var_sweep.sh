#!/bin/bash
# Indexer load-order variants (release builds in .var/<name>/fp8ops), two passes each, then the
# GPU indexer tests on each variant. Run from the repository root on the GPU machine.
set -u
src=$PWD
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
vars=${VARS:-base new}
for v in $vars; do cp fp8ops/*.py .var/$v/fp8ops/; done
export FP8OPS_SWEEP_INDEXER_B=${SWEEP_B:-1,256,512,1024,2048,4096,16384}
for pass in 0 1; do
  for v in $vars; do
    PYTHONPATH=$src/.var/$v timeout 150 python3 ci/tune_sweep.py --kinds indexer --only auto --json "$OUT/$v-pass$pass.json" >"$OUT/$v-pass$pass.log" 2>&1 || echo "sweep $v pass $pass failed"
    echo "done $v pass $pass $(date +%T)"
  done
done
python3 - "$OUT" $vars <<'PY'
import json, sys
out, vs = sys.argv[1], sys.argv[2:]
res = {}
for v in vs:
    for p in (0, 1):
        try:
            rows = json.load(open(f"{out}/{v}-pass{p}.json"))
        except Exception:
            continue
        for r in rows:
            if r["op"] == "indexer":
                res.setdefault(r["B"], {}).setdefault(v, []).append(r["us"])
            else:
                res.setdefault("copy", {}).setdefault(v, []).append(r["tbps"])
print("B | " + " | ".join(vs))
for b, d in res.items():
    print(f"{b} | " + " | ".join(", ".join(f"{x:.2f}" if b != "copy" else f"{x:.3f}" for x in d.get(v, [])) for v in vs))
PY
run=$(mktemp -d); cp -r tests "$run/"
for v in ${TEST_VARS:-$vars}; do
  echo "== tests $v"
  (cd "$run" && PYTHONPATH=$src/.var/$v FP8OPS_REQUIRE_GPU=1 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_indexer.py 2>&1 | tail -3)
done
