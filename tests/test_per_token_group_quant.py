"""per_token_group_quant: layouts, numerics against the torch expression of SPEC section 5, padding,
bad inputs, opcheck, torch.compile; and on a GPU, bit-identity with the CPU kernel, CUDA graphs,
streams and very large inputs."""

import itertools

import pytest
import torch
from helpers import (
    DTYPES,
    assert_same_bits,
    assert_same_quant,
    check_runs_on_current_stream,
    every_exponent_input,
    make_input,
    misaligned,
    per_token_problem,
    poisoned_call,
    raw_bytes,
    strided_rows,
)

import fp8ops
from fp8ops import _layout, _native
from fp8ops import reference as ref

LAYOUTS = ("row", "col", "col_tma", "col_tma_packed")
M_SIZES = (0, 1, 3, 4, 5, 17, 4097)


def expected_geometry(M, K, group_size, layout, pad_rows_to):
    """SPEC section 2's table, written out independently of fp8ops._layout."""
    S = K // group_size
    Mp = -(-M // pad_rows_to) * pad_rows_to
    Ma = -(-Mp // 4) * 4
    table = {
        "row": ((Mp, S), (S, 1), torch.float32, Mp * S * 4),
        "col": ((Mp, S), (1, Mp), torch.float32, Mp * S * 4),
        "col_tma": ((Mp, S), (1, Ma), torch.float32, Ma * S * 4),
        "col_tma_packed": ((Mp, -(-S // 4)), (1, Ma), torch.int32, Ma * -(-S // 4) * 4),
    }
    return table[layout]


def check_against_reference(x, group_size=128, scale_layout="row", ue8m0=False, pad_rows_to=1, eps=1e-10):
    q, s = fp8ops.per_token_group_quant(x, group_size, scale_layout, ue8m0, pad_rows_to, eps)
    rq, rs = ref.per_token_group_quant(x.cpu(), group_size, scale_layout, ue8m0, pad_rows_to, eps)
    what = f"{tuple(x.shape)} {x.dtype} gs={group_size} {scale_layout} ue8m0={ue8m0} pad={pad_rows_to} eps={eps}"
    assert_same_quant(q, s, rq, rs, what)
    return q, s


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("pad_rows_to", (1, 4, 16))
def test_shapes_and_strides(layout, pad_rows_to):
    for M, K, gs in itertools.product(M_SIZES, (0, 128, 384, 1536), (32, 64, 128)):
        if M == 4097 and K > 384:
            continue
        x = torch.randn(M, K, dtype=torch.bfloat16)
        q, s = fp8ops.per_token_group_quant(x, gs, layout, pad_rows_to=pad_rows_to)
        sizes, strides, dtype, nbytes = expected_geometry(M, K, gs, layout, pad_rows_to)
        assert q.shape == (sizes[0], K) and q.dtype == torch.float8_e4m3fn and q.is_contiguous()
        assert (tuple(s.shape), s.stride(), s.dtype) == (sizes, strides, dtype), (M, K, gs)
        assert s.untyped_storage().nbytes() == nbytes, (M, K, gs)
        # The Python twin of the C++ layout function, and the fake kernel, agree.
        assert _layout.per_token_scale_geometry(M, K // gs, layout, pad_rows_to) == (sizes, strides, dtype)
        mq, ms = fp8ops.per_token_group_quant(x.to("meta"), gs, layout, pad_rows_to=pad_rows_to)
        assert (mq.shape, mq.stride(), mq.dtype) == (q.shape, q.stride(), q.dtype)
        assert (ms.shape, ms.stride(), ms.dtype) == (s.shape, s.stride(), s.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ue8m0", (False, True))
def test_matches_torch_expression(dtype, layout, ue8m0):
    for M in M_SIZES:
        K = 2048 if M == 4097 else 1024
        x = make_input((M, K), dtype)
        check_against_reference(x, 128, layout, ue8m0, pad_rows_to=4 if M % 2 else 1)


@pytest.mark.parametrize("group_size", (32, 64))
@pytest.mark.parametrize("dtype", DTYPES)
def test_small_groups(group_size, dtype):
    for layout, M in itertools.product(LAYOUTS, (1, 5, 17, 130)):
        x = make_input((M, 7 * 64), dtype)  # S odd for group 64: exercises packed tail bytes
        check_against_reference(x, group_size, layout, ue8m0=M % 2 == 1)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_every_scale_exponent(dtype):
    x = every_exponent_input(dtype)
    for layout, eps in itertools.product(LAYOUTS, (1e-30, 1e30)):
        check_against_reference(x, 128, layout, ue8m0=True, eps=eps)
        check_against_reference(x, 128, layout, ue8m0=False, eps=eps)


@pytest.mark.parametrize("eps", (1e-30, 1e-10, 1e-4, 1.0, 1e30))
def test_eps(eps):
    x = make_input((33, 512), torch.bfloat16)
    x[3] *= 1e-30  # groups whose amax falls under eps
    for layout in LAYOUTS:
        check_against_reference(x, 128, layout, ue8m0=False, eps=eps)
        check_against_reference(x, 128, layout, ue8m0=True, eps=eps)


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_inputs(dtype):
    x = make_input((37, 1024), dtype, nonfinite=True)
    for layout in LAYOUTS:
        q, s = check_against_reference(x, 128, layout, ue8m0=layout == "col")
        codes = q.view(torch.uint8)
        assert not ((codes & 0x7F) == 0x7F).any(), "no output may hold the e4m3 NaN code"
        if s.dtype == torch.float32:
            assert torch.isfinite(s).all() and (s[: x.shape[0]] > 0).all()


def test_non_finite_semantics():
    x = torch.zeros(1, 128, dtype=torch.float32)
    x[0, :4] = torch.tensor([float("nan"), float("inf"), float("-inf"), 2.0])
    q, s = fp8ops.per_token_group_quant(x)
    assert (
        s.item() == torch.tensor(2.0 / 448.0, dtype=torch.float32).item()
        or s.item() == (torch.tensor(2.0) * torch.tensor(1.0 / 448.0)).item()
    )
    vals = q.float()[0, :4].tolist()
    assert vals == [0.0, 448.0, -448.0, 448.0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_misaligned_and_leading_dims(dtype):
    base = make_input((19, 768), dtype)
    for layout in LAYOUTS:
        check_against_reference(strided_rows(base, 8), 128, layout)  # row stride not 16-byte aligned
        check_against_reference(strided_rows(base, 64), 128, layout)
        check_against_reference(misaligned(base), 128, layout)
        x3 = make_input((2, 3, 5, 256), dtype)
        q, s = check_against_reference(x3, 64, layout, pad_rows_to=4)
        assert q.shape == (32, 256)
        # A leading-dim slice that still views as [-1, K].
        sliced = strided_rows(x3, 32)[1:]
        sliced.view(-1, 256)
        check_against_reference(sliced, 128, layout)
        # Broadcast rows (row stride 0).
        check_against_reference(base[:1].expand(6, 768), 128, layout)


def test_leading_dims_that_cannot_be_flattened():
    x = torch.randn(4, 6, 256, dtype=torch.bfloat16).transpose(0, 1)
    with pytest.raises(RuntimeError, match="leading dims"):
        fp8ops.per_token_group_quant(x)


BAD_INPUTS = [
    (lambda: torch.randn(4, 256).to(torch.int32), {}, "x must be bfloat16, float16 or float32"),
    (lambda: torch.randn(4, 256, dtype=torch.float64), {}, "x must be bfloat16"),
    (lambda: torch.randn(256, dtype=torch.bfloat16), {}, "at least 2 dims"),
    (lambda: torch.randn(4, 256, dtype=torch.bfloat16), {"group_size": 96}, "group_size must be 32, 64 or 128"),
    (lambda: torch.randn(4, 200, dtype=torch.bfloat16), {}, "must be a multiple of group_size"),
    (lambda: torch.randn(4, 256, dtype=torch.bfloat16), {"scale_layout": "colmajor"}, "scale_layout must be one of"),
    (lambda: torch.randn(4, 256, dtype=torch.bfloat16), {"pad_rows_to": 0}, "pad_rows_to must be >= 1"),
    (lambda: torch.randn(4, 256, dtype=torch.bfloat16), {"eps": 0.0}, "eps must be finite"),
    (lambda: torch.randn(4, 256, dtype=torch.bfloat16), {"eps": 1e-31}, "eps must be finite"),
    (lambda: torch.randn(4, 256, dtype=torch.bfloat16), {"eps": float("nan")}, "eps must be finite"),
    (lambda: torch.randn(4, 256, dtype=torch.bfloat16), {"eps": float("inf")}, "eps must be finite"),
    (lambda: torch.randn(4, 256, dtype=torch.bfloat16), {"eps": 1e39}, "eps must be finite"),
    (lambda: torch.randn(256, 4, dtype=torch.bfloat16).t(), {}, "last dim must be contiguous"),
]


@pytest.mark.parametrize("make, kwargs, match", BAD_INPUTS)
def test_bad_inputs_raise(make, kwargs, match):
    with pytest.raises(RuntimeError, match=match):
        fp8ops.per_token_group_quant(make(), **kwargs)


def test_deterministic_poison_reaches_allocations():
    """With deterministic mode's fill_uninitialized_memory, fresh CPU tensors are filled with NaN
    (float) or the max integer, so an unwritten output byte would show; this checks the poison is
    active in this torch, then that every padding byte came out zero anyway."""
    old_det = torch.are_deterministic_algorithms_enabled()
    old_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        probe = torch.empty_strided((8, 3), (1, 8), dtype=torch.float32)
        assert torch.isnan(probe).all(), "poisoning is not active"
        x = make_input((5, 384), torch.bfloat16)
        for layout in LAYOUTS:
            check_against_reference(x, 128, layout, pad_rows_to=8)
            check_against_reference(x, 64, layout, pad_rows_to=3)
    finally:
        torch.use_deterministic_algorithms(old_det)
        torch.utils.deterministic.fill_uninitialized_memory = old_fill


@pytest.mark.parametrize("layout", LAYOUTS)
def test_opcheck(layout):
    for M, ue8m0, pad in ((5, False, 1), (8, True, 4), (0, False, 4)):
        x = make_input((M, 256), torch.bfloat16)
        torch.library.opcheck(
            torch.ops.fp8ops.per_token_group_quant.default,
            (x,),
            {"group_size": 128, "scale_layout": layout, "ue8m0": ue8m0, "pad_rows_to": pad, "eps": 1e-10},
        )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_torch_compile_dynamic_cpu(layout):
    torch._dynamo.reset()

    def f(x):
        q, s = fp8ops.per_token_group_quant(x, 128, layout, pad_rows_to=4)
        return q, s

    cf = torch.compile(f, fullgraph=True, dynamic=True)
    for M in (3, 9, 17):
        x = make_input((M, 512), torch.bfloat16)
        q, s = cf(x)
        eq, es = f(x)
        assert_same_bits(q, eq, "compiled q")
        assert_same_bits(s, es, "compiled scale")
        assert s.stride() == es.stride()


# ----------------------------------------------------------------------------------------- GPU


def cuda_equals_cpu(x, *args):
    q, s = fp8ops.per_token_group_quant(x, *args)
    cq, cs = fp8ops.per_token_group_quant(x.cpu(), *args)
    what = f"{tuple(x.shape)} {x.dtype} {args}"
    assert q.is_cuda and s.is_cuda and q.device == x.device
    assert (s.shape, s.stride(), s.dtype) == (cs.shape, cs.stride(), cs.dtype), what
    assert_same_quant(q, s, cq, cs, what)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", (32, 64, 128))
def test_cuda_bit_identical_to_cpu(dtype, group_size, pdl):
    for layout, ue8m0, M in itertools.product(LAYOUTS, (False, True), (0, 1, 3, 5, 17, 64, 4097)):
        K = 7 * group_size * (4 if M < 100 else 1)
        x = make_input((M, K), dtype, device="cuda", nonfinite=M == 17)
        pad = 4 if M in (3, 17) else 1
        cuda_equals_cpu(x, group_size, layout, ue8m0, pad, 1e-10)
    # Strided, misaligned and leading-dim inputs take the scalar-load path or strided rows.
    base = make_input((33, 4 * group_size * 3), dtype, device="cuda")
    for layout in LAYOUTS:
        cuda_equals_cpu(strided_rows(base, 8), group_size, layout, False, 1, 1e-4)
        cuda_equals_cpu(strided_rows(base, 64), group_size, layout, True, 4, 1e-10)
        cuda_equals_cpu(misaligned(base), group_size, layout, False, 1, 1e-10)
        cuda_equals_cpu(base.view(3, 11, -1), group_size, layout, False, 16, 1e-10)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_cuda_every_scale_exponent(dtype):
    """The CUDA kernel takes a UE8M0 scale's reciprocal from its exponent bits: held to the CPU
    kernel (1 / scale) over every exponent the eps bounds allow, at K = 512 and 7168."""
    for groups in (4, 56):
        x = every_exponent_input(dtype, groups).cuda()
        for layout, eps in itertools.product(LAYOUTS, (1e-30, 1e30)):
            cuda_equals_cpu(x, 128, layout, True, 1, eps)
            cuda_equals_cpu(x, 128, layout, False, 4, eps)


@pytest.mark.gpu
def test_cuda_large_grid_paths():
    """Sizes large enough for the unrolled kernel (two rows with MN-major scales, two groups of a
    row with row-major ones, four rows otherwise), with every layout and dtype; with row-strided
    and misaligned inputs, and with odd group counts (whose row-major scales cannot take 8-byte
    stores); with q within half the L2 (evict-first loads of x) and past it (plain loads)."""
    props = torch.cuda.get_device_properties(0)
    sms, l2 = props.multi_processor_count, props.L2_cache_size
    past_l2 = (l2 // 2 // 2048 + 3, 2048)
    assert not _native.group_quant_launch(per_token_problem(*past_l2, "col_tma", sms=sms, l2=l2))["stream"]
    assert _native.group_quant_launch(per_token_problem(8195, 2048, "col_tma", sms=sms, l2=l2))["stream"]
    for dtype, layout in itertools.product(DTYPES, LAYOUTS):
        x = make_input((8195, 2048), dtype, device="cuda", nonfinite=True)
        cuda_equals_cpu(x, 128, layout, layout == "col", 4, 1e-10)
        x = make_input(past_l2, dtype, device="cuda", nonfinite=True)
        cuda_equals_cpu(x, 128, layout, layout == "col_tma", 1, 1e-10)
        del x
        base = make_input((4099, 64 * 50), dtype, device="cuda", nonfinite=True)
        cuda_equals_cpu(strided_rows(base, 64), 64, layout, True, 1, 1e-10)
        cuda_equals_cpu(misaligned(base), 64, layout, False, 4, 1e-10)
        cuda_equals_cpu(make_input((4099, 32 * 93), dtype, device="cuda"), 32, layout, False, 1, 1e-10)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_cuda_row_blocks(dtype):
    """Grids that take group_quant_row_kernel (a block per row; with MN-major scales 8 blocks per 8
    rows: S / 8 groups each with fp32 scales, a warp per row and packed word with packed ones), at
    both ends of its row range and with row counts that leave part of the last 8 rows empty: every
    layout, UE8M0, q and scale padding rows, non-finite values (in some warps only), bit for bit
    against the CPU kernel, over poisoned outputs. K = 4608 (S = 36) takes them with packed scales
    only, whose 9 words of 8 rows span two blocks."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = ((sms // 2 + 1, 7168), (sms - 3, 4096), (8 * sms - 9, 7168), (2 * sms + 5, 8192), (sms + 7, 4608))
    for M, K in shapes:
        x = make_input((M, K), dtype, device="cuda", nonfinite=True)
        x[M // 2 :, :] = x[M // 2 :, :].nan_to_num(0.0, 0.0, 0.0)  # finite warps beside non-finite ones
        for layout, ue8m0, pad in itertools.product(LAYOUTS, (False, True), (1, 4, 16)):
            c = _native.group_quant_launch(per_token_problem(M, K, layout, pad_rows_to=pad, sms=sms))
            assert c["row_blocks"] == (K != 4608 or layout in ("row", "col_tma_packed")), (M, K, layout, pad)
            args = (128, layout, ue8m0, pad, 1e-10)
            q, s = poisoned_call(fp8ops.per_token_group_quant, x, *args)
            cq, cs = fp8ops.per_token_group_quant(x.cpu(), *args)
            assert_same_quant(q, s, cq, cs, f"row blocks {M} x {K} {dtype} {args}")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_more_than_2_31_elements(layout):
    K = 7168
    M = (1 << 31) // K + 3  # M * K > 2^31
    x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
    x[-1, :200] = float("nan")
    q, s = fp8ops.per_token_group_quant(x, 128, layout, pad_rows_to=4)
    rows = torch.tensor([0, 1, M // 2, M - 2, M - 1])
    xr = x[rows.cuda()].cpu()
    rq, rs = ref.per_token_group_quant(xr, 128, layout)
    assert_same_bits(q[rows.cuda()], rq, "q spot rows")
    assert torch.equal(s[rows.cuda()].cpu(), rs)
    Mp = q.shape[0]
    assert Mp == -(-M // 4) * 4 and not q[M:].view(torch.uint8).any() and not s[M:].any()
    del x, q, s
    torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_padding_written_over_poison(layout):
    # The last two are large enough for the multi-row kernel (with scale-only padding rows when
    # pad == 1 and M % 4 != 0 in the col_tma layouts).
    for M, pad, gs in ((1, 1, 128), (5, 8, 64), (17, 4, 32), (130, 16, 128), (16387, 1, 128), (16387, 4, 128)):
        x = make_input((M, 7 * gs), torch.bfloat16, device="cuda")
        q, s = poisoned_call(fp8ops.per_token_group_quant, x, gs, layout, False, pad, 1e-10)
        cq, cs = fp8ops.per_token_group_quant(x.cpu(), gs, layout, False, pad, 1e-10)
        assert_same_quant(q, s, cq, cs, "over poison")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_graph_replay_with_new_data(layout, pdl):
    x = make_input((37, 1024), torch.bfloat16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fp8ops.per_token_group_quant(x, 128, layout, pad_rows_to=4)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gq, gs = fp8ops.per_token_group_quant(x, 128, layout, pad_rows_to=4)
    for _ in range(3):
        x.copy_(make_input((37, 1024), torch.bfloat16, device="cuda"))
        g.replay()
        torch.cuda.synchronize()
        cq, cs = fp8ops.per_token_group_quant(x.cpu(), 128, layout, pad_rows_to=4)
        assert_same_quant(gq, gs, cq, cs, "graph")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ("row", "col_tma", "col_tma_packed"))
def test_cuda_compile_reduce_overhead(layout):
    torch._dynamo.reset()

    def f(x):
        return fp8ops.per_token_group_quant(x, 128, layout, pad_rows_to=4)

    cf = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):
        x = make_input((24, 2048), torch.bfloat16, device="cuda")
        q, s = cf(x)
        cq, cs = fp8ops.per_token_group_quant(x.cpu(), 128, layout, pad_rows_to=4)
        assert_same_bits(q, cq, "compiled q")
        assert_same_bits(s, cs, "compiled scale")
        assert s.stride() == cs.stride()


@pytest.mark.gpu
def test_cuda_runs_on_current_stream():
    check_runs_on_current_stream(device=0, current=0)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_opcheck(layout):
    x = make_input((9, 512), torch.bfloat16, device="cuda")
    torch.library.opcheck(
        torch.ops.fp8ops.per_token_group_quant.default,
        (x,),
        {"group_size": 128, "scale_layout": layout, "ue8m0": True, "pad_rows_to": 4, "eps": 1e-10},
    )


@pytest.mark.gpu
def test_cuda_programmatic_launch_chain_in_a_graph():
    """The kernels start early (programmatic dependent launch) but wait for the previous grid:
    a producer kernel writing x, our quantizer, then our packer reading its scales, replayed in a
    graph with new data each time, must see each other's results."""
    a = make_input((33, 2048), torch.bfloat16, device="cuda")
    b = make_input((33, 2048), torch.bfloat16, device="cuda")
    x = torch.empty_like(a)

    def chain():
        torch.add(a, b, out=x)
        _, s = fp8ops.per_token_group_quant(x, 128, "row", ue8m0=True)
        q2, s2 = fp8ops.per_token_group_quant(x, 128, "col_tma_packed")
        return fp8ops.pack_ue8m0(s), q2, s2

    chain()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        packed, q2, s2 = chain()
    for _ in range(3):
        a.copy_(make_input((33, 2048), torch.bfloat16, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        xc = a.cpu() + b.cpu()
        cq, cs = fp8ops.per_token_group_quant(xc, 128, "col_tma_packed")
        assert_same_bits(q2, cq, "q after producer")
        assert torch.equal(raw_bytes(packed).cpu(), raw_bytes(cs))
        assert torch.equal(raw_bytes(s2).cpu(), raw_bytes(cs))
