"""Every op runs on its inputs' device, whatever the current device is (tensor-parallel ranks call
them without switching devices). Needs two GPUs; skipped, by name, with fewer."""

import pytest
import torch
from helpers import assert_same_quant, check_runs_on_current_stream, make_input, raw_bytes

import fp8ops

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="fewer than two GPUs"),
]


def all_ops(x, xg, s_fp32, q_idx, w_idx, cos_sin, positions):
    """Every op on one device's inputs; returns every output."""
    outs = []
    for layout in ("row", "col", "col_tma", "col_tma_packed"):
        outs += fp8ops.per_token_group_quant(x, 128, layout, pad_rows_to=4)
    outs += fp8ops.group_major_quant(xg)
    outs += fp8ops.group_major_quant(xg, packed=True)
    outs.append(fp8ops.pack_ue8m0(s_fp32))
    q, s = fp8ops.per_token_group_quant(x, 128, "col_tma")
    outs.append(fp8ops.dequant(q, s, 128, torch.bfloat16))
    outs += fp8ops.indexer_q_quant(q_idx, w_idx, 0.5, cos_sin, positions)
    return outs


def inputs(device):
    x = make_input((37, 1024), torch.bfloat16)
    xg = make_input((9, 4, 640), torch.bfloat16)
    _, s = fp8ops.per_token_group_quant(x, 128, "row", ue8m0=True)
    # indexer_q_quant: q [B, H, 128], weight [B, H], a cos/sin cache and positions.
    q_idx = make_input((5, 8, 128), torch.bfloat16, zero_groups=False)
    w_idx = torch.randn(5, 8).to(torch.bfloat16)
    cos_sin = torch.randn(64, 64)
    positions = torch.randint(0, 64, (5,))
    return [t.to(device) for t in (x, xg, s, q_idx, w_idx, cos_sin, positions)]


@pytest.mark.parametrize("current, target", ((0, 1), (1, 0)))
def test_ops_run_on_the_input_device(current, target):
    cpu_inputs = [t.cpu() for t in inputs("cpu")]
    expected = all_ops(*cpu_inputs)
    with torch.cuda.device(current):
        outs = all_ops(*[t.to(f"cuda:{target}") for t in cpu_inputs])
        torch.cuda.synchronize(target)
    for out, exp in zip(outs, expected, strict=True):
        assert out.device == torch.device("cuda", target)
        assert out.stride() == exp.stride()
        assert torch.equal(raw_bytes(out).cpu(), raw_bytes(exp))


@pytest.mark.parametrize("current, target", ((0, 1), (1, 0)))
def test_launches_on_the_input_devices_current_stream(current, target):
    check_runs_on_current_stream(device=target, current=current)


@pytest.mark.parametrize("device", (0, 1))
def test_graphs_on_each_device(device):
    x = make_input((37, 1024), torch.bfloat16, device=f"cuda:{device}")
    with torch.cuda.device(device):
        fp8ops.per_token_group_quant(x, 128, "col_tma_packed", pad_rows_to=4)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        # torch.cuda.graph's default capture stream is one per process, made on the device that
        # was current at the first capture; capture on a stream of this device instead.
        with torch.cuda.graph(graph, stream=torch.cuda.Stream(device)):
            gq, gs = fp8ops.per_token_group_quant(x, 128, "col_tma_packed", pad_rows_to=4)
    for _ in range(2):
        x.copy_(make_input((37, 1024), torch.bfloat16, device=f"cuda:{device}"))
        graph.replay()
        torch.cuda.synchronize(device)
        cq, cs = fp8ops.per_token_group_quant(x.cpu(), 128, "col_tma_packed", pad_rows_to=4)
        assert_same_quant(gq, gs, cq, cs, "graph")


def test_inputs_on_two_devices_raise():
    q, s = fp8ops.per_token_group_quant(make_input((8, 256), torch.bfloat16, device="cuda:0"), 128, "col")
    with pytest.raises(RuntimeError, match="same device"):
        fp8ops.dequant(q, s.to("cuda:1"))
