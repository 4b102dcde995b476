import json
import torch, deep_gemm as dg
import fp8ops
M, N, K = 1, 4096, 7168
w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
ws = torch.rand(N // 128, K // 128, device="cuda") + 0.5
x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda"); out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
q, s = fp8ops.per_token_group_quant(x, 128, "col_tma")
qr, sr = fp8ops.per_token_group_quant(x, 128, "row")
t = dg.get_mn_major_tma_aligned_tensor(sr)
for name, tt in (("ours", s), ("DG transposed", t), ("q ours", q), ("q row-call", qr)):
    print(name, tuple(tt.shape), tt.stride(), tt.dtype, "ptr%1024", tt.data_ptr() % 1024, "storage", tt.untyped_storage().nbytes(), "storage ptr%1024", tt.untyped_storage().data_ptr() % 1024, "offset", tt.storage_offset())
names = {}
for label, sc in (("ours", s), ("transposed", t)):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        dg.fp8_gemm_nt((q, sc), (w, ws), out); torch.cuda.synchronize()
    prof.export_chrome_trace("/tmp/n.json")
    for e in json.load(open("/tmp/n.json"))["traceEvents"]:
        if e.get("cat") == "kernel": print(label, e["dur"], e["name"][:400]); print(label, "args", {k: v for k, v in e.get("args", {}).items() if k in ("grid", "block", "shared memory", "registers per thread")})
