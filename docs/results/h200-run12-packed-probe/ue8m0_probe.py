"""Is the col_tma_packed gap at small M the UE8M0 rounding? col_tma with and without ue8m0, and
col_tma_packed, same shapes, two passes."""
import functools, json
import torch
import fp8ops
from fp8ops import bench

for p in range(2):
    for M, K in [(1, 2048), (16, 7168), (64, 2048), (128, 2048), (4, 16384)]:
        xs = bench.per_token_inputs(M, K, M * K * 3)
        out = {"pass": p, "M": M, "K": K}
        for name, layout, ue in (("row", "row", False), ("row_ue8m0", "row", True), ("col_tma", "col_tma", False),
                                 ("col_tma_ue8m0", "col_tma", True), ("packed", "col_tma_packed", True)):
            fn = functools.partial(fp8ops.per_token_group_quant, group_size=128, scale_layout=layout, ue8m0=ue)
            out[name] = round(bench.graph_time_us(fn, xs), 3)
        print(json.dumps(out), flush=True)
