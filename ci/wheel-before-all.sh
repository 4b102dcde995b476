#!/usr/bin/env bash
# cibuildwheel before-all (manylinux_2_28, AlmaLinux 8): install the CUDA toolkit the wheel is
# built with (FP8OPS_CUDA_VERSION, default 13.0) from NVIDIA's RHEL 8 repository. Only the
# compiler, the runtime headers and libraries are needed: fp8ops uses no CUDA math library.
set -euo pipefail
ver=${FP8OPS_CUDA_VERSION:-13.0}
arch=$(uname -m)
[ "$arch" = aarch64 ] && repo_arch=sbsa || repo_arch=x86_64
dnf install -y dnf-plugins-core
dnf config-manager --add-repo "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/${repo_arch}/cuda-rhel8.repo"
pkgver=${ver/./-}
dnf install -y "cuda-nvcc-${pkgver}" "cuda-cudart-devel-${pkgver}" "cuda-crt-${pkgver}" "cuda-cccl-${pkgver}"
ln -sfn "/usr/local/cuda-${ver}" /usr/local/cuda
/usr/local/cuda/bin/nvcc --version
