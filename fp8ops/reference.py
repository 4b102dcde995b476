"""Plain torch expressions of SPEC.md, independent of the C++ code.

Used by the tests (as the independent reference), by the benchmark's self-check, and, compiled with
torch.compile, as the benchmark's "what a user would write" baseline. Each function returns its
scales in the requested layout with explicit zero padding, built by plain torch indexing.
"""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
INV_E4M3_MAX = 1.0 / 448.0  # rounds to fp32 0x3B124925 when it multiplies an fp32 tensor


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def ue8m0_round(s: torch.Tensor) -> torch.Tensor:
    """Round positive fp32 scales up to a power of two, biased exponent clamped to [1, 254]."""
    return (ue8m0_exponent(s) << 23).view(torch.float32)


def ue8m0_exponent(s: torch.Tensor) -> torch.Tensor:
    bits = s.view(torch.int32) & 0x7FFFFFFF
    e = (bits >> 23) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return e.clamp(1, 254)


def quant_groups(x: torch.Tensor, group_size: int, ue8m0: bool, eps: float):
    """SPEC section 5 on the last dim of x: returns (q e4m3 like x, scale fp32 [..., K/group_size])."""
    shape = x.shape
    xf = x.float().reshape(*shape[:-1], shape[-1] // group_size, group_size)
    a = xf.abs().masked_fill(~xf.isfinite(), 0.0).amax(-1, keepdim=True)
    s = a.clamp(min=eps) * INV_E4M3_MAX
    if ue8m0:
        s = ue8m0_round(s)
    xs = torch.where(xf.isnan(), torch.zeros_like(xf), xf) * (1.0 / s)
    q = xs.clamp(-448.0, 448.0).to(E4M3)
    return q.reshape(shape), s.squeeze(-1)


def pack_exponents(s: torch.Tensor) -> torch.Tensor:
    """fp32 UE8M0 scales [..., S] -> int32 words [..., ceil(S/4)], byte j of word p = group 4p+j."""
    e = torch.where(s == 0, torch.zeros_like(s, dtype=torch.int32), ue8m0_exponent(s)).to(torch.uint8)
    S = s.shape[-1]
    P = (S + 3) // 4
    padded = torch.zeros(*s.shape[:-1], 4 * P, dtype=torch.uint8, device=s.device)
    padded[..., :S] = e
    return padded.view(torch.int32)


def mn_major(values: torch.Tensor, rows_storage: int, rows_logical: int) -> torch.Tensor:
    """[M, C] values into a zeroed [C, rows_storage] storage, returned as the [rows_logical, C] view
    with strides (1, rows_storage)."""
    M, C = values.shape
    storage = torch.zeros(C, rows_storage, dtype=values.dtype, device=values.device)
    storage[:, :M] = values.t()
    return storage[:, :rows_logical].t()


def per_token_group_quant(
    x: torch.Tensor,
    group_size: int = 128,
    scale_layout: str = "row",
    ue8m0: bool = False,
    pad_rows_to: int = 1,
    eps: float = 1e-10,
):
    """The torch expression of per_token_group_quant: (q [Mp, K], scale in the requested layout)."""
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    M = x2.shape[0]
    Mp = align(M, pad_rows_to)
    packed = scale_layout == "col_tma_packed"
    q, s = quant_groups(x2, group_size, ue8m0 or packed, eps)
    q_out = torch.zeros(Mp, K, dtype=E4M3, device=x.device)
    q_out[:M] = q
    if scale_layout == "row":
        s_out = torch.zeros(Mp, K // group_size, dtype=torch.float32, device=x.device)
        s_out[:M] = s
    elif scale_layout == "col":
        s_out = mn_major(s, Mp, Mp)
    elif scale_layout == "col_tma":
        s_out = mn_major(s, align(Mp, 4), Mp)
    elif scale_layout == "col_tma_packed":
        s_out = mn_major(pack_exponents(s), align(Mp, 4), Mp)
    else:
        raise ValueError(f"unknown scale_layout {scale_layout!r}")
    return q_out, s_out


def group_major_quant(x: torch.Tensor, ue8m0: bool = False, packed: bool = False, eps: float = 1e-10):
    """The torch expression of group_major_quant: (q [T, G, D], scale [T, G, C] group-major)."""
    T, G, D = x.shape
    q, s = quant_groups(x, 128, ue8m0 or packed, eps)  # s [T, G, S]
    vals = pack_exponents(s) if packed else s
    C = vals.shape[-1]
    Ta = align(T, 4)
    storage = torch.zeros(G, C, Ta, dtype=vals.dtype, device=x.device)
    storage[:, :, :T] = vals.permute(1, 2, 0)
    return q.contiguous(), storage[:, :, :T].permute(2, 0, 1)


def dequant(q: torch.Tensor, scale: torch.Tensor, group_size: int = 128, out_dtype=None):
    """float(q) * scale per group, then one cast; packed int32 scales are unpacked first."""
    if scale.dtype == torch.int32:
        b = scale.contiguous().view(torch.uint8).reshape(*scale.shape, 4).flatten(-2).to(torch.int32)
        scale = torch.where(b == 0, torch.zeros_like(b, dtype=torch.float32), (b << 23).view(torch.float32))
    S = q.shape[-1] // group_size
    s = scale[..., :S].float().unsqueeze(-1)
    y = (q.float().reshape(*q.shape[:-1], S, group_size) * s).reshape(q.shape)
    return y.to(out_dtype or torch.float32)


def hadamard_matrix(n: int = 128, dtype=torch.float64, device=None) -> torch.Tensor:
    """Sylvester-order Walsh-Hadamard matrix (unnormalized), built on `device` (so that compiled
    code makes no host-to-device copy, which a CUDA graph capture refuses)."""
    h = torch.ones(1, 1, dtype=dtype, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def indexer_q_transform(
    q, cos_sin_cache, positions, rope_tail=True, rope_neox=False, hadamard=True, dtype=torch.float64
):
    """RoPE then Hadamard of SPEC section 4 (float64 by default): returns the transformed [B, H, 128]."""
    x = q.to(dtype).clone()
    cs = cos_sin_cache.to(dtype)[positions.long()]  # [B, 64]
    cos, sin = cs[:, None, :32], cs[:, None, 32:]
    half = x[..., 64:] if rope_tail else x[..., :64]
    if rope_neox:
        a, b = half[..., :32].clone(), half[..., 32:].clone()
        half[..., :32], half[..., 32:] = a * cos - b * sin, a * sin + b * cos
    else:
        a, b = half[..., 0::2].clone(), half[..., 1::2].clone()
        half[..., 0::2], half[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    if hadamard:
        x = x @ hadamard_matrix(128, dtype, x.device).t() * 128**-0.5
    return x


def indexer_q_quant(
    q, weight, weight_scale, cos_sin_cache, positions, rope_tail=True, rope_neox=False, hadamard=True, eps=1e-4
):
    """Float64 expression of indexer_q_quant: (transformed q, scale [B, H], weights_out [B, H])."""
    x = indexer_q_transform(q, cos_sin_cache, positions, rope_tail, rope_neox, hadamard)
    amax = x.abs().masked_fill(~x.isfinite(), 0).amax(-1)
    scale = amax.clamp(min=eps) / 448.0
    return x, scale, weight.double() * weight_scale * scale


def indexer_q_quant_fp32(
    q, weight, weight_scale, cos_sin_cache, positions, rope_tail=True, rope_neox=False, hadamard=True, eps=1e-4
):
    """What a user would write in fp32 torch: (q_fp8 [B, H, 128], weights_out [B, H, 1])."""
    x = indexer_q_transform(q, cos_sin_cache, positions, rope_tail, rope_neox, hadamard, torch.float32)
    amax = x.abs().masked_fill(~x.isfinite(), 0).amax(-1, keepdim=True)
    scale = amax.clamp(min=eps) * INV_E4M3_MAX
    q8 = (torch.where(x.isnan(), torch.zeros_like(x), x) * (1.0 / scale)).clamp(-448.0, 448.0).to(E4M3)
    return q8, weight.float().unsqueeze(-1) * weight_scale * scale


def silu_mul(x: torch.Tensor, silu=None) -> torch.Tensor:
    """SPEC section 8's activation in x's dtype T: T(T(silu(g)) * u), silu in fp32 (torch's
    F.silu unless another fp32 SiLU is given)."""
    H = x.shape[-1] // 2
    g, u = x[..., :H].float(), x[..., H:].float()
    s = silu(g) if silu is not None else torch.nn.functional.silu(g)
    return (s.to(x.dtype).float() * u).to(x.dtype)


def silu_mul_quant(
    x, group_size=128, scale_layout="row", ue8m0=False, pad_rows_to=1, eps=1e-10, masked_m=None, silu=None
):
    """The torch expression of silu_mul_quant. Masked: rows t >= masked_m[e] of q and of the scale
    are left as zeros (the op leaves them untouched)."""
    a = silu_mul(x, silu)
    if masked_m is None:
        return per_token_group_quant(a, group_size, scale_layout, ue8m0, pad_rows_to, eps)
    E, Mmax, H = a.shape
    S = H // group_size
    packed = scale_layout == "col_tma_packed"
    q_out = torch.zeros(E, Mmax, H, dtype=E4M3, device=x.device)
    s_rows = torch.zeros(E, Mmax, S, dtype=torch.float32, device=x.device)
    for e in range(E):
        m = int(masked_m[e])
        q, s = quant_groups(a[e, :m], group_size, ue8m0 or packed, eps)
        q_out[e, :m] = q
        s_rows[e, :m] = s
    if scale_layout == "row":
        return q_out, s_rows
    vals = pack_exponents(s_rows) if packed else s_rows  # rows past masked_m have zero scales: words 0
    C, Ma = vals.shape[-1], align(Mmax, 4)
    storage = torch.zeros(E, C, Ma, dtype=vals.dtype, device=x.device)
    storage[:, :, :Mmax] = vals.transpose(1, 2)
    return q_out, storage[:, :, :Mmax].transpose(1, 2)


def rms_inverse(ms, norm_eps):
    """SPEC section 9 step 3 on fp32 ms: 1 / sqrt(ms + norm_eps) in fp32. The square root is
    correctly rounded: in float64, then rounded (torch's fp32 CPU sqrt may be off by an ulp)."""
    return 1.0 / torch.sqrt((ms + torch.tensor(norm_eps, dtype=torch.float32)).double()).float()


def rms_norm(x, weight, norm_eps=1e-6, residual=None):
    """SPEC section 9 steps 1-4 in x's dtype T: (y, r), torch summing the squares in its own order."""
    r = (x.float() + residual.float()).to(x.dtype) if residual is not None else x
    ms = r.float().square().sum(-1, keepdim=True) / x.shape[-1]
    inv = rms_inverse(ms, norm_eps)
    return ((r.float() * inv) * weight.float()).to(x.dtype), r


def rms_norm_quant(
    x, weight, norm_eps=1e-6, residual=None, group_size=128, scale_layout="row", ue8m0=False, pad_rows_to=1, eps=1e-10
):
    """The torch expression of rms_norm_quant: (q, scale, the new residual or None)."""
    y, r = rms_norm(x, weight, norm_eps, residual)
    q, s = per_token_group_quant(y, group_size, scale_layout, ue8m0, pad_rows_to, eps)
    return q, s, (r if residual is not None else None)


def block_quant(w: torch.Tensor, ue8m0: bool = False, eps: float = 1e-10):
    """The torch expression of block_quant (128 x 128 blocks, zero-padded edges)."""
    *lead, N, K = w.shape
    Np, Kp = align(N, 128), align(K, 128)
    wp = torch.zeros(*lead, Np, Kp, dtype=torch.float32, device=w.device)
    wp[..., :N, :K] = w.float()
    v = wp.reshape(*lead, Np // 128, 128, Kp // 128, 128)
    a = v.abs().masked_fill(~v.isfinite(), 0).amax(dim=(-3, -1), keepdim=True)
    s = a.clamp(min=eps) * INV_E4M3_MAX
    if ue8m0:
        s = ue8m0_round(s)
    q = (torch.where(v.isnan(), torch.zeros_like(v), v) * (1.0 / s)).clamp(-448.0, 448.0).to(E4M3)
    q = q.reshape(*lead, Np, Kp)[..., :N, :K].contiguous()
    return q, s.reshape(*lead, Np // 128, Kp // 128)
