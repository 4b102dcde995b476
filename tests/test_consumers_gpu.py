"""The consumers read our scales with no layout kernel in between: DeepGEMM SM90 fp8_gemm_nt and
fp8_einsum, and torch._scaled_mm blockwise 1x128 (cuBLASLt). GPU only; DeepGEMM tests need deep_gemm."""

import os

import pytest
import torch
from helpers import assert_same_bits, make_input

import fp8ops
from fp8ops import reference as ref

pytestmark = pytest.mark.gpu


def deep_gemm():
    try:
        import deep_gemm as dg
    except ImportError:
        if os.environ.get("FP8OPS_REQUIRE_DEEP_GEMM") == "1":
            raise
        pytest.skip("deep_gemm is not installed")
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("DeepGEMM SM90 tests need an sm_90 GPU")
    return dg


def gemm_nt_pair(dg, a, a_other, b, b_other, what):
    """fp8_gemm_nt(a, b) and fp8_gemm_nt(a_other, b_other) into bf16 [M, N], held bit-identical;
    returns the first output."""
    M, N = a[0].shape[0], b[0].shape[0]
    out, out_other = (torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    dg.fp8_gemm_nt(a, b, out)
    dg.fp8_gemm_nt(a_other, b_other, out_other)
    torch.cuda.synchronize()
    assert_same_bits(out, out_other, what)
    return out


def block_quant_weight(N, K):
    """A weight quantized per 128x128 block, DeepGEMM's SM90 recipe (1, 128, 128) for B."""
    w = torch.randn(N, K, device="cuda")
    blocks = w.view(N // 128, 128, K // 128, 128)
    ws = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-4) / 448.0
    wq = (blocks / ws[:, None, :, None]).to(torch.float8_e4m3fn).view(N, K)
    return wq, ws.contiguous()


@pytest.mark.parametrize("M", (1, 3, 5, 64, 129, 4096))
def test_deep_gemm_fp8_gemm_nt_zero_copy_and_bit_identical(M):
    dg = deep_gemm()
    N, K = 1024, 2048
    wq, ws = block_quant_weight(N, K)
    x = make_input((M, K), torch.bfloat16, device="cuda")
    q, s = fp8ops.per_token_group_quant(x, 128, "col_tma")
    assert dg.get_mn_major_tma_aligned_tensor(s).data_ptr() == s.data_ptr(), "DeepGEMM would copy our scales"
    q_row, s_row = fp8ops.per_token_group_quant(x, 128, "row")
    assert_same_bits(q, q_row, "q")
    assert torch.equal(s, s_row)
    assert dg.get_mn_major_tma_aligned_tensor(s_row).data_ptr() != s_row.data_ptr()
    out = gemm_nt_pair(dg, (q, s), (q_row, s_row), (wq, ws), (wq, ws), f"fp8_gemm_nt M={M}")
    # And the GEMM is right: against a float64 product of the dequantized operands.
    a = ref.dequant(q.cpu(), s.cpu()).double()
    b = (wq.float().view(N // 128, 128, K // 128, 128) * ws[:, None, :, None]).view(N, K).cpu().double()
    expect = a @ b.t()
    err = (out.double().cpu() - expect).norm() / expect.norm().clamp(min=1e-30)
    assert err < 1e-2, err


@pytest.mark.parametrize("ue8m0", (False, True))
def test_parity_with_deep_gemm_per_token_cast(ue8m0):
    dg = deep_gemm()
    from deep_gemm.utils import per_token_cast_to_fp8

    for M, K in ((1, 7168), (37, 2048), (4096, 1024)):
        x = make_input((M, K), torch.bfloat16, device="cuda")
        theirs_q, theirs_s = per_token_cast_to_fp8(x, use_ue8m0=ue8m0)
        q, s = fp8ops.per_token_group_quant(x, 128, "row", ue8m0=ue8m0, eps=1e-4)
        assert_same_bits(q, theirs_q, f"q M={M} ue8m0={ue8m0}")
        assert_same_bits(s, theirs_s.float(), f"scale M={M} ue8m0={ue8m0}")
    del dg


def test_packed_ue8m0_equals_deep_gemm_packer():
    dg = deep_gemm()
    # 130 x 7168 and 301 x 4096 take the row blocks (group_quant_row_kernel) on an H200.
    for M, K in ((1, 7168), (5, 896), (130, 2048), (130, 7168), (301, 4096), (4097, 512)):
        x = make_input((M, K), torch.bfloat16, device="cuda")
        _, s_fp32 = fp8ops.per_token_group_quant(x, 128, "row", ue8m0=True)
        _, packed = fp8ops.per_token_group_quant(x, 128, "col_tma_packed")
        theirs = dg.get_mn_major_tma_aligned_packed_ue8m0_tensor(s_fp32)
        assert theirs.shape == packed.shape and theirs.stride() == packed.stride()
        assert torch.equal(packed, theirs)
        assert torch.equal(fp8ops.pack_ue8m0(s_fp32), theirs)


def test_deep_gemm_fp8_einsum_group_major_zero_copy():
    dg = deep_gemm()
    T, G, D, N = 37, 8, 1024, 512
    x = make_input((T, G, D + 256), torch.bfloat16, device="cuda")[:, :, :D]
    w = torch.randn(G, N, D, device="cuda")
    blocks = w.view(G, N // 128, 128, D // 128, 128)
    ws = blocks.abs().amax(dim=(2, 4)).clamp(min=1e-4) / 448.0
    wq = (blocks / ws[:, :, None, :, None]).to(torch.float8_e4m3fn).view(G, N, D)
    q, s = fp8ops.group_major_quant(x)
    # Per group, the scales are DeepGEMM's MN-major TMA-aligned layout already.
    for g in (0, G - 1):
        assert dg.get_mn_major_tma_aligned_tensor(s[:, g]).data_ptr() == s[:, g].data_ptr()
    assert dg.get_mn_major_tma_aligned_tensor(s.permute(1, 0, 2)).data_ptr() == s.data_ptr()
    out = torch.empty(T, G, N, dtype=torch.bfloat16, device="cuda")
    out_contig = torch.empty_like(out)
    dg.fp8_einsum("bhr,hdr->bhd", (q, s), (wq, ws), out)
    dg.fp8_einsum("bhr,hdr->bhd", (q, s.contiguous()), (wq, ws), out_contig)
    torch.cuda.synchronize()
    assert_same_bits(out, out_contig, "fp8_einsum")
    # The packed layout equals DeepGEMM's packer applied group by group.
    _, sp = fp8ops.group_major_quant(x, packed=True)
    _, s8 = fp8ops.group_major_quant(x, ue8m0=True)
    for g in range(G):
        assert torch.equal(sp[:, g], dg.get_mn_major_tma_aligned_packed_ue8m0_tensor(s8[:, g].contiguous()))


def scaled_mm_blockwise(q, s, wq_t, ws_t):
    return torch._scaled_mm(q, wq_t, s, ws_t, out_dtype=torch.bfloat16)


@pytest.mark.parametrize("M", (1, 3, 4, 5, 64, 130))
def test_torch_scaled_mm_blockwise_col_layout(M):
    N, K = 512, 1024
    wq, ws = block_quant_weight(N, K)
    x = make_input((M, K), torch.bfloat16, device="cuda")
    pad = 1 if M % 4 == 0 else 4
    q, s = fp8ops.per_token_group_quant(x, 128, "col", pad_rows_to=pad)
    assert q.shape[0] % 4 == 0 and s.stride() == (1, q.shape[0])
    out = scaled_mm_blockwise(q, s, wq.t(), ws.t())
    # The same GEMM on a manually zero-padded input.
    Mp = q.shape[0]
    xp = torch.zeros(Mp, K, dtype=x.dtype, device="cuda")
    xp[:M] = x
    qp, sp = fp8ops.per_token_group_quant(xp, 128, "col")
    outp = scaled_mm_blockwise(qp, sp, wq.t(), ws.t())
    assert_same_bits(out[:M], outp[:M], f"_scaled_mm M={M}")
    assert not out[M:].any(), "padding rows must produce zero output rows"
    a = ref.dequant(q.cpu(), s.cpu()).double()[:M]
    b = (wq.float().view(N // 128, 128, K // 128, 128) * ws[:, None, :, None]).view(N, K).cpu().double()
    expect = a @ b.t()
    assert (out[:M].double().cpu() - expect).norm() / expect.norm() < 1e-2


def test_quantized_linear_compiles_and_replays_in_a_graph():
    dg = deep_gemm()
    N, K = 1024, 2048
    wq, ws = block_quant_weight(N, K)

    @torch.library.custom_op("fp8ops_test::deep_gemm_nt", mutates_args=())
    def dg_gemm(q: torch.Tensor, s: torch.Tensor, w: torch.Tensor, w_s: torch.Tensor) -> torch.Tensor:
        out = torch.empty(q.shape[0], w.shape[0], dtype=torch.bfloat16, device=q.device)
        dg.fp8_gemm_nt((q, s), (w, w_s), out)
        return out

    @dg_gemm.register_fake
    def _(q, s, w, w_s):
        return q.new_empty((q.shape[0], w.shape[0]), dtype=torch.bfloat16)

    def linear_dg(x):
        q, s = fp8ops.per_token_group_quant(x, 128, "col_tma")
        return dg_gemm(q, s, wq, ws)

    def linear_cublas(x):
        M = x.shape[0]
        q, s = fp8ops.per_token_group_quant(x, 128, "col", pad_rows_to=4)
        return torch._scaled_mm(q, wq.t(), s, ws.t(), out_dtype=torch.bfloat16)[:M]

    for fn in (linear_dg, linear_cublas):
        torch._dynamo.reset()
        cf = torch.compile(fn, fullgraph=True)
        x = make_input((7, K), torch.bfloat16, device="cuda")
        eager = fn(x)
        assert_same_bits(cf(x), eager, f"compiled {fn.__name__}")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            cf(x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = cf(x)
        for _ in range(2):
            x.copy_(make_input((7, K), torch.bfloat16, device="cuda"))
            graph.replay()
            torch.cuda.synchronize()
            assert_same_bits(y, fn(x), f"graph replay {fn.__name__}")


def test_no_layout_kernel_between_quant_and_deep_gemm():
    """The profiler sees exactly two kernels for quant + GEMM with col_tma scales, and a third,
    DeepGEMM's transpose, with row-major scales."""
    dg = deep_gemm()
    N, K = 1024, 2048
    wq, ws = block_quant_weight(N, K)
    x = make_input((16, K), torch.bfloat16, device="cuda")
    out = torch.empty(16, N, dtype=torch.bfloat16, device="cuda")

    def kernels(layout):
        for _ in range(2):
            q, s = fp8ops.per_token_group_quant(x, 128, layout)
            dg.fp8_gemm_nt((q, s), (wq, ws), out)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            q, s = fp8ops.per_token_group_quant(x, 128, layout)
            dg.fp8_gemm_nt((q, s), (wq, ws), out)
            torch.cuda.synchronize()
        return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]

    ours = kernels("col_tma")
    theirs = kernels("row")
    assert len(ours) == 2, ours
    assert len(theirs) == 3, theirs


# ------------------------------------------------------------- the fused ops and block_quant


def expert_weights(E, N, K):
    w = torch.randn(E, N, K, device="cuda")
    q, s = fp8ops.block_quant(w)
    return q, s


@pytest.mark.parametrize("E, Mmax", ((4, 64), (8, 128)))
def test_silu_masked_into_deep_gemm_masked_gemm_zero_copy(E, Mmax):
    dg = deep_gemm()
    H, N = 1024, 512
    x = make_input((E, Mmax, 2 * H), torch.bfloat16, device="cuda")
    counts = torch.randint(1, Mmax + 1, (E,))
    counts[0], counts[-1] = 0, Mmax
    m = counts.to(torch.int32).cuda()
    # Poison what the allocator hands out next, so that rows past masked_m hold NaN codes and
    # NaN scales: the GEMM's valid rows must not see them.
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    blocks = [torch.full((n,), 0xFF, dtype=torch.uint8, device="cuda") for n in (E * Mmax * H, E * 8 * Mmax * 4)]
    del blocks
    q, s = fp8ops.silu_mul_quant(x, 128, "col_tma", masked_m=m)
    assert dg.get_mn_major_tma_aligned_tensor(s).data_ptr() == s.data_ptr(), "DeepGEMM would copy our scales"
    wq, ws = expert_weights(E, N, H)
    out = torch.empty(E, Mmax, N, dtype=torch.bfloat16, device="cuda")
    out_ref = torch.empty_like(out)
    dg.m_grouped_fp8_gemm_nt_masked((q, s), (wq, ws), out, m, Mmax)
    # The same GEMM on DeepGEMM's own transform of the same scales (zeros past masked_m).
    s_plain = torch.zeros(E, Mmax, H // 128, device="cuda")
    for e in range(E):
        s_plain[e, : counts[e]] = s[e, : counts[e]]
    q_plain = q.clone()
    for e in range(E):
        q_plain[e, counts[e] :] = 0
    dg.m_grouped_fp8_gemm_nt_masked((q_plain, s_plain), (wq, ws), out_ref, m, Mmax)
    torch.cuda.synchronize()
    for e in range(E):
        n = int(counts[e])
        assert_same_bits(out[e, :n], out_ref[e, :n], f"masked GEMM expert {e}")
        assert torch.isfinite(out[e, :n].float()).all()


def test_silu_flat_into_deep_gemm_nt_and_m_grouped_contiguous():
    dg = deep_gemm()
    E, rows_per_expert, H, N = 4, 128, 1024, 512
    M = E * rows_per_expert
    x = make_input((M, 2 * H), torch.bfloat16, device="cuda")
    q, s = fp8ops.silu_mul_quant(x, 128, "col_tma")
    assert dg.get_mn_major_tma_aligned_tensor(s).data_ptr() == s.data_ptr()
    q_row, s_row = fp8ops.silu_mul_quant(x, 128, "row")
    wq, ws = fp8ops.block_quant(torch.randn(N, H, device="cuda"))
    gemm_nt_pair(dg, (q, s), (q_row, s_row), (wq, ws), (wq, ws), "fp8_gemm_nt")
    wq3, ws3 = expert_weights(E, N, H)
    m_indices = torch.arange(E, device="cuda", dtype=torch.int32).repeat_interleave(rows_per_expert)
    out, out_row = (torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    dg.m_grouped_fp8_gemm_nt_contiguous((q, s), (wq3, ws3), out, m_indices)
    dg.m_grouped_fp8_gemm_nt_contiguous((q_row, s_row), (wq3, ws3), out_row, m_indices)
    torch.cuda.synchronize()
    assert_same_bits(out, out_row, "m_grouped_fp8_gemm_nt_contiguous")


def test_silu_masked_packed_equals_deep_gemm_packer_per_expert():
    dg = deep_gemm()
    E, Mmax, H = 4, 36, 1024
    x = make_input((E, Mmax, 2 * H), torch.bfloat16, device="cuda")
    full = torch.full((E,), Mmax, dtype=torch.int32, device="cuda")
    _, packed = fp8ops.silu_mul_quant(x, 128, "col_tma_packed", masked_m=full)
    _, s8 = fp8ops.silu_mul_quant(x, 128, "row", ue8m0=True, masked_m=full)
    for e in range(E):
        assert torch.equal(packed[e], dg.get_mn_major_tma_aligned_packed_ue8m0_tensor(s8[e].contiguous()))


def test_rms_norm_quant_into_deep_gemm_zero_copy():
    dg = deep_gemm()
    M, D, N = 37, 7168, 1024
    x, r = (make_input((M, D), torch.bfloat16, device="cuda") for _ in range(2))
    w = make_input((D,), torch.bfloat16, device="cuda")
    r2 = r.clone()
    q, s = fp8ops.rms_norm_quant(x, w, 1e-6, r, 128, "col_tma")
    q_row, s_row = fp8ops.rms_norm_quant(x, w, 1e-6, r2, 128, "row")
    assert dg.get_mn_major_tma_aligned_tensor(s).data_ptr() == s.data_ptr()
    wq, ws = fp8ops.block_quant(torch.randn(N, D, device="cuda"))
    gemm_nt_pair(dg, (q, s), (q_row, s_row), (wq, ws), (wq, ws), "fp8_gemm_nt after rms_norm_quant")


@pytest.mark.parametrize("ue8m0", (False, True))
def test_block_quant_equals_deep_gemm_per_block_cast(ue8m0):
    dg = deep_gemm()
    from deep_gemm.utils import per_block_cast_to_fp8

    for N, K in ((128, 128), (512, 7168), (300, 200), (129, 1000)):
        w = make_input((N, K), torch.bfloat16, device="cuda")
        theirs_q, theirs_s = per_block_cast_to_fp8(w, use_ue8m0=ue8m0)
        q, s = fp8ops.block_quant(w, ue8m0=ue8m0, eps=1e-4)
        assert_same_bits(q, theirs_q, f"q {N}x{K} ue8m0={ue8m0}")
        assert_same_bits(s, theirs_s.float(), f"scale {N}x{K} ue8m0={ue8m0}")
    del dg


def test_block_quant_weights_in_fp8_gemm_nt_equal_deep_gemm_quantization():
    dg = deep_gemm()
    from deep_gemm.utils import per_block_cast_to_fp8

    M, N, K = 64, 1024, 2048
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    ours = fp8ops.block_quant(w, eps=1e-4)
    theirs = per_block_cast_to_fp8(w, use_ue8m0=False)
    q, s = fp8ops.per_token_group_quant(make_input((M, K), torch.bfloat16, device="cuda"), 128, "col_tma")
    gemm_nt_pair(dg, (q, s), (q, s), ours, theirs, "fp8_gemm_nt with block_quant weights")


@pytest.mark.parametrize("M", (4, 64))
def test_torch_scaled_mm_128x128_with_block_quant_weights(M):
    N, K = 512, 1024
    w = torch.randn(N, K, device="cuda")
    wq, ws = fp8ops.block_quant(w)
    x = make_input((M, K), torch.bfloat16, device="cuda")
    q, s = fp8ops.per_token_group_quant(x, 128, "col")
    out = scaled_mm_blockwise(q, s, wq.t(), ws.t())
    a = ref.dequant(q.cpu(), s.cpu()).double()
    b = (wq.float().view(N // 128, 128, K // 128, 128) * ws[:, None, :, None]).view(N, K).cpu().double()
    expect = a @ b.t()
    assert (out.double().cpu() - expect).norm() / expect.norm() < 1e-2
