"""Per-call time of per_token_group_quant (col_tma, bf16, K=7168) with inputs rotated past L2, the
benchmark's protocol, against the same input in every call of the graph (x then stays in L2 between
calls where it fits), two passes per size. GPU only; run from the repository root:

    PYTHONPATH=. python ci/l2_probe.py
"""

import functools

import fp8ops
from fp8ops import bench


def main() -> None:
    print(f"copy {bench.copy_bandwidth_tbps():.3f} TB/s")
    fn = functools.partial(fp8ops.per_token_group_quant, group_size=128, scale_layout="col_tma")
    K = 7168
    for M in (128, 512, 2048, 8192):
        xs = bench.per_token_inputs(M, K, M * K * 3)
        for p in range(2):
            rotated = bench.graph_time_us(fn, xs)
            same = bench.graph_time_us(fn, xs[:1])
            print(
                f"M={M:5d} K={K} col_tma pass {p}: rotated ({len(xs)} sets) {rotated:7.2f} us, "
                f"same input {same:7.2f} us"
            )


if __name__ == "__main__":
    main()
