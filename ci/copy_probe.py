"""A plain device copy of the same byte count as a kernel call, timed the way the benchmark times
the kernel (20 calls per CUDA graph, replay median / 20, sources rotated past L2), beside the
kernel itself, in one process: what a memory-bound kernel of that size can hope for. GPU only;
from the repository root:

    PYTHONPATH=. python ci/copy_probe.py
"""

import functools

import torch

import fp8ops
from fp8ops import bench


def copy_us(total_bytes: int) -> float:
    """Per-call time of dst.copy_(src) moving total_bytes (half read, half written)."""
    n = total_bytes // 2
    sets = [
        (torch.empty(n, dtype=torch.uint8, device="cuda"), torch.empty(n, dtype=torch.uint8, device="cuda"))
        for _ in range(bench.n_sets_for(total_bytes))
    ]
    return bench.graph_time_us(torch.Tensor.copy_, sets)


def main() -> None:
    rate = bench.copy_bandwidth_tbps()
    print(f"copy of 1 GiB: {rate:.3f} TB/s (read + write)")

    def report(what: str, nbytes: int, kernel_us: float) -> None:
        c = copy_us(nbytes)
        pct, kpct = bench.pct_of_copy(nbytes, c, rate), bench.pct_of_copy(nbytes, kernel_us, rate)
        print(
            f"{what:38s} {nbytes / 1e6:8.1f} MB: plain copy {c:8.2f} us ({pct:5.1f}% of the 1 GiB rate), "
            f"kernel {kernel_us:8.2f} us ({kpct:5.1f}%)"
        )

    for M, K in ((2048, 7168), (2048, 16384), (8192, 7168)):
        for layout in ("row", "col_tma"):
            fn = functools.partial(fp8ops.per_token_group_quant, group_size=128, scale_layout=layout)
            xs = bench.per_token_inputs(M, K, M * K * 3)
            _, s = fn(xs[0][0])
            report(f"per_token {layout} M={M} K={K}", bench.quant_bytes(M, K, 2, s), bench.graph_time_us(fn, xs))
    cs = torch.randn(65536, 64, device="cuda")
    for B in (2048, 16384):
        per_call, sets = bench.indexer_inputs(B, 64, cs)
        report(f"indexer B={B} H=64", per_call, bench.graph_time_us(fp8ops.indexer_q_quant, sets))


if __name__ == "__main__":
    main()
