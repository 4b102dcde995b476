"""Argument checks of the fake (meta) kernels: the twin of the checks in csrc/prepare.cpp, in the
same order and with the same messages, so that a bad call fails the same way in eager mode on
every device and at trace time under torch.compile. tests/test_errors.py holds the two equal."""

from __future__ import annotations

import math

import torch

from ._layout import GROUP_SIZES, SCALE_LAYOUTS, align, ceil_div

MAX_ROWS = 1 << 31
MAX_WORK_ITEMS = 1 << 31
FLOAT32_MAX = 3.4028234663852886e38

_DTYPE_NAMES = {
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float32: "float32",
    torch.float8_e4m3fn: "float8_e4m3fn",
    torch.int32: "int32",
    torch.float64: "float64",
    torch.int64: "int64",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
    torch.float8_e5m2: "float8_e5m2",
    torch.complex64: "complex64",
    torch.complex128: "complex128",
}


def dtype_name(dtype) -> str:
    return _DTYPE_NAMES.get(dtype, "an unsupported dtype")


def require(cond, op: str, *parts) -> None:
    """Raise RuntimeError('fp8ops: <op>: <parts>') unless cond (a bool or a SymBool)."""
    torch._check(cond, lambda: "fp8ops: " + op + "".join(str(p) for p in parts))


def float_input(op, arg, t, allow_fp32):
    ok = t.dtype in (torch.bfloat16, torch.float16) or (allow_fp32 and t.dtype == torch.float32)
    want = " must be bfloat16, float16 or float32" if allow_fp32 else " must be bfloat16 or float16"
    require(ok, op, ": ", arg, want, ", got ", dtype_name(t.dtype))
    device(op, arg, t)


def device(op, arg, t):
    if t.device.type != "meta":
        require(t.device.type in ("cpu", "cuda"), op, ": ", arg, " must be a CPU or CUDA tensor")


def eps(op, value, name="eps"):
    ok = math.isfinite(value) and 1e-30 <= value <= FLOAT32_MAX
    require(ok, op, f": {name} must be finite, >= 1e-30 and representable in float32, got ", _cpp_double(value))


def same_device(op, arg_a, a, arg_b, b):
    require(a.device == b.device, op, ": ", arg_a, " and ", arg_b, " must be on the same device")


def _cpp_double(v) -> str:
    """A double as C++'s ostream prints it (6 significant digits)."""
    if math.isnan(v):
        return "nan" if math.copysign(1.0, v) > 0 else "-nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    s = f"{v:.6g}"
    if "e" in s:
        mant, exp = s.split("e")
        s = f"{mant}e{exp[0]}{int(exp[1:]):02d}"
    return s


def below_work_limit(*factors) -> bool:
    return any(f == 0 for f in factors) or math.prod(factors) < MAX_WORK_ITEMS


def flattened_row_stride(op, x):
    """Row stride of x viewed as [-1, K]; raises where that view would fail."""
    n = x.dim()
    row_stride = x.shape[n - 1]
    inner = -1
    for d in range(n - 2, -1, -1):
        if x.shape[d] == 0:
            return row_stride
        if x.shape[d] == 1:
            continue
        if inner < 0:
            row_stride = x.stride(d)
        else:
            require(
                x.stride(d) == x.stride(inner) * x.shape[inner],
                op,
                ": x's leading dims must be viewable as one dim (x.view(-1, K) fails for these strides); "
                "call .contiguous() or reshape first",
            )
        inner = d
    return row_stride


def group_sizes(op, group_size):
    require(group_size in GROUP_SIZES, op, ": group_size must be 32, 64 or 128, got ", group_size)


def row_quant_args(op, group_size, layout, pad_rows_to, eps_value):
    """The arguments every row quantizer shares, in the C++ order (check_row_quant_args)."""
    group_sizes(op, group_size)
    scale_layout(op, layout)
    require(pad_rows_to >= 1, op, ": pad_rows_to must be >= 1, got ", pad_rows_to)
    eps(op, eps_value)


def scale_layout(op, name):
    require(
        name in SCALE_LAYOUTS,
        op,
        ": scale_layout must be one of 'row', 'col', 'col_tma', 'col_tma_packed', got '",
        name,
        "'",
    )


def padded_rows(op, M, pad_rows_to):
    """align(M, pad_rows_to), which must be below 2^31."""
    require(
        M < MAX_ROWS and pad_rows_to < MAX_ROWS and align(M, pad_rows_to) < MAX_ROWS,
        op,
        ": the padded row count align(M, pad_rows_to) = align(",
        M,
        ", ",
        pad_rows_to,
        ") must be below 2^31",
    )
    return align(M, pad_rows_to)


def last_dim_contiguous(op, x, name="x"):
    K = x.shape[-1]
    require(
        K == 0 or x.stride(-1) == 1, op, f": {name}'s last dim must be contiguous (stride 1), got stride ", x.stride(-1)
    )


def flat_rows(op, M, D, group_size, layout, pad_rows_to):
    """The per-token output's row checks (padded rows, scale groups)."""
    Mp = padded_rows(op, M, pad_rows_to)
    rows = align(Mp, 4) if layout in ("col_tma", "col_tma_packed") else Mp
    require(
        below_work_limit(rows, D // group_size),
        op,
        ": x has too many scale groups; at most 2^31 - 1 (padded rows times K / group_size) are supported",
    )


def per_token_group_quant(x, group_size, layout, pad_rows_to, eps_value):
    """Checks of per_token_group_quant; returns M."""
    op = "per_token_group_quant"
    float_input(op, "x", x, True)
    require(x.dim() >= 2, op, ": x must have at least 2 dims ([M, K] or [..., K]), got ", x.dim())
    row_quant_args(op, group_size, layout, pad_rows_to, eps_value)
    K = x.shape[-1]
    require(K % group_size == 0, op, ": x.size(-1) (K = ", K, ") must be a multiple of group_size (", group_size, ")")
    last_dim_contiguous(op, x)
    M = math.prod(x.shape[:-1])
    flattened_row_stride(op, x)
    flat_rows(op, M, K, group_size, layout, pad_rows_to)
    return M


def silu_mul_quant(x, group_size, layout, pad_rows_to, eps_value, masked_m):
    """Checks of silu_mul_quant; returns M (flat) or None (masked)."""
    op = "silu_mul_quant"
    float_input(op, "x", x, True)
    if masked_m is not None:
        require(x.dim() == 3, op, ": with masked_m, x must be 3-D [E, Mmax, 2H], got ", x.dim(), " dims")
    else:
        require(x.dim() >= 2, op, ": x must have at least 2 dims ([M, 2H] or [..., 2H]), got ", x.dim())
    row_quant_args(op, group_size, layout, pad_rows_to, eps_value)
    K2 = x.shape[-1]
    require(
        K2 % (2 * group_size) == 0,
        op,
        ": x.size(-1) / 2 (H, the gate and up widths) must be a multiple of group_size (",
        group_size,
        "); x.size(-1) = ",
        K2,
    )
    last_dim_contiguous(op, x)
    H = K2 // 2
    if masked_m is None:
        M = math.prod(x.shape[:-1])
        flattened_row_stride(op, x)
        flat_rows(op, M, H, group_size, layout, pad_rows_to)
        return M
    E, Mmax = x.shape[0], x.shape[1]
    require(masked_m.dtype == torch.int32, op, ": masked_m must be int32, got ", dtype_name(masked_m.dtype))
    require(masked_m.dim() == 1 and masked_m.shape[0] == E, op, ": masked_m must be [E] = [", E, "]")
    same_device(op, "x", x, "masked_m", masked_m)
    require(masked_m.stride(0) == 1 or E <= 1, op, ": masked_m must be contiguous")
    require(pad_rows_to == 1, op, ": pad_rows_to must be 1 with masked_m, got ", pad_rows_to)
    require(
        layout != "col",
        op,
        ": scale_layout 'col' is not offered with masked_m (use 'row', 'col_tma' or 'col_tma_packed')",
    )
    require(E <= 1024, op, ": with masked_m, at most 1024 experts are supported, got ", E)
    require(
        below_work_limit(E, align(Mmax, 4), H // group_size),
        op,
        ": x has too many scale groups; at most 2^31 - 1 (E * align(Mmax, 4) * H / group_size) are supported",
    )
    return None


RMS_MAX_D = 8 * 8 * 256


def rms_norm_quant(x, weight, norm_eps, residual, group_size, layout, pad_rows_to, eps_value):
    """Checks of rms_norm_quant; returns M."""
    op = "rms_norm_quant"
    float_input(op, "x", x, True)
    require(x.dim() >= 2, op, ": x must have at least 2 dims ([M, D] or [..., D]), got ", x.dim())
    D = x.shape[-1]
    require(
        weight.dtype == x.dtype, op, ": weight must have x's dtype (", dtype_name(x.dtype), "), got ",
        dtype_name(weight.dtype),
    )  # fmt: skip
    require(weight.dim() == 1 and weight.shape[0] == D, op, ": weight must be [D] = [", D, "]")
    require(D <= 1 or weight.stride(0) == 1, op, ": weight must be contiguous")
    same_device(op, "x", x, "weight", weight)
    if residual is not None:
        require(
            residual.dtype == x.dtype, op, ": residual must have x's dtype (", dtype_name(x.dtype), "), got ",
            dtype_name(residual.dtype),
        )  # fmt: skip
        require(tuple(residual.shape) == tuple(x.shape), op, ": residual must have x's shape")
        same_device(op, "x", x, "residual", residual)
        last_dim_contiguous(op, residual, "residual")
    ok = math.isfinite(norm_eps) and 0.0 <= norm_eps <= FLOAT32_MAX
    require(ok, op, ": norm_eps must be finite, >= 0 and representable in float32, got ", _cpp_double(norm_eps))
    row_quant_args(op, group_size, layout, pad_rows_to, eps_value)
    require(D % group_size == 0, op, ": x.size(-1) (D = ", D, ") must be a multiple of group_size (", group_size, ")")
    require(D <= RMS_MAX_D, op, ": x.size(-1) (D = ", D, ") must be at most ", RMS_MAX_D)
    last_dim_contiguous(op, x)
    M = math.prod(x.shape[:-1])
    flattened_row_stride(op, x)
    if residual is not None:
        flattened_row_stride(op, residual)
    flat_rows(op, M, D, group_size, layout, pad_rows_to)
    return M


def block_quant(w, block_n, block_k, eps_value):
    op = "block_quant"
    float_input(op, "w", w, True)
    require(w.dim() in (2, 3), op, ": w must be 2-D [N, K] or 3-D [E, N, K], got ", w.dim(), " dims")
    require(
        block_n == 128 and block_k == 128,
        op,
        ": block_n and block_k must be 128 (128 x 128 blocks), got ",
        block_n,
        " x ",
        block_k,
    )
    eps(op, eps_value)
    K = w.shape[-1]
    require(K <= 1 or w.stride(-1) == 1, op, ": w's last dim must be contiguous (stride 1), got stride ", w.stride(-1))
    E = w.shape[0] if w.dim() == 3 else 1
    require(
        E <= 65535 and ceil_div(w.shape[-2], 128) <= 65535,
        op,
        ": w has too many blocks: at most 65535 experts and 65535 row blocks",
    )


def group_major_quant(x, eps_value):
    op = "group_major_quant"
    float_input(op, "x", x, True)
    require(x.dim() == 3, op, ": x must be 3-D [T, G, D], got ", x.dim(), " dims")
    eps(op, eps_value)
    T, G, D = x.shape
    require(D % 128 == 0, op, ": x.size(2) (D = ", D, ") must be a multiple of 128")
    require(D == 0 or x.stride(2) == 1, op, ": x's last dim must be contiguous (stride 1), got stride ", x.stride(2))
    require(
        below_work_limit(align(T, 4), G, D // 128),
        op,
        ": x has too many scale groups; at most 2^31 - 1 (align(T, 4) * G * D / 128) are supported",
    )


def pack_ue8m0(scale):
    op = "pack_ue8m0"
    require(scale.dtype == torch.float32, op, ": scale must be float32, got ", dtype_name(scale.dtype))
    device(op, "scale", scale)
    require(scale.dim() in (2, 3), op, ": scale must be 2-D [M, S] or 3-D [B, M, S], got ", scale.dim(), " dims")
    B = scale.shape[0] if scale.dim() == 3 else 1
    M, S = scale.shape[-2], scale.shape[-1]
    require(
        below_work_limit(B, align(M, 4), ceil_div(S, 4)),
        op,
        ": scale is too large; at most 2^31 - 1 packed words are supported",
    )


def dequant(q, scale, group_size, out_dtype):
    op = "dequant"
    require(q.dtype == torch.float8_e4m3fn, op, ": q must be float8_e4m3fn, got ", dtype_name(q.dtype))
    device(op, "q", q)
    packed = scale.dtype == torch.int32
    require(
        packed or scale.dtype == torch.float32,
        op,
        ": scale must be float32 or int32 (packed UE8M0), got ",
        dtype_name(scale.dtype),
    )
    same_device(op, "q", q, "scale", scale)
    require(q.dim() in (2, 3), op, ": q must be 2-D or 3-D, got ", q.dim(), " dims")
    require(scale.dim() == q.dim(), op, ": scale must have q's rank (", q.dim(), "), got ", scale.dim())
    for d in range(q.dim() - 1):
        require(
            scale.shape[d] == q.shape[d],
            op,
            f": scale.size({d}) = ",
            scale.shape[d],
            f" must equal q.size({d}) = ",
            q.shape[d],
        )
    group_sizes(op, group_size)
    K = q.shape[-1]
    require(K % group_size == 0, op, ": q.size(-1) (K = ", K, ") must be a multiple of group_size (", group_size, ")")
    S = K // group_size
    C = ceil_div(S, 4) if packed else S
    what = " (ceil(K / group_size / 4), packed)" if packed else " (K / group_size)"
    require(scale.shape[-1] == C, op, ": scale.size(-1) must be ", C, what, ", got ", scale.shape[-1])
    dt = out_dtype if out_dtype is not None else torch.float32
    require(
        dt in (torch.float32, torch.bfloat16, torch.float16),
        op,
        ": out_dtype must be float32, bfloat16 or float16, got ",
        dtype_name(dt),
    )


def indexer_q_quant(q, weight, weight_scale, cos_sin_cache, positions, eps_value):
    op = "indexer_q_quant"
    float_input(op, "q", q, False)
    require(q.dim() == 3, op, ": q must be 3-D [B, H, 128], got ", q.dim(), " dims")
    B, H = q.shape[0], q.shape[1]
    require(q.shape[2] == 128, op, ": q's head dim must be 128, got ", q.shape[2])
    require(
        q.stride(2) == 1 and (H <= 1 or q.stride(1) == 128),
        op,
        ": q's last two dims must be contiguous (strides (128, 1)), got (",
        q.stride(1),
        ", ",
        q.stride(2),
        ")",
    )
    require(
        weight.dtype == q.dtype,
        op,
        ": weight must have q's dtype (",
        dtype_name(q.dtype),
        "), got ",
        dtype_name(weight.dtype),
    )
    require(
        weight.dim() == 2 and weight.shape[0] == B and weight.shape[1] == H,
        op,
        ": weight must be [B, H] = [",
        B,
        ", ",
        H,
        "]",
    )
    require(
        cos_sin_cache.dtype == torch.float32,
        op,
        ": cos_sin_cache must be float32, got ",
        dtype_name(cos_sin_cache.dtype),
    )
    require(
        cos_sin_cache.dim() == 2 and cos_sin_cache.shape[1] == 64,
        op,
        ": cos_sin_cache must be [max_pos, 64] (cos(32) | sin(32)), got width ",
        cos_sin_cache.shape[1] if cos_sin_cache.dim() == 2 else -1,
    )
    require(cos_sin_cache.stride(1) == 1, op, ": cos_sin_cache's last dim must be contiguous")
    require(
        positions.dtype in (torch.int32, torch.int64),
        op,
        ": positions must be int32 or int64, got ",
        dtype_name(positions.dtype),
    )
    require(positions.dim() == 1 and positions.shape[0] == B, op, ": positions must be [B] = [", B, "]")
    same_device(op, "q", q, "weight", weight)
    same_device(op, "q", q, "cos_sin_cache", cos_sin_cache)
    same_device(op, "q", q, "positions", positions)
    eps(op, eps_value)
    require(B * H == 0 or cos_sin_cache.shape[0] > 0, op, ": cos_sin_cache has no positions")
    require(math.isfinite(weight_scale), op, ": weight_scale must be finite")
    require(B * H < MAX_WORK_ITEMS, op, ": B * H (", B * H, ") must be below 2^31")
