"""Typed wrappers of the torch.ops.fp8ops operators (SPEC.md is the contract)."""

from __future__ import annotations

import torch

__all__ = [
    "per_token_group_quant",
    "group_major_quant",
    "indexer_q_quant",
    "silu_mul_quant",
    "rms_norm_quant",
    "block_quant",
    "pack_ue8m0",
    "dequant",
]

_NO_GRAD = (
    "Quantization is not differentiable: the outputs never require grad (rms_norm_quant, which "
    "updates ``residual`` in place, raises instead when an input requires grad in grad mode)."
)


def per_token_group_quant(
    x: torch.Tensor,
    group_size: int = 128,
    scale_layout: str = "row",
    ue8m0: bool = False,
    pad_rows_to: int = 1,
    eps: float = 1e-10,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize x ``[M, K]`` (or ``[..., K]``, leading dims flattened; bf16, fp16 or fp32) to e4m3 per group of
    ``group_size`` consecutive elements of a row, with one fp32 scale per group.

    ``scale = max(amax, eps) / 448`` (a multiply by fp32 ``1/448``), ``q = e4m3(x / scale)``; NaN
    codes to 0 and +-inf to +-448, and neither enters amax. With ``ue8m0`` the scale is rounded
    up to a power of two. ``scale_layout`` picks the consumer's layout of the ``[Mp, K/group_size]``
    scales, where ``Mp = align(M, pad_rows_to)``:

    - ``"row"``: strides ``(S, 1)``; generic and Triton GEMMs.
    - ``"col"``: strides ``(1, Mp)``; ``torch._scaled_mm`` blockwise 1x128, CUTLASS sm90.
    - ``"col_tma"``: strides ``(1, align(Mp, 4))``; DeepGEMM SM90 ``fp8_gemm_nt``, zero-copy.
    - ``"col_tma_packed"``: int32 ``[Mp, ceil(S/4)]`` of UE8M0 exponent bytes, strides
      ``(1, align(Mp, 4))``; DeepGEMM SM100. Always UE8M0.

    Rows ``M..Mp-1`` and all layout padding are zero. Returns ``(q [Mp, K] e4m3, scale)``. Not
    differentiable: the outputs never require grad.
    """
    return torch.ops.fp8ops.per_token_group_quant(x, group_size, scale_layout, ue8m0, pad_rows_to, eps)


def group_major_quant(
    x: torch.Tensor, ue8m0: bool = False, packed: bool = False, eps: float = 1e-10
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize x ``[T, G, D]`` (bf16, fp16 or fp32; token and group strides arbitrary, D contiguous) per 128 elements
    of D, writing the scales group-major, the layout of DeepGEMM's ``fp8_einsum("bhr,hdr->bhd")``.

    Returns q ``[T, G, D]`` e4m3 contiguous and the scale: fp32 ``[T, G, D/128]`` with strides
    ``(1, S*Ta, Ta)``, ``Ta = align(T, 4)``, or with ``packed`` int32 UE8M0 words ``[T, G, P]``,
    ``P = ceil(S/4)``, strides ``(1, P*Ta, Ta)`` (always UE8M0). Token padding is zero. Not
    differentiable: the outputs never require grad.
    """
    return torch.ops.fp8ops.group_major_quant(x, ue8m0, packed, eps)


def indexer_q_quant(
    q: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    rope_tail: bool = True,
    rope_neox: bool = False,
    hadamard: bool = True,
    eps: float = 1e-4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sparse-attention indexer query in one launch: RoPE, Hadamard, e4m3 per (token, head).

    q ``[B, H, 128]`` bf16/fp16 (row stride arbitrary, last two dims contiguous); weight ``[B, H]``
    of q's dtype, any strides (typically a column slice of a projection output); cos_sin_cache fp32
    ``[max_pos, 64]`` laid out ``cos(32) | sin(32)``; positions ``[B]`` int32 or int64.

    RoPE rotates the last 64 dims (``rope_tail=True``, DeepSeek-V4) or the first 64 (DeepSeek-V3.2),
    in interleaved pairs ``(2i, 2i+1)`` or, with ``rope_neox``, pairs ``(i, i+32)``; with
    ``hadamard`` a 128-point Walsh-Hadamard transform (Sylvester order, times ``128**-0.5``)
    follows. Returns q_fp8 ``[B, H, 128]`` e4m3 and weights_out ``[B, H, 1]`` fp32
    ``= weight * weight_scale * scale``. A position outside ``[0, max_pos)`` raises on the CPU; the
    CUDA kernel clamps it into range (no out-of-bounds read) and that row's values are unspecified.
    """
    return torch.ops.fp8ops.indexer_q_quant(
        q, weight, weight_scale, cos_sin_cache, positions, rope_tail, rope_neox, hadamard, eps
    )


def silu_mul_quant(
    x: torch.Tensor,
    group_size: int = 128,
    scale_layout: str = "row",
    ue8m0: bool = False,
    pad_rows_to: int = 1,
    eps: float = 1e-10,
    masked_m: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``SiLU(gate) * up`` fused with the per-group quantization: the MoE / MLP down-projection
    input in one pass over memory.

    x holds gate and up side by side: ``x[..., :H]`` is the gate, ``x[..., H:]`` the up projection
    (bf16, fp16 or fp32, last dim contiguous, ``H % group_size == 0``). In x's dtype T the
    activation is ``T(T(silu(g)) * u)``, what the unfused ``F.silu(g) * u`` computes (silu in fp32
    with fp8ops' own exp, so CPU and CUDA agree bit for bit), then it is quantized exactly as
    :func:`per_token_group_quant` does.

    - ``masked_m=None`` (flat): x ``[..., 2H]``; the outputs are :func:`per_token_group_quant`'s
      for an ``[M, H]`` input, in every ``scale_layout``, with ``pad_rows_to``.
    - ``masked_m`` int32 ``[E]`` (DeepEP's low-latency layout): x ``[E, Mmax, 2H]``; only rows
      ``t < masked_m[e]`` of expert e are read and written (the others keep whatever the buffers
      held). q is ``[E, Mmax, H]``; the scale is ``row`` ``[E, Mmax, S]``, ``col_tma`` strides
      ``(S*Ma, 1, Ma)`` (``m_grouped_fp8_gemm_nt_masked``, zero-copy) or ``col_tma_packed``,
      ``Ma = align(Mmax, 4)``. The counts are read on the device (no host sync); a count outside
      ``[0, Mmax]`` raises on the CPU and is clamped on the GPU.

    Not differentiable: the outputs never require grad.
    """
    return torch.ops.fp8ops.silu_mul_quant(x, group_size, scale_layout, ue8m0, pad_rows_to, eps, masked_m)


def rms_norm_quant(
    x: torch.Tensor,
    weight: torch.Tensor,
    norm_eps: float = 1e-6,
    residual: torch.Tensor | None = None,
    group_size: int = 128,
    scale_layout: str = "row",
    ue8m0: bool = False,
    pad_rows_to: int = 1,
    eps: float = 1e-10,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(Residual add +) RMSNorm fused with the per-group quantization, one pass over memory.

    x ``[..., D]`` (bf16, fp16 or fp32, last dim contiguous, ``D % group_size == 0``,
    ``D <= 16384``), weight ``[D]`` of x's dtype. With ``residual`` (x's shape and dtype), first
    ``r = T(x + residual)`` is written back into ``residual`` in place, else ``r = x``. Then
    ``y = T(r * (1 / sqrt(mean(r^2) + norm_eps)) * weight)`` in fp32 with one rounding to T (the
    sum of squares in the order docs/SPEC.md gives), quantized exactly as
    :func:`per_token_group_quant` does, in every ``scale_layout`` and with ``pad_rows_to``. If the
    sum of squares overflows fp32 the row's inverse RMS is 0, so its codes are 0.

    Returns ``(q [Mp, D] e4m3, scale)``. Not differentiable: raises when an input requires grad
    and grad mode is on (it updates ``residual`` in place).
    """
    return torch.ops.fp8ops.rms_norm_quant(
        x, weight, norm_eps, residual, group_size, scale_layout, ue8m0, pad_rows_to, eps
    )


def block_quant(
    w: torch.Tensor, block_n: int = 128, block_k: int = 128, ue8m0: bool = False, eps: float = 1e-10
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a weight ``[N, K]`` (or stacked experts ``[E, N, K]``; bf16, fp16 or fp32, last dim
    contiguous, any N and K) to e4m3 per 128 x 128 block.

    Returns q, e4m3 of w's shape (contiguous), and the fp32 scales ``[ceil(N/128), ceil(K/128)]``
    (or ``[E, ...]``) contiguous: the layout DeepGEMM reads for its B operand and
    ``torch._scaled_mm``'s 128x128 blockwise mode takes. A partial edge block takes its amax over
    the elements it has. With ``eps=1e-4`` the result equals DeepGEMM's ``per_block_cast_to_fp8``.
    Only 128 x 128 blocks are supported. Not differentiable: the outputs never require grad.
    """
    return torch.ops.fp8ops.block_quant(w, block_n, block_k, ue8m0, eps)


def pack_ue8m0(scale: torch.Tensor) -> torch.Tensor:
    """Pack fp32 UE8M0 scales ``[M, S]`` or ``[B, M, S]`` (any strides) into int32 words in the
    ``col_tma_packed`` layout: ``[M, ceil(S/4)]`` strides ``(1, align(M, 4))``, or 3-D strides
    ``(P*align(M, 4), 1, align(M, 4))``.

    Each scale must be 0.0 (packed as byte 0, the padding value) or a power of two in
    ``[2^-126, 2^127]``. The CPU kernel raises otherwise. The CUDA kernel cannot check without a
    host sync, so it rounds such a scale's exponent up (clamped to ``[1, 254]``) and never traps:
    the packed scale then no longer matches the codes quantized with the original one.
    """
    return torch.ops.fp8ops.pack_ue8m0(scale)


def dequant(
    q: torch.Tensor, scale: torch.Tensor, group_size: int = 128, out_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Reverse any fp8ops quantization: ``float(q) * scale`` per group of ``group_size``, then one
    round-to-nearest-even cast to ``out_dtype`` (float32 by default). q is 2-D or 3-D e4m3; scale
    has q's rank and is fp32 ``[..., K/group_size]`` or packed int32 ``[..., ceil(K/group_size/4)]``,
    read through its strides (every fp8ops layout works). Packed byte 0 reads as scale 0. For tests
    and debugging; not tuned for speed.
    """
    return torch.ops.fp8ops.dequant(q, scale, group_size, out_dtype)
