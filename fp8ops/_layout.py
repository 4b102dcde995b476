"""The scale-layout contract (SPEC sections 2, 3, 6) in Python, for the fake kernels.

Twin of csrc/layout.cpp; tests hold the two equal for many shapes. Works on ints and SymInts.
"""

from __future__ import annotations

import torch

SCALE_LAYOUTS = ("row", "col", "col_tma", "col_tma_packed")
GROUP_SIZES = (32, 64, 128)


def align(n, a):
    return (n + a - 1) // a * a


def ceil_div(n, a):
    return (n + a - 1) // a


def per_token_scale_geometry(M, S, scale_layout: str, pad_rows_to: int):
    """(sizes, strides, dtype) of per_token_group_quant's scale for M rows and S groups per row."""
    Mp = align(M, pad_rows_to)
    if scale_layout == "row":
        return (Mp, S), (S, 1), torch.float32
    if scale_layout == "col":
        return (Mp, S), (1, Mp), torch.float32
    if scale_layout == "col_tma":
        return (Mp, S), (1, align(Mp, 4)), torch.float32
    if scale_layout == "col_tma_packed":
        return (Mp, ceil_div(S, 4)), (1, align(Mp, 4)), torch.int32
    raise ValueError(f"scale_layout must be one of {SCALE_LAYOUTS}, got {scale_layout!r}")


def group_major_scale_geometry(T, G, S, packed: bool):
    """(sizes, strides, dtype) of group_major_quant's scale: storage [G, C, align(T, 4)]."""
    Ta = align(T, 4)
    C = ceil_div(S, 4) if packed else S
    return (T, G, C), (1, C * Ta, Ta), torch.int32 if packed else torch.float32


def packed_scale_geometry(shape):
    """(sizes, strides) of pack_ue8m0's output for fp32 scales of `shape` ([M, S] or [B, M, S])."""
    M, S = shape[-2], shape[-1]
    Ma, P = align(M, 4), ceil_div(S, 4)
    if len(shape) == 2:
        return (M, P), (1, Ma)
    return (shape[0], M, P), (P * Ma, 1, Ma)


def masked_scale_geometry(E, Mmax, S, scale_layout: str):
    """(sizes, strides, dtype) of silu_mul_quant's masked-mode scale ([E, Mmax, S] or packed)."""
    if scale_layout == "row":
        return (E, Mmax, S), (Mmax * S, S, 1), torch.float32
    Ma = align(Mmax, 4)
    if scale_layout == "col_tma":
        return (E, Mmax, S), (S * Ma, 1, Ma), torch.float32
    if scale_layout == "col_tma_packed":
        P = ceil_div(S, 4)
        return (E, Mmax, P), (P * Ma, 1, Ma), torch.int32
    raise ValueError(f"scale_layout must be 'row', 'col_tma' or 'col_tma_packed' in masked mode, got {scale_layout!r}")


def block_scale_shape(shape, block_n: int = 128, block_k: int = 128):
    """block_quant's scale shape for a weight of `shape` ([N, K] or [E, N, K])."""
    *lead, N, K = shape
    return (*lead, ceil_div(N, block_n), ceil_div(K, block_k))
