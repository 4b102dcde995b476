"""Per-token quant at K=2048: row against the MN-major layouts, rotated x and one x in all calls,
in the benchmark's protocol (20 calls in one graph). Run once per FP8OPS_TUNE_PDL setting."""
import functools
import os

import fp8ops
from fp8ops import bench

print("PDL", os.environ.get("FP8OPS_TUNE_PDL", "1"), "MNSMALL", os.environ.get("FP8OPS_TUNE_MNSMALL", "-1"))
for M in (256, 512, 1024, 2048):
    K = 2048
    xs = bench.per_token_inputs(M, K, M * K * 3)
    line = [f"M={M:5d}"]
    for layout in ("row", "col", "col_tma", "col_tma_packed"):
        fn = functools.partial(fp8ops.per_token_group_quant, group_size=128, scale_layout=layout)
        rot = min(bench.graph_time_us(fn, xs) for _ in range(3))
        same = min(bench.graph_time_us(fn, xs[:1]) for _ in range(3))
        line.append(f"{layout} {rot:.2f}/{same:.2f}")
    print("  ".join(line), flush=True)
