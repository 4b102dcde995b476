"""group_major_quant, pack_ue8m0 and dequant (SPEC sections 3 and 6)."""

import itertools

import pytest
import torch
from helpers import DTYPES, assert_same_bits, assert_same_quant, make_input, poisoned_call, raw_bytes

import fp8ops
from fp8ops import _layout
from fp8ops import reference as ref

T_SIZES = (0, 1, 3, 4, 37)


def strided_tgd(T, G, D, dtype, device="cpu", nonfinite=False):
    """A [T, G, D] view with arbitrary token and group strides (a slice of a wider projection)."""
    full = make_input((T, G + 1, D + 256), dtype, device=device, nonfinite=nonfinite)
    return full[:, 1:, 128 : 128 + D]


def group_major_expected(T, G, S, packed):
    Ta = -(-T // 4) * 4
    C = -(-S // 4) if packed else S
    return (T, G, C), (1, C * Ta, Ta), torch.int32 if packed else torch.float32, G * C * Ta * 4


@pytest.mark.parametrize("packed", (False, True))
def test_group_major_shapes_strides(packed):
    for T, G, D in itertools.product(T_SIZES, (1, 8, 16), (128, 512, 640)):
        x = torch.randn(T, G, D, dtype=torch.bfloat16)
        q, s = fp8ops.group_major_quant(x, packed=packed)
        sizes, strides, dtype, nbytes = group_major_expected(T, G, D // 128, packed)
        assert q.shape == (T, G, D) and q.is_contiguous() and q.dtype == torch.float8_e4m3fn
        assert (tuple(s.shape), s.stride(), s.dtype) == (sizes, strides, dtype)
        assert s.untyped_storage().nbytes() == nbytes
        assert _layout.group_major_scale_geometry(T, G, D // 128, packed) == (sizes, strides, dtype)
        mq, ms = fp8ops.group_major_quant(x.to("meta"), packed=packed)
        assert (mq.shape, mq.stride(), ms.shape, ms.stride(), ms.dtype) == (
            q.shape,
            q.stride(),
            s.shape,
            s.stride(),
            s.dtype,
        )


def check_group_major(x, ue8m0=False, packed=False, eps=1e-10):
    q, s = fp8ops.group_major_quant(x, ue8m0, packed, eps)
    rq, rs = ref.group_major_quant(x.cpu(), ue8m0, packed, eps)
    what = f"{tuple(x.shape)} {x.stride()} {x.dtype} ue8m0={ue8m0} packed={packed}"
    assert_same_quant(q, s, rq, rs, what)
    return q, s


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ue8m0, packed", ((False, False), (True, False), (False, True)))
def test_group_major_matches_torch_expression(dtype, ue8m0, packed):
    for T, G, D in itertools.product(T_SIZES, (1, 8), (128, 640)):
        check_group_major(strided_tgd(T, G, D, dtype), ue8m0, packed)
        check_group_major(make_input((T, G, D), dtype), ue8m0, packed, eps=1e-4)
    check_group_major(strided_tgd(37, 8, 1024, dtype, nonfinite=True), ue8m0, packed)


BAD_GROUP_MAJOR = [
    (lambda: torch.randn(4, 256, dtype=torch.bfloat16), "x must be 3-D"),
    (lambda: torch.randn(4, 2, 200, dtype=torch.bfloat16), "multiple of 128"),
    (lambda: torch.randn(4, 2, 256).to(torch.int32), "x must be bfloat16"),
    (lambda: torch.randn(4, 256, 2, dtype=torch.bfloat16).transpose(1, 2), "last dim must be contiguous"),
]


@pytest.mark.parametrize("make, match", BAD_GROUP_MAJOR)
def test_group_major_bad_inputs(make, match):
    with pytest.raises(RuntimeError, match=match):
        fp8ops.group_major_quant(make())


@pytest.mark.parametrize("packed", (False, True))
def test_group_major_opcheck_and_compile(packed):
    x = strided_tgd(5, 4, 256, torch.bfloat16)
    torch.library.opcheck(
        torch.ops.fp8ops.group_major_quant.default, (x,), {"ue8m0": False, "packed": packed, "eps": 1e-10}
    )
    torch._dynamo.reset()
    cf = torch.compile(lambda t: fp8ops.group_major_quant(t, packed=packed), fullgraph=True, dynamic=True)
    for T in (3, 9, 17):
        x = strided_tgd(T, 4, 256, torch.bfloat16)
        q, s = cf(x)
        eq, es = fp8ops.group_major_quant(x, packed=packed)
        assert_same_bits(q, eq, "compiled q")
        assert_same_bits(s, es, "compiled scale")
        assert s.stride() == es.stride()


def ue8m0_scales(shape, zero_rows=True):
    e = torch.randint(1, 255, shape, dtype=torch.int32)
    s = (e << 23).view(torch.float32)
    if zero_rows and shape[-2] > 1:
        s[..., 1, :] = 0.0
    return s


def packed_expected(shape):
    M, S = shape[-2], shape[-1]
    Ma, P = -(-M // 4) * 4, -(-S // 4)
    if len(shape) == 2:
        return (M, P), (1, Ma)
    return (shape[0], M, P), (P * Ma, 1, Ma)


@pytest.mark.parametrize("shape", ((0, 7), (1, 1), (3, 5), (5, 56), (17, 8), (3, 13, 7), (4, 0, 6), (2, 37, 16)))
def test_pack_ue8m0_matches_torch(shape):
    for s in (ue8m0_scales(shape), ue8m0_scales(shape).transpose(-1, -2).contiguous().transpose(-1, -2)):
        p = fp8ops.pack_ue8m0(s)
        sizes, strides = packed_expected(shape)
        assert (tuple(p.shape), p.stride(), p.dtype) == (sizes, strides, torch.int32)
        Ma = strides[-1]
        storage = torch.zeros(*shape[:-2], sizes[-1], Ma, dtype=torch.int32)
        storage[..., : shape[-2]] = ref.pack_exponents(s).transpose(-1, -2)
        assert torch.equal(raw_bytes(p), raw_bytes(storage))
        mp = fp8ops.pack_ue8m0(s.to("meta"))
        assert (mp.shape, mp.stride(), mp.dtype) == (p.shape, p.stride(), p.dtype)


def test_pack_ue8m0_equals_fused_quant():
    x = make_input((37, 7 * 128), torch.bfloat16)
    _, s = fp8ops.per_token_group_quant(x, 128, "row", ue8m0=True)
    _, packed = fp8ops.per_token_group_quant(x, 128, "col_tma_packed")
    assert torch.equal(raw_bytes(fp8ops.pack_ue8m0(s)), raw_bytes(packed))
    xg = strided_tgd(37, 8, 640, torch.bfloat16)
    _, sg = fp8ops.group_major_quant(xg, ue8m0=True)
    _, pg = fp8ops.group_major_quant(xg, packed=True)
    # [T, G, S] -> [G, T, S]: pack_ue8m0's 3-D layout is the group-major packed storage.
    assert torch.equal(raw_bytes(fp8ops.pack_ue8m0(sg.permute(1, 0, 2))), raw_bytes(pg))


@pytest.mark.parametrize("bad", (3.0, -0.5, float("nan"), float("inf"), 2.0**-127, 0.75))
def test_pack_ue8m0_rejects_non_power_of_two_on_cpu(bad):
    s = ue8m0_scales((4, 8))
    s[2, 3] = bad
    with pytest.raises(RuntimeError, match="power of two"):
        fp8ops.pack_ue8m0(s)


def test_pack_ue8m0_bad_inputs():
    with pytest.raises(RuntimeError, match="scale must be float32"):
        fp8ops.pack_ue8m0(torch.ones(4, 4, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="2-D"):
        fp8ops.pack_ue8m0(torch.ones(4))


def test_pack_opcheck():
    torch.library.opcheck(torch.ops.fp8ops.pack_ue8m0.default, (ue8m0_scales((5, 9)),))
    torch.library.opcheck(torch.ops.fp8ops.pack_ue8m0.default, (ue8m0_scales((3, 5, 9)),))


@pytest.mark.parametrize("out_dtype", (None, torch.float32, torch.bfloat16, torch.float16))
def test_dequant_every_layout(out_dtype):
    x = make_input((13, 768), torch.bfloat16)
    for layout, gs in itertools.product(("row", "col", "col_tma", "col_tma_packed"), (32, 64, 128)):
        q, s = fp8ops.per_token_group_quant(x, gs, layout, pad_rows_to=4)
        y = fp8ops.dequant(q, s, gs, out_dtype)
        assert y.dtype == (out_dtype or torch.float32) and y.shape == q.shape
        assert_same_bits(y, ref.dequant(q, s, gs, out_dtype), f"dequant {layout} {gs}")
        if layout == "row" and out_dtype in (None, torch.float32):
            # Round trip: within half an e4m3 step of the input (2^-4 relative for normals,
            # scale * 2^-10 absolute for subnormals).
            step = s[:13].repeat_interleave(gs, dim=1) * 2.0**-10
            err = (y[:13] - x.float()).abs()
            assert (err <= x.float().abs() * 2.0**-4 + step).all()
    xg = strided_tgd(6, 4, 512, torch.bfloat16)
    for packed in (False, True):
        q, s = fp8ops.group_major_quant(xg, packed=packed)
        assert_same_bits(fp8ops.dequant(q, s, 128, out_dtype), ref.dequant(q, s, 128, out_dtype), "group-major")


def test_dequant_bad_inputs_and_opcheck():
    q, s = fp8ops.per_token_group_quant(torch.randn(4, 256), 128, "col")
    with pytest.raises(RuntimeError, match="q must be float8_e4m3fn"):
        fp8ops.dequant(q.float(), s)
    with pytest.raises(RuntimeError, match="scale.size"):
        fp8ops.dequant(q, s, 64)
    with pytest.raises(RuntimeError, match="out_dtype"):
        fp8ops.dequant(q, s, 128, torch.int32)
    with pytest.raises(RuntimeError, match="rank"):
        fp8ops.dequant(q, s[0])
    # test_schema compares inputs with a multiply, which float8 tensors do not support on the CPU.
    torch.library.opcheck(
        torch.ops.fp8ops.dequant.default,
        (q, s),
        {"group_size": 128, "out_dtype": torch.bfloat16},
        test_utils=("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic"),
    )


# ----------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_group_major_cuda_bit_identical(dtype, pdl):
    # (2049, 16, 384): three groups per row, so the pairs-of-groups kernel has a last pair with one
    # group.
    for (T, G, D), (ue8m0, packed) in itertools.product(
        ((0, 8, 512), (1, 8, 512), (3, 16, 4096), (37, 8, 1024), (4097, 16, 512), (2049, 16, 384)),
        ((False, False), (True, False), (False, True)),
    ):
        x = strided_tgd(T, G, D, dtype, device="cuda", nonfinite=T == 37)
        q, s = fp8ops.group_major_quant(x, ue8m0, packed)
        cq, cs = fp8ops.group_major_quant(x.cpu(), ue8m0, packed)
        assert s.stride() == cs.stride()
        assert_same_quant(q, s, cq, cs, f"{T} {G} {D} ue8m0={ue8m0} packed={packed}")


@pytest.mark.gpu
@pytest.mark.parametrize("packed", (False, True))
def test_group_major_cuda_padding_written_over_poison(packed):
    # T = 4097: token padding rows in the scales; large enough for the multi-row kernel. G = 3 and
    # 5: blocks with more row slots than rows, whose spare slots still zero padding rows.
    for T, G, D in ((1, 8, 512), (1, 3, 512), (2, 5, 256), (37, 8, 1024), (4097, 16, 512)):
        x = strided_tgd(T, G, D, torch.bfloat16, device="cuda")
        q, s = poisoned_call(fp8ops.group_major_quant, x, False, packed)
        cq, cs = fp8ops.group_major_quant(x.cpu(), False, packed)
        assert_same_quant(q, s, cq, cs, f"over poison {T} {G} {D} packed={packed}")


@pytest.mark.gpu
def test_pack_and_dequant_cuda_bit_identical(pdl):
    for shape in ((0, 7), (1, 1), (5, 56), (4097, 13), (3, 37, 16)):
        s = ue8m0_scales(shape)
        assert torch.equal(raw_bytes(fp8ops.pack_ue8m0(s.cuda())).cpu(), raw_bytes(fp8ops.pack_ue8m0(s)))
        st = s.transpose(-1, -2).contiguous().transpose(-1, -2).cuda()
        assert torch.equal(raw_bytes(fp8ops.pack_ue8m0(st)).cpu(), raw_bytes(fp8ops.pack_ue8m0(s)))
    # Invalid scales: the CUDA kernel rounds the exponent up and does not trap.
    bad = torch.tensor([[3.0, 0.75, 2.0**-140, 1.0]], device="cuda")
    assert raw_bytes(fp8ops.pack_ue8m0(bad)).cpu().tolist() == [129, 127, 1, 127] + [0] * 12
    x = make_input((130, 1024), torch.bfloat16, device="cuda")
    for layout, dt in itertools.product(("row", "col_tma", "col_tma_packed"), (None, torch.bfloat16, torch.float16)):
        q, s = fp8ops.per_token_group_quant(x, 128, layout, pad_rows_to=4)
        assert_same_bits(fp8ops.dequant(q, s, 128, dt), fp8ops.dequant(q.cpu(), s.cpu(), 128, dt), layout)


@pytest.mark.gpu
def test_group_major_cuda_graph(pdl):
    x = strided_tgd(37, 8, 1024, torch.bfloat16, device="cuda")
    fp8ops.group_major_quant(x, packed=True)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gq, gs = fp8ops.group_major_quant(x, packed=True)
    for _ in range(2):
        x.copy_(strided_tgd(37, 8, 1024, torch.bfloat16, device="cuda"))
        g.replay()
        torch.cuda.synchronize()
        cq, cs = fp8ops.group_major_quant(x.cpu(), packed=True)
        assert_same_quant(gq, gs, cq, cs, "graph")
