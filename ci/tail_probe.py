"""Does the time of a call step with the grid's last, partial round? Times the indexer at B on both
sides of the boundaries where its resident warps (3168 on the H200: 1584 blocks of two warps, groups
of 8 heads) finish a whole number of rounds, and the per-token quantizer at M around 2048 (K=16384),
the way the benchmark times them (20 calls per CUDA graph, replay median / 20, inputs rotated past
L2), with a plain device copy of the same bytes beside each. GPU only; from the repository root:

    PYTHONPATH=. python ci/tail_probe.py
"""

import functools

import torch
from copy_probe import copy_us

import fp8ops
from fp8ops import bench


def main() -> None:
    rate = bench.copy_bandwidth_tbps()
    print(f"copy of 1 GiB: {rate:.3f} TB/s (read + write)")

    def report(what: str, nbytes: int, kernel_us: float, per: int, unit: str) -> None:
        c = copy_us(nbytes)
        print(
            f"{what:34s} {nbytes / 1e6:7.1f} MB: kernel {kernel_us:7.2f} us "
            f"({bench.pct_of_copy(nbytes, kernel_us, rate):5.1f}%), {1e3 * kernel_us / per:6.3f} ns per {unit}; "
            f"plain copy {c:7.2f} us ({bench.pct_of_copy(nbytes, c, rate):5.1f}%)",
            flush=True,
        )

    cs = torch.randn(65536, 64, device="cuda")
    for p in range(2):
        print(f"-- pass {p}")
        # 396 tokens of 64 heads are 3168 groups of 8 heads: one round of the H200's resident warps.
        for B in (1584, 1585, 1980, 1981, 2048, 2200, 2376, 2377):
            per_call, sets = bench.indexer_inputs(B, 64, cs)
            us = bench.graph_time_us(fp8ops.indexer_q_quant, sets)
            report(f"indexer B={B} ({8 * B / 3168:.2f} rounds)", per_call, us, B * 64, "head")
        for M in (1536, 1792, 1920, 1984, 2048, 2112, 2176, 2304, 2560):
            for layout in ("row", "col_tma"):
                fn = functools.partial(fp8ops.per_token_group_quant, group_size=128, scale_layout=layout)
                xs = bench.per_token_inputs(M, 16384, M * 16384 * 3)
                _, s = fn(xs[0][0])
                us = bench.graph_time_us(fn, xs)
                report(f"per_token {layout} M={M} K=16384", bench.quant_bytes(M, 16384, 2, s), us, M, "row")


if __name__ == "__main__":
    main()
