"""Input generators and comparison helpers shared by the tests."""

from __future__ import annotations

import torch

from fp8ops import _layout

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def make_input(shape, dtype, device="cpu", nonfinite=False, zero_groups=True):
    """Random rows of very different magnitudes (1e-4 .. 1e4, within fp16 range), some all-zero
    rows; with nonfinite, NaN, +inf and -inf sprinkled in."""
    x = torch.randn(shape, dtype=torch.float32)
    if x.numel():
        mag = torch.exp(torch.empty(*shape[:-1], 1).uniform_(-9.0, 9.0))
        x = x * mag
        if zero_groups and x.dim() >= 2 and shape[0] > 2:
            x[1] = 0.0
    x = x.to(dtype)
    if nonfinite and x.numel():
        flat = x.view(-1)
        n = flat.numel()
        for val in (float("nan"), float("inf"), float("-inf")):
            idx = torch.randint(0, n, (max(1, n // 97),))
            flat[idx] = val
        # one whole group of non-finite values
        flat[: min(n, 32)] = float("nan")
    return x.to(device)


def every_exponent_input(dtype, groups=4):
    """One row per power of two from 2^-149 to 2^127: each row's values lie within its power
    times [-2, 2] (its amax at least the power itself), so the scales, UE8M0 ones included, run
    over every exponent that the eps bounds allow. Powers below the dtype's range come out as
    subnormals or zeros."""
    k = torch.arange(-149, 128, dtype=torch.float64)
    mag = 2.0 ** k[:, None] * (1 + torch.rand(k.numel(), 1, dtype=torch.float64) * 0.99)
    x = (torch.rand(k.numel(), groups * 128, dtype=torch.float64) * 2 - 1) * mag
    x[:, ::128] = mag * torch.where(torch.rand(k.numel(), 1) < 0.5, -1.0, 1.0).double()
    return x.to(dtype)


def strided_rows(x: torch.Tensor, pad: int = 64) -> torch.Tensor:
    """The same values as a row-strided view (row stride K + pad)."""
    *lead, K = x.shape
    big = torch.empty(*lead, K + pad, dtype=x.dtype, device=x.device)
    big.normal_()
    big[..., :K] = x
    return big[..., :K]


def misaligned(x: torch.Tensor) -> torch.Tensor:
    """The same values at a base address that is not 16-byte aligned (one element offset)."""
    flat = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
    flat[1:] = x.reshape(-1)
    return flat[1:].view(x.shape)


def raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """Every byte of t's storage, padding included."""
    st = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(st, 0, (st.nbytes(),), (1,)).clone()


def assert_same_bits(a: torch.Tensor, b: torch.Tensor, what=""):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    ab = (
        a.contiguous().view(torch.uint8)
        if a.element_size() == 1
        else a.contiguous().view(torch.int32 if a.element_size() == 4 else torch.int16)
    )
    bb = (
        b.contiguous().view(torch.uint8)
        if b.element_size() == 1
        else b.contiguous().view(torch.int32 if b.element_size() == 4 else torch.int16)
    )
    if not torch.equal(ab.cpu(), bb.cpu()):
        diff = (ab.cpu() != bb.cpu()).nonzero()
        raise AssertionError(f"{what}: {diff.shape[0]} elements differ, first at {diff[0].tolist()}")


def assert_same_quant(q, s, want_q, want_s, what=""):
    """q code for code, the scales value for value, and every byte of the scale storage
    (padding included)."""
    assert_same_bits(q, want_q, "q " + what)
    assert_same_bits(s, want_s, "scale " + what)
    assert torch.equal(raw_bytes(s).cpu(), raw_bytes(want_s).cpu()), "scale storage " + what


def check_runs_on_current_stream(device: int, current: int) -> None:
    """With `device`'s side stream held busy by a sleep, a quantization queued on it after a copy
    into x must see the copy; had it run on another stream, it would read the old x. `current` is
    the current device during the call (torch.cuda.stream only sets its own device's stream)."""
    import fp8ops

    old = make_input((64, 4096), torch.bfloat16, device=f"cuda:{device}")
    new = make_input((64, 4096), torch.bfloat16, device=f"cuda:{device}")
    x = old.clone()
    torch.cuda.synchronize(device)
    side = torch.cuda.Stream(device=device)
    with torch.cuda.device(current), torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        x.copy_(new)
        q, s = fp8ops.per_token_group_quant(x, 128, "col_tma")
    side.synchronize()
    cq, cs = fp8ops.per_token_group_quant(new.cpu(), 128, "col_tma")
    assert_same_quant(q, s, cq, cs, "side stream")


def poisoned_call(op, x, *args, **kwargs):
    """Fill blocks of the outputs' sizes with 0xFF, free them, then call op(x, *args, **kwargs), so
    that the caching allocator hands the poisoned blocks to the op; checks that it did."""
    meta = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
    q_meta, s_meta = op(x.to("meta"), *meta, **kwargs)
    sizes = (q_meta.numel() * q_meta.element_size(), s_meta.untyped_storage().nbytes())
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    blocks = [torch.full((n,), 0xFF, dtype=torch.uint8, device=x.device) for n in sizes]
    ptrs = {b.data_ptr() for b in blocks}
    del blocks
    q, s = op(x, *args, **kwargs)
    assert {q.data_ptr(), s.data_ptr()} <= ptrs, "the outputs did not reuse the poisoned blocks"
    return q, s


H200_SMS = 132
H200_L2 = 60 << 20


def per_token_problem(
    M, K, layout, group_size=128, elem_bytes=2, pad_rows_to=1, x_aligned=True, sms=H200_SMS, l2=H200_L2
):
    """The group quantization launch problem (fp8ops._native.group_quant_launch) of a per-token
    call on M x K, as the op builds it; sms and l2 are the H200's multiprocessor count and L2 size
    by default."""
    S = K // group_size
    sizes, strides, _ = _layout.per_token_scale_geometry(M, S, layout, pad_rows_to)
    Mp = sizes[0]
    T_s = strides[1] if layout in ("col_tma", "col_tma_packed") else Mp
    return dict(
        T=M, G=1, D=K, T_q=Mp, T_s=T_s, s_stride_t=strides[0], s_stride_g=0, s_stride_s=strides[1],
        group_size=group_size, packed=layout == "col_tma_packed", elem_bytes=elem_bytes, x_aligned=x_aligned,
        sm_count=sms, l2_bytes=l2,
    )  # fmt: skip
