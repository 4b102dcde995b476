"""Builds fp8ops._C, one abi3 library on the LibTorch stable ABI (torch >= 2.11, Python >= 3.10).

Environment:
  CUDA_HOME              the CUDA toolkit (else /usr/local/cuda if it has bin/nvcc, else the folder
                         above the real path of the nvcc on PATH)
  TORCH_CUDA_ARCH_LIST   GPU targets, e.g. "9.0a;10.0a" (the default)
  MAX_JOBS               parallel compile jobs (ninja)
"""

import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist


def _find_cuda_home():
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    if os.path.isfile("/usr/local/cuda/bin/nvcc"):
        return "/usr/local/cuda"
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    return None


# torch.utils.cpp_extension reads CUDA_HOME when it is imported, so it must be set first: a
# wrapper script at /usr/local/bin/nvcc would otherwise make it pick /usr/local.
_cuda_home = _find_cuda_home()
if _cuda_home:
    os.environ["CUDA_HOME"] = _cuda_home

import re  # noqa: E402
import subprocess  # noqa: E402

from torch.utils.cpp_extension import BuildExtension, CUDAExtension  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARCHS = "9.0a;10.0a"
TORCH_TARGET_VERSION = "0x020b000000000000"  # the stable ABI of torch 2.11


def _gencode_flags():
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST") or DEFAULT_ARCHS
    flags = []
    for arch in archs.replace(",", ";").replace(" ", ";").split(";"):
        arch = arch.strip()
        if not arch:
            continue
        ptx = arch.endswith("+PTX")
        arch = arch.removesuffix("+PTX")
        num = arch.replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def _extension():
    sources = sorted(glob.glob("csrc/*.cpp") + glob.glob("csrc/cpu/*.cpp") + glob.glob("csrc/cuda/*.cu"))
    defines = [
        f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}",
        "-DUSE_CUDA",
    ]
    cxx = ["-O3", "-std=c++17", "-ffp-contract=off", "-fvisibility=hidden", *defines]
    nvcc = [
        "-O3",
        "-std=c++17",
        "--expt-relaxed-constexpr",
        "-Xcompiler=-ffp-contract=off,-fvisibility=hidden",
        *defines,
        *_gencode_flags(),
    ]
    # py_limited_api=True makes torch add -DPy_LIMITED_API=0x030A0000 (Python 3.10).
    return CUDAExtension(
        name="fp8ops._C",
        sources=sources,
        include_dirs=[os.path.join(ROOT, "include")],
        extra_compile_args={"cxx": cxx, "nvcc": nvcc},
        extra_link_args=["-s"],  # no debug info or symbol table in the shipped library
        py_limited_api=True,
    )


def _cuda_version():
    nvcc = os.path.join(_cuda_home or "", "bin", "nvcc")
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
        return re.search(r"release (\d+\.\d+)", out).group(1)
    except (OSError, subprocess.CalledProcessError, AttributeError):
        return "unknown"


class BuildPyWithInfo(build_py):
    """Writes fp8ops/_build_info.py (the CUDA version the library is built with, checked at import)
    into the build only: the source tree and the sdist hold no generated file."""

    def run(self):
        super().run()
        path = os.path.join(self.build_lib, "fp8ops", "_build_info.py")
        with open(path, "w") as f:
            f.write(f'"""Written by setup.py at build time."""\n\nCUDA_VERSION = "{_cuda_version()}"\n')


class SdistWithoutEggInfo(sdist):
    """The sdist without setuptools' generated egg-info folder: PKG-INFO at its root carries the
    metadata, and a build from the sdist makes its own egg-info."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, [f for f in files if ".egg-info" not in f.split(os.sep)[0]])


setup(
    ext_modules=[_extension()],
    cmdclass={
        "build_ext": BuildExtension.with_options(use_ninja=True),
        "build_py": BuildPyWithInfo,
        "sdist": SdistWithoutEggInfo,
    },
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
