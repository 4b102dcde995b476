"""Fake (meta) kernels: the checks of the real kernels (fp8ops/_checks.py) and the exact sizes,
strides and dtypes of each op's outputs, so that the ops trace under torch.compile(fullgraph=True),
dynamic shapes included, and a bad call fails there as it does in eager mode. Also the autograd
registration: quantization is not differentiable, so every output is marked non-differentiable."""

from __future__ import annotations

import torch

from . import _checks
from ._layout import (
    block_scale_shape,
    group_major_scale_geometry,
    masked_scale_geometry,
    packed_scale_geometry,
    per_token_scale_geometry,
)

E4M3 = torch.float8_e4m3fn


def _flat_outputs(x, M, D, group_size, scale_layout, pad_rows_to):
    sizes, strides, dtype = per_token_scale_geometry(M, D // group_size, scale_layout, pad_rows_to)
    return x.new_empty((sizes[0], D), dtype=E4M3), x.new_empty_strided(sizes, strides, dtype=dtype)


@torch.library.register_fake("fp8ops::per_token_group_quant")
def _per_token_group_quant_fake(x, group_size=128, scale_layout="row", ue8m0=False, pad_rows_to=1, eps=1e-10):
    M = _checks.per_token_group_quant(x, group_size, scale_layout, pad_rows_to, eps)
    return _flat_outputs(x, M, x.shape[-1], group_size, scale_layout, pad_rows_to)


@torch.library.register_fake("fp8ops::group_major_quant")
def _group_major_quant_fake(x, ue8m0=False, packed=False, eps=1e-10):
    _checks.group_major_quant(x, eps)
    T, G, D = x.shape
    sizes, strides, dtype = group_major_scale_geometry(T, G, D // 128, packed)
    q = x.new_empty((T, G, D), dtype=E4M3)
    return q, x.new_empty_strided(sizes, strides, dtype=dtype)


@torch.library.register_fake("fp8ops::pack_ue8m0")
def _pack_ue8m0_fake(scale):
    _checks.pack_ue8m0(scale)
    sizes, strides = packed_scale_geometry(tuple(scale.shape))
    return scale.new_empty_strided(sizes, strides, dtype=torch.int32)


@torch.library.register_fake("fp8ops::dequant")
def _dequant_fake(q, scale, group_size=128, out_dtype=None):
    _checks.dequant(q, scale, group_size, out_dtype)
    return q.new_empty(q.shape, dtype=out_dtype if out_dtype is not None else torch.float32)


@torch.library.register_fake("fp8ops::indexer_q_quant")
def _indexer_q_quant_fake(
    q, weight, weight_scale, cos_sin_cache, positions, rope_tail=True, rope_neox=False, hadamard=True, eps=1e-4
):
    _checks.indexer_q_quant(q, weight, weight_scale, cos_sin_cache, positions, eps)
    B, H, _ = q.shape
    return q.new_empty((B, H, 128), dtype=E4M3), q.new_empty((B, H, 1), dtype=torch.float32)


@torch.library.register_fake("fp8ops::silu_mul_quant")
def _silu_mul_quant_fake(x, group_size=128, scale_layout="row", ue8m0=False, pad_rows_to=1, eps=1e-10, masked_m=None):
    M = _checks.silu_mul_quant(x, group_size, scale_layout, pad_rows_to, eps, masked_m)
    H = x.shape[-1] // 2
    if masked_m is None:
        return _flat_outputs(x, M, H, group_size, scale_layout, pad_rows_to)
    E, Mmax = x.shape[0], x.shape[1]
    sizes, strides, dtype = masked_scale_geometry(E, Mmax, H // group_size, scale_layout)
    return x.new_empty((E, Mmax, H), dtype=E4M3), x.new_empty_strided(sizes, strides, dtype=dtype)


@torch.library.register_fake("fp8ops::rms_norm_quant")
def _rms_norm_quant_fake(
    x, weight, norm_eps=1e-6, residual=None, group_size=128, scale_layout="row", ue8m0=False, pad_rows_to=1, eps=1e-10
):
    M = _checks.rms_norm_quant(x, weight, norm_eps, residual, group_size, scale_layout, pad_rows_to, eps)
    return _flat_outputs(x, M, x.shape[-1], group_size, scale_layout, pad_rows_to)


@torch.library.register_fake("fp8ops::block_quant")
def _block_quant_fake(w, block_n=128, block_k=128, ue8m0=False, eps=1e-10):
    _checks.block_quant(w, block_n, block_k, eps)
    return w.new_empty(w.shape, dtype=E4M3), w.new_empty(block_scale_shape(tuple(w.shape)), dtype=torch.float32)


def _non_differentiable(op_name: str) -> None:
    """Marks every output of op_name non-differentiable: outputs never require grad, so a backward
    through them raises torch's 'does not require grad' error instead of silently skipping x."""

    def setup_context(ctx, inputs, output):
        outs = output if isinstance(output, tuple) else (output,)
        ctx.mark_non_differentiable(*outs)

    def backward(ctx, *grads):
        raise RuntimeError(f"fp8ops: {op_name} is not differentiable")

    torch.library.register_autograd(f"fp8ops::{op_name}", backward, setup_context=setup_context)


for _op in (
    "per_token_group_quant",
    "group_major_quant",
    "pack_ue8m0",
    "dequant",
    "indexer_q_quant",
    "silu_mul_quant",
    "block_quant",
):
    _non_differentiable(_op)


def _rms_norm_quant_autograd(
    x, weight, norm_eps=1e-6, residual=None, group_size=128, scale_layout="row", ue8m0=False, pad_rows_to=1, eps=1e-10
):
    """rms_norm_quant mutates residual, and torch registers no autograd formula for a mutating op:
    it raises at the call instead when an input requires grad and grad mode is on."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, residual)):
        raise RuntimeError(
            "fp8ops: rms_norm_quant is not differentiable; call it under torch.no_grad() or on tensors that do "
            "not require grad"
        )
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.fp8ops.rms_norm_quant.default(
            x, weight, norm_eps, residual, group_size, scale_layout, ue8m0, pad_rows_to, eps
        )


torch.library.impl("fp8ops::rms_norm_quant", "Autograd")(_rms_norm_quant_autograd)
