import sys, torch, fp8ops
print(fp8ops._LIBRARY, flush=True)
torch.manual_seed(0)
bad = 0
for B, H, dt in ((256, 64, torch.bfloat16), (2048, 64, torch.bfloat16), (4099, 64, torch.float16), (2048, 16, torch.bfloat16)):
    for tail, neox in ((True, False), (False, True)):
        q = torch.randn(B, H, 128, dtype=dt)
        w = torch.randn(B, H + 8, dtype=dt)[:, :H]
        cs = torch.randn(1000, 64)
        pos = torch.randint(0, 1000, (B,))
        a = fp8ops.indexer_q_quant(q, w, 0.5, cs, pos, rope_tail=tail, rope_neox=neox, hadamard=True)
        g = fp8ops.indexer_q_quant(q.cuda(), w.cuda(), 0.5, cs.cuda(), pos.cuda(), rope_tail=tail, rope_neox=neox, hadamard=True)
        torch.cuda.synchronize()
        ok = torch.equal(a[0].view(torch.uint8), g[0].cpu().view(torch.uint8)) and torch.equal(a[1], g[1].cpu())
        bad += not ok
        print(B, H, dt, tail, neox, "ok" if ok else "MISMATCH", flush=True)
sys.exit(1 if bad else 0)
