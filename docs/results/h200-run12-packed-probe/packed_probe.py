"""Packed small-M probe: per-token quant times for a few shapes and layouts under the current
FP8OPS_TUNE_* environment (benchmarking build on PYTHONPATH). One JSON line per shape."""
import functools, json, os, sys
import torch
import fp8ops
from fp8ops import bench

SHAPES = [(1, 2048), (4, 16384), (16, 7168), (64, 2048), (128, 2048), (512, 2048), (16, 16384)]
tag = sys.argv[1]
for M, K in SHAPES:
    xs = bench.per_token_inputs(M, K, M * K * 3)
    out = {"cfg": tag, "M": M, "K": K}
    for layout in ("row", "col_tma", "col_tma_packed"):
        fn = functools.partial(fp8ops.per_token_group_quant, group_size=128, scale_layout=layout)
        out[layout] = round(bench.graph_time_us(fn, xs), 3)
    print(json.dumps(out), flush=True)
