"""silu_mul_quant, rms_norm_quant and block_quant (SPEC sections 8-10): the CPU kernels against
torch expressions of SPEC, layouts, padding, bad inputs, opcheck, torch.compile; on a GPU,
bit-identity with the CPU kernels, rows that must stay unwritten, and CUDA graphs."""

import itertools

import pytest
import torch
from helpers import (
    DTYPES,
    assert_same_bits,
    assert_same_quant,
    every_exponent_input,
    make_input,
    misaligned,
    strided_rows,
)

import fp8ops
from fp8ops import _layout, _native
from fp8ops import reference as ref

LAYOUTS = ("row", "col", "col_tma", "col_tma_packed")
MASKED_LAYOUTS = ("row", "col_tma", "col_tma_packed")
M_SIZES = (0, 1, 3, 5, 17, 4097)


def code_steps(a, b):
    """|a - b| in e4m3 code steps, per element (+0 and -0 equal; other sign flips count 255)."""
    ai, bi = a.view(torch.uint8).int(), b.view(torch.uint8).int()
    ai, bi = torch.where(ai == 0x80, 0, ai), torch.where(bi == 0x80, 0, bi)
    same_sign = ((ai & 0x80) == (bi & 0x80)) | (ai == 0) | (bi == 0)
    return torch.where(same_sign, ((ai & 0x7F) - (bi & 0x7F)).abs(), torch.full_like(ai, 255))


# ---------------------------------------------------------------------------------- SiLU numerics


def test_exp_fp32_within_one_ulp():
    x = torch.cat([torch.empty(1 << 20).uniform_(-86.6, 88.72), torch.randn(1 << 18) * 4, torch.tensor([0.0, -0.0])])
    got = _native.exp_fp32(x).double()
    want = torch.exp(x.double())
    ulp = (want.float().view(torch.int32) + 1).view(torch.float32).double() - want.float().double()
    assert ((got - want).abs() <= ulp).all()
    special = torch.tensor([float("nan"), float("inf"), float("-inf"), 88.73, -86.61, -200.0])
    out = _native.exp_fp32(special)
    assert out[0].isnan() and out[1] == float("inf") and out[2] == 0 and out[3] == float("inf")
    assert out[4] == 0 and out[5] == 0


def test_silu_fp32_against_torch():
    g = torch.cat([torch.randn(1 << 20) * 8, torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, 100.0])])
    ours, theirs = _native.silu_fp32(g), torch.nn.functional.silu(g)
    finite = theirs.isfinite() & (theirs.abs() > 1e-30)
    rel = ((ours - theirs).abs() / theirs.abs())[finite]
    assert rel.max() < 4e-7
    assert ours[-5] == float("inf") and ours[-4].isnan() and ours[-3].isnan() and ours[-2] == 0 and ours[-1] == 100
    # Rounded to bf16 or fp16, the two agree almost everywhere, and then within one ulp.
    for dt in (torch.bfloat16, torch.float16):
        a, b = ours[:-5].to(dt), theirs[:-5].to(dt)
        diff = a != b
        assert diff.float().mean() < 1e-4
        assert ((a.float() - b.float()).abs()[diff] <= (b.float().abs() * 2**-7 + 1e-30)[diff]).all()


def test_silu_fp32_error_on_bf16_gates_within_the_device_margin():
    """The premise of the masked kernels' SiLU shortcut (numerics.h, silu_approx): on every bf16
    gate of its range, silu_fp32 is within 1.16 * 2^-23 of SiLU, relative (float64 reference)."""
    g = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    g = g[g.isfinite() & (g.abs() >= 2.0**-60) & (g.abs() <= 40.0)]
    assert g.numel() > 16000
    want = g.double() / (1 + torch.exp(-g.double()))
    rel = (_native.silu_fp32(g).double() - want).abs() / want.abs()
    assert rel.max() * 2**23 <= 1.16


def test_silu_table_premise_on_every_bf16_gate():
    """The bf16 SiLU table of the kernels (silu_mul_quant.cuh, silu_table.h): T(silu(g)) = b + d(b)
    with d(b) = T(silu(g)) - b stored for lo <= |b| < hi only, and |b| clamped up to lo below that:
    every entry is silu_fp32's, and for every bf16 g with 2^-125 <= |g| < 128 (its domain) the
    lookup gives the CPU reference."""
    lo, hi = _native.silu_table_bounds()
    b = torch.arange(1 << 16, dtype=torch.int32)
    exact = _native.silu_fp32(b.to(torch.int16).view(torch.bfloat16).float()).to(torch.bfloat16)
    exact = exact.view(torch.int16).int() & 0xFFFF
    m, neg = b & 0x7FFF, b >> 15
    domain = (m >= 0x100) & (m < hi)
    # The library's table (silu_table.h) holds d for lo <= |b| < hi, positive then negative.
    table = torch.tensor(_native.silu_table())
    n = hi - lo
    assert table.numel() == 2 * n
    own = torch.cat([torch.arange(lo, hi), torch.arange(lo, hi) | 0x8000])
    assert torch.equal(table, (exact[own] - own) & 0xFFFF)
    d = table[neg * n + m.clamp(min=lo, max=hi - 1) - lo]
    got = (b + d) & 0xFFFF
    assert int(domain.sum()) == 2 * (hi - 0x100)
    assert torch.equal(got[domain], exact[domain])
    # The kernels add b and d as signed 16-bit halves (one DPX add per word): over the domain that
    # sum never leaves 16 signed bits, so it is the sum above.
    wide = ((b + 0x8000) & 0xFFFF) + ((d + 0x8000) & 0xFFFF) - 0x10000
    assert bool(((wide >= -0x8000) & (wide <= 0x7FFF))[domain].all())
    assert torch.equal(wide[domain] & 0xFFFF, exact[domain])
    # Below the domain the clamp would be wrong: the kernel takes silu_fp32 there.
    below = (m >= 0x80) & (m < 0x100)
    assert not torch.equal(got[below], exact[below])


def test_silu_table_range_on_two_bf16_values_a_word():
    """silu_table_range (silu_mul_quant.cuh) tests a word of two bf16 values b (low half) and c (high
    half) at once: the word times 2 less 0x200 in each half, modulo 2^32, has both halves below
    2 * (hi - 0x100) exactly when 0x100 <= |b|, |c| < hi (a borrow out of the low half happens
    only where b is out of range). Every b against edge values of c, and the other way round."""
    _, hi = _native.silu_table_bounds()
    v = torch.arange(1 << 16, dtype=torch.int64)
    edges = (0, 1, 0xFF, 0x100, 0x101, 0x3F80, hi - 1, hi, 0x7F80, 0x7FFF)
    edges = edges + tuple(e | 0x8000 for e in edges)

    def in_range(u):
        return ((u & 0x7FFF) >= 0x100) & ((u & 0x7FFF) < hi)

    for e in edges:
        for b, c in ((v, torch.full_like(v, e)), (torch.full_like(v, e), v)):
            twice = (((c << 16) | b) * 2) & 0xFFFFFFFF
            t = (twice - 0x02000200) & 0xFFFFFFFF
            assert torch.equal(torch.maximum(t & 0xFFFF, t >> 16) < 2 * (hi - 0x100), in_range(b) & in_range(c))


# ------------------------------------------------------------------------------- silu_mul_quant


def check_silu_flat(x, group_size=128, layout="row", ue8m0=False, pad_rows_to=1, eps=1e-10):
    q, s = fp8ops.silu_mul_quant(x, group_size, layout, ue8m0, pad_rows_to, eps)
    rq, rs = ref.silu_mul_quant(x.cpu(), group_size, layout, ue8m0, pad_rows_to, eps, silu=_native.silu_fp32)
    assert_same_quant(q, s, rq, rs, f"{tuple(x.shape)} {x.dtype} gs={group_size} {layout} ue8m0={ue8m0}")
    # The flat op equals per_token_group_quant on the unfused activation.
    pq, ps = fp8ops.per_token_group_quant(ref.silu_mul(x.cpu(), _native.silu_fp32), group_size, layout, ue8m0,
                                          pad_rows_to, eps)  # fmt: skip
    assert_same_quant(q, s, pq, ps, "against per_token_group_quant")
    return q, s


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_silu_mul_quant_matches_torch_expression(dtype, layout):
    for M in M_SIZES:
        H = 256 if M == 4097 else 768
        x = make_input((M, 2 * H), dtype)
        check_silu_flat(x, 128, layout, ue8m0=M % 2 == 1, pad_rows_to=4 if M % 2 else 1)


@pytest.mark.parametrize("group_size", (32, 64, 128))
def test_silu_mul_quant_group_sizes_and_boundary_at_h(group_size):
    for H in (group_size, 3 * group_size, 7 * group_size):
        x = make_input((9, 2 * H), torch.bfloat16)
        for layout in LAYOUTS:
            check_silu_flat(x, group_size, layout)


def test_silu_mul_quant_non_finite_halves():
    x = make_input((33, 1024), torch.bfloat16, nonfinite=True)
    x[3, :512] = float("-inf")  # SiLU(-inf) is NaN: its codes are 0
    x[4, 512:] = 0.0
    x[4, :512] = float("inf")  # inf * 0 is NaN
    for layout in LAYOUTS:
        q, s = check_silu_flat(x, 128, layout)
        assert not ((q.view(torch.uint8) & 0x7F) == 0x7F).any()


def test_silu_mul_quant_strided_misaligned_and_leading_dims():
    x = make_input((2, 3, 5, 512), torch.bfloat16)
    check_silu_flat(x)
    check_silu_flat(strided_rows(make_input((7, 512), torch.float16)), layout="col_tma")
    check_silu_flat(misaligned(make_input((7, 512), torch.bfloat16)), layout="col_tma_packed")


def masked_case(E, Mmax, H, dtype=torch.bfloat16, counts=None, device="cpu"):
    x = make_input((E, Mmax, 2 * H), dtype)
    m = counts if counts is not None else torch.randint(0, Mmax + 1, (E,))
    return x.to(device), m.to(torch.int32).to(device)


def check_masked_valid_rows(q, s, x, m, group_size, layout, ue8m0=False):
    """Rows below masked_m equal the reference (and the flat op on the same rows)."""
    rq, rs = ref.silu_mul_quant(x.cpu(), group_size, layout, ue8m0, masked_m=m.cpu(), silu=_native.silu_fp32)
    packed = layout == "col_tma_packed"
    for e in range(x.shape[0]):
        n = int(m[e])
        assert_same_bits(q[e, :n], rq[e, :n], f"q expert {e}")
        assert_same_bits(s[e, :n], rs[e, :n], f"scale expert {e}")
        fq, fs = fp8ops.silu_mul_quant(x[e, :n].cpu(), group_size, "row", ue8m0 or packed)
        assert_same_bits(q[e, :n].cpu(), fq, "masked q == flat q")
        if not packed:
            assert torch.equal(s[e, :n].cpu(), fs)


@pytest.mark.parametrize("layout", MASKED_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_quant_masked(layout, dtype):
    Mmax = 9
    for counts in (torch.tensor([0, 1, Mmax, 4, 0, 7]), torch.zeros(3), torch.full((2,), Mmax)):
        x, m = masked_case(len(counts), Mmax, 384, dtype, counts)
        q, s = fp8ops.silu_mul_quant(x, 128, layout, masked_m=m)
        sizes, strides, sdtype = _layout.masked_scale_geometry(len(counts), Mmax, 3, layout)
        assert (tuple(s.shape), s.stride(), s.dtype) == (sizes, strides, sdtype)
        assert q.shape == (len(counts), Mmax, 384) and q.is_contiguous()
        check_masked_valid_rows(q, s, x, m, 128, layout)


@pytest.mark.parametrize("bad", (-1, 10, 2**31 - 1))
def test_silu_mul_quant_masked_count_out_of_range_raises_on_cpu(bad):
    x, m = masked_case(3, 9, 128, counts=torch.tensor([1, bad, 2]))
    with pytest.raises(RuntimeError, match=r"masked_m\[1\] = .* is outside \[0, Mmax\]"):
        fp8ops.silu_mul_quant(x, masked_m=m)


def test_silu_mul_quant_masked_geometry_matches_deep_gemm_helper_strides():
    # get_mn_major_tma_aligned_tensor on an [8, 256, 16] fp32 tensor returns strides (4096, 1, 256).
    assert _layout.masked_scale_geometry(8, 256, 16, "col_tma")[1] == (4096, 1, 256)


# ------------------------------------------------------------------------------- rms_norm_quant


def exact_sum_input(shape, dtype):
    """Values k * 2^-3 with small integers k: every square and partial sum is exact in fp32, so
    any summation order gives the same sum of squares."""
    return (torch.randint(-24, 25, shape).float() / 8).to(dtype)


def check_rms(x, w, residual=None, group_size=128, layout="row", ue8m0=False, pad_rows_to=1, norm_eps=1e-6):
    res_in = residual.clone() if residual is not None else None
    q, s = fp8ops.rms_norm_quant(x, w, norm_eps, residual, group_size, layout, ue8m0, pad_rows_to)
    rq, rs, rr = ref.rms_norm_quant(x.cpu(), w.cpu(), norm_eps, None if res_in is None else res_in.cpu(), group_size,
                                    layout, ue8m0, pad_rows_to)  # fmt: skip
    if residual is not None:
        assert_same_values(residual.cpu(), rr, "residual updated in place")
    return q, s, rq, rs


def assert_same_values(a, b, what):
    """Bit for bit, except that any NaN equals any NaN (fp8ops writes the canonical quiet NaN)."""
    nan = a.isnan()
    assert torch.equal(nan, b.isnan()), what
    assert_same_bits(a.masked_fill(nan, 0), b.masked_fill(nan, 0), what)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_rms_norm_quant_matches_torch_expression_exactly_where_sums_are_exact(dtype, layout):
    for M, D in ((0, 512), (1, 7168), (3, 1536), (5, 512), (17, 2048), (4097, 256)):
        x, w = exact_sum_input((M, D), dtype), exact_sum_input((D,), dtype)
        r = exact_sum_input((M, D), dtype)
        q, s, rq, rs = check_rms(x, w, r, 128, layout, ue8m0=M % 2 == 1, pad_rows_to=4 if M % 2 else 1)
        assert_same_quant(q, s, rq, rs, f"M={M} D={D} {dtype} {layout}")
        q, s, rq, rs = check_rms(x, w, None, 128, layout)
        assert_same_quant(q, s, rq, rs, f"no residual M={M} D={D}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_quant_close_to_torch_on_random_inputs(dtype):
    """The sum's order differs from torch's, so a few codes may move by one step."""
    for D in (512, 1536, 7168):
        x, w, r = (torch.randn(64, D).to(dtype), torch.randn(D).to(dtype), torch.randn(64, D).to(dtype))
        r_in = r.clone()
        q, s, rq, rs = check_rms(x, w, r)
        steps = code_steps(q, rq)
        assert steps.max() <= 1 and (steps > 0).float().mean() < 0.01, D
        # A scale moves only where the group's largest y rounded to T the other way: one ulp of T.
        ulp = {torch.bfloat16: 2**-7, torch.float16: 2**-10, torch.float32: 2**-20}[dtype]
        assert ((s - rs).abs() <= rs * ulp).all()
        # Against torch's own F.rms_norm in the same dtype, then the quant.
        y = torch.nn.functional.rms_norm((x.float() + r_in.float()).to(dtype), (D,), w, 1e-6)
        tq, ts = fp8ops.per_token_group_quant(y)
        steps = code_steps(q, tq)
        assert steps.max() <= 1 and (steps > 0).float().mean() < 0.02, D


def test_rms_norm_quant_sum_order_is_fused_quant_h():
    """The sum of squares follows the pairwise order written in include/fp8ops/fused_quant.h: here
    rows whose squares cancel catastrophically in that order tell it from a plain sequential sum."""
    for D in (256, 2048, 7168):
        sh = _native.row_shape(D // 8, "rms")
        x = torch.randn(8, D) * torch.tensor([1e-3, 1e3]).repeat(D // 2)
        got = fp8ops.rms_norm_quant(x, torch.ones(D), norm_eps=0.0, scale_layout="row")
        # The expected order, written out in torch with float64 fused multiply-adds rounded to fp32.
        v = x.view(8, D // 8, 8)
        lanes = sh["lanes"]
        acc = torch.zeros(8, lanes, dtype=torch.float32)
        for c in range(D // 8):
            for i in range(8):
                e = v[:, c, i].double()
                acc[:, c % lanes] = (e * e + acc[:, c % lanes].double()).float()
        width = min(lanes, 32)
        while width > 1:
            width //= 2
            idx = torch.arange(lanes) ^ width
            acc = acc + acc[:, idx]
        if lanes > 32:
            w = acc[:, ::32]
            width = lanes // 32
            while width > 1:
                width //= 2
                w = w + w[:, torch.arange(lanes // 32) ^ width]
            acc = w
        total = acc[:, 0]
        inv = 1.0 / torch.sqrt((total / D).double()).float()
        y = (x * inv[:, None]) * torch.ones(D)
        wq, ws = fp8ops.per_token_group_quant(y)
        assert_same_quant(got[0], got[1], wq, ws, f"D={D}")


def test_rms_inverse_against_torch_steps():
    """rms_norm_quant's step 3 (fused_quant.h's rms_inverse, which the CPU kernel and the device's
    slow path take) equals a torch expression of SPEC section 9's fp32 steps over sums of every
    fp32 exponent, zero, subnormals, the largest finite, inf and NaN."""
    e = torch.arange(-149, 128, dtype=torch.float64)
    sums = torch.cat(
        [
            (2.0**e * (1 + torch.rand(e.numel(), dtype=torch.float64))).float(),
            torch.rand(1 << 16) * 1e4,
            torch.tensor([0.0, 1e-45, 3.4028235e38, float("inf"), float("nan")]),
        ]
    )
    for D, eps in itertools.product((512, 1536, 4096, 7168, 16384), (1e-6, 0.0)):
        got = _native.rms_inverse(sums, D, eps)
        assert got[-1].isnan() and not got[:-1].isnan().any(), (D, eps)
        want = ref.rms_inverse(sums / D, eps)
        assert torch.equal(got[:-1].view(torch.int32), want[:-1].view(torch.int32)), (D, eps)


@pytest.mark.gpu
def test_cuda_rms_inverse_sweeps_every_fp32_value():
    """The kernels' inverse (rms_norm_quant.cuh's rms_inverse_fast) equals the correctly rounded ops
    of rms_inverse, bit for bit: its quotient over every fp32 sum of its fast range for every D a
    multiple of 8 up to 16384, its reciprocal square root over every ms + eps of that range, and
    the whole inverse over every fp32 bit pattern (zero, subnormals, inf, NaN: the slow path) for a
    spread of D and eps. The sum times 1 / D in place of the quotient, exact only for a power of
    two, shows that the sweep finds what differs."""
    bits = lambda v: int(torch.tensor([v], dtype=torch.float32).view(torch.int32))  # noqa: E731
    fast_min, fast_max = _native.rms_fast_range()
    assert 0 < fast_min < 1 < fast_max < float("inf")
    lo, hi = bits(fast_min), bits(fast_max) + 1
    assert _native.rms_inverse_sweep_cuda(7168, 0.0, 3, lo, hi) == 0
    bad = [D for D in range(8, 16385, 8) if _native.rms_inverse_sweep_cuda(D, 0.0, 1, lo, hi)]
    assert not bad, bad[:10]
    for D, eps in itertools.product((8, 512, 1024, 1536, 4096, 5120, 7168, 16384), (1e-6, 0.0, 1e-30, 3e38)):
        assert _native.rms_inverse_sweep_cuda(D, eps, 0, 0, 1 << 32) == 0, (D, eps)
    assert _native.rms_inverse_sweep_cuda(4096, 0.0, 2, lo, hi) == 0
    assert _native.rms_inverse_sweep_cuda(7168, 0.0, 2, lo, hi) > 0


def test_rms_norm_quant_edge_rows():
    D = 1024
    w = torch.randn(D).bfloat16()
    w[::7] = 0
    x = torch.randn(6, D).bfloat16()
    x[0] = 0  # all zeros
    x[1] = 3e38  # the sum of squares overflows fp32: inverse RMS 0, codes 0
    x[2, 5] = float("nan")
    x[3, 9] = float("inf")
    r = torch.randn(6, D).bfloat16()
    r[4, 3] = float("-inf")
    q, s, rq, rs = check_rms(x, w, r)
    assert not ((q.view(torch.uint8) & 0x7F) == 0x7F).any()
    assert ((q[1].view(torch.uint8) & 0x7F) == 0).all() and torch.isfinite(s).all()
    assert_same_quant(q[[0, 1]], s[[0, 1]], rq[[0, 1]], rs[[0, 1]], "zero and overflowing rows")


@pytest.mark.parametrize("D, gs", ((32, 32), (64, 32), (16384, 128), (16384, 32)))
def test_rms_norm_quant_smallest_and_largest_d(D, gs):
    x, w, r = exact_sum_input((5, D), torch.bfloat16), exact_sum_input((D,), torch.bfloat16), None
    q, s, rq, rs = check_rms(x, w, r, gs, "col_tma")
    assert_same_quant(q, s, rq, rs, f"D={D}")


def test_rms_norm_quant_bad_residual_leaves_it_unchanged():
    x, w = torch.randn(4, 256).bfloat16(), torch.randn(256).bfloat16()
    for bad, match in (
        (torch.randn(4, 128).bfloat16(), "residual must have x's shape"),
        (torch.randn(4, 256).half(), "residual must have x's dtype"),
        (torch.randn(4, 256).bfloat16().to("meta"), "x and residual must be on the same device"),
    ):
        before = bad.clone() if bad.device.type != "meta" else None
        with pytest.raises(RuntimeError, match=match):
            fp8ops.rms_norm_quant(x, w, residual=bad)
        if before is not None:
            assert torch.equal(bad, before)


def test_rms_norm_quant_strided_inputs():
    x = strided_rows(exact_sum_input((9, 512), torch.bfloat16))
    r = strided_rows(exact_sum_input((9, 512), torch.bfloat16), pad=8)
    q, s, rq, rs = check_rms(x, exact_sum_input((512,), torch.bfloat16), r, 64, "col")
    assert_same_quant(q, s, rq, rs, "strided")


# ----------------------------------------------------------------------------------- block_quant


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ue8m0", (False, True))
def test_block_quant_matches_torch_expression(dtype, ue8m0):
    for shape in ((1, 1), (128, 128), (300, 200), (129, 385), (3, 257, 130), (2, 128, 7), (0, 5), (4, 0, 9)):
        w = make_input(shape, dtype)
        for eps in (1e-10, 1e-4):
            q, s = fp8ops.block_quant(w, ue8m0=ue8m0, eps=eps)
            rq, rs = ref.block_quant(w, ue8m0, eps)
            assert_same_bits(q, rq, f"q {shape}")
            assert_same_bits(s, rs, f"scale {shape}")
            assert q.is_contiguous() and s.is_contiguous() and s.shape == _layout.block_scale_shape(shape)


def test_block_quant_non_finite_zero_expert_and_strided_view():
    w = make_input((3, 256, 384), torch.bfloat16, nonfinite=True)
    w[1] = 0  # an all-zero expert: scales eps * C, codes 0
    q, s = fp8ops.block_quant(w)
    rq, rs = ref.block_quant(w)
    assert_same_bits(q, rq, "q")
    assert_same_bits(s, rs, "scale")
    assert ((q[1].view(torch.uint8) & 0x7F) == 0).all() and torch.isfinite(s).all()
    big = make_input((300, 1000), torch.float32)
    view = big[:, 100:700]
    q, s = fp8ops.block_quant(view)
    rq, rs = ref.block_quant(view)
    assert_same_bits(q, rq, "strided view")
    assert_same_bits(s, rs, "strided view scale")


# ----------------------------------------------------------------------- op plumbing, every op


def test_fake_geometry_equals_real():
    cases = [
        (fp8ops.silu_mul_quant, (make_input((5, 512), torch.bfloat16),), {"scale_layout": "col_tma", "pad_rows_to": 4}),
        (fp8ops.silu_mul_quant, masked_case(3, 6, 256), {"scale_layout": "col_tma_packed"}),
        (fp8ops.rms_norm_quant, (torch.randn(3, 5, 256), torch.randn(256)), {"scale_layout": "col"}),
        (fp8ops.block_quant, (torch.randn(2, 300, 129),), {}),
    ]
    for op, args, kwargs in cases:
        if op is fp8ops.silu_mul_quant and len(args) == 2:
            args, kwargs = (args[0],), dict(kwargs, masked_m=args[1])
        real = op(*args, **kwargs)
        meta = op(
            *[a.to("meta") for a in args], **{k: v.to("meta") if torch.is_tensor(v) else v for k, v in kwargs.items()}
        )
        for r, m in zip(real, meta, strict=True):
            assert (r.shape, r.stride(), r.dtype) == (m.shape, m.stride(), m.dtype)


OPCHECK_CASES = [
    (
        "silu flat",
        torch.ops.fp8ops.silu_mul_quant.default,
        lambda: (make_input((5, 512), torch.bfloat16),),
        {"scale_layout": "col_tma", "pad_rows_to": 4},
    ),  # fmt: skip
    (
        "silu masked",
        torch.ops.fp8ops.silu_mul_quant.default,
        lambda: (make_input((3, 6, 512), torch.bfloat16),),
        {"scale_layout": "row", "masked_m": "full"},
    ),  # fmt: skip
    (
        "rms",
        torch.ops.fp8ops.rms_norm_quant.default,
        lambda: (make_input((5, 512), torch.bfloat16), torch.randn(512).bfloat16()),
        {"scale_layout": "col_tma_packed"},
    ),  # fmt: skip
    (
        "rms residual",
        torch.ops.fp8ops.rms_norm_quant.default,
        lambda: (make_input((5, 512), torch.float16), torch.randn(512).half()),
        {"residual": "like_x"},
    ),  # fmt: skip
    ("block", torch.ops.fp8ops.block_quant.default, lambda: (make_input((200, 300), torch.bfloat16),), {}),
]


def _materialize(args, kwargs, device):
    args = tuple(a.to(device) for a in args)
    kw = dict(kwargs)
    if kw.get("masked_m") == "full":  # every row valid, so that the outputs hold no unwritten byte
        kw["masked_m"] = torch.full((args[0].shape[0],), args[0].shape[1], dtype=torch.int32, device=device)
    if kw.get("residual") == "like_x":
        kw["residual"] = torch.randn(args[0].shape).to(args[0].dtype).to(device)
    return args, kw


@pytest.mark.parametrize("name, op, make, kwargs", OPCHECK_CASES, ids=[c[0] for c in OPCHECK_CASES])
def test_opcheck(name, op, make, kwargs):
    args, kw = _materialize(make(), kwargs, "cpu")
    torch.library.opcheck(op, args, kw)


@pytest.mark.parametrize("name, op, make, kwargs", OPCHECK_CASES, ids=[c[0] for c in OPCHECK_CASES])
def test_torch_compile_dynamic_matches_eager(name, op, make, kwargs):
    torch._dynamo.reset()
    f = torch.compile(lambda *a, **k: op(*a, **k), fullgraph=True, dynamic=True)
    for rows in (3, 9):
        args, kw = _materialize(make(), kwargs, "cpu")
        args = (torch.cat([args[0]] * rows, 0)[: rows * args[0].shape[0] // 2 + 1],) + args[1:]
        if "residual" in kw:
            kw["residual"] = torch.randn(args[0].shape).to(args[0].dtype)
        if "masked_m" in kw:
            kw["masked_m"] = torch.full((args[0].shape[0],), args[0].shape[1], dtype=torch.int32)
        kw2 = {k: v.clone() if torch.is_tensor(v) else v for k, v in kw.items()}
        a, b = f(*args, **kw), op(*args, **kw2)
        for x, y in zip(a, b, strict=True):
            assert_same_bits(x, y, name)
            assert x.stride() == y.stride()
        if "residual" in kw:
            assert torch.equal(kw["residual"], kw2["residual"])


def test_rms_norm_quant_raises_when_an_input_requires_grad():
    x, w = torch.randn(4, 256), torch.randn(256)
    with pytest.raises(RuntimeError, match="rms_norm_quant is not differentiable"):
        fp8ops.rms_norm_quant(x.requires_grad_(), w)
    with torch.no_grad():
        q, s = fp8ops.rms_norm_quant(x, w)
    assert not q.requires_grad
    torch._dynamo.reset()
    f = torch.compile(fp8ops.rms_norm_quant, fullgraph=True)
    with pytest.raises(Exception, match="rms_norm_quant is not differentiable"):
        f(torch.randn(4, 256), w.requires_grad_())


@pytest.mark.parametrize("op", ("silu", "block"))
def test_fused_outputs_never_require_grad(op):
    x = torch.randn(4, 256, requires_grad=True)
    outs = fp8ops.silu_mul_quant(x) if op == "silu" else fp8ops.block_quant(x)
    assert not any(o.requires_grad for o in outs)


# --------------------------------------------------------------------------------------- GPU


def poisoned_blocks(like):
    """Fills blocks of the storage sizes of the tensors `like` with 0xFF and frees them, so that the
    caching allocator hands them to the next allocations of those sizes; returns their addresses."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    blocks = [torch.full((t.untyped_storage().nbytes(),), 0xFF, dtype=torch.uint8, device="cuda") for t in like]
    ptrs = [b.data_ptr() for b in blocks]
    del blocks
    return ptrs


def call_over_poison(fn, like):
    ptrs = poisoned_blocks(like)
    out = fn()
    if all(t.untyped_storage().nbytes() for t in like):
        assert {o.data_ptr() for o in out} <= set(ptrs), "the outputs did not reuse the poisoned blocks"
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_silu_mul_quant_bit_identical_to_cpu(dtype, layout, pdl):
    shapes = ((0, 256, 128), (1, 2048, 128), (3, 384, 64), (5, 96, 32), (17, 9216, 128), (4097, 512, 128))
    # Few rows cut into slices (silu_mul_quant_launch.h): of H = 33280, 8320 and 6144 into narrow
    # slices, a block per multiprocessor (8320: 1040 chunks, in slices of 96 with TMA-padded scale
    # rows or of 64 without, the last holding 80 or 16); 70 rows of 2560 into slices of 256 chunks,
    # the last holding 64. 300 rows of 6144 with groups of 64: lanes of two adjacent chunks in two
    # passes, the second used by some lanes only. 270 rows of 9216: several passes of one chunk per
    # lane where the rows are not loaded 16 bytes at a time (and in fp32).
    shapes = (*shapes, (3, 33280, 128), (5, 8320, 32), (3, 6144, 64), (70, 2560, 128), (300, 6144, 64))
    shapes = (*shapes, (270, 9216, 128))
    # Packed scale words that two slices share (groups of 128, slices of 6 or 18 groups), the last
    # of 5 rows of 8576 also ending the row (groups 64 and 65 in one slice, 66 in the next); and a
    # last slice of one group of 64, alone in its word.
    shapes = (*shapes, (5, 8576, 128), (16, 18432, 128), (3, 4160, 64))
    # bf16 grids of 2^18 gate values or more look SiLU up in a table: rows, and 40 rows of 8192 in
    # slices (silu_mul_quant_launch.h's silu_table).
    shapes = (*shapes, (40, 16384, 128))
    # 1000 rows of 2048 (and the 4097 of 512 above): in bf16 those table kernels of a pair a lane
    # run on half the blocks, each making two passes; 2500 rows of 2048: blocks of 512 threads,
    # two or three passes each (silu_mul_quant_launch.h's silu_flat_grid); 420 rows of 2048: pairs,
    # one pass, on a block per row group.
    shapes = (*shapes, (1000, 2048, 128), (2500, 2048, 128), (420, 2048, 128))
    # Every lane shape runs: a chunk per lane, two adjacent chunks (large or wide rows), slices.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kinds = set()
    for M, H, _ in shapes:
        s = _native.silu_shape(H // 8, _layout.align(M, 4), False, dtype.itemsize, True, sms)
        kinds.add((s["adjacent"], s["slices"] > 1))
    assert kinds == ({(1, False), (1, True)} if dtype == torch.float32 else {(1, False), (2, False), (1, True)})
    for M, H, gs in shapes:
        x = make_input((M, 2 * H), dtype, device="cuda", nonfinite=M == 17)
        for xx in (x, strided_rows(x), misaligned(x)):
            cq, cs = fp8ops.silu_mul_quant(xx.cpu(), gs, layout, M % 2 == 1, 4)
            q, s = call_over_poison(lambda: fp8ops.silu_mul_quant(xx, gs, layout, M % 2 == 1, 4), (cq, cs))  # noqa: B023
            assert_same_quant(q, s, cq, cs, f"M={M} H={H} {dtype} {layout}")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_silu_mul_quant_table_kernel_bit_identical_to_cpu(layout, pdl):
    """Large flat bf16 grids look SiLU up in a table (silu_mul_quant.cuh): rows of every magnitude (in
    and out of the table's domain), rows of tiny gates (the clamp below it), a zero row, and rows
    holding every bf16 pattern (the exact fallback, NaN and inf included), contiguous and strided,
    bit for bit against the CPU reference. The grid is one whose loads of x are evict-first
    (silu_mul_quant_launch.h's silu_stream)."""
    M, H = 8191, 1024
    assert _native.silu_table_used(True, False, M, H)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert _native.silu_stream(M, _layout.align(M, 4), H, 2, l2), l2
    x = make_input((M, 2 * H), torch.bfloat16)
    x[2:6, :H] *= 2.0**-12
    every = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    x[10 : 10 + (1 << 16) // H, :H] = every[torch.randperm(1 << 16)].view(-1, H)
    x[80] = 0
    x = x.cuda()
    for xx in (x, strided_rows(x)):
        cq, cs = fp8ops.silu_mul_quant(xx.cpu(), 128, layout, layout == "col", 4)
        q, s = call_over_poison(lambda: fp8ops.silu_mul_quant(xx, 128, layout, layout == "col", 4), (cq, cs))  # noqa: B023
        assert_same_quant(q, s, cq, cs, f"{layout}")


def check_masked_over_poison(x, m, layout, what="", group_size=128):
    """The masked op on CUDA over poisoned outputs: rows below masked_m equal the CPU reference
    bit for bit, rows past it keep their poison bytes (codes and scales). Returns (q, s)."""
    cq, cs = fp8ops.silu_mul_quant(x.cpu(), group_size, layout, masked_m=m.cpu())
    q, s = call_over_poison(lambda: fp8ops.silu_mul_quant(x, group_size, layout, masked_m=m), (cq, cs))
    for e in range(x.shape[0]):
        n = int(m[e])
        assert_same_bits(q[e, :n], cq[e, :n], f"{what} q e={e}")
        assert_same_bits(s[e, :n], cs[e, :n], f"{what} scale e={e}")
        assert (q[e, n:].view(torch.uint8) == 0xFF).all(), "a row past masked_m was written"
        poison = s[e, n:] == -1 if s.dtype == torch.int32 else s[e, n:].isnan()  # 0xFFFFFFFF
        assert poison.all(), "a scale past masked_m was written"
    return q, s


@pytest.mark.gpu
@pytest.mark.parametrize("layout", MASKED_LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_silu_mul_quant_masked_rows_past_count_keep_poison(layout, dtype, pdl):
    # H = 6144: two adjacent chunks per lane in two passes. H = 128: 16 lanes a row, two rows a
    # warp, in blocks dealt more rows than the grid holds at once; E = 40: the counts scanned
    # through shared memory.
    for E, Mmax, H in ((6, 9, 384), (32, 256, 2048), (1, 1, 128), (4, 7, 6144), (8, 300, 128), (40, 64, 2048)):
        counts = torch.randint(0, Mmax + 1, (E,))
        counts[0] = 0
        counts[-1] = Mmax
        x, m = masked_case(E, Mmax, H, dtype, counts, device="cuda")
        q, s = check_masked_over_poison(x, m, layout, f"E={E} H={H}")
        if layout != "row":
            # The TMA padding rows Mmax..Ma-1 of every expert are zero.
            Ma, C = s.stride(2), s.shape[2]
            st = torch.empty(0, dtype=s.dtype, device=s.device).set_(
                s.untyped_storage(), 0, (E, C, Ma), (C * Ma, Ma, 1)
            )
            assert (st[:, :, Mmax:] == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", MASKED_LAYOUTS)
def test_cuda_silu_mul_quant_masked_every_bf16_gate_bit_identical_to_cpu(layout, pdl):
    """The masked kernel on valid rows holding every bf16 gate pattern (the table's range and the
    exact fallback, NaN and inf included), tiny gates and a zero row, with the counts scanned
    by every warp (at most 32 experts) and through shared memory (more), bit for bit against the
    CPU reference; rows past the counts keep their poison."""
    every = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    H, Mmax = 1024, 80
    for E in (8, 40):
        counts = torch.randint(0, Mmax + 1, (E,))
        counts[0], counts[1], counts[2] = Mmax, 0, 5
        x, m = masked_case(E, Mmax, H, torch.bfloat16, counts)
        x[0, : (1 << 16) // H, :H] = every[torch.randperm(1 << 16)].view(-1, H)
        x[2, :3, :H] *= 2.0**-12
        x[2, 4] = 0
        check_masked_over_poison(x.cuda(), m.cuda(), layout, f"E={E}")


def counts_summing_to(total, E, Mmax):
    """E counts of at most Mmax that sum to total (at least Mmax): expert 0 stays full, expert 1
    is emptied first, then rows are taken from random experts past it."""
    counts = torch.full((E,), Mmax)
    drop = E * Mmax - total
    first = min(drop, Mmax)
    counts[1] -= first
    drop -= first
    while drop > 0:
        e = int(torch.randint(2, E, ()))
        if counts[e] > 0:
            counts[e] -= 1
            drop -= 1
    return counts


@pytest.mark.gpu
@pytest.mark.parametrize("layout", MASKED_LAYOUTS)
def test_cuda_silu_mul_quant_masked_pairs_bit_identical_to_cpu(layout, pdl):
    """Masked bf16 buffers whose valid rows reach silu_mul_quant_launch.h's silu_masked_pairs: from
    there the kernel takes units of two chunks and the SiLU table. One row below the switch, at it
    (with every bf16 gate pattern, tiny gates and a zero row) and every row valid; H = 512 to 2048,
    groups of 32 to 128, counts scanned by every warp and, with more than 32 experts, through
    shared memory; bit for bit against the CPU reference, rows past the counts poisoned."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    every = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    for E, H, gs in ((4, 2048, 128), (6, 1024, 64), (4, 512, 32), (48, 2048, 128)):
        need = _native.silu_masked_pairs(H // 8, E * 1024, 2, True, True, sms)["rows"]
        Mmax = need // E + 40
        assert 0 < need < E * Mmax, (E, H, need)
        for total in (need - 1, need, E * Mmax):
            x, m = masked_case(E, Mmax, H, torch.bfloat16, counts_summing_to(total, E, Mmax))
            n = (1 << 16) // H  # rows of H gates that hold every pattern, in expert 0
            if total == need and Mmax >= n + 5:
                x[0, :n, :H] = every[torch.randperm(1 << 16)].view(-1, H)
                x[0, n : n + 3, :H] *= 2.0**-12
                x[0, n + 4] = 0
            check_masked_over_poison(x.cuda(), m.cuda(), layout, f"E={E} H={H} rows={total}", gs)


@pytest.mark.gpu
def test_cuda_silu_mul_quant_masked_clamps_out_of_range_counts():
    x, _ = masked_case(4, 8, 256, device="cuda")
    m = torch.tensor([-5, 3, 100, 2**31 - 1], dtype=torch.int32, device="cuda")
    q, s = fp8ops.silu_mul_quant(x, 128, "row", masked_m=m)
    cq, cs = fp8ops.silu_mul_quant(x.cpu(), 128, "row", masked_m=torch.tensor([0, 3, 8, 8], dtype=torch.int32))
    for e, n in enumerate((0, 3, 8, 8)):
        assert_same_bits(q[e, :n], cq[e, :n], f"q e={e}")
        assert_same_bits(s[e, :n], cs[e, :n], f"s e={e}")


def assert_same_activation(got, want, what):
    """Bit-equal, except that a NaN may have any payload."""
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), f"{what}: NaN positions differ"
    bits = {2: torch.int16, 4: torch.int32}[want.element_size()]
    bad = (got.view(bits) != want.view(bits)) & ~nan
    assert not bad.any(), f"{what}: {int(bad.sum())} values differ, first at {int(bad.nonzero()[0])}"


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype,path",
    [(torch.bfloat16, p) for p in ("flat", "masked", "table")] + [(torch.float16, p) for p in ("flat", "masked")],
)
def test_cuda_silu_activation_every_16bit_gate(dtype, path):
    """The kernels' device activation T(T(silu(g)) * u) equals the CPU reference for every 16-bit
    gate: the fast path (for bf16 in the masked kernels without the table, the shortcut with its
    exact values near bf16's midpoints; in large flat grids and the other masked kernels, the
    table), its range edges and the exact fallback, in order (chunks of neighbouring values) and
    shuffled (chunks that mix both paths), times 1 and times random up values. A gate count that is
    not a multiple of the block leaves lanes past the end, which still take part in the shortcut's
    votes."""
    g = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype)
    if dtype == torch.bfloat16:
        # Gates whose SiLU lies within the shortcut's margin (16 fp32 steps) of a midpoint of
        # bf16: the exact values it must take.
        gf = g.float()
        gf = gf[gf.isfinite() & (gf.abs() >= 2.0**-60) & (gf.abs() <= 40.0)]
        low = _native.silu_fp32(gf).view(torch.int32) & 0xFFFF
        assert ((low - 0x8000).abs() <= 16).sum() >= 4
    for order in ("sorted", "shuffled", "short"):
        gg = g if order == "sorted" else g[torch.randperm(g.numel())]
        if order == "short":
            gg = gg[: 8 * 2083]
        for u in (torch.ones_like(gg), make_input((gg.numel(),), dtype)):
            want = ref.silu_mul(torch.cat([gg, u]).view(1, -1), _native.silu_fp32).view(-1)
            got = _native.silu_mul_cuda(gg.cuda(), u.cuda(), path).cpu()
            assert_same_activation(got, want, f"{dtype} {order} {path}")


@pytest.mark.gpu
@pytest.mark.parametrize("path", ("flat", "masked"))
def test_cuda_silu_activation_fp32_gates(path):
    edges = torch.tensor([2.0**-60, 2.0**-61, 40.0, 40.000004, -40.0, -40.000004, 0.0, -0.0, 1e-45, -88.8, 88.8])
    g = torch.cat([torch.randn(1 << 22) * 8, torch.randn(1 << 20) * 100, edges, torch.tensor([float("nan")] * 5)])
    g = g[: g.numel() // 8 * 8]
    u = torch.randn_like(g)
    want = ref.silu_mul(torch.cat([g, u]).view(1, -1), _native.silu_fp32).view(-1)
    assert_same_activation(_native.silu_mul_cuda(g.cuda(), u.cuda(), path).cpu(), want, "fp32")


@pytest.mark.gpu
def test_cuda_silu_close_to_torch_unfused_route():
    """Against torch's CUDA F.silu(g) * u in the same dtype: a tiny fraction of codes one step apart."""
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) * 3
    q, s = fp8ops.silu_mul_quant(x)
    a = torch.nn.functional.silu(x[:, :2048]) * x[:, 2048:]
    tq, ts = fp8ops.per_token_group_quant(a)
    steps = code_steps(q, tq)
    assert steps.max() <= 1 and (steps > 0).float().mean() < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_rms_norm_quant_bit_identical_to_cpu(dtype, layout, pdl):
    shapes = ((0, 512, 128), (1, 7168, 128), (3, 1536, 64), (5, 512, 32), (17, 16384, 128), (4097, 256, 128))
    # 2048: a row of 128 lanes of two chunks in one block; 3072: clusters of 4 blocks; 300 x 7168,
    # 700 x 1024, 400 x 1536 and 600 x 768: grids too large for the split kernel (7168, 1536 and
    # 768: rows of 256, 64 and 32 lanes of three or four chunks, in the kernel whose rows of several
    # warps take their inverse in the first). In the kernel of four chunks a lane, whole warps lack
    # the fourth chunk at 7168 (its upper half), 1536, 768 and 384 (16 lanes), and the third too at
    # 2560 (128 lanes: two warps have it).
    shapes = (*shapes, (2, 2048, 128), (300, 7168, 128), (700, 1024, 64), (400, 1536, 128), (600, 768, 64))
    shapes = (*shapes, (6, 3072, 128), (200, 2560, 128), (300, 384, 128))
    # Rows of 256 lanes in the row kernel that knows W: 300 x 7168 above, 100 x 4096 (two chunks a
    # lane; with the residual, the kernel that does not know W) and 70 x 16384 (eight).
    shapes = (*shapes, (100, 4096, 128), (70, 16384, 128))
    # Groups of 32 in the row kernel of four chunks a lane: every lane of a group stores one of its
    # units' scales (fused_quant.cuh's gathered fp32 scales).
    shapes = (*shapes, (300, 1536, 32))
    # The slot kernel without the residual (1 x 7168 above): rows of 2, 3 and 4 chunk slots.
    shapes = (*shapes, (9, 4096, 128), (5, 5120, 64), (2, 8192, 128))
    # The largest small grid of rows of 7168: 64 rows, with the residual 512 blocks in clusters of
    # 8 (the split kernel), without it 256 blocks (the slot kernel).
    shapes = (*shapes, (64, 7168, 128))
    # Every kernel runs: the row kernel, the split kernel in one block (512, 1536, 2048) and in
    # clusters of 4 and 8 blocks, and the slot kernel.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert {_native.rms_split_cluster(_layout.align(M, 4), D // 8, sms) for M, D, _ in shapes} == {0, 1, 4, 8}
    slot = {(M, D) for M, D, _ in shapes if _native.rms_slot_blocks(_layout.align(M, 4), D // 8, False, sms)}
    assert slot == {(1, 7168), (9, 4096), (5, 5120), (2, 8192), (64, 7168)}
    row_kernel = [D for M, D, _ in shapes if _native.rms_split_cluster(_layout.align(M, 4), D // 8, sms) == 0]
    assert {D for D in row_kernel if _native.rms_whole_row(D // 8, False)} == {4096, 7168, 16384}
    assert {D for D in row_kernel if _native.rms_whole_row(D // 8, True)} == {7168, 16384}
    for M, D, gs in shapes:
        x = make_input((M, D), dtype, device="cuda", nonfinite=M == 17)
        # Non-finite weights put NaN and inf beside finite values of a chunk in every row: the
        # magnitude maxima and the finite filter of the row kernels of four and eight chunks.
        w = make_input((D,), dtype, device="cuda", nonfinite=M in (17, 70, 300))
        for with_res, layout_of in itertools.product((False, True), (lambda t: t, strided_rows, misaligned)):
            xx = layout_of(x)
            r = layout_of(make_input((M, D), dtype, device="cuda")) if with_res else None
            r_cpu = r.cpu() if with_res else None
            cq, cs = fp8ops.rms_norm_quant(xx.cpu(), w.cpu(), 1e-6, r_cpu, gs, layout, M % 2 == 1, 4)
            q, s = call_over_poison(
                lambda: fp8ops.rms_norm_quant(xx, w, 1e-6, r, gs, layout, M % 2 == 1, 4),  # noqa: B023
                (cq, cs),
            )
            assert_same_quant(q, s, cq, cs, f"M={M} D={D} {dtype} {layout} residual={with_res}")
            if with_res:
                assert_same_bits(r.cpu(), r_cpu, "residual")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
@pytest.mark.parametrize("M, D", ((2201, 4096), (4401, 2048), (8803, 1024)))
def test_cuda_rms_norm_quant_pipelined_bit_identical_to_cpu(dtype, M, D, pdl):
    """The pipelined row kernel (rms_norm_quant_launch.h's rms_pipelined: D = 4096, 2048 and 1024
    without the residual, 1, 2 and 4 rows a block, more than two waves of blocks even at 8 a
    multiprocessor) against the CPU kernel, every layout, contiguous and strided rows, with padding
    rows and non-finite values."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert _native.rms_pipelined(D // 8, _layout.align(M, 4), 2, False, True, 8 * sms)
    x = make_input((M, D), dtype, device="cuda", nonfinite=True)
    w = make_input((D,), dtype, device="cuda")
    for layout, layout_of in itertools.product(LAYOUTS, (lambda t: t, strided_rows)):
        xx, ue8m0 = layout_of(x), layout == "col_tma_packed"
        cq, cs = fp8ops.rms_norm_quant(xx.cpu(), w.cpu(), 1e-6, None, 128, layout, ue8m0, 4)
        q, s = call_over_poison(
            lambda: fp8ops.rms_norm_quant(xx, w, 1e-6, None, 128, layout, ue8m0, 4),  # noqa: B023
            (cq, cs),
        )
        assert_same_quant(q, s, cq, cs, f"M={M} D={D} {dtype} {layout}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_fused_scales_of_every_exponent(dtype):
    """The row kernels take an fp32 scale's reciprocal from the hardware reciprocal and one Newton
    step (numerics.h's group_reciprocal), exact over the scales the eps bounds allow: held to the
    CPU kernels (1 / scale) with group amaxes of every exponent the dtype holds, at both eps bounds.
    silu_mul_quant: gate 20, up rows of every power of two from 2^-149 to 2^127
    (every_exponent_input; powers past the dtype's range come out as zeros, subnormals or infs);
    rms_norm_quant: weight group g within 2^(2g - 126) * [1, 2)."""
    up = every_exponent_input(dtype)
    x = torch.cat([torch.full_like(up, 20.0), up], 1)
    kw = torch.arange(-126, 130, 2, dtype=torch.float64).clamp(max=127)
    w = (2.0 ** kw.repeat_interleave(128) * (1 + torch.rand(kw.numel() * 128, dtype=torch.float64))).to(dtype)
    xr = make_input((5, w.numel()), dtype)
    for layout, ue8m0, eps in itertools.product(("row", "col_tma", "col_tma_packed"), (False, True), (1e-30, 1e30)):
        if layout == "col_tma_packed" and not ue8m0:
            continue
        cq, cs = fp8ops.silu_mul_quant(x, 128, layout, ue8m0, 4, eps)
        q, s = fp8ops.silu_mul_quant(x.cuda(), 128, layout, ue8m0, 4, eps)
        assert_same_quant(q, s, cq, cs, f"silu {dtype} {layout} ue8m0={ue8m0} eps={eps}")
        cq, cs = fp8ops.rms_norm_quant(xr, w, 1e-6, None, 128, layout, ue8m0, 4, eps)
        q, s = fp8ops.rms_norm_quant(xr.cuda(), w.cuda(), 1e-6, None, 128, layout, ue8m0, 4, eps)
        assert_same_quant(q, s, cq, cs, f"rms {dtype} {layout} ue8m0={ue8m0} eps={eps}")


@pytest.mark.gpu
def test_cuda_rms_norm_quant_close_to_torch_route():
    x, r = torch.randn(2048, 7168, device="cuda").bfloat16(), torch.randn(2048, 7168, device="cuda").bfloat16()
    w = torch.randn(7168, device="cuda").bfloat16()
    r2 = r.clone()
    q, s = fp8ops.rms_norm_quant(x, w, 1e-6, r)
    r2 += x
    tq, ts = fp8ops.per_token_group_quant(torch.nn.functional.rms_norm(r2, (7168,), w, 1e-6))
    assert torch.equal(r, r2)
    steps = code_steps(q, tq)
    assert steps.max() <= 1 and (steps > 0).float().mean() < 0.01


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_block_quant_bit_identical_to_cpu(dtype, pdl):
    for shape in ((1, 1), (300, 200), (129, 385), (3, 257, 130), (2, 1024, 2048), (0, 7)):
        w = make_input(shape, dtype, device="cuda", nonfinite=len(shape) == 3)
        for ww in (w, misaligned(w)) if w.numel() else (w,):
            for ue8m0 in (False, True):
                q, s = fp8ops.block_quant(ww, ue8m0=ue8m0)
                cq, cs = fp8ops.block_quant(ww.cpu(), ue8m0=ue8m0)
                assert_same_bits(q, cq, f"q {shape}")
                assert_same_bits(s, cs, f"s {shape}")


@pytest.mark.gpu
def test_cuda_graph_replay_with_new_data(pdl):
    x = make_input((64, 1024), torch.bfloat16, device="cuda")
    w = make_input((512,), torch.bfloat16, device="cuda")
    xr = make_input((64, 512), torch.bfloat16, device="cuda")
    res = make_input((64, 512), torch.bfloat16, device="cuda")
    wb = make_input((256, 384), torch.bfloat16, device="cuda")
    xm, m = masked_case(4, 16, 256, device="cuda")
    calls = lambda: (  # noqa: E731
        fp8ops.silu_mul_quant(x, 128, "col_tma"),
        fp8ops.silu_mul_quant(xm, 128, "col_tma", masked_m=m),
        fp8ops.rms_norm_quant(xr, w, 1e-6, res, 128, "col_tma_packed"),
        fp8ops.block_quant(wb),
    )
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        calls()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = calls()
    for _ in range(2):
        for t in (x, xr, res, wb, xm):
            t.copy_(make_input(tuple(t.shape), torch.bfloat16, device="cuda"))
        m.copy_(torch.randint(0, 17, (4,), dtype=torch.int32))
        res_before = res.cpu()
        g.replay()
        torch.cuda.synchronize()
        assert_same_quant(*outs[0], *fp8ops.silu_mul_quant(x.cpu(), 128, "col_tma"), "silu")
        cq, cs = fp8ops.silu_mul_quant(xm.cpu(), 128, "col_tma", masked_m=m.cpu())
        for e in range(4):
            n = int(m[e])
            assert_same_bits(outs[1][0][e, :n], cq[e, :n], "masked")
        cq, cs = fp8ops.rms_norm_quant(xr.cpu(), w.cpu(), 1e-6, res_before, 128, "col_tma_packed")
        assert_same_quant(*outs[2], cq, cs, "rms")
        assert torch.equal(res.cpu(), res_before)
        assert_same_quant(*outs[3], *fp8ops.block_quant(wb.cpu()), "block")
