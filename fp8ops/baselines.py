"""The benchmark's baselines: the leanest torch expressions a careful user would write for each op
(no zero-filled outputs, no slice writes), to be compiled per shape with
``torch.compile(fullgraph=True, dynamic=False)``, and the unfused routes the fused ops replace.
Their numerics are SPEC's up to NaN handling (a NaN propagates into its group's amax here)."""

from __future__ import annotations

import torch

from . import ops

E4M3 = torch.float8_e4m3fn
INV_E4M3_MAX = 1.0 / 448.0


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _ue8m0(s: torch.Tensor) -> torch.Tensor:
    bits = s.view(torch.int32)
    e = ((bits >> 23) + ((bits & 0x7FFFFF) != 0).to(torch.int32)).clamp(1, 254)
    return e


def _scales(s: torch.Tensor, layout: str, packed: bool) -> torch.Tensor:
    """[M, S] fp32 scales into the layout, written once into an empty strided buffer."""
    M, S = s.shape
    if layout == "row":
        return s
    if layout == "col":
        return torch.empty_strided((M, S), (1, M), dtype=s.dtype, device=s.device).copy_(s)
    Ma = align(M, 4)
    if not packed:
        return torch.empty_strided((M, S), (1, Ma), dtype=s.dtype, device=s.device).copy_(s)
    P = (S + 3) // 4
    e = torch.nn.functional.pad(_ue8m0(s), (0, 4 * P - S)).to(torch.uint8).view(torch.int32)
    return torch.empty_strided((M, P), (1, Ma), dtype=torch.int32, device=s.device).copy_(e)


def quant(x: torch.Tensor, layout: str = "row", ue8m0: bool = False, group_size: int = 128):
    """Per-token group quantization of x [M, K]: one amax per group, one multiply."""
    M, K = x.shape
    packed = layout == "col_tma_packed"
    xf = x.float().view(M, K // group_size, group_size)
    s = xf.abs().amax(-1).clamp(min=1e-10) * INV_E4M3_MAX
    if ue8m0 or packed:
        s = (_ue8m0(s) << 23).view(torch.float32)
    q = (xf * (1.0 / s)[..., None]).clamp(-448.0, 448.0).to(E4M3).view(M, K)
    return q, _scales(s, layout, packed)


def group_major_quant(x: torch.Tensor, packed: bool = False):
    """[T, G, D] per 128 elements, scales written group-major ([G, S, Ta] storage)."""
    T, G, D = x.shape
    S = D // 128
    xf = x.float().view(T, G, S, 128)
    s = xf.abs().amax(-1).clamp(min=1e-10) * INV_E4M3_MAX  # [T, G, S]
    if packed:
        s = (_ue8m0(s) << 23).view(torch.float32)
    q = (xf * (1.0 / s)[..., None]).clamp(-448.0, 448.0).to(E4M3).view(T, G, D)
    Ta = align(T, 4)
    if packed:
        P = (S + 3) // 4
        e = torch.nn.functional.pad(_ue8m0(s), (0, 4 * P - S)).to(torch.uint8).view(torch.int32)
        out = torch.empty_strided((T, G, P), (1, P * Ta, Ta), dtype=torch.int32, device=x.device).copy_(e)
    else:
        out = torch.empty_strided((T, G, S), (1, S * Ta, Ta), dtype=torch.float32, device=x.device).copy_(s)
    return q, out


def indexer_q_quant(q, weight, weight_scale, cos_sin_cache, positions):
    """DeepSeek-V4's indexer query in fp32: RoPE on the last 64 dims (interleaved pairs), the
    128-point Hadamard as a matrix product, one scale per (token, head)."""
    x = q.float()
    cs = cos_sin_cache[positions]
    cos, sin = cs[:, None, :32], cs[:, None, 32:]
    a, b = x[..., 64::2], x[..., 65::2]
    rot = torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)
    x = torch.cat((x[..., :64], rot), -1)
    h = hadamard(x.device)
    x = x @ h
    s = x.abs().amax(-1, keepdim=True).clamp(min=1e-4) * INV_E4M3_MAX
    q8 = (x * (1.0 / s)).clamp(-448.0, 448.0).to(E4M3)
    return q8, weight.float().unsqueeze(-1) * weight_scale * s


def hadamard(device, n: int = 128) -> torch.Tensor:
    """Sylvester-order Walsh-Hadamard matrix times n^-0.5 (symmetric)."""
    h = torch.ones(1, 1, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h * n**-0.5


def silu_mul_quant(x: torch.Tensor, layout: str = "col_tma_packed"):
    """SiLU(gate) * up in x's dtype, then the lean quant, as one compiled graph."""
    H = x.shape[-1] // 2
    a = torch.nn.functional.silu(x[:, :H]) * x[:, H:]
    return quant(a, layout)


def silu_mul_then_fp8ops(x: torch.Tensor, layout: str = "col_tma_packed", masked_m=None):
    """The unfused route: torch's SiLU and multiply (a bf16 round trip), then fp8ops' quant."""
    H = x.shape[-1] // 2
    a = torch.nn.functional.silu(x[..., :H]) * x[..., H:]
    return ops.per_token_group_quant(a, 128, layout)


def add_rms_norm_then_fp8ops(x, residual, weight, layout: str = "col_tma"):
    """The unfused route: the residual add, torch's RMSNorm, then fp8ops' quant."""
    if residual is not None:
        residual += x
        x = residual
    y = torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, 1e-6)
    return ops.per_token_group_quant(y, 128, layout)


def per_block_cast(w: torch.Tensor, eps: float = 1e-4):
    """A weight [N, K] per 128 x 128 block as DeepGEMM's per_block_cast_to_fp8 computes it: edges
    zero-padded, amax over each block, scale amax / 448, codes w * (1 / scale)."""
    N, K = w.shape
    Np, Kp = align(N, 128), align(K, 128)
    wp = torch.nn.functional.pad(w, (0, Kp - K, 0, Np - N)).view(Np // 128, 128, Kp // 128, 128)
    s = wp.abs().float().amax(dim=(1, 3), keepdim=True).clamp(min=eps) / 448.0
    q = (wp * (1.0 / s)).to(E4M3).view(Np, Kp)[:N, :K].contiguous()
    return q, s.view(Np // 128, Kp // 128)
