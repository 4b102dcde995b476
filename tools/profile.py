"""Runs one fp8ops kernel on one shape three times, for a profiler; inputs are built the way the
benchmark builds them. Under Nsight Compute, profiling the third launch (the regex matches the
kernel's name without its namespace: group_quant, indexer_q_quant, silu_mul_quant, rms_norm_quant,
block_quant):

    ncu --clock-control none --kernel-name regex:group_quant --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        python tools/profile.py per_token row 8192 7168

    python tools/profile.py indexer 16384            # B (H = 64, DeepSeek-V4 options)
    python tools/profile.py per_token row 8192 7168  # layout M K (bf16)
    python tools/profile.py group_major 512 16 4096 fp32|packed
    python tools/profile.py silu 16384 2048 [E [m]]   # M (rows, or Mmax of E experts, m valid) H, bf16
    python tools/profile.py rms 8192 7168 res|nores   # M D, bf16, col_tma
    python tools/profile.py block 7168 18432          # N K (bf16)
"""

from __future__ import annotations

import sys

import torch

import fp8ops
from fp8ops import bench


def main(argv: list[str]) -> None:
    kind, args = argv[0], argv[1:]
    if kind == "indexer":
        cs = torch.randn(65536, 64, device="cuda")
        _, sets = bench.indexer_inputs(int(args[0]), 64, cs)
        call = lambda: fp8ops.indexer_q_quant(*sets[0])  # noqa: E731
    elif kind == "per_token":
        layout, M, K = args[0], int(args[1]), int(args[2])
        x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
        call = lambda: fp8ops.per_token_group_quant(x, scale_layout=layout)  # noqa: E731
    elif kind == "group_major":
        T, G, D, packed = int(args[0]), int(args[1]), int(args[2]), args[3] == "packed"
        x = bench.group_major_inputs(T, G, D)[0][0]
        call = lambda: fp8ops.group_major_quant(x, packed=packed)  # noqa: E731
    elif kind == "silu":
        M, H = int(args[0]), int(args[1])
        if len(args) > 2:  # masked: E experts of Mmax = M rows, m (default 8) valid each
            E, valid = int(args[2]), int(args[3]) if len(args) > 3 else 8
            x = torch.randn(E, M, 2 * H, dtype=torch.bfloat16, device="cuda")
            m = torch.full((E,), min(valid, M), dtype=torch.int32, device="cuda")
            call = lambda: fp8ops.silu_mul_quant(x, 128, "col_tma_packed", masked_m=m)  # noqa: E731
        else:
            x = torch.randn(M, 2 * H, dtype=torch.bfloat16, device="cuda")
            call = lambda: fp8ops.silu_mul_quant(x, 128, "col_tma_packed")  # noqa: E731
    elif kind == "rms":
        M, D, res = int(args[0]), int(args[1]), args[2] == "res"
        x = torch.randn(M, D, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(D, dtype=torch.bfloat16, device="cuda")
        r = torch.randn(M, D, dtype=torch.bfloat16, device="cuda") if res else None
        call = lambda: fp8ops.rms_norm_quant(x, w, 1e-6, r, 128, "col_tma")  # noqa: E731
    elif kind == "block":
        w = torch.randn(int(args[0]), int(args[1]), dtype=torch.bfloat16, device="cuda")
        call = lambda: fp8ops.block_quant(w)  # noqa: E731
    else:
        raise SystemExit(f"unknown kernel {kind!r}")
    for _ in range(3):
        call()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
