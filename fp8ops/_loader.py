"""Loads the compiled library fp8ops._C (abi3, LibTorch stable ABI) into torch.ops."""

from __future__ import annotations

import glob
import os

import torch

MIN_TORCH = (2, 11)


def _torch_version() -> tuple[int, int]:
    base = torch.__version__.split("+")[0]
    major, minor = base.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _check_cuda_major() -> None:
    """The library links the CUDA runtime of its build's major version, which torch provides."""
    try:
        from ._build_info import CUDA_VERSION
    except ImportError:  # a source tree that was never built
        return
    built = CUDA_VERSION.split(".")[0]
    have = torch.version.cuda
    if have is None:
        raise ImportError(
            f"fp8ops was built for CUDA {CUDA_VERSION} and needs a CUDA build of torch; this torch "
            f"({torch.__version__}) has no CUDA. Install a torch built for CUDA {built}.x."
        )
    if built != "unknown" and have.split(".")[0] != built:
        raise ImportError(
            f"fp8ops was built for CUDA {CUDA_VERSION}, but torch {torch.__version__} uses CUDA {have}; "
            f"install the fp8ops wheel for CUDA {have.split('.')[0]}, or build fp8ops from source against this torch."
        )


def load() -> str:
    if _torch_version() < MIN_TORCH:
        raise ImportError(
            f"fp8ops needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]} (it is built on that LibTorch stable ABI); "
            f"found torch {torch.__version__}"
        )
    _check_cuda_major()
    here = os.path.dirname(os.path.abspath(__file__))
    libs = sorted(glob.glob(os.path.join(here, "_C*.so")) + glob.glob(os.path.join(here, "_C*.pyd")))
    if not libs:
        raise ImportError(
            f"fp8ops: the compiled library fp8ops/_C*.so was not found in {here}; build it with "
            "`pip install --no-build-isolation -e .` (see README.md)"
        )
    torch.ops.load_library(libs[0])
    return libs[0]
