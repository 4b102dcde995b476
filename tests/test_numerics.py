"""The shared numerics header, through the CPU kernel, against the torch expression on inputs
built to reach every e4m3 code, every rounding tie and every bf16 bit pattern."""

import pytest
import torch
from helpers import assert_same_bits

import fp8ops
from fp8ops import reference as ref


@pytest.mark.parametrize("ue8m0", (False, True))
def test_every_bf16_bit_pattern(ue8m0):
    x = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).reshape(512, 128)
    x = x[torch.randperm(512)][:, torch.randperm(128)]
    q, s = fp8ops.per_token_group_quant(x, 128, "row", ue8m0)
    rq, rs = ref.per_token_group_quant(x, 128, "row", ue8m0)
    assert_same_bits(q, rq, "q")
    assert_same_bits(s, rs, "scale")


def test_every_e4m3_code_and_tie():
    """With amax = 448 * 2^k and UE8M0 scales, x * r is exact, so the inputs can sit on every
    e4m3 value and on every midpoint between neighbours (ties round to even)."""
    codes = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  # 0 .. 448
    mids = (codes[:-1] + codes[1:]) / 2
    vals = torch.cat([codes, mids, -codes, -mids])
    vals = torch.cat([vals, torch.zeros((-vals.numel()) % 127)]).reshape(-1, 127)
    for k in (-20, -3, 0, 5):
        x = torch.cat([vals, torch.full((vals.shape[0], 1), 448.0)], dim=1) * 2.0**k
        q, s = fp8ops.per_token_group_quant(x, 128, "row", ue8m0=True)
        rq, _ = ref.per_token_group_quant(x, 128, "row", ue8m0=True)
        assert_same_bits(q, rq, f"k={k}")
        assert torch.equal(q[:, :127].float().flatten()[: codes.numel()], codes)


def test_random_fp32_bit_patterns():
    bits = torch.randint(-(1 << 31), (1 << 31) - 1, (2048, 128), dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    for ue8m0 in (False, True):
        q, s = fp8ops.per_token_group_quant(x, 128, "row", ue8m0, eps=1e-30)
        rq, rs = ref.per_token_group_quant(x, 128, "row", ue8m0, eps=1e-30)
        assert_same_bits(q, rq, "q")
        assert_same_bits(s, rs, "scale")


def test_scale_is_a_multiply_by_the_fp32_reciprocal():
    amax = torch.rand(10000) * 1000 + 1e-3
    x = torch.zeros(10000, 128)
    x[:, 0] = amax
    _, s = fp8ops.per_token_group_quant(x, 128, "row")
    c = torch.tensor([0x3B124925], dtype=torch.int32).view(torch.float32)
    assert torch.equal(s[:, 0], amax * c)
    assert not torch.equal(s[:, 0], amax / 448.0)  # the division differs somewhere
