"""fp8ops: FP8 quantization kernels whose scales land in their consumer GEMM's layout."""

from . import _loader

_LIBRARY = _loader.load()

from . import _fake  # noqa: E402,F401  (registers the fake kernels)
from ._native import pdl_enabled, set_pdl  # noqa: E402
from .ops import (  # noqa: E402
    block_quant,
    dequant,
    group_major_quant,
    indexer_q_quant,
    pack_ue8m0,
    per_token_group_quant,
    rms_norm_quant,
    silu_mul_quant,
)

__version__ = "0.1.0"
__all__ = [
    "per_token_group_quant",
    "group_major_quant",
    "indexer_q_quant",
    "silu_mul_quant",
    "rms_norm_quant",
    "block_quant",
    "pack_ue8m0",
    "dequant",
    "set_pdl",
    "pdl_enabled",
    "__version__",
]
