"""Every bad call fails with one message, the same on the CPU, on meta tensors (the fake kernels
that torch.compile traces with) and on the GPU; under torch.compile it fails at trace time with
that message. Messages are the fp8ops text alone (no C++ function or source path). And no op is
differentiable: outputs never require grad."""

import re

import pytest
import torch

import fp8ops


def bf16(*shape):
    return torch.randn(*shape).to(torch.bfloat16)


def indexer_args(B=5, H=8):
    return [bf16(B, H, 128), bf16(B, H), 0.5, torch.randn(64, 64), torch.randint(0, 64, (B,))]


def q8(*shape):
    return torch.randn(*shape).to(torch.float8_e4m3fn)


# (name, op, args builder (on the CPU), kwargs, the message's distinctive text)
CASES = [
    ("pt int32", fp8ops.per_token_group_quant, lambda: [torch.ones(4, 256, dtype=torch.int32)], {}, "got int32"),
    ("pt float64", fp8ops.per_token_group_quant, lambda: [torch.ones(4, 256, dtype=torch.float64)], {}, "got float64"),
    ("pt 1-D", fp8ops.per_token_group_quant, lambda: [bf16(256)], {}, "at least 2 dims"),
    ("pt group 96", fp8ops.per_token_group_quant, lambda: [bf16(4, 192)], {"group_size": 96}, "group_size must be"),
    ("pt K 200", fp8ops.per_token_group_quant, lambda: [bf16(4, 200)], {}, "multiple of group_size"),
    ("pt layout", fp8ops.per_token_group_quant, lambda: [bf16(4, 256)], {"scale_layout": "c"}, "scale_layout must"),
    ("pt pad 0", fp8ops.per_token_group_quant, lambda: [bf16(4, 256)], {"pad_rows_to": 0}, "pad_rows_to must be"),
    ("pt pad 2^63-1", fp8ops.per_token_group_quant, lambda: [bf16(4, 256)], {"pad_rows_to": 2**63 - 1}, "below 2^31"),
    ("pt pad 2^62", fp8ops.per_token_group_quant, lambda: [bf16(5, 256)], {"pad_rows_to": 2**62}, "below 2^31"),
    ("pt pad 2^31", fp8ops.per_token_group_quant, lambda: [bf16(1, 256)], {"pad_rows_to": 2**31}, "below 2^31"),
    ("pt eps nan", fp8ops.per_token_group_quant, lambda: [bf16(4, 256)], {"eps": float("nan")}, "eps must be"),
    ("pt eps 0", fp8ops.per_token_group_quant, lambda: [bf16(4, 256)], {"eps": 0.0}, "eps must be"),
    ("pt eps 1e39", fp8ops.per_token_group_quant, lambda: [bf16(4, 256)], {"eps": 1e39}, "eps must be"),
    ("pt transposed", fp8ops.per_token_group_quant, lambda: [bf16(256, 4).t()], {}, "last dim must be contiguous"),
    (
        "pt unflattenable",
        fp8ops.per_token_group_quant,
        lambda: [bf16(4, 3, 256).transpose(0, 1)],
        {},
        "viewable as one dim",
    ),
    ("gm int32", fp8ops.group_major_quant, lambda: [torch.ones(2, 2, 128, dtype=torch.int32)], {}, "got int32"),
    ("gm 2-D", fp8ops.group_major_quant, lambda: [bf16(2, 128)], {}, "must be 3-D"),
    ("gm D 200", fp8ops.group_major_quant, lambda: [bf16(2, 2, 200)], {}, "multiple of 128"),
    ("gm eps inf", fp8ops.group_major_quant, lambda: [bf16(2, 2, 128)], {"eps": float("inf")}, "eps must be"),
    ("gm transposed", fp8ops.group_major_quant, lambda: [bf16(2, 128, 2).transpose(1, 2)], {}, "contiguous"),
    ("pack fp16", fp8ops.pack_ue8m0, lambda: [torch.ones(4, 4, dtype=torch.float16)], {}, "got float16"),
    ("pack 1-D", fp8ops.pack_ue8m0, lambda: [torch.ones(4)], {}, "2-D [M, S] or 3-D"),
    ("dq q bf16", fp8ops.dequant, lambda: [bf16(4, 128), torch.ones(4, 1)], {}, "q must be float8_e4m3fn"),
    ("dq scale f64", fp8ops.dequant, lambda: [q8(4, 128), torch.ones(4, 1, dtype=torch.float64)], {}, "got float64"),
    ("dq group 96", fp8ops.dequant, lambda: [q8(4, 192), torch.ones(4, 2)], {"group_size": 96}, "group_size must"),
    ("dq group 0", fp8ops.dequant, lambda: [q8(4, 192), torch.ones(4, 2)], {"group_size": 0}, "group_size must"),
    ("dq K 200", fp8ops.dequant, lambda: [q8(4, 200), torch.ones(4, 2)], {}, "multiple of group_size"),
    ("dq rank", fp8ops.dequant, lambda: [q8(4, 128), torch.ones(1, 4, 1)], {}, "q's rank"),
    ("dq rows", fp8ops.dequant, lambda: [q8(4, 128), torch.ones(3, 1)], {}, "must equal q.size(0)"),
    ("dq width", fp8ops.dequant, lambda: [q8(4, 256), torch.ones(4, 1)], {}, "scale.size(-1) must be 2"),
    ("dq out int", fp8ops.dequant, lambda: [q8(4, 128), torch.ones(4, 1)], {"out_dtype": torch.int32}, "out_dtype"),
    (
        "ix q fp32",
        fp8ops.indexer_q_quant,
        lambda: [a.float() if i == 0 else a for i, a in enumerate(indexer_args())],
        {},
        "q must be bfloat16 or float16, got float32",
    ),  # fmt: skip
    (
        "ix weight shape",
        fp8ops.indexer_q_quant,
        lambda: [a[:, :3] if i == 1 else a for i, a in enumerate(indexer_args())],
        {},
        "weight must be [B, H]",
    ),  # fmt: skip
    (
        "ix weight 1-D",
        fp8ops.indexer_q_quant,
        lambda: [a[:, 0] if i == 1 else a for i, a in enumerate(indexer_args())],
        {},
        "weight must be [B, H]",
    ),  # fmt: skip
    (
        "ix positions shape",
        fp8ops.indexer_q_quant,
        lambda: [a[:2] if i == 4 else a for i, a in enumerate(indexer_args())],
        {},
        "positions must be [B]",
    ),  # fmt: skip
    (
        "ix positions 2-D",
        fp8ops.indexer_q_quant,
        lambda: [a[:, None] if i == 4 else a for i, a in enumerate(indexer_args())],
        {},
        "positions must be [B]",
    ),  # fmt: skip
    (
        "ix positions f32",
        fp8ops.indexer_q_quant,
        lambda: [a.float() if i == 4 else a for i, a in enumerate(indexer_args())],
        {},
        "int32 or int64",
    ),  # fmt: skip
    (
        "ix cache width",
        fp8ops.indexer_q_quant,
        lambda: [a[:, :32] if i == 3 else a for i, a in enumerate(indexer_args())],
        {},
        "[max_pos, 64]",
    ),  # fmt: skip
    ("ix eps nan", fp8ops.indexer_q_quant, indexer_args, {"eps": float("nan")}, "eps must be"),
    (
        "ix weight_scale inf",
        fp8ops.indexer_q_quant,
        lambda: [float("inf") if i == 2 else a for i, a in enumerate(indexer_args())],
        {},
        "weight_scale must be finite",
    ),  # fmt: skip
]


CASES += [
    ("silu odd width", fp8ops.silu_mul_quant, lambda: [bf16(4, 200)], {}, "must be a multiple of group_size"),
    ("silu H 192", fp8ops.silu_mul_quant, lambda: [bf16(4, 384)], {}, "H, the gate and up widths"),
    ("silu float64", fp8ops.silu_mul_quant, lambda: [torch.ones(4, 256, dtype=torch.float64)], {}, "got float64"),
    ("silu layout", fp8ops.silu_mul_quant, lambda: [bf16(4, 256)], {"scale_layout": "x"}, "scale_layout must"),
    ("silu pad", fp8ops.silu_mul_quant, lambda: [bf16(4, 256)], {"pad_rows_to": 2**62}, "below 2^31"),
    ("silu transposed", fp8ops.silu_mul_quant, lambda: [bf16(256, 4).t()], {}, "last dim must be contiguous"),
    (
        "silu masked 2-D",
        fp8ops.silu_mul_quant,
        lambda: [bf16(4, 256)],
        {"masked_m": torch.ones(4, dtype=torch.int32)},
        "must be 3-D",
    ),  # fmt: skip
    (
        "silu masked int64",
        fp8ops.silu_mul_quant,
        lambda: [bf16(3, 4, 256)],
        {"masked_m": torch.ones(3, dtype=torch.int64)},
        "masked_m must be int32",
    ),  # fmt: skip
    (
        "silu masked shape",
        fp8ops.silu_mul_quant,
        lambda: [bf16(3, 4, 256)],
        {"masked_m": torch.ones(2, dtype=torch.int32)},
        "masked_m must be [E]",
    ),  # fmt: skip
    (
        "silu masked col",
        fp8ops.silu_mul_quant,
        lambda: [bf16(3, 4, 256)],
        {"masked_m": torch.ones(3, dtype=torch.int32), "scale_layout": "col"},
        "'col' is not offered",
    ),  # fmt: skip
    (
        "silu masked pad",
        fp8ops.silu_mul_quant,
        lambda: [bf16(3, 4, 256)],
        {"masked_m": torch.ones(3, dtype=torch.int32), "pad_rows_to": 4},
        "pad_rows_to must be 1",
    ),  # fmt: skip
    ("rms D 200", fp8ops.rms_norm_quant, lambda: [bf16(4, 200), bf16(200)], {}, "multiple of group_size"),
    ("rms D 32768", fp8ops.rms_norm_quant, lambda: [bf16(1, 32768), bf16(32768)], {}, "at most 16384"),
    ("rms weight dtype", fp8ops.rms_norm_quant, lambda: [bf16(4, 256), torch.ones(256)], {}, "weight must have x's"),
    ("rms weight shape", fp8ops.rms_norm_quant, lambda: [bf16(4, 256), bf16(128)], {}, "weight must be [D]"),
    (
        "rms residual shape",
        fp8ops.rms_norm_quant,
        lambda: [bf16(4, 256), bf16(256)],
        {"residual": bf16(3, 256)},
        "residual must have x's shape",
    ),  # fmt: skip
    (
        "rms residual dtype",
        fp8ops.rms_norm_quant,
        lambda: [bf16(4, 256), bf16(256)],
        {"residual": torch.ones(4, 256)},
        "residual must have x's dtype",
    ),  # fmt: skip
    ("rms norm_eps", fp8ops.rms_norm_quant, lambda: [bf16(4, 256), bf16(256)], {"norm_eps": -1.0}, "norm_eps must"),
    ("rms eps", fp8ops.rms_norm_quant, lambda: [bf16(4, 256), bf16(256)], {"eps": 0.0}, "eps must be finite"),
    ("block 1-D", fp8ops.block_quant, lambda: [bf16(256)], {}, "2-D [N, K] or 3-D"),
    ("block int32", fp8ops.block_quant, lambda: [torch.ones(4, 4, dtype=torch.int32)], {}, "got int32"),
    ("block 64", fp8ops.block_quant, lambda: [bf16(128, 128)], {"block_n": 64}, "block_n and block_k must be 128"),
    ("block transposed", fp8ops.block_quant, lambda: [bf16(256, 128).t()], {}, "last dim must be contiguous"),
    ("block eps", fp8ops.block_quant, lambda: [bf16(128, 128)], {"eps": float("nan")}, "eps must be finite"),
]


def on(device, args):
    return [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]


def on_kw(device, kwargs):
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


def message(op, args, kwargs):
    with pytest.raises(RuntimeError) as info:
        op(*args, **kwargs)
    return str(info.value)


@pytest.mark.parametrize("name, op, make, kwargs, text", CASES, ids=[c[0] for c in CASES])
def test_same_message_on_every_device(name, op, make, kwargs, text):
    args = make()
    want = message(op, args, kwargs)
    assert want.startswith("fp8ops: ") and "\n" not in want, want
    assert text in want, want
    assert not re.search(r"\.(cpp|cu|h):\d+", want), want
    assert message(op, on("meta", args), on_kw("meta", kwargs)) == want
    if torch.cuda.is_available():
        assert message(op, on("cuda", args), on_kw("cuda", kwargs)) == want


@pytest.mark.parametrize("name, op, make, kwargs, text", CASES[::4], ids=[c[0] for c in CASES[::4]])
def test_torch_compile_fails_at_trace_time_with_the_message(name, op, make, kwargs, text):
    args = make()
    want = message(op, args, kwargs)
    torch._dynamo.reset()
    f = torch.compile(lambda *a: op(*a, **kwargs), fullgraph=True)
    with pytest.raises(Exception) as info:
        f(*args)
    assert want in str(info.value)


def test_mixed_devices_are_rejected_on_meta():
    args = indexer_args()
    args[1] = args[1].to("meta")
    assert "q and weight must be on the same device" in message(fp8ops.indexer_q_quant, args, {})
    q, s = fp8ops.per_token_group_quant(bf16(4, 256))
    assert "q and scale must be on the same device" in message(fp8ops.dequant, [q, s.to("meta")], {})


@pytest.mark.gpu
def test_mixed_devices_are_rejected_on_cuda():
    args = indexer_args()
    args[4] = args[4].cuda()
    assert "q and positions must be on the same device" in message(fp8ops.indexer_q_quant, args, {})


GRAD_CALLS = [
    ("per_token_group_quant", lambda x: fp8ops.per_token_group_quant(x, 128, "col_tma")),
    ("group_major_quant", lambda x: fp8ops.group_major_quant(x.view(2, 2, 256))),
    ("dequant", lambda x: (fp8ops.dequant(*fp8ops.per_token_group_quant(x)),)),
]


@pytest.mark.parametrize("compiled", (False, True))
@pytest.mark.parametrize("name, call", GRAD_CALLS, ids=[c[0] for c in GRAD_CALLS])
def test_outputs_never_require_grad(name, call, compiled):
    x = bf16(4, 256).float().requires_grad_()
    f = torch.compile(call, fullgraph=True) if compiled else call
    outs = f(x)
    assert not any(o.requires_grad for o in outs)
    with pytest.raises(RuntimeError, match="does not require grad"):
        outs[-1].float().sum().backward()
    assert x.grad is None


def test_indexer_outputs_never_require_grad():
    args = indexer_args()
    args[1] = args[1].float().bfloat16().requires_grad_()
    q8_, w = fp8ops.indexer_q_quant(*args)
    assert not q8_.requires_grad and not w.requires_grad
