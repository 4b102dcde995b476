#!/bin/bash
# Indexer launch sweep on the benchmarking build in .var/tune: register cap x start stagger,
# two passes, one process per configuration; then the GPU indexer tests under two forced shapes.
set -u
src=$PWD
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
cp fp8ops/*.py .var/tune/fp8ops/
export FP8OPS_SWEEP_INDEXER_B=${SWEEP_B:-256,512,1024,2048,4096,16384}
cfgs=${CFGS:-"m0s0 m0s500 m0s1000 m0s2000 m16s0 m16s1000"}
for pass in 0 1; do
  for c in $cfgs; do
    m=${c#m}; m=${m%s*}; s=${c#*s}
    FP8OPS_TUNE_IDX_LANES=4 FP8OPS_TUNE_IDX_WARPS=2 FP8OPS_TUNE_IDX_MINB=$m FP8OPS_TUNE_IDX_STAGGER=$s \
      PYTHONPATH=$src/.var/tune timeout 120 python3 ci/tune_sweep.py --worker indexer > "$OUT/$c-pass$pass.jsonl" 2>"$OUT/$c-pass$pass.err" || echo "failed $c $pass"
  done
done
python3 - "$OUT" $cfgs <<'PY'
import json, sys
out, cs = sys.argv[1], sys.argv[2:]
res = {}
for c in cs:
    for p in (0, 1):
        try:
            rows = [json.loads(l) for l in open(f"{out}/{c}-pass{p}.jsonl") if l.startswith("{")]
        except Exception:
            continue
        for r in rows:
            k = r["B"] if r["op"] == "indexer" else "copy"
            res.setdefault(k, {}).setdefault(c, []).append(r["us"] if r["op"] == "indexer" else r["tbps"])
print("B | " + " | ".join(cs))
for b, d in res.items():
    print(f"{b} | " + " | ".join(", ".join(f"{x:.2f}" if b != "copy" else f"{x:.3f}" for x in d.get(c, [])) for c in cs))
PY
[ "${TESTS:-1}" = 1 ] || exit 0
run=$(mktemp -d); cp -r tests "$run/"
for f in "FP8OPS_TUNE_IDX_LANES=4 FP8OPS_TUNE_IDX_WARPS=2 FP8OPS_TUNE_IDX_MINB=0 FP8OPS_TUNE_IDX_STAGGER=1000" "FP8OPS_TUNE_IDX_LANES=4 FP8OPS_TUNE_IDX_WARPS=2 FP8OPS_TUNE_IDX_MINB=16 FP8OPS_TUNE_IDX_STAGGER=1000"; do
  echo "== tests $f"
  (cd "$run" && env $f PYTHONPATH=$src/.var/tune FP8OPS_REQUIRE_GPU=1 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_indexer.py 2>&1 | tail -2)
done
