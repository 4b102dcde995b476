"""Where the indexer's time goes at mid-size B: indexer_q_quant (DeepSeek-V4 options, H=64) timed
the benchmark's way (20 calls per CUDA graph, replay median / 20) with its inputs rotated past L2,
then with the same inputs in all 20 calls (q stays in L2 where it fits), then rotated but with every
position 0 (one cos/sin row for all tokens), beside a plain copy of the same bytes; two passes. The
library comes from PYTHONPATH, so that variant builds can be timed the same way. GPU only:

    PYTHONPATH=. python ci/idx_probe.py [B ...]
"""

import sys

import torch
from copy_probe import copy_us

import fp8ops
from fp8ops import bench


def main() -> None:
    Bs = [int(b) for b in sys.argv[1:]] or [1024, 2048, 4096, 16384]
    print(f"fp8ops from {fp8ops._LIBRARY}")
    rate = bench.copy_bandwidth_tbps()
    print(f"copy of 1 GiB: {rate:.3f} TB/s (read + write)")
    cs = torch.randn(65536, 64, device="cuda")
    for p in range(2):
        for B in Bs:
            per_call, sets = bench.indexer_inputs(B, 64, cs)
            pos0 = [(q, w, s, c, torch.zeros_like(pos)) for q, w, s, c, pos in sets]
            t = {
                "rotated": bench.graph_time_us(fp8ops.indexer_q_quant, sets),
                "same": bench.graph_time_us(fp8ops.indexer_q_quant, sets[:1]),
                "pos0": bench.graph_time_us(fp8ops.indexer_q_quant, pos0),
                "copy": copy_us(per_call),
            }
            print(
                f"pass {p} B={B:6d}: "
                + ", ".join(f"{k} {v:7.2f} us ({bench.pct_of_copy(per_call, v, rate):5.1f}%)" for k, v in t.items())
                + f"; {len(sets)} sets",
                flush=True,
            )
            del sets, pos0


if __name__ == "__main__":
    main()
