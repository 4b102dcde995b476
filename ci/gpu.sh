#!/usr/bin/env bash
# The whole GPU cycle on a GPU machine: ci/gpu.sh [tests|bench|all|tune|profile]
#   - installs deep_gemm from .devdeps/ when present (see DEVELOPERS notes in README) and fails
#     if deep_gemm is then missing, so that the consumer tests really run;
#   - with FP8OPS_WHEEL=path/to/wheel, installs that wheel and tests it from outside the source
#     tree; else uses the library built elsewhere (fp8ops/_C*.so) if it is there, else builds it;
#   - tests: the whole pytest suite with the GPU required; bench: python -m fp8ops.bench;
#   - tune: with a benchmarking build in .tune/ (FP8OPS_TUNING=1 python setup.py build_ext
#     --build-lib .tune), the launch-shape sweep (ci/tune_sweep.py), then the GPU tests of the
#     kernels under forced shapes, so that every shape the sweep times is also held to the CPU
#     (TUNE_TESTS=0 skips them, TUNE_FORCED="VAR=value ..." runs one configuration of them;
#     TUNE_ARGS passes options to the sweep);
#   - profile: Nsight Compute over ci/profile.py for each line of PROFILE_CASES.
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

status=0
if [ "$stage" = profile ]; then
  # Nsight Compute over ci/profile.py, one case per line of PROFILE_CASES (its arguments); the
  # library built elsewhere (fp8ops/_C*.so) is used. NCU_ARGS replaces the default sections.
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  ncu_args=${NCU_ARGS:---section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats --section InstructionStats}
  while IFS= read -r case; do
    [ -n "$case" ] || continue
    echo "== profile: $case" | tee -a "$OUT/profile.log"
    ncu --clock-control none --kernel-name-base mangled --kernel-name regex:fp8ops --launch-skip 2 --launch-count 1 $ncu_args \
      $PY ci/profile.py $case >>"$OUT/profile.log" 2>&1 || status=1
  done <<<"${PROFILE_CASES:-indexer 16384}"
  exit $status
fi
if [ "$stage" = tune ]; then
  ls .tune/fp8ops/_C*.so >/dev/null || { echo "ci/gpu.sh tune: no benchmarking build in .tune/"; exit 1; }
  cp -r fp8ops/*.py .tune/fp8ops/
  src=$PWD
  PYTHONPATH=$src/.tune $PY ci/tune_sweep.py ${TUNE_ARGS:-} --json "$OUT/tune.json" 2>&1 | tee "$OUT/tune.log" || status=1
  [ "${TUNE_TESTS:-1}" = 1 ] || exit $status
  run=$(mktemp -d)
  cp -r tests "$run/"
  forced=("FP8OPS_TUNE_UNROLL=4 FP8OPS_TUNE_MNVEC=1 FP8OPS_TUNE_IDX_LANES=4 FP8OPS_TUNE_IDX_WARPS=2 FP8OPS_TUNE_IDX_MINB=14"
    "FP8OPS_TUNE_UNROLL=2 FP8OPS_TUNE_MNVEC=1 FP8OPS_TUNE_STREAM=1 FP8OPS_TUNE_IDX_LANES=8 FP8OPS_TUNE_IDX_WARPS=2 FP8OPS_TUNE_IDX_MINB=0 FP8OPS_TUNE_IDX_PERSIST=0"
    "FP8OPS_TUNE_UNROLL=1 FP8OPS_TUNE_STREAM=1 FP8OPS_TUNE_IDX_LANES=8 FP8OPS_TUNE_IDX_WARPS=2 FP8OPS_TUNE_IDX_MINB=0")
  [ -n "${TUNE_FORCED:-}" ] && forced=("$TUNE_FORCED")
  for cfg in "${forced[@]}"; do
    echo "== forced: $cfg" | tee -a "$OUT/tune-tests.log"
    (cd "$run" && env $cfg PYTHONPATH=$src/.tune FP8OPS_REQUIRE_GPU=1 $PY -m pytest -q -p no:cacheprovider -m gpu \
      tests/test_per_token_group_quant.py tests/test_group_major_pack_dequant.py tests/test_indexer.py 2>&1 | tail -15) \
      | tee -a "$OUT/tune-tests.log"
    grep -q "failed\|error" <(tail -3 "$OUT/tune-tests.log") && status=1
  done
  exit $status
fi
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
