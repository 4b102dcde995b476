import functools, json
import torch, deep_gemm as dg
import fp8ops
M, N, K = 1, 4096, 7168
w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
ws = torch.rand(N // 128, K // 128, device="cuda") + 0.5
x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda"); out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
dummy = fp8ops.per_token_group_quant(torch.randn(M, K, dtype=torch.bfloat16, device="cuda"), 128, "row")[1]
zbuf = torch.zeros(1, device="cuda")
def a():
    q, s = fp8ops.per_token_group_quant(x, 128, "col_tma"); dg.fp8_gemm_nt((q, s), (w, ws), out)
def b():
    q, s = fp8ops.per_token_group_quant(x, 128, "col_tma"); zbuf.zero_(); dg.fp8_gemm_nt((q, s), (w, ws), out)
def c():
    q, s = fp8ops.per_token_group_quant(x, 128, "col_tma"); dg.get_mn_major_tma_aligned_tensor(dummy); dg.fp8_gemm_nt((q, s), (w, ws), out)
def d():
    q, s = fp8ops.per_token_group_quant(x, 128, "row"); dg.fp8_gemm_nt((q, s), (w, ws), out)
def e():
    dg.fp8_gemm_nt((q0, s0), (w, ws), out)
q0, s0 = fp8ops.per_token_group_quant(x, 128, "col_tma")
for name, fn in (("quant col_tma, gemm", a), ("quant col_tma, zero_, gemm", b), ("quant col_tma, DG transpose of other scales, gemm", c), ("quant row, gemm (transform inside)", d), ("gemm alone (static col_tma scales)", e)):
    for _ in range(2):
        for _ in range(20): fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20): fn()
    for _ in range(3): g.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        g.replay(); torch.cuda.synchronize()
    prof.export_chrome_trace("/tmp/t.json")
    ev = sorted([e for e in json.load(open("/tmp/t.json"))["traceEvents"] if e.get("cat") == "kernel"], key=lambda e: e["ts"])
    gem = [e["dur"] for e in ev if "gemm" in e["name"]]
    span = ev[-1]["ts"] + ev[-1]["dur"] - ev[0]["ts"]
    gem.sort()
    print(f"{name:52s}: per iteration {span / 20:6.2f} us, gemm kernel median {gem[len(gem)//2]:6.2f} us (min {gem[0]:.2f}, max {gem[-1]:.2f})", flush=True)
