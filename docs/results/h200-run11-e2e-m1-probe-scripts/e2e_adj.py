import json
import torch, deep_gemm as dg
import fp8ops
M, N, K = 1, 4096, 7168
w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
ws = torch.rand(N // 128, K // 128, device="cuda") + 0.5
x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda"); out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
q, s = fp8ops.per_token_group_quant(x, 128, "col_tma")
print("ours: q ptr", q.data_ptr(), "s ptr", s.data_ptr(), "s - q", s.data_ptr() - q.data_ptr())
def mk(gap):
    buf = torch.zeros(7168 + gap + 896, dtype=torch.uint8, device="cuda")
    qq = buf[:7168].view(torch.float8_e4m3fn).view(1, 7168); qq.copy_(q)
    ss = buf[7168 + gap:7168 + gap + 896].view(torch.float32).as_strided((1, 56), (1, 4)); ss.copy_(s)
    return qq, ss
cases = [("ours", q, s)] + [(f"q,s in one buffer, s at q+7168+{g}", *mk(g)) for g in (0, 512, 4096, 65536)] + [("ours again", q, s)]
for name, qq, sc in cases:
    g = torch.cuda.CUDAGraph()
    for _ in range(3): dg.fp8_gemm_nt((qq, sc), (w, ws), out)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for _ in range(20): dg.fp8_gemm_nt((qq, sc), (w, ws), out)
    for _ in range(3): g.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        g.replay(); torch.cuda.synchronize()
    prof.export_chrome_trace("/tmp/a.json")
    d = sorted(e["dur"] for e in json.load(open("/tmp/a.json"))["traceEvents"] if e.get("cat") == "kernel")
    print(f"{name:40s} s-q {sc.data_ptr() - qq.data_ptr():7d}: gemm median {d[len(d)//2]:.2f} us", flush=True)
