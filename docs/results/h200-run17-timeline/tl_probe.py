"""Timeline probe of the indexer kernel (probe build with FP8OPS_IDX_TIMELINE): per warp the
start, the end of each trip and its SM, from 20 calls captured in one CUDA graph."""
import statistics
import sys

import torch

import fp8ops
from fp8ops import bench


def pct(xs, ps=(0, 10, 50, 90, 100)):
    xs = sorted(xs)
    return " ".join(f"p{p}={xs[min(len(xs) - 1, int(p / 100 * len(xs)))]:.2f}" for p in ps)


def main():
    B = int(sys.argv[1])
    torch.manual_seed(0)
    cs = torch.randn(65536, 64, device="cuda")
    per_call, sets = bench.indexer_inputs(B, 64, cs)
    calls = [sets[i % len(sets)] for i in range(20)]
    for a in calls:
        fp8ops.indexer_q_quant(*a)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [fp8ops.indexer_q_quant(*a) for a in calls]
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(20):
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3 / 20)
    print(f"B={B} graph per call {statistics.median(ts):.2f} us, bytes {per_call}, "
          f"at 4.15 TB/s {per_call / 4.15e6:.2f} us")
    for o in outs:
        o[1].zero_()
    g.replay()
    torch.cuda.synchronize()
    tls = []
    for o in outs:
        w = o[1].view(-1).view(torch.int64)
        n = w.numel() // 16
        t = w[: n * 16].view(n, 16).cpu()
        t = t[t[:, 15] != 0]
        tls.append(t)
    prev_end = None
    for k, t in enumerate(tls):
        trips = (t[:, 15] >> 32).tolist()
        sm = (t[:, 15] & 0xFFFFFFFF).tolist()
        start = t[:, 0].tolist()
        ends = [int(t[i, min(trips[i], 14)]) for i in range(len(trips))]
        T0, T1 = min(start), max(ends)
        gap = (T0 - prev_end) / 1e3 if prev_end is not None else float("nan")
        prev_end = T1
        if k not in (0, 10, 19):
            print(f"call {k}: span {(T1 - T0) / 1e3:.2f} us, gap from previous end {gap:.2f} us")
            continue
        print(f"== call {k}: warps {len(trips)}, span {(T1 - T0) / 1e3:.2f} us, gap from previous end {gap:.2f} us")
        print(" trips per warp:", pct(trips))
        print(" start - T0 (us):", pct([(x - T0) / 1e3 for x in start]))
        print(" first trip (us):", pct([(int(t[i, 1]) - start[i]) / 1e3 for i in range(len(trips))]))
        mids = [(int(t[i, j + 1]) - int(t[i, j])) / 1e3 for i in range(len(trips)) for j in range(1, min(trips[i], 14))]
        if mids:
            print(" later trips (us):", pct(mids))
        print(" end - T0 (us):", pct([(x - T0) / 1e3 for x in ends]))
        # Warps alive over time, 0.5 us bins.
        nb = int((T1 - T0) / 500) + 1
        alive = [0] * nb
        for i in range(len(trips)):
            for bkt in range(int((start[i] - T0) / 500), int((ends[i] - T0) / 500) + 1):
                alive[bkt] += 1
        print(" warps alive per 0.5 us:", " ".join(str(a) for a in alive))
        # Trip ends per 0.5 us bin (groups finished): throughput over time.
        done = [0] * nb
        for i in range(len(trips)):
            for j in range(1, min(trips[i], 14) + 1):
                done[int((int(t[i, j]) - T0) / 500)] += 1
        print(" groups done per 0.5 us:", " ".join(str(a) for a in done))
        per_sm = {}
        for i in range(len(trips)):
            per_sm.setdefault(sm[i], []).append(ends[i])
        print(" SMs", len(per_sm), "last end per SM - T0 (us):", pct([(max(v) - T0) / 1e3 for v in per_sm.values()]),
              " first end per SM:", pct([(min(v) - T0) / 1e3 for v in per_sm.values()]))
        ds = sorted({int(x) - T0 for x in start})
        steps = sorted({b - a for a, b in zip(ds, ds[1:]) if b > a})[:5]
        print(" smallest timer steps (ns):", steps)


if __name__ == "__main__":
    main()
