"""indexer_q_quant (SPEC section 4): against a float64 torch reference with fp8 tolerance, every
option, bad inputs, opcheck, torch.compile; on a GPU, bit-identity with the CPU kernel."""

import itertools

import pytest
import torch
from helpers import assert_same_bits, poisoned_call

import fp8ops
from fp8ops import reference as ref

OPTIONS = list(itertools.product((True, False), (False, True), (True, False)))  # rope_tail, neox, hadamard


def make_case(B, H=8, dtype=torch.bfloat16, device="cpu", pos_dtype=torch.int64, max_pos=4096):
    """q with a wider row stride, weight as a column slice of a projection output, and a real
    RoPE cache (cos | sin of position * inverse frequency)."""
    q = (torch.randn(B, H + 1, 128) * 3).to(dtype)[:, 1:]
    weight = torch.randn(B, H + 5).to(dtype)[:, 2 : 2 + H]
    inv_freq = 1.0 / (10000 ** (torch.arange(32, dtype=torch.float64) / 32))
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos_sin = torch.cat([ang.cos(), ang.sin()], -1).float()
    positions = torch.randint(0, max_pos, (B,), dtype=pos_dtype)
    return [t.to(device) for t in (q, weight)] + [0.37, cos_sin.to(device), positions.to(device)]


def check_close_to_reference(args, rope_tail, rope_neox, hadamard, eps=1e-4):
    q, weight, ws, cs, pos = args
    q8, w_out = fp8ops.indexer_q_quant(q, weight, ws, cs, pos, rope_tail, rope_neox, hadamard, eps)
    B, H = q.shape[:2]
    assert q8.shape == (B, H, 128) and q8.dtype == torch.float8_e4m3fn and q8.is_contiguous()
    assert w_out.shape == (B, H, 1) and w_out.dtype == torch.float32 and w_out.is_contiguous()
    x, scale, w_ref = ref.indexer_q_quant(
        q.cpu(), weight.cpu(), ws, cs.cpu(), pos.cpu(), rope_tail, rope_neox, hadamard, eps
    )
    deq = q8.cpu().double() * scale[..., None]
    step = scale[..., None] * 2.0**-9  # one e4m3 subnormal step in scale units
    assert ((deq - x).abs() <= x.abs() / 16 + step).all()
    rel = (w_out.cpu().squeeze(-1).double() - w_ref).abs() / w_ref.abs().clamp(min=1e-30)
    assert (rel <= 2e-5).all(), rel.max()
    return q8, w_out


@pytest.mark.parametrize("rope_tail, rope_neox, hadamard", OPTIONS)
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_matches_float64_reference(rope_tail, rope_neox, hadamard, dtype):
    for B, pos_dtype in ((0, torch.int64), (1, torch.int32), (7, torch.int64), (33, torch.int32)):
        check_close_to_reference(make_case(B, dtype=dtype, pos_dtype=pos_dtype), rope_tail, rope_neox, hadamard)


def test_rope_variants_differ():
    """Interleaved and NeoX pairs, and head or tail, are really different rotations."""
    args = make_case(5)
    outs = [
        fp8ops.indexer_q_quant(*args, rope_tail=t, rope_neox=n, hadamard=False)[0]
        for t in (True, False)
        for n in (False, True)
    ]
    for a, b in itertools.combinations(outs, 2):
        assert not torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_complex_freqs_cis_converts():
    args = make_case(4, max_pos=64)
    cs = args[3]
    f = torch.complex(cs[:, :32], cs[:, 32:])
    args[3] = torch.cat([f.real, f.imag], -1)
    check_close_to_reference(args, True, False, True)


BAD = [
    (lambda a: [a[0][..., :64]] + a[1:], "head dim must be 128"),
    (lambda a: [a[0].float()] + a[1:], "q must be bfloat16"),
    (lambda a: [a[0], a[1].half()] + a[2:], "weight must have q's dtype"),
    (lambda a: [a[0], a[1][:, :3]] + a[2:], "weight must be"),
    (lambda a: a[:3] + [a[3][:, :32]] + a[4:], "cos_sin_cache must be \\[max_pos, 64\\]"),
    (lambda a: a[:3] + [a[3].double()] + a[4:], "cos_sin_cache must be float32"),
    (lambda a: a[:4] + [a[4].float()], "positions must be int32 or int64"),
    (lambda a: a[:4] + [a[4][:2]], "positions must be \\[B\\]"),
    (lambda a: a[:4] + [a[4] + 100000], "outside the cos_sin_cache"),
    (lambda a: a[:4] + [a[4] - 100000], "outside the cos_sin_cache"),
    (lambda a: [a[0].transpose(0, 1).contiguous().transpose(0, 1)] + a[1:], "last two dims must be contiguous"),
]


@pytest.mark.parametrize("mutate, match", BAD)
def test_bad_inputs_raise(mutate, match):
    with pytest.raises(RuntimeError, match=match):
        fp8ops.indexer_q_quant(*mutate(make_case(5)))


@pytest.mark.parametrize("rope_tail, rope_neox, hadamard", OPTIONS[:4])
def test_opcheck_and_compile(rope_tail, rope_neox, hadamard):
    args = make_case(6)
    torch.library.opcheck(
        torch.ops.fp8ops.indexer_q_quant.default,
        tuple(args),
        {"rope_tail": rope_tail, "rope_neox": rope_neox, "hadamard": hadamard, "eps": 1e-4},
    )
    torch._dynamo.reset()
    cf = torch.compile(
        lambda *a: fp8ops.indexer_q_quant(*a, rope_tail=rope_tail, rope_neox=rope_neox, hadamard=hadamard),
        fullgraph=True,
        dynamic=True,
    )
    for B in (3, 9):
        args = make_case(B)
        got, want = (
            cf(*args),
            fp8ops.indexer_q_quant(*args, rope_tail=rope_tail, rope_neox=rope_neox, hadamard=hadamard),
        )
        assert_same_bits(got[0], want[0], "compiled q")
        assert_same_bits(got[1], want[1], "compiled weights")


# ----------------------------------------------------------------------------------------- GPU


def on_cuda(args):
    """A copy of make_case's arguments with every tensor moved to the GPU."""
    return [a.cuda() if isinstance(a, torch.Tensor) else a for a in args]


def check_cuda_matches_cpu(args, cuda_args, label, poison=False, **opts):
    """The CUDA kernel on cuda_args (outputs poisoned first when poison) equals the CPU kernel on
    args, bit for bit, in q_fp8 and weights_out."""
    cpu = fp8ops.indexer_q_quant(*args, **opts)
    if poison:
        gpu = poisoned_call(fp8ops.indexer_q_quant, *cuda_args, **opts)
    else:
        gpu = fp8ops.indexer_q_quant(*cuda_args, **opts)
    assert_same_bits(gpu[0], cpu[0], f"q_fp8 {label}")
    assert_same_bits(gpu[1], cpu[1], f"weights_out {label}")


@pytest.mark.gpu
@pytest.mark.parametrize("rope_tail, rope_neox, hadamard", OPTIONS)
def test_cuda_bit_identical_to_cpu(rope_tail, rope_neox, hadamard, pdl):
    """Both launch shapes, both dtypes, int32 and int64 positions. With the Hadamard and the
    DeepSeek-V4 or V3.2 RoPE the option set's own kernels run, otherwise the kernels that read
    every option at run time."""
    for B, dtype, pos_dtype in (
        (1, torch.bfloat16, torch.int64),
        (33, torch.float16, torch.int32),
        (33, torch.float16, torch.int64),
        (2048, torch.float16, torch.int64),
        (16384, torch.bfloat16, torch.int32),
        (16384, torch.bfloat16, torch.int64),
    ):
        args = make_case(B, H=64 if B > 1000 else 8, dtype=dtype, pos_dtype=pos_dtype)
        cuda_args = on_cuda(args)
        check_cuda_matches_cpu(args, cuda_args, f"B={B}", rope_tail=rope_tail, rope_neox=rope_neox, hadamard=hadamard)


@pytest.mark.gpu
@pytest.mark.parametrize("rope_tail, rope_neox, hadamard", OPTIONS)
def test_cuda_bit_identical_misaligned_strided_nonfinite(rope_tail, rope_neox, hadamard):
    """The scalar-load paths (q not 16-byte aligned, a cos/sin row stride that is not a multiple of
    4), a strided weight, a (token, head) count that leaves lanes of the last warp idle, and
    inf/NaN in q. 9363 x 7 items (2^14 to 2^17) take the capped four-lane launch shape, the others
    eight lanes."""
    for B, H in ((5, 3), (37, 8), (9363, 7)):
        args = make_case(B, H=H)
        q = args[0]
        q[0, 0, 5] = float("inf")
        q[B - 1, H - 1, 100] = float("nan")
        q[B // 2, 0, 64] = float("-inf")
        # The same values on the GPU, in storage that is 6 bytes past an aligned address (q) and
        # with a row stride of 65 (cos_sin).
        q_cuda = torch.empty(B * H * 128 + 3, dtype=q.dtype, device="cuda")[3:].view(B, H, 128)
        q_cuda.copy_(q)
        cs = args[3]
        cs_cuda = torch.empty(cs.shape[0], 65, device="cuda")[:, 1:]
        cs_cuda.copy_(cs)
        w_cuda = torch.empty(B, H + 5, dtype=q.dtype, device="cuda")[:, 2 : 2 + H]  # a column slice
        w_cuda.copy_(args[1])
        cuda_args = [q_cuda, w_cuda, args[2], cs_cuda, args[4].cuda()]
        assert q_cuda.data_ptr() % 16 != 0 and cs_cuda.stride(0) % 4 != 0
        check_cuda_matches_cpu(
            args, cuda_args, f"B={B} H={H}", rope_tail=rope_tail, rope_neox=rope_neox, hadamard=hadamard
        )


@pytest.mark.gpu
@pytest.mark.parametrize("rope_tail, rope_neox, hadamard", OPTIONS)
def test_cuda_bit_identical_many_groups_per_warp(rope_tail, rope_neox, hadamard):
    """More (token, head) items than the resident warps take at once, so that warps loop over
    several groups with the next one's loads in flight; an odd H leaves the last group partial and
    puts groups across tokens; inf/NaN in heads that are not the first ones a warp works on. Outputs
    are poisoned first. 9363 x 7 items take the capped four-lane launch shape (2^14 to 2^17 items),
    18725 x 7 the uncapped one, whose warps have two to six groups each and so start staggered (on
    the H200), each with both input dtypes (int64 positions with bf16, int32 with
    fp16); the DeepSeek option sets take their own kernels. (Below 2^14 items eight lanes per head
    run, one group per warp on the H200; ci/gpu.sh tune forces eight lanes onto these sizes.)"""
    for B, H, dtype in (
        (9363, 7, torch.bfloat16),
        (9363, 7, torch.float16),
        (18725, 7, torch.bfloat16),
        (18725, 7, torch.float16),
    ):
        pos_dtype = torch.int64 if dtype == torch.bfloat16 else torch.int32
        args = make_case(B, H=H, dtype=dtype, pos_dtype=pos_dtype)
        q = args[0]
        q[4000, 3, 7] = float("inf")
        q[2500, 6, 120] = float("nan")
        q[B - 1, H - 1, 0] = float("-inf")
        cuda_args = on_cuda(args)
        check_cuda_matches_cpu(
            args,
            cuda_args,
            f"B={B} H={H} {dtype}",
            poison=True,
            rope_tail=rope_tail,
            rope_neox=rope_neox,
            hadamard=hadamard,
        )


@pytest.mark.gpu
@pytest.mark.parametrize("pos_dtype", (torch.int32, torch.int64))
@pytest.mark.parametrize("B, H", ((9, 8), (300, 64), (2048, 64)))
def test_cuda_clamps_out_of_range_positions_and_writes_everything(pos_dtype, B, H):
    """Positions outside the cache, on the eight-lane kernels (B = 9), the capped four-lane ones
    (B = 300) and the four-lane ones with many groups per warp (B = 2048): every output is written
    and finite, the rows of in-range positions equal the CPU kernel's, and the others are those of
    the nearest end of the cache (the kernel clamps; SPEC leaves those rows unspecified, this pins
    the clamp that keeps every read inside the cache). int64 values past 2^32 and below -2^32
    included."""
    args = make_case(B, H=H, pos_dtype=pos_dtype)
    max_pos = args[3].shape[0]
    pos = args[4]
    bad = {3: 10**9 if pos_dtype == torch.int32 else 2**33 + 5, 5: -7, B - 1: max_pos}
    if pos_dtype == torch.int64:
        bad[1] = -(2**32) + 5  # low word in range, value negative
        bad[2] = 2**32 + 3  # low word in range, value past the cache
    for i, v in bad.items():
        pos[i] = v
    cuda_args = on_cuda(args)
    q8, w = poisoned_call(fp8ops.indexer_q_quant, *cuda_args)
    torch.cuda.synchronize()
    assert not ((q8.view(torch.uint8) & 0x7F) == 0x7F).any() and torch.isfinite(w).all()
    clamped = list(args)
    clamped[4] = pos.clamp(0, max_pos - 1)
    cq, cw = fp8ops.indexer_q_quant(*clamped)
    assert_same_bits(q8, cq, "q_fp8 with clamped positions")
    assert_same_bits(w, cw, "weights_out with clamped positions")


@pytest.mark.gpu
@pytest.mark.parametrize("what", ("q", "weight", "positions"))
def test_cuda_offsets_past_2_31(what):
    """An input whose element offsets reach past 2^31 (a row stride of about 2^30 over three
    tokens): the DeepSeek-V4 options then run on the kernels with 64-bit offsets, bit-identical to
    the CPU kernel. Needs about 5 GiB of free GPU memory."""
    if torch.cuda.mem_get_info()[0] < 6 * 2**30:
        pytest.skip("fewer than 6 GiB of free GPU memory")
    B, H = 3, 8
    args = make_case(B, H=H)
    cuda_args = on_cuda(args)
    stride = 2**30 + 1024
    if what == "q":
        big = torch.empty(stride * (B - 1) + H * 128, dtype=args[0].dtype, device="cuda")
        view = big.as_strided((B, H, 128), (stride, 128, 1))
    elif what == "weight":
        big = torch.empty(stride * (B - 1) + H, dtype=args[1].dtype, device="cuda")
        view = big.as_strided((B, H), (stride, 1))
    else:
        big = torch.empty(stride // 8 * (B - 1) + 1, dtype=torch.int64, device="cuda")
        view = big.as_strided((B,), (stride // 8,))
    index = {"q": 0, "weight": 1, "positions": 4}[what]
    view.copy_(cuda_args[index])
    cuda_args[index] = view
    check_cuda_matches_cpu(args, cuda_args, f"{what} with a 2^30 stride", poison=True)


@pytest.mark.gpu
def test_cuda_graph_replay(pdl):
    args = on_cuda(make_case(64, H=64))
    fp8ops.indexer_q_quant(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gq, gw = fp8ops.indexer_q_quant(*args)
    for _ in range(2):
        fresh = make_case(64, H=64)
        args[0].copy_(fresh[0])
        args[4].copy_(fresh[4])
        graph.replay()
        torch.cuda.synchronize()
        cq, cw = fp8ops.indexer_q_quant(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])
        assert_same_bits(gq, cq, "graph q")
        assert_same_bits(gw, cw, "graph weights")
