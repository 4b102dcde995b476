import json
import torch, deep_gemm as dg
import fp8ops
M, N, K = 1, 4096, 7168
w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
ws = torch.rand(N // 128, K // 128, device="cuda") + 0.5
x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda"); out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
q, s = fp8ops.per_token_group_quant(x, 128, "col_tma")
exact = torch.empty_strided((1, 56), (1, 4), device="cuda"); exact.copy_(s)
big = torch.zeros(4096, device="cuda"); off = big[128:128 + 224].as_strided((1, 56), (1, 4)); off.copy_(s)
t = dg.get_mn_major_tma_aligned_tensor(fp8ops.per_token_group_quant(x, 128, "row")[1])
for name, sc in (("ours (896 B storage)", s), ("copy, exact extent (884 B)", exact), ("copy at +512 B in a larger buffer", off), ("DG transposed", t), ("ours again", s)):
    print(name, sc.data_ptr() % 1024, sc.untyped_storage().nbytes(), end=": ")
    g = torch.cuda.CUDAGraph()
    for _ in range(3): dg.fp8_gemm_nt((q, sc), (w, ws), out)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for _ in range(20): dg.fp8_gemm_nt((q, sc), (w, ws), out)
    for _ in range(3): g.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        g.replay(); torch.cuda.synchronize()
    prof.export_chrome_trace("/tmp/a.json")
    d = sorted(e["dur"] for e in json.load(open("/tmp/a.json"))["traceEvents"] if e.get("cat") == "kernel")
    print(f"gemm median {d[len(d)//2]:.2f} us (min {d[0]:.2f} max {d[-1]:.2f})", flush=True)
