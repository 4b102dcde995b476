#!/usr/bin/env bash
# cibuildwheel before-build: the build needs torch (its headers and the stable-ABI shim) in the
# build environment, since the build runs without isolation. Any torch >= 2.11 built for the same
# CUDA major works; the library targets the torch 2.11 stable ABI whatever the build's torch is.
set -euo pipefail
ver=${FP8OPS_CUDA_VERSION:-13.0}
torch_spec=${FP8OPS_BUILD_TORCH:-torch>=2.11}
python -m pip install --upgrade pip setuptools wheel ninja
python -m pip install "$torch_spec" --index-url "https://download.pytorch.org/whl/cu${ver/./}"
