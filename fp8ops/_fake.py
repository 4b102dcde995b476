"""Fake (meta) kernels: the exact sizes, strides and dtypes of each op's outputs, so that the ops
trace under torch.compile(fullgraph=True), dynamic shapes included."""

from __future__ import annotations

import math

import torch

from ._layout import (
    GROUP_SIZES,
    SCALE_LAYOUTS,
    ceil_div,
    group_major_scale_geometry,
    packed_scale_geometry,
    per_token_scale_geometry,
)

E4M3 = torch.float8_e4m3fn


@torch.library.register_fake("fp8ops::per_token_group_quant")
def _per_token_group_quant_fake(x, group_size=128, scale_layout="row", ue8m0=False, pad_rows_to=1, eps=1e-10):
    torch._check(x.dim() >= 2, lambda: f"per_token_group_quant: x must have at least 2 dims, got {x.dim()}")
    torch._check(group_size in GROUP_SIZES, lambda: f"per_token_group_quant: bad group_size {group_size}")
    torch._check(scale_layout in SCALE_LAYOUTS, lambda: f"per_token_group_quant: bad scale_layout {scale_layout!r}")
    torch._check(pad_rows_to >= 1, lambda: "per_token_group_quant: pad_rows_to must be >= 1")
    K = x.shape[-1]
    torch._check(K % group_size == 0, lambda: "per_token_group_quant: K must be a multiple of group_size")
    M = math.prod(x.shape[:-1])
    sizes, strides, dtype = per_token_scale_geometry(M, K // group_size, scale_layout, pad_rows_to)
    q = x.new_empty((sizes[0], K), dtype=E4M3)
    return q, x.new_empty_strided(sizes, strides, dtype=dtype)


@torch.library.register_fake("fp8ops::group_major_quant")
def _group_major_quant_fake(x, ue8m0=False, packed=False, eps=1e-10):
    torch._check(x.dim() == 3, lambda: f"group_major_quant: x must be 3-D, got {x.dim()}")
    T, G, D = x.shape
    torch._check(D % 128 == 0, lambda: "group_major_quant: D must be a multiple of 128")
    sizes, strides, dtype = group_major_scale_geometry(T, G, D // 128, packed)
    q = x.new_empty((T, G, D), dtype=E4M3)
    return q, x.new_empty_strided(sizes, strides, dtype=dtype)


@torch.library.register_fake("fp8ops::pack_ue8m0")
def _pack_ue8m0_fake(scale):
    torch._check(scale.dim() in (2, 3), lambda: f"pack_ue8m0: scale must be 2-D or 3-D, got {scale.dim()}")
    sizes, strides = packed_scale_geometry(tuple(scale.shape))
    return scale.new_empty_strided(sizes, strides, dtype=torch.int32)


@torch.library.register_fake("fp8ops::dequant")
def _dequant_fake(q, scale, group_size=128, out_dtype=None):
    torch._check(q.dim() in (2, 3), lambda: f"dequant: q must be 2-D or 3-D, got {q.dim()}")
    S = q.shape[-1] // group_size
    expected = ceil_div(S, 4) if scale.dtype == torch.int32 else S
    torch._check(scale.shape[-1] == expected, lambda: "dequant: scale.size(-1) does not match q")
    return q.new_empty(q.shape, dtype=out_dtype if out_dtype is not None else torch.float32)


@torch.library.register_fake("fp8ops::indexer_q_quant")
def _indexer_q_quant_fake(
    q, weight, weight_scale, cos_sin_cache, positions, rope_tail=True, rope_neox=False, hadamard=True, eps=1e-4
):
    torch._check(q.dim() == 3 and q.shape[-1] == 128, lambda: "indexer_q_quant: q must be [B, H, 128]")
    B, H, _ = q.shape
    return q.new_empty((B, H, 128), dtype=E4M3), q.new_empty((B, H, 1), dtype=torch.float32)
