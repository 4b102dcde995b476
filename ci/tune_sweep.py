"""Launch-shape sweep for the kernels, on a GPU, with a benchmarking build of fp8ops.

    FP8OPS_TUNING=1 python setup.py build_ext --build-lib .tune -q   # the library that obeys FP8OPS_TUNE_*
    PYTHONPATH=.tune python ci/tune_sweep.py --json $OUT/tune.json

Each configuration runs in its own process (the library reads FP8OPS_TUNE_* once), which times a
fixed list of shapes the way the benchmark does (20 calls per CUDA graph, replay median, inputs
rotated past L2) and prints one JSON line per shape. The parent prints a table per kernel with
one column per configuration. `--merge NAME=JSON ...` prints earlier --json files side by side
(ci/var_sweep.sh). Used to choose the defaults in group_quant.cuh and indexer.cuh; the
benchmark (python -m fp8ops.bench) measures the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

# uN: N rows per thread (u2 with row-major fp32 scales: 2 groups of a row, unless MNVEC=0 and
# GVEC=0); mn: MN-major scales written by vector stores; ld: non-coherent loads that skip L1; tN: N
# threads per block (default 256; auto uses 128 for one-row grids, auto-t256 does not); nogv:
# row-major scales without pairs of groups per thread; gather: packed words gathered by shuffles
# on every path; gv2: pairs of groups per thread with MN-major fp32 scales too; nomns: one-row
# grids with per-token MN-major scales shaped like the others (a warp across groups, not rows).
GROUP_CONFIGS = {
    "auto": {},
    "u1": {"FP8OPS_TUNE_UNROLL": "1"},
    "auto-t256": {"FP8OPS_TUNE_SMALL_THREADS": "256"},
    "u1-t128": {"FP8OPS_TUNE_UNROLL": "1", "FP8OPS_TUNE_THREADS": "128"},
    "u2": {"FP8OPS_TUNE_UNROLL": "2", "FP8OPS_TUNE_MNVEC": "0"},
    "u2mn": {"FP8OPS_TUNE_UNROLL": "2", "FP8OPS_TUNE_MNVEC": "1"},
    "u2mn-t128": {"FP8OPS_TUNE_UNROLL": "2", "FP8OPS_TUNE_MNVEC": "1", "FP8OPS_TUNE_THREADS": "128"},
    "u4": {"FP8OPS_TUNE_UNROLL": "4", "FP8OPS_TUNE_MNVEC": "0"},
    "u4mn": {"FP8OPS_TUNE_UNROLL": "4", "FP8OPS_TUNE_MNVEC": "1"},
    "u4mn-t128": {"FP8OPS_TUNE_UNROLL": "4", "FP8OPS_TUNE_MNVEC": "1", "FP8OPS_TUNE_THREADS": "128"},
    "u2mn+ld": {"FP8OPS_TUNE_UNROLL": "2", "FP8OPS_TUNE_MNVEC": "1", "FP8OPS_TUNE_STREAM": "1"},
    "auto-nogv": {"FP8OPS_TUNE_GVEC": "0"},
    "auto-gather": {"FP8OPS_TUNE_GATHER": "1"},
    "auto-gv2": {"FP8OPS_TUNE_GVEC": "2"},
    "auto-nomns": {"FP8OPS_TUNE_MNSMALL": "0"},
}
# lN: N lanes per (token, head); wN: N warps per block; bN: at least N resident blocks asked of the
# compiler (a register cap); -np: one group per warp (grid not capped at the resident blocks);
# auto: the library's own choice; auto-any: the same without the kernels of fixed option sets;
# auto-noshare: from 2^14 items two-warp blocks with no register cap and the grid-wide schedule
# (evict-first loads of q where the library uses them); auto-nostream: no evict-first loads of q.
INDEXER_CONFIGS = {
    "auto": {},
    "auto-any": {"FP8OPS_TUNE_IDX_MODE": "0"},
    "auto-noshare": {"FP8OPS_TUNE_IDX_SHARE": "0", "FP8OPS_TUNE_IDX_WARPS": "2", "FP8OPS_TUNE_IDX_MINB": "0"},
    "auto-nostream": {"FP8OPS_TUNE_IDX_STREAM": "0"},
} | {
    f"l{lanes}w{w}" + (f"b{b}" if b else "") + ("" if persist else "-np"): {
        "FP8OPS_TUNE_IDX_LANES": str(lanes),
        "FP8OPS_TUNE_IDX_WARPS": str(w),
        "FP8OPS_TUNE_IDX_MINB": str(b),
        "FP8OPS_TUNE_IDX_PERSIST": str(int(persist)),
    }
    for lanes, w, b, persist in (
        (8, 2, 0, True),
        (8, 2, 16, True),
        (8, 4, 0, True),
        (4, 2, 0, True),
        (4, 2, 12, True),
        (4, 2, 12, False),
        (4, 2, 0, False),
        (8, 2, 0, False),
        (4, 2, 14, True),
        (4, 2, 16, True),
        (4, 4, 6, True),
        (4, 4, 8, True),
    )
}

PER_TOKEN = [  # (M, K, layout)
    *[(M, 7168, layout) for M in (1, 4, 16) for layout in ("row", "col_tma", "col_tma_packed")],
    *[(M, 2048, layout) for M in (1, 4) for layout in ("row", "col_tma", "col_tma_packed")],
    *[(M, 16384, layout) for M in (128, 512) for layout in ("row", "col_tma", "col_tma_packed")],
    *[
        (M, K, layout)
        for M, K in ((64, 7168), (128, 2048), (512, 2048))
        for layout in ("row", "col_tma", "col_tma_packed")
    ],
    (128, 7168, "col_tma"),
    (512, 7168, "col_tma"),
    (512, 7168, "col_tma_packed"),
    (2048, 7168, "row"),
    (2048, 16384, "row"),
    (8192, 2048, "row"),
    (32768, 2048, "row"),
    (2048, 2048, "col_tma"),
    (2048, 7168, "col_tma"),
    (2048, 16384, "col_tma"),
    (8192, 2048, "col_tma"),
    (8192, 7168, "col_tma"),
    (8192, 7168, "row"),
    (32768, 7168, "col_tma"),
    (32768, 7168, "row"),
    (32768, 7168, "col_tma_packed"),
]
GROUP_MAJOR = [  # (T, G, D, packed)
    (1, 8, 4096, False),
    (1, 8, 4096, True),
    (8, 16, 4096, True),
    (512, 16, 4096, False),
    (4096, 8, 4096, False),
    (4096, 16, 4096, False),
    (4096, 16, 4096, True),
]
# FP8OPS_SWEEP_PER_TOKEN="32768x16384,2048x16384" replaces the group rows: those (M, K) in every
# per-token layout, and no group-major rows.
if os.environ.get("FP8OPS_SWEEP_PER_TOKEN"):
    PER_TOKEN = [
        (int(m), int(k), layout)
        for m, k in (mk.split("x") for mk in os.environ["FP8OPS_SWEEP_PER_TOKEN"].split(","))
        for layout in ("row", "col", "col_tma", "col_tma_packed")
    ]
    GROUP_MAJOR = []
# FP8OPS_SWEEP_INDEXER_B="256,2048" replaces the token counts of the indexer rows.
INDEXER_B = tuple(int(b) for b in os.environ.get("FP8OPS_SWEEP_INDEXER_B", "1,8,64,256,512,2048,16384").split(","))


def worker(kind: str) -> None:
    import functools

    import torch

    import fp8ops
    from fp8ops import bench

    copy = bench.copy_bandwidth_tbps()

    def emit(row):
        print(json.dumps(row), flush=True)

    def emit_quant(key, fn, xs, rows):
        """Times the quantizer fn over the argument sets xs (rows of x each) and emits key with
        the time and the percentage of the copy rate."""
        _, s = fn(xs[0][0])
        us = bench.graph_time_us(fn, xs)
        nbytes = bench.quant_bytes(rows, xs[0][0].shape[-1], 2, s)
        emit({**key, "us": us, "pct": bench.pct_of_copy(nbytes, us, copy)})

    if kind == "group":
        for M, K, layout in PER_TOKEN:
            fn = functools.partial(fp8ops.per_token_group_quant, group_size=128, scale_layout=layout)
            key = {"op": "per_token", "M": M, "K": K, "layout": layout}
            emit_quant(key, fn, bench.per_token_inputs(M, K, M * K * 3), M)
        for T, G, D, packed in GROUP_MAJOR:
            fn = functools.partial(fp8ops.group_major_quant, packed=packed)
            key = {"op": "group_major", "T": T, "G": G, "D": D, "packed": packed}
            emit_quant(key, fn, bench.group_major_inputs(T, G, D), T * G)
    else:
        H, max_pos = 64, 65536
        cs = torch.randn(max_pos, 64, device="cuda")
        for B in INDEXER_B:
            per_call, sets = bench.indexer_inputs(B, H, cs)
            us = bench.graph_time_us(fp8ops.indexer_q_quant, sets)
            emit({"op": "indexer", "B": B, "H": H, "us": us, "pct": bench.pct_of_copy(per_call, us, copy)})
    emit({"op": "copy", "tbps": copy})


def key_of(row):
    return tuple((k, row[k]) for k in row if k not in ("us", "pct", "tbps", "config"))


def merge(specs) -> None:
    """Prints the rows of several --json files side by side: one column per NAME, the values of
    that name's files in the order given (ci/var_sweep.sh: a variant's passes)."""
    names, table = [], {}
    for spec in specs:
        name, path = spec.split("=", 1)
        if name not in names:
            names.append(name)
        try:
            with open(path) as f:
                rows = json.load(f)
        except (OSError, ValueError):
            continue
        for row in rows:
            table.setdefault(key_of(row), {}).setdefault(name, []).append(row)
    print(" | ".join(["shape"] + names))
    for key, by_name in table.items():
        copy = key[0][1] == "copy"
        fmt = (lambda r: f"{r['tbps']:.3f}") if copy else (lambda r: f"{r['us']:.2f}")
        cells = [", ".join(fmt(r) for r in by_name.get(n, [])) or "-" for n in names]
        print(" | ".join([",".join(f"{v}" for _, v in key) + (" TB/s" if copy else "")] + cells))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", choices=("group", "indexer"))
    ap.add_argument("--kinds", default="group,indexer")
    ap.add_argument("--only", help="comma-separated configuration names to run (default: all)")
    ap.add_argument("--json")
    ap.add_argument("--merge", nargs="+", metavar="NAME=JSON", help="print these --json files side by side, and exit")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    if args.merge:
        merge(args.merge)
        return 0
    rows = []
    for kind in args.kinds.split(","):
        configs = GROUP_CONFIGS if kind == "group" else INDEXER_CONFIGS
        if args.only:
            configs = {k: v for k, v in configs.items() if k in args.only.split(",")}
        for name, env in configs.items():
            proc = subprocess.run(
                [sys.executable, __file__, "--worker", kind],
                env={**os.environ, **env},
                capture_output=True,
                text=True,
                timeout=300,
            )
            if proc.returncode != 0:
                print(f"config {name} failed:\n{proc.stderr[-3000:]}", flush=True)
                return 1
            for line in proc.stdout.splitlines():
                row = json.loads(line)
                row["config"] = name
                rows.append(row)
            print(f"done {kind} {name}", file=sys.stderr, flush=True)
        names = list(configs)
        table = {}
        for row in rows:
            if row["config"] in configs:
                table.setdefault(key_of(row), {})[row["config"]] = row
        print(f"\n{kind}: us (% of copy) per configuration")
        print(" | ".join(["shape"] + names))
        for key, by_cfg in table.items():
            if key[0][1] == "copy":
                cells = [f"{by_cfg[n]['tbps']:.3f} TB/s" if n in by_cfg else "-" for n in names]
            else:
                cells = [f"{by_cfg[n]['us']:.2f} ({by_cfg[n]['pct']:.1f})" if n in by_cfg else "-" for n in names]
            print(" | ".join([",".join(f"{v}" for _, v in key)] + cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
