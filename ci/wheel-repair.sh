#!/usr/bin/env bash
# cibuildwheel repair step: tag the wheel manylinux, but never vendor torch's libraries or the CUDA
# runtime and driver: at run time they come from the installed torch (which the wheel requires).
set -euo pipefail
wheel=$1
dest=$2
python -m pip install -q auditwheel
auditwheel repair -w "$dest" "$wheel" \
  --exclude libtorch.so --exclude libtorch_cpu.so --exclude libtorch_cuda.so \
  --exclude libc10.so --exclude libc10_cuda.so \
  --exclude 'libcudart.so.*' --exclude 'libcuda.so.*'
