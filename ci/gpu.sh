#!/usr/bin/env bash
# The whole GPU cycle on a GPU machine: ci/gpu.sh [tests|bench|all]
#   - installs deep_gemm from .devdeps/ when present (see DEVELOPERS notes in README) and fails
#     if deep_gemm is then missing, so that the consumer tests really run;
#   - with FP8OPS_WHEEL=path/to/wheel, installs that wheel and tests it from outside the source
#     tree; else uses the library built elsewhere (fp8ops/_C*.so) if it is there, else builds it;
#   - tests: the whole pytest suite with the GPU required; bench: python -m fp8ops.bench.
# Logs and results go to $OUT when set, else to ./gpu-out.
set -euo pipefail
stage=${1:-all}
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

if [ -f .devdeps/install-deepgemm.sh ]; then
  bash .devdeps/install-deepgemm.sh >"$OUT/deepgemm-install.log" 2>&1 || { tail -30 "$OUT/deepgemm-install.log"; exit 1; }
fi
$PY -c "import deep_gemm" || { echo "ci/gpu.sh: deep_gemm is missing on the GPU machine"; exit 1; }

if [ -n "${FP8OPS_WHEEL:-}" ]; then
  # Test an installed wheel (built elsewhere), from outside the source tree.
  site=$(mktemp -d)
  $PY -m pip install -q --no-deps --no-index --target "$site" "$FP8OPS_WHEEL"
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  run=$(mktemp -d)
  cp -r tests "$run/"
  cd "$run"
else
  if ! ls fp8ops/_C*.so >/dev/null 2>&1; then
    CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} MAX_JOBS=${MAX_JOBS:-$(nproc)} \
      $PY -m pip install --no-build-isolation --no-deps -e . >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  fi
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
$PY -c "import torch, fp8ops; print('fp8ops', fp8ops.__version__, 'from', fp8ops._LIBRARY, 'torch', torch.__version__, torch.cuda.get_device_name())"

status=0
if [ "$stage" = tests ] || [ "$stage" = all ]; then
  FP8OPS_REQUIRE_GPU=1 FP8OPS_REQUIRE_DEEP_GEMM=1 $PY -m pytest tests -q -rs -p no:cacheprovider \
    --junitxml="$OUT/gpu-tests.xml" 2>&1 | tee "$OUT/gpu-tests.log" || status=1
fi
# The benchmark runs even after a test failure (its own self-check stops it on a wrong kernel),
# so that one GPU session yields both; the script still fails at the end.
if [ "$stage" = bench ] || [ "$stage" = all ]; then
  $PY -m fp8ops.bench ${BENCH_ARGS:-} --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.log" || status=1
fi
exit $status
