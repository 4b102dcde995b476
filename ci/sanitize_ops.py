"""Calls every fp8ops op on small shapes (every layout, dtype and option) and reads back the whole
storage of every output, for compute-sanitizer (ci/gpu.sh sanitize): memcheck finds out-of-bounds
accesses, initcheck reads of bytes nothing wrote, racecheck shared-memory races. Run it with
PYTORCH_NO_CUDA_MEMORY_CACHING=1, else reused memory hides unwritten bytes.

    python ci/sanitize_ops.py              # every op
    python ci/sanitize_ops.py --unwritten  # reads a buffer nothing wrote: initcheck must report it
"""

from __future__ import annotations

import itertools
import sys

import torch

import fp8ops
from fp8ops import _native

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
LAYOUTS = ("row", "col", "col_tma", "col_tma_packed")


def read_back(*tensors) -> int:
    """Copies every byte of each tensor's storage to the host (a device kernel reads them all)."""
    n = 0
    for t in tensors:
        st = t.untyped_storage()
        whole = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st, 0, (st.nbytes(),), (1,))
        n += int((whole.clone().cpu() != 0xA5).sum())  # the count itself does not matter
    return n


def rand(*shape, dtype=torch.bfloat16):
    return (torch.randn(*shape, device="cuda") * 4).to(dtype)


def main() -> int:
    calls = 0
    for dtype, layout, (M, K, gs) in itertools.product(DTYPES, LAYOUTS, ((1, 128, 128), (5, 384, 64), (17, 96, 32))):
        x = rand(M, K, dtype=dtype)
        read_back(*fp8ops.per_token_group_quant(x, gs, layout, ue8m0=M == 5, pad_rows_to=4))
        read_back(*fp8ops.silu_mul_quant(rand(M, 2 * K, dtype=dtype), gs, layout, pad_rows_to=4))
        # Rows of 6144: few are cut into slices of 256 chunks.
        read_back(*fp8ops.silu_mul_quant(rand(M, 2 * 6144, dtype=dtype), gs, layout, pad_rows_to=4))
        read_back(*fp8ops.rms_norm_quant(x, rand(K, dtype=dtype), 1e-6, rand(M, K, dtype=dtype), gs, layout))
        read_back(*fp8ops.rms_norm_quant(rand(M, 2048, dtype=dtype), rand(2048, dtype=dtype), 1e-6, None, gs, layout))
        calls += 5
    for dtype, layout in itertools.product(DTYPES, LAYOUTS):
        # 90 rows of 6144: lanes of two adjacent chunks (bf16, fp16), two passes per row; for bf16
        # the SiLU table.
        read_back(*fp8ops.silu_mul_quant(rand(90, 2 * 6144, dtype=dtype), 64, layout, pad_rows_to=4))
        # rms_norm_quant's split kernel in clusters of 8 blocks (7168) and in one block (512; 1536,
        # 64 lanes of four chunks, with the residual).
        read_back(*fp8ops.rms_norm_quant(rand(3, 7168, dtype=dtype), rand(7168, dtype=dtype), 1e-6,
                                         rand(3, 7168, dtype=dtype), 128, layout))  # fmt: skip
        read_back(*fp8ops.rms_norm_quant(rand(5, 512, dtype=dtype), rand(512, dtype=dtype), 1e-6, None, 64, layout))
        read_back(*fp8ops.rms_norm_quant(rand(3, 1536, dtype=dtype), rand(1536, dtype=dtype), 1e-6,
                                         rand(3, 1536, dtype=dtype), 128, layout))  # fmt: skip
        # Its slot kernel (no residual): 3 rows of 7168 in 4 blocks each (the last with half its
        # warps quantizing), q and scale padding rows.
        read_back(*fp8ops.rms_norm_quant(rand(3, 7168, dtype=dtype), rand(7168, dtype=dtype), 1e-6, None, 128, layout,
                                         False, 4))  # fmt: skip
        # 5 rows of 8576 in slices of 6 groups: packed scale words that two slices share.
        read_back(*fp8ops.silu_mul_quant(rand(5, 2 * 8576, dtype=dtype), 128, layout, pad_rows_to=4))
        calls += 6
    for layout in LAYOUTS:
        # 300 bf16 rows of 2048: the row kernel with the SiLU table (the 90 rows above: slices).
        read_back(*fp8ops.silu_mul_quant(rand(300, 2 * 2048), 128, layout, pad_rows_to=4))
        calls += 1
    # 2200 bf16 rows of 2048: blocks of 512 threads, two or three passes each (silu_flat_grid).
    read_back(*fp8ops.silu_mul_quant(rand(2200, 2 * 2048), 128, "col_tma", pad_rows_to=4))
    calls += 1
    for dtype, layout in itertools.product(DTYPES[:2], LAYOUTS):
        # 70 rows of 4096, q padding rows: per_token row blocks (a block per row; per 8 rows if MN-major).
        x = rand(70, 4096, dtype=dtype)
        x[3, 5] = float("nan")
        read_back(*fp8ops.per_token_group_quant(x, 128, layout, ue8m0=dtype == torch.float16, pad_rows_to=4))
        calls += 1
    for dtype, layout in itertools.product(DTYPES, ("row", "col_tma_packed")):
        # rms_norm_quant's row kernels of 256 lanes: 70 rows of 7168 with the residual (3 or 4
        # chunks a lane) and of 16384 without (8 chunks a lane).
        x, w = rand(70, 7168, dtype=dtype), rand(7168, dtype=dtype)
        read_back(
            *fp8ops.rms_norm_quant(x, w, 1e-6, rand(70, 7168, dtype=dtype), 128, layout, layout.endswith("packed"), 4)
        )
        x, w = rand(70, 16384, dtype=dtype), rand(16384, dtype=dtype)
        read_back(*fp8ops.rms_norm_quant(x, w, 1e-6, None, 128, layout, layout.endswith("packed"), 4))
        calls += 2
    for dtype, layout, (M, D) in itertools.product(
        (torch.bfloat16, torch.float16), ("row", "col_tma_packed"), ((2201, 4096), (4401, 2048), (8195, 1024))
    ):
        # rms_norm_quant's pipelined row kernels, in more than two waves of blocks: a row a block
        # (D = 4096), two and four rows a block (2048, 1024).
        x, w = rand(M, D, dtype=dtype), rand(D, dtype=dtype)
        read_back(*fp8ops.rms_norm_quant(x, w, 1e-6, None, 128, layout, layout.endswith("packed"), 4))
        calls += 1
    # Masked: 4 experts (counts scanned by every warp) and 36 (through shared memory).
    for layout, H, E in itertools.product(("row", "col_tma", "col_tma_packed"), (256, 6144), (4, 36)):
        Mmax = 6
        x = rand(E, Mmax, 2 * H)
        full = torch.full((E,), Mmax, dtype=torch.int32, device="cuda")
        read_back(*fp8ops.silu_mul_quant(x, 128, layout, masked_m=full))
        # Partly filled experts: rows past masked_m are documented as unwritten, so only the
        # valid rows are read back.
        counts = ([0, 1, 6, 3] * 9)[:E]
        q, s = fp8ops.silu_mul_quant(x, 128, layout, masked_m=torch.tensor(counts, dtype=torch.int32, device="cuda"))
        for e, n in enumerate(counts):
            q[e, :n].cpu(), s[e, :n].cpu()
        calls += 2
    # Masked bf16 rows of 2048 with enough valid rows for the kernel to take pairs and the SiLU
    # table (silu_mul_quant_launch.h's silu_masked_pairs), counts scanned both ways.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for layout, E in (("col_tma_packed", 4), ("row", 36)):
        need = _native.silu_masked_pairs(256, E * 1024, 2, True, True, sms)["rows"]
        Mmax = need // E + 8
        counts = [Mmax - (e % 3) * 2 for e in range(E)]
        assert sum(counts) >= need > 0, (E, need)
        x = rand(E, Mmax, 2 * 2048)
        q, s = fp8ops.silu_mul_quant(x, 128, layout, masked_m=torch.tensor(counts, dtype=torch.int32, device="cuda"))
        for e, n in enumerate(counts):
            q[e, :n].cpu(), s[e, :n].cpu()
        calls += 1
    for dtype, packed in itertools.product(DTYPES, (False, True)):
        xg = rand(5, 3, 384, dtype=dtype)[:, :, :256]
        read_back(*fp8ops.group_major_quant(xg, packed=packed))
        calls += 1
    for dtype, shape in itertools.product(DTYPES, ((1, 1), (130, 260), (2, 129, 128))):
        read_back(*fp8ops.block_quant(rand(*shape, dtype=dtype), ue8m0=shape[0] == 1))
        calls += 1
    cs = torch.randn(64, 64, device="cuda")
    for rope_tail, neox, hadamard in itertools.product((True, False), repeat=3):
        for B in (1, 300):
            q = rand(B, 8, 128)
            w = rand(B, 8)
            read_back(*fp8ops.indexer_q_quant(q, w, 0.5, cs, torch.randint(0, 64, (B,), device="cuda"),
                                              rope_tail, neox, hadamard))  # fmt: skip
            calls += 1
    s = fp8ops.per_token_group_quant(rand(33, 512), scale_layout="row", ue8m0=True)[1]
    read_back(fp8ops.pack_ue8m0(s), fp8ops.pack_ue8m0(s.view(3, 11, 4)))
    q, s = fp8ops.per_token_group_quant(rand(9, 256), scale_layout="col_tma_packed")
    for out_dtype in (None, torch.bfloat16, torch.float16):
        read_back(fp8ops.dequant(q, s, 128, out_dtype))
    calls += 5
    torch.cuda.synchronize()
    print(f"sanitize_ops: {calls} op calls, every output's storage read back")
    return 0


def unwritten() -> int:
    """Reads a device buffer that nothing wrote, through a kernel: initcheck must report it."""
    buf = torch.empty(1 << 16, dtype=torch.uint8, device="cuda")
    (buf + 0).cpu()
    torch.cuda.synchronize()
    print("sanitize_ops --unwritten: read a buffer nothing wrote")
    return 0


if __name__ == "__main__":
    sys.exit(unwritten() if "--unwritten" in sys.argv[1:] else main())
