"""Per-SM work and end times of the indexer kernel (probe build with FP8OPS_IDX_TIMELINE)."""
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
    for o in outs:
        o[1].zero_()
    g.replay()
    torch.cuda.synchronize()
    for k in (10, 15):
        w = outs[k][1].view(-1).view(torch.int64)
        n = w.numel() // 16
        t = w[: n * 16].view(n, 16).cpu()
        idx = (t[:, 15] != 0).nonzero().flatten().tolist()
        trips = {i: int(t[i, 15]) >> 32 for i in idx}
        sm = {i: int(t[i, 15]) & 0xFFFFFFFF for i in idx}
        start = {i: int(t[i, 0]) for i in idx}
        end = {i: int(t[i, min(trips[i], 14)]) for i in idx}
        T0 = min(start.values())
        per_sm = {}
        for i in idx:
            d = per_sm.setdefault(sm[i], {"groups": 0, "warps": 0, "last": 0, "blocks": set()})
            d["groups"] += trips[i]
            d["warps"] += 1
            d["last"] = max(d["last"], (end[i] - T0) / 1e3)
            d["blocks"].add(i // 2)
        print(f"== call {k}: warps {len(idx)}, span {(max(end.values()) - T0) / 1e3:.2f} us")
        print(" groups per SM:", pct([d["groups"] for d in per_sm.values()]))
        print(" warps per SM:", pct([d["warps"] for d in per_sm.values()]))
        print(" last end per SM:", pct([d["last"] for d in per_sm.values()]))
        by_groups = {}
        for d in per_sm.values():
            by_groups.setdefault(d["groups"], []).append(d["last"])
        for gcount in sorted(by_groups):
            v = by_groups[gcount]
            print(f"  SMs with {gcount} groups: {len(v)}, last end median {statistics.median(v):.2f} us,"
                  f" range {min(v):.2f}-{max(v):.2f}")
        five = [i for i in idx if trips[i] == max(trips.values())]
        print(" warps with the most trips:", len(five), "block ids", min(i // 2 for i in five), "-", max(i // 2 for i in five))
        print(" SM of blocks 0..39:", [sm[2 * b] for b in range(40)])
        s0 = sorted(per_sm)[0]
        print(f" blocks on SM {s0}:", sorted(per_sm[s0]["blocks"]))
        s1 = sorted(per_sm)[len(per_sm) // 2]
        print(f" blocks on SM {s1}:", sorted(per_sm[s1]["blocks"]))
        late = sorted(per_sm.items(), key=lambda kv: -kv[1]["last"])[:5]
        for s, d in late:
            print(f"  late SM {s}: last {d['last']:.2f} us, groups {d['groups']}, blocks {sorted(d['blocks'])}")


if __name__ == "__main__":
    main()
