#!/usr/bin/env bash
# A/B timing of kernel variants on a GPU machine: release libraries built elsewhere, one per
# variant, in .var/<name>/fp8ops/_C.abi3.so (.var/ is not tracked; carry it). For each of two
# passes, each variant in turn runs ci/tune_sweep.py with the library's own launch choice
# ("auto"), in its own process; then a table of the passes side by side (tune_sweep.py --merge),
# then the GPU tests of each variant, so that every variant timed is also held to the CPU
# reference.
#
#   VARS="base new" bash ci/var_sweep.sh
#
# VARS: the variants (default: every directory under .var/ with a library); KINDS: what
# tune_sweep.py times (default indexer); SWEEP_B: the indexer's B values (FP8OPS_SWEEP_PER_TOKEN,
# passed through, picks the group rows: see tune_sweep.py); TEST_VARS: the variants to test
# (default all, none: no tests); TEST_FILES: the test files (default tests/test_indexer.py). Logs
# and JSON go to $OUT (default ./gpu-out).
set -u
cd "$(dirname "$0")/.."
src=$PWD
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
vars=${VARS:-$(for d in .var/*/fp8ops/_C*.so; do [ -e "$d" ] && basename "$(dirname "$(dirname "$d")")"; done)}
[ -n "$vars" ] || { echo "ci/var_sweep.sh: no variant libraries under .var/"; exit 1; }
for v in $vars; do cp fp8ops/*.py ".var/$v/fp8ops/"; done
export FP8OPS_SWEEP_INDEXER_B=${SWEEP_B:-1,256,512,1024,2048,4096,16384}
status=0
for pass in 0 1; do
  for v in $vars; do
    PYTHONPATH=$src/.var/$v timeout 200 $PY ci/tune_sweep.py --kinds "${KINDS:-indexer}" --only auto \
      --json "$OUT/$v-pass$pass.json" >"$OUT/$v-pass$pass.log" 2>&1 || { echo "sweep $v pass $pass failed"; status=1; }
    echo "done $v pass $pass $(date +%T)"
  done
done
$PY ci/tune_sweep.py --merge $(for v in $vars; do echo "$v=$OUT/$v-pass0.json $v=$OUT/$v-pass1.json"; done) \
  | tee "$OUT/var-sweep-table.txt"
run=$(mktemp -d)
cp -r tests "$run/"
for v in ${TEST_VARS:-$vars}; do
  [ "$v" = none ] && continue
  echo "== tests $v" | tee -a "$OUT/var-sweep-tests.log"
  (cd "$run" && PYTHONPATH=$src/.var/$v FP8OPS_REQUIRE_GPU=1 $PY -m pytest -q -p no:cacheprovider -m gpu \
    ${TEST_FILES:-tests/test_indexer.py} 2>&1 | tail -3) | tee -a "$OUT/var-sweep-tests.log"
  tail -1 "$OUT/var-sweep-tests.log" | grep -q "failed\|error\|no tests ran" && status=1
done
exit $status
