#!/usr/bin/env bash
# The GPU cycle on a GPU machine: ci/gpu.sh [tests|bench|sanitize|all]
#   - installs deep_gemm from .devdeps/ when present (../shared/devdeps/prepare.sh makes it) and
#     fails if deep_gemm is then missing, so that the consumer tests really run;
#   - with FP8OPS_WHEEL=path/to/wheel, installs that wheel and tests it from outside the source
#     tree; else uses the library built elsewhere (fp8ops/_C*.so) if it is there, else builds it;
#   - tests: the whole pytest suite with the GPU required;
#   - bench: python -m fp8ops.bench (BENCH_ARGS passes options);
#   - sanitize: compute-sanitizer memcheck, initcheck and racecheck over every op on small shapes
#     (ci/sanitize_ops.py), after proving that initcheck reports a buffer read before any write.
# Logs and results go to $OUT when set, else to ./gpu-out. "all" is tests, sanitize, then bench.
set -euo pipefail
stage=${1:-all}
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
src=$PWD

if [ -f .devdeps/install-deepgemm.sh ]; then
  bash .devdeps/install-deepgemm.sh >"$OUT/deepgemm-install.log" 2>&1 || { tail -30 "$OUT/deepgemm-install.log"; exit 1; }
fi
$PY -c "import deep_gemm" || { echo "ci/gpu.sh: deep_gemm is missing on the GPU machine"; exit 1; }

if [ -n "${FP8OPS_WHEEL:-}" ]; then
  site=$(mktemp -d)
  $PY -m pip install -q --no-deps --no-index --target "$site" "$FP8OPS_WHEEL"
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
else
  if ! ls fp8ops/_C*.so >/dev/null 2>&1; then
    CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} MAX_JOBS=${MAX_JOBS:-$(nproc)} \
      $PY -m pip install --no-build-isolation --no-deps -e . >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  fi
  export PYTHONPATH=$src${PYTHONPATH:+:$PYTHONPATH}
fi
# Tests run from outside the source tree, against whichever library PYTHONPATH names.
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
cp -r tests "$run/"
$PY -c "import torch, fp8ops; print('fp8ops', fp8ops.__version__, 'from', fp8ops._LIBRARY, 'torch', torch.__version__, torch.cuda.get_device_name())"

status=0
if [ "$stage" = tests ] || [ "$stage" = all ]; then
  (cd "$run" && FP8OPS_REQUIRE_GPU=1 FP8OPS_REQUIRE_DEEP_GEMM=1 $PY -m pytest tests -q -rs -p no:cacheprovider \
    --junitxml="$OUT/gpu-tests.xml") 2>&1 | tee "$OUT/gpu-tests.log" || status=1
fi
if [ "$stage" = sanitize ] || [ "$stage" = all ]; then
  # The caching allocator off, so that memory an op did not write is memory nothing wrote.
  export PYTORCH_NO_CUDA_MEMORY_CACHING=1
  log=$OUT/sanitize.log
  : >"$log"
  # The stage must be able to fail: a buffer read before any write must be reported.
  if compute-sanitizer --tool initcheck --error-exitcode 9 $PY ci/sanitize_ops.py --unwritten >>"$log" 2>&1; then
    echo "ci/gpu.sh sanitize: initcheck did not report a buffer read before any write" | tee -a "$log"
    status=1
  else
    echo "== initcheck reported the unwritten buffer, as it must" | tee -a "$log"
  fi
  for tool in memcheck initcheck racecheck; do
    echo "== $tool" | tee -a "$log"
    compute-sanitizer --tool "$tool" --error-exitcode 9 $PY ci/sanitize_ops.py >>"$log" 2>&1 || status=1
    tail -2 "$log"
  done
  unset PYTORCH_NO_CUDA_MEMORY_CACHING
fi
# The benchmark runs even after a test failure (its own self-check stops it on a wrong kernel),
# so that one GPU run yields both; the script still fails at the end.
if [ "$stage" = bench ] || [ "$stage" = all ]; then
  $PY -m fp8ops.bench ${BENCH_ARGS:-} --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.log" || status=1
fi
exit $status
