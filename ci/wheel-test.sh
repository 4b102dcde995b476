#!/usr/bin/env bash
# Runs the test suite against the installed wheel, from outside the source tree, so that a file
# missing from the package fails the run. GPU tests run when torch sees a GPU.
# Usage: ci/wheel-test.sh PROJECT_DIR
set -euo pipefail
project=$1
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
cp -r "$project/tests" "$run/"
cd "$run"
python -c "import fp8ops, os; assert not fp8ops.__file__.startswith(os.path.realpath('$project')), fp8ops.__file__; print('testing', fp8ops.__file__)"
python -m pytest tests -q -p no:cacheprovider
