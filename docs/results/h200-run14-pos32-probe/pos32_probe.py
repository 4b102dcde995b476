"""Indexer timing with int64 and int32 positions, the same inputs otherwise (run as
`PYTHONPATH=<repo> python pos32_probe.py` from outside the repository on the H200). Kept as run."""
import torch, fp8ops
from fp8ops import bench
copy = bench.copy_bandwidth_tbps()
cs = torch.randn(65536, 64, device="cuda")
for B in (1, 256, 2048, 16384):
    per_call, sets = bench.indexer_inputs(B, 64, cs)
    t64 = bench.graph_time_us(fp8ops.indexer_q_quant, sets)
    sets32 = [s[:4] + (s[4].to(torch.int32),) for s in sets]
    t32 = bench.graph_time_us(fp8ops.indexer_q_quant, sets32)
    print(f"indexer B={B}: int64 positions {t64:.2f} us ({bench.pct_of_copy(per_call, t64, copy):.1f}%), int32 {t32:.2f} us", flush=True)
