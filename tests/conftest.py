import os

import pytest
import torch

import fp8ops  # noqa: F401  (loads the library and the fakes)

HAS_CUDA = torch.cuda.is_available()


def pytest_configure(config):
    # Registered here rather than in pyproject.toml, so that runs from outside the source tree see it.
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("FP8OPS_REQUIRE_GPU") == "1" and not HAS_CUDA:
        raise pytest.UsageError("FP8OPS_REQUIRE_GPU=1 but torch sees no CUDA device")
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def fresh_seed():
    """Fresh random inputs every run; the seed is printed, so a failure can be replayed with
    FP8OPS_TEST_SEED=<seed>."""
    seed = int(os.environ.get("FP8OPS_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    torch.manual_seed(seed)
    print(f"seed={seed}")
    yield seed


def devices():
    return ["cpu", "cuda"] if HAS_CUDA else ["cpu"]


@pytest.fixture(params=(True, False), ids=("pdl", "no_pdl"))
def pdl(request):
    """Runs a GPU test with programmatic dependent launch on (the default) and off."""
    fp8ops.set_pdl(request.param)
    yield request.param
    fp8ops.set_pdl(True)
