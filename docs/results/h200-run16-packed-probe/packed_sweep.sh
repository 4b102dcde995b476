#!/bin/bash
# A/B of the per-token kernel at small M: release builds in .var/<name>/fp8ops, alternating, 3 passes.
set -u
src=$PWD
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
vars=${VARS:-A E}
for v in $vars; do cp fp8ops/*.py .var/$v/fp8ops/; done
for pass in 0 1 2; do
  for v in $vars; do
    PYTHONPATH=$src/.var/$v python3 probe/packed_probe.py >"$OUT/packed-$v-pass$pass.jsonl" 2>"$OUT/packed-$v-pass$pass.err" || echo "probe $v $pass failed"
  done
done
python3 - "$OUT" $vars <<'PY'
import json, sys, glob
out, vs = sys.argv[1], sys.argv[2:]
res = {}
for v in vs:
    for f in sorted(glob.glob(f"{out}/packed-{v}-pass*.jsonl")):
        for line in open(f):
            r = json.loads(line)
            res.setdefault((r["M"], r["K"], r["layout"]), {}).setdefault(v, []).append(r["us"])
print("shape | " + " | ".join(vs))
for k, d in res.items():
    print(f"{k} | " + " | ".join(", ".join(f"{x:.2f}" for x in d.get(v, [])) for v in vs))
PY
run=$(mktemp -d); cp -r tests "$run/"
for v in ${TEST_VARS:-E}; do
  echo "== tests $v"
  (cd "$run" && PYTHONPATH=$src/.var/$v FP8OPS_REQUIRE_GPU=1 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_per_token_group_quant.py tests/test_group_major_pack_dequant.py 2>&1 | tail -3)
done
