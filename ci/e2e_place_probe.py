"""Probe: how DeepGEMM's M=1 fp8_gemm_nt time (N=4096, K=7168) depends on where q and its
col_tma scales sit in memory. Same values and strides in every case; only addresses change.

    PYTHONPATH=. python ci/e2e_place_probe.py

Each case copies q and the scales into one 64 MiB buffer at the given byte offsets and times the
GEMM the way the benchmark times a call (fp8ops.bench.graph_time_us: 20 calls in a CUDA graph, the
replay median over 30 replays divided by 20), in two passes over all cases so that drift shows.
(The log in docs/results/h200-run12-e2e-place-probe.log came from this script's first version,
which had its own copy of that timing loop: 3 eager calls, 5 warm-up replays, 30 timed replays.)
"""

from __future__ import annotations

import torch

import fp8ops
from fp8ops import bench

M, N, K = 1, 4096, 7168


def main() -> None:
    import deep_gemm as dg

    torch.manual_seed(0)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    ws = torch.rand(N // 128, K // 128, device="cuda") + 0.5
    x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    q, s = fp8ops.per_token_group_quant(x, 128, "col_tma")
    print(f"op outputs: q at {q.data_ptr():#x}, s at {s.data_ptr():#x} (s - q = {s.data_ptr() - q.data_ptr()})")
    buf = torch.zeros(64 << 20, dtype=torch.uint8, device="cuda")
    s_bytes = s.untyped_storage().nbytes()

    def place(q_off, s_off):
        qq = buf[q_off : q_off + K].view(torch.float8_e4m3fn).view(M, K)
        qq.copy_(q)
        ss = buf[s_off : s_off + s_bytes].view(torch.float32).as_strided(s.shape, s.stride())
        ss.copy_(s)
        return qq, ss

    def gemm(qq, ss):
        dg.fp8_gemm_nt((qq, ss), (w, ws), out)

    cases = [("op outputs", lambda: (q, s))]
    base = 1 << 20
    for d in (7168, 7168 + 128, 7168 + 512, 8192, 12288, 16384, 32768, 65536, 1 << 20, 2 << 20, 4 << 20):
        cases.append((f"q at 1 MiB, s at q + {d}", lambda d=d: place(base, base + d)))
    for d in (1024, 4096, 65536, 1 << 20):
        cases.append((f"q at 1 MiB, s at q - {d}", lambda d=d: place(base, base - d)))
    for sa in (0, 512, 1024, 1536, 2048, 2560, 3072, 3584, 4096):
        cases.append((f"s at 2 MiB + {sa}, q at 8 MiB", lambda sa=sa: place(8 << 20, (2 << 20) + sa)))
    for p in range(2):
        print(f"pass {p}")
        for name, make in cases:
            qq, ss = make()
            print(f"  {name:36s} GEMM {bench.graph_time_us(gemm, [(qq, ss)]):6.2f} us", flush=True)


if __name__ == "__main__":
    main()
