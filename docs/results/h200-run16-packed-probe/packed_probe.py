"""Small-M per-token rows, three layouts, one JSON line per shape (library from PYTHONPATH)."""

import functools
import json

import fp8ops
from fp8ops import bench

SHAPES = [(1, 7168), (16, 7168), (64, 7168), (1, 2048), (64, 2048), (128, 2048), (512, 2048), (16, 16384), (2048, 7168)]
for M, K in SHAPES:
    xs = bench.per_token_inputs(M, K, M * K * 3)
    for layout in ("row", "col_tma", "col_tma_packed"):
        fn = functools.partial(fp8ops.per_token_group_quant, group_size=128, scale_layout=layout)
        print(json.dumps({"M": M, "K": K, "layout": layout, "us": bench.graph_time_us(fn, xs)}), flush=True)
