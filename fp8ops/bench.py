"""fp8ops benchmark and self-check: ``python -m fp8ops.bench``.

On a GPU: measures the copy bandwidth and a launch floor, self-checks the CUDA kernels against the
CPU kernels, then times (CUDA-graph replay, 20 back-to-back calls per graph, median over replays,
inputs rotated past L2) fp8ops against the torch.compile'd torch reference producing the same
layout and, when deep_gemm is installed, against the two-kernel route (row-major quantization plus
DeepGEMM's own layout transform), and quantization + DeepGEMM GEMM end to end.

Without a GPU: self-checks the CPU kernel against the torch expression of SPEC section 5 and
times the CPU kernels on a small grid (wall clock), clearly labelled as such.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
import time

import torch

import fp8ops
from fp8ops import reference as ref

LAYOUTS = ("row", "col", "col_tma", "col_tma_packed")
GPU_M = (1, 4, 16, 64, 128, 512, 2048, 8192, 32768)
GPU_K = (2048, 7168, 16384)
CPU_M = (1, 4, 16, 64, 128, 512)
CPU_K = 2048
CALLS_PER_GRAPH = 20


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Sections:
    """Runs the benchmark's sections, logging when each starts and keeping its wall time (the JSON
    field section_seconds), so that a slow run shows where the time went."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def __call__(self, key: str, title: str, run):
        t0 = time.perf_counter()
        log(f"{title} [{t0 - self.start:.0f} s into the sections]")
        out = run()
        self.seconds[key] = round(time.perf_counter() - t0, 1)
        return out

    def done(self) -> dict[str, float]:
        log(f"sections done in {time.perf_counter() - self.start:.0f} s: {self.seconds}")
        return self.seconds


# ------------------------------------------------------------------------------------- timing


def graph_time_us(fn, arg_sets, replays: int = 30) -> float:
    """Per-call time of CALLS_PER_GRAPH back-to-back calls fn(*arg_sets[i % len(arg_sets)]) captured
    in one CUDA graph: the replay median divided by the call count."""
    calls = [arg_sets[i % len(arg_sets)] for i in range(CALLS_PER_GRAPH)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            for args in calls:
                fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for args in calls:
            fn(*args)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del graph
    return statistics.median(times) * 1e3 / CALLS_PER_GRAPH


def copy_bandwidth_tbps(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy rate, counting bytes read plus bytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return 2 * nbytes / (statistics.median(times) * 1e-3) / 1e12


def launch_floor_us() -> float:
    buf = torch.zeros(1, device="cuda")
    return graph_time_us(torch.Tensor.zero_, [(buf,)])


def n_sets_for(bytes_per_call: int) -> int:
    """Input sets to rotate through so that the graph's footprint is at least twice the L2."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return max(1, min(CALLS_PER_GRAPH, math.ceil(2 * l2 / max(1, bytes_per_call))))


def tbps(nbytes: int, us: float) -> float:
    """nbytes moved in us microseconds, in TB/s."""
    return nbytes / (us * 1e-6) / 1e12


def pct_of_copy(nbytes: int, us: float, copy_tbps: float) -> float:
    """nbytes moved in us microseconds, as a percentage of the copy rate copy_tbps (TB/s)."""
    return 100.0 * tbps(nbytes, us) / copy_tbps


def per_token_inputs(M: int, K: int, bytes_per_call: int):
    """Argument sets of bf16 [M, K] activations, as many as rotate a graph of calls moving
    bytes_per_call each past L2."""
    return [(torch.randn(M, K, dtype=torch.bfloat16, device="cuda"),) for _ in range(n_sets_for(bytes_per_call))]


def quant_bytes(M: int, K: int, x_elem: int, scale: torch.Tensor) -> int:
    """Fewest bytes moved: x read once, q and the whole scale storage written once."""
    return M * K * x_elem + M * K + scale.untyped_storage().nbytes()


# ------------------------------------------------------------------------------------- checks


def self_check_cpu(Ms, K) -> int:
    """The CPU kernel equals the torch expression of SPEC section 5, bit for bit."""
    n = 0
    for M in Ms:
        x = torch.randn(M, K, dtype=torch.bfloat16) * torch.exp(torch.randn(M, 1) * 3)
        for layout in LAYOUTS:
            for ue8m0 in (False, True):
                q, s = fp8ops.per_token_group_quant(x, 128, layout, ue8m0)
                rq, rs = ref.per_token_group_quant(x, 128, layout, ue8m0)
                if not (torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(s, rs)):
                    raise SystemExit(
                        f"SELF-CHECK FAILED: CPU kernel != torch expression (M={M}, {layout}, ue8m0={ue8m0})"
                    )
                n += 1
    return n


def self_check_cuda(Ms, Ks) -> int:
    """The CUDA kernel equals the CPU kernel, bit for bit, padding included."""
    n = 0
    for M in Ms:
        for K in Ks:
            x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda") * torch.exp(torch.randn(M, 1, device="cuda") * 3)
            for layout in LAYOUTS:
                q, s = fp8ops.per_token_group_quant(x, 128, layout, pad_rows_to=4)
                cq, cs = fp8ops.per_token_group_quant(x.cpu(), 128, layout, pad_rows_to=4)
                same = torch.equal(q.view(torch.uint8).cpu(), cq.view(torch.uint8))
                same = same and torch.equal(s.cpu(), cs) and s.stride() == cs.stride()
                if not same:
                    raise SystemExit(f"SELF-CHECK FAILED: CUDA kernel != CPU kernel (M={M}, K={K}, {layout})")
                n += 1
    return n


# --------------------------------------------------------------------------------- GPU tables


def compiled_reference(layout: str, ue8m0: bool = False):
    # Each layout is its own graph, and dynamic M adds a few (0/1 specialization): allow them.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)

    def f(x):
        return ref.per_token_group_quant(x, 128, layout, ue8m0 or layout == "col_tma_packed")

    return torch.compile(f, fullgraph=True, dynamic=True)


def _quant(x, layout, ue8m0=False):
    return fp8ops.per_token_group_quant(x, 128, layout, ue8m0)


def _scales_then(transform, quant, x):
    """A quantizer producing row-major scales, then a layout transform of those scales."""
    return transform(quant(x)[1])


def _quant_gemm(dg, layout, w, ws, x, out):
    q, s = fp8ops.per_token_group_quant(x, 128, layout)
    dg.fp8_gemm_nt((q, s), (w, ws), out)


def _quant_gemm_placed(dg, layout, w, ws, x, out, pad_bytes):
    """_quant_gemm with a pad_bytes allocation made first and alive through it, so that the caching
    allocator puts q and its scales (and the transform's output) pad_bytes further on."""
    pad = torch.empty(pad_bytes, dtype=torch.uint8, device=x.device)
    _quant_gemm(dg, layout, w, ws, x, out)
    del pad


def _quant_einsum(dg, contiguous_scales, w, ws, x, out):
    q, s = fp8ops.group_major_quant(x)
    dg.fp8_einsum("bhr,hdr->bhd", (q, s.contiguous() if contiguous_scales else s), (w, ws), out)


def bench_per_token(Ms, Ks, copy_tbps, dg):
    rows = []
    compiled = {layout: compiled_reference(layout) for layout in LAYOUTS}
    compiled_row_ue8m0 = compiled_reference("row", ue8m0=True)
    for K in Ks:
        for M in Ms:
            probe = torch.empty(M, K, dtype=torch.bfloat16, device="cuda")
            _, s_probe = fp8ops.per_token_group_quant(probe, 128, "col_tma")
            xs = per_token_inputs(M, K, quant_bytes(M, K, 2, s_probe))
            # fp8ops' four layouts back to back first, then the references, so that the layouts
            # are compared under the same conditions (timed in between the references' graphs,
            # the row layout measured about 0.2 us faster than the others at M=512 K=2048 in runs
            # 14-17, which fp8ops' layouts timed back to back did not show; docs/PERF.md).
            shape_rows = []
            for layout in LAYOUTS:
                _, s = fp8ops.per_token_group_quant(xs[0][0], 128, layout)
                row = {"M": M, "K": K, "layout": layout, "bytes": quant_bytes(M, K, 2, s)}
                row["fp8ops_us"] = graph_time_us(functools.partial(_quant, layout=layout), xs)
                if layout == "col_tma" and K == 7168:
                    # The rows of published per-token figures (SGLang's, col_tma at K=7168), also
                    # timed with one x in all calls of the graph: where x fits in the L2, that
                    # protocol measures a partly cached read, and rotated inputs (above) do not.
                    row["fp8ops_same_input_us"] = graph_time_us(functools.partial(_quant, layout=layout), xs[:1])
                shape_rows.append(row)
            for row in shape_rows:
                layout = row["layout"]
                row["compiled_ref_us"] = graph_time_us(compiled[layout], xs)
                if dg is not None and layout in ("col_tma", "col_tma_packed"):
                    packed = layout == "col_tma_packed"
                    transform = (
                        dg.get_mn_major_tma_aligned_packed_ue8m0_tensor
                        if packed
                        else dg.get_mn_major_tma_aligned_tensor
                    )
                    s_rows = [(_quant(x, "row", packed)[1],) for (x,) in xs]
                    row["dg_transform_us"] = graph_time_us(transform, s_rows)
                    ours_row = functools.partial(_quant, layout="row", ue8m0=packed)
                    row["fp8ops_row_plus_dg_transform_us"] = graph_time_us(
                        functools.partial(_scales_then, transform, ours_row), xs
                    )
                    cr = compiled_row_ue8m0 if packed else compiled["row"]
                    row["compiled_ref_row_plus_dg_transform_us"] = graph_time_us(
                        functools.partial(_scales_then, transform, cr), xs
                    )
                row["fp8ops_TBps"] = tbps(row["bytes"], row["fp8ops_us"])
                row["pct_of_copy"] = pct_of_copy(row["bytes"], row["fp8ops_us"], copy_tbps)
                row["speedup_vs_compiled_ref"] = row["compiled_ref_us"] / row["fp8ops_us"]
                rows.append(row)
                same = row.get("fp8ops_same_input_us")
                log(
                    f"  M={M:6d} K={K:6d} {layout:15s} fp8ops {row['fp8ops_us']:9.2f} us "
                    f"({row['pct_of_copy']:5.1f}% of copy)  compiled ref {row['compiled_ref_us']:9.2f} us"
                    + (f"  (one x in all calls: {same:.2f} us)" if same is not None else "")
                )
    return rows


def bench_end_to_end(dg, Ms=(1, 2, 4, 8, 16, 32, 64, 128), N=4096, K=7168):
    """quant + DeepGEMM fp8_gemm_nt: scales written in DeepGEMM's layout versus row-major scales
    that DeepGEMM transforms inside the call. Each route is timed twice: as it comes (every call of
    the graph reuses the same memory, so one placement of q and its scales), and with the 20 calls
    of the graph at 20 placements (a 0, 512, ..., 9728-byte allocation ahead of each call), since
    DeepGEMM's small-M GEMM time depends on where its operands sit (docs/PERF.md)."""
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    ws = torch.rand(N // 128, K // 128, device="cuda") + 0.5
    rows = []
    for M in Ms:
        sets = [
            (
                torch.randn(M, K, dtype=torch.bfloat16, device="cuda"),
                torch.empty(M, N, dtype=torch.bfloat16, device="cuda"),
            )
            for _ in range(4)
        ]
        placed = [(*sets[i % len(sets)], 512 * i) for i in range(CALLS_PER_GRAPH)]
        s_rows = [(_quant(x, "row")[1],) for x, _ in sets]
        row = {"M": M, "N": N, "K": K}
        for route, layout in (("col_tma_route", "col_tma"), ("row_major_route", "row")):
            row[f"{route}_us"] = graph_time_us(functools.partial(_quant_gemm, dg, layout, w, ws), sets)
            row[f"{route}_placed_us"] = graph_time_us(functools.partial(_quant_gemm_placed, dg, layout, w, ws), placed)
        row["transform_alone_us"] = graph_time_us(dg.get_mn_major_tma_aligned_tensor, s_rows)
        for tag in ("", "_placed"):
            row[f"saved{tag}_us"] = row[f"row_major_route{tag}_us"] - row[f"col_tma_route{tag}_us"]
            row[f"saved{tag}_over_transform"] = row[f"saved{tag}_us"] / row["transform_alone_us"]
        rows.append(row)
        log(
            f"  e2e M={M:4d}: col_tma route {row['col_tma_route_us']:7.2f} us "
            f"({row['col_tma_route_placed_us']:7.2f} over placements), row-major route "
            f"{row['row_major_route_us']:7.2f} us ({row['row_major_route_placed_us']:7.2f}), "
            f"transform alone {row['transform_alone_us']:6.2f} us"
        )
    return rows


def bench_einsum(dg, Ts=(1, 8, 37, 64, 512), G=8, D=1024, N=512):
    """group_major_quant + DeepGEMM fp8_einsum("bhr,hdr->bhd"): native group-major scales versus
    the same scales made contiguous (the layout DeepGEMM must transform)."""
    w = torch.randn(G, N, D, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    ws = torch.rand(G, N // 128, D // 128, device="cuda") + 0.5
    rows = []
    for T in Ts:
        sets = [
            (
                torch.randn(T, G, D + 128, dtype=torch.bfloat16, device="cuda")[:, :, :D],
                torch.empty(T, G, N, dtype=torch.bfloat16, device="cuda"),
            )
            for _ in range(4)
        ]
        row = {
            "T": T,
            "G": G,
            "D": D,
            "N": N,
            "native_route_us": graph_time_us(functools.partial(_quant_einsum, dg, False, w, ws), sets),
            "contiguous_scales_route_us": graph_time_us(functools.partial(_quant_einsum, dg, True, w, ws), sets),
            "quant_alone_us": graph_time_us(fp8ops.group_major_quant, [(x,) for x, _ in sets]),
        }
        rows.append(row)
        log(
            f"  einsum T={T:4d}: native {row['native_route_us']:7.2f} us, contiguous scales "
            f"{row['contiguous_scales_route_us']:7.2f} us, quant alone {row['quant_alone_us']:6.2f} us"
        )
    return rows


def _group_major(x, packed):
    return fp8ops.group_major_quant(x, packed=packed)


def batched_scales_reference(ue8m0: bool):
    """torch.compile'd torch expression of a per-group quantizer of [T, G, D] whose fp32 scales
    (UE8M0 values with ue8m0) come out as [G, T, S] contiguous, the input on which DeepGEMM's
    layout helpers run their transpose (and pack) kernel. Its own function per setting, so that
    each has its own compile cache."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)

    def f(x):
        q, s = ref.quant_groups(x, 128, ue8m0, 1e-10)
        return q.contiguous(), s.permute(1, 0, 2).contiguous()

    return torch.compile(f, fullgraph=True, dynamic=True)


def group_major_inputs(T: int, G: int, D: int):
    """Argument sets of bf16 strided [T, G, D] views (column slices of a wider activation), rotated
    past L2."""
    return [
        (torch.randn(T, G, D + 128, dtype=torch.bfloat16, device="cuda")[:, :, :D],)
        for _ in range(n_sets_for(T * G * D * 3))
    ]


def bench_group_major(dg, copy_tbps):
    rows = []
    compiled = {
        p: torch.compile(functools.partial(ref.group_major_quant, packed=p), fullgraph=True, dynamic=True)
        for p in (False, True)
    }
    compiled_batched = {p: batched_scales_reference(ue8m0=p) for p in (False, True)}
    for T in (1, 8, 64, 512, 4096):
        for G in (8, 16):
            for D in (512, 4096):
                xs = group_major_inputs(T, G, D)
                for packed in (False, True):
                    _, s = fp8ops.group_major_quant(xs[0][0], packed=packed)
                    nbytes = quant_bytes(T * G, D, 2, s)
                    row = {"T": T, "G": G, "D": D, "packed": packed, "bytes": nbytes}
                    row["fp8ops_us"] = graph_time_us(functools.partial(_group_major, packed=packed), xs)
                    row["compiled_ref_us"] = graph_time_us(compiled[packed], xs)
                    if dg is not None:
                        # The route without fp8ops: the compiled reference, then DeepGEMM's helper
                        # to the same group-major layout (MN-major per group, packed or not).
                        transform = (
                            dg.get_mn_major_tma_aligned_packed_ue8m0_tensor
                            if packed
                            else dg.get_mn_major_tma_aligned_tensor
                        )
                        row["compiled_ref_plus_dg_transform_us"] = graph_time_us(
                            functools.partial(_scales_then, transform, compiled_batched[packed]), xs
                        )
                    row["pct_of_copy"] = pct_of_copy(nbytes, row["fp8ops_us"], copy_tbps)
                    rows.append(row)
                    log(
                        f"  group-major T={T:5d} G={G:3d} D={D:5d} packed={packed!s:5s} fp8ops "
                        f"{row['fp8ops_us']:8.2f} us ({row['pct_of_copy']:5.1f}% of copy), compiled ref "
                        f"{row['compiled_ref_us']:8.2f} us, compiled ref + DeepGEMM transform "
                        f"{row.get('compiled_ref_plus_dg_transform_us', float('nan')):8.2f} us"
                    )
    pack_rows = []
    for M, S in ((128, 56), (4096, 56), (32768, 56), (32768, 128)):
        s = [(ref.ue8m0_round(torch.rand(M, S, device="cuda") + 1e-3),) for _ in range(n_sets_for(M * S * 5))]
        row = {"M": M, "S": S, "fp8ops_pack_us": graph_time_us(fp8ops.pack_ue8m0, s)}
        if dg is not None:
            row["dg_pack_us"] = graph_time_us(dg.get_mn_major_tma_aligned_packed_ue8m0_tensor, s)
        pack_rows.append(row)
        log(
            f"  pack_ue8m0 M={M} S={S}: fp8ops {row['fp8ops_pack_us']:.2f} us, "
            f"deep_gemm {row.get('dg_pack_us', float('nan')):.2f} us"
        )
    return rows, pack_rows


def indexer_inputs(B: int, H: int, cs: torch.Tensor):
    """Byte count of one indexer_q_quant call and argument sets rotated past L2: bf16 q, the weight
    as a column slice of a wider projection output, a shared fp32 cos/sin cache, int64 positions."""
    per_call = B * H * (128 * 3 + 2 + 4) + B * (64 * 4 + 8)
    sets = [
        (
            torch.randn(B, H, 128, dtype=torch.bfloat16, device="cuda"),
            torch.randn(B, H + 8, dtype=torch.bfloat16, device="cuda")[:, :H],
            0.5,
            cs,
            torch.randint(0, cs.shape[0], (B,), device="cuda"),
        )
        for _ in range(n_sets_for(per_call))
    ]
    return per_call, sets


def bench_indexer(copy_tbps, Bs=(1, 8, 64, 256, 512, 2048, 16384), H=64, max_pos=65536):
    """indexer_q_quant (DeepSeek-V4 options: rope_tail, interleaved, Hadamard) against the
    torch.compile'd fp32 torch expression of the same."""
    cs = torch.randn(max_pos, 64, device="cuda")
    compiled = torch.compile(ref.indexer_q_quant_fp32, fullgraph=True, dynamic=True)
    rows = []
    for B in Bs:
        per_call, sets = indexer_inputs(B, H, cs)
        row = {"B": B, "H": H, "bytes": per_call}
        row["fp8ops_us"] = graph_time_us(fp8ops.indexer_q_quant, sets)
        row["compiled_ref_us"] = graph_time_us(compiled, sets)
        row["pct_of_copy"] = pct_of_copy(per_call, row["fp8ops_us"], copy_tbps)
        rows.append(row)
        log(
            f"  indexer B={B:6d} H={H}: fp8ops {row['fp8ops_us']:8.2f} us ({row['pct_of_copy']:5.1f}% of copy), "
            f"compiled ref {row['compiled_ref_us']:8.2f} us"
        )
    return rows


def gpu_main(args) -> dict:
    try:
        import deep_gemm as dg
    except ImportError:
        dg = None
    props = torch.cuda.get_device_properties(0)
    log(
        f"fp8ops benchmark on {props.name} ({props.multi_processor_count} SMs, L2 {props.L2_cache_size >> 20} MiB), "
        f"torch {torch.__version__}, deep_gemm {'present' if dg else 'absent'}"
    )
    log("self-check: CPU kernel vs torch expression, CUDA kernel vs CPU kernel ...")
    n = self_check_cpu((1, 5, 17, 130), 2048) + self_check_cuda((1, 5, 17, 130, 1031), (2048, 7168))
    log(f"self-check passed ({n} cases)")
    copy_tbps = copy_bandwidth_tbps()
    floor = launch_floor_us()
    log(f"copy bandwidth {copy_tbps:.3f} TB/s (read + write), launch floor {floor:.2f} us per call")
    Ms = GPU_M if not args.quick else (1, 16, 128, 2048, 32768)
    Ks = GPU_K if not args.quick else (7168,)
    result = {
        "device": props.name,
        "torch": torch.__version__,
        "deep_gemm": dg is not None,
        "copy_TBps": copy_tbps,
        "launch_floor_us": floor,
        "calls_per_graph": CALLS_PER_GRAPH,
    }
    section = Sections()
    if "per_token" in args.sections:
        result["per_token"] = section(
            "per_token", "per_token_group_quant (bf16, group 128):", lambda: bench_per_token(Ms, Ks, copy_tbps, dg)
        )
    if "e2e" in args.sections and dg is not None:
        result["end_to_end"] = section(
            "end_to_end", "end to end, quant + deep_gemm.fp8_gemm_nt (N=4096, K=7168):", lambda: bench_end_to_end(dg)
        )
    if "group_major" in args.sections:
        result["group_major"], result["pack_ue8m0"] = section(
            "group_major", "group_major_quant and pack_ue8m0:", lambda: bench_group_major(dg, copy_tbps)
        )
    if "e2e" in args.sections and dg is not None:
        title = "end to end, group_major_quant + deep_gemm.fp8_einsum (G=8, D=1024, N=512):"
        result["einsum"] = section("einsum", title, lambda: bench_einsum(dg))
    if "indexer" in args.sections:
        result["indexer"] = section(
            "indexer", "indexer_q_quant (rope_tail, interleaved, Hadamard):", lambda: bench_indexer(copy_tbps)
        )
    result["section_seconds"] = section.done()
    return result


# --------------------------------------------------------------------------------------- CPU


def wall_median_us(fn, reps: int = 15) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def cpu_main(args) -> dict:
    log("No CUDA device: CPU reference kernels only (wall clock, not GPU figures).")
    section = Sections()
    n = section("self_check", "self-check: CPU kernel vs torch expression ...", lambda: self_check_cpu(CPU_M, CPU_K))
    log(f"self-check passed ({n} cases)")
    rows = section("per_token", "per_token_group_quant on the CPU (bf16, group 128):", bench_cpu)
    return {"device": "cpu", "torch": torch.__version__, "cpu_rows": rows, "section_seconds": section.done()}


def bench_cpu() -> list:
    rows = []
    for M in CPU_M:
        x = torch.randn(M, CPU_K, dtype=torch.bfloat16)
        for layout in LAYOUTS:
            row = {
                "M": M,
                "K": CPU_K,
                "layout": layout,
                "fp8ops_cpu_us": wall_median_us(functools.partial(fp8ops.per_token_group_quant, x, 128, layout)),
                "torch_eager_ref_cpu_us": wall_median_us(functools.partial(ref.per_token_group_quant, x, 128, layout)),
            }
            rows.append(row)
            log(
                f"  CPU M={M:4d} K={CPU_K} {layout:15s} fp8ops {row['fp8ops_cpu_us']:9.1f} us, "
                f"torch eager reference {row['torch_eager_ref_cpu_us']:9.1f} us"
            )
    return rows


# ---------------------------------------------------------------------------------- reporting


def print_tables(res: dict) -> None:
    if res["device"] == "cpu":
        print("\nCPU reference kernels (wall clock, median of 15; NOT GPU figures)")
        print(f"{'M':>6} {'K':>6} {'layout':15} {'fp8ops us':>11} {'torch eager us':>15}")
        for r in res["cpu_rows"]:
            print(
                f"{r['M']:6d} {r['K']:6d} {r['layout']:15} {r['fp8ops_cpu_us']:11.1f} "
                f"{r['torch_eager_ref_cpu_us']:15.1f}"
            )
        return
    print(
        f"\n{res['device']}: copy {res['copy_TBps']:.3f} TB/s, launch floor {res['launch_floor_us']:.2f} us "
        f"(per call, {res['calls_per_graph']} calls per CUDA graph)"
    )
    if "per_token" in res:
        print("\nper_token_group_quant, bf16, group 128 (us per call)")
        print(
            f"{'M':>6} {'K':>6} {'layout':15} {'fp8ops':>9} {'%copy':>6} {'vs row':>7} {'compiled':>9} {'speedup':>8}"
            f" {'row+DGtr':>9} {'DGtr':>7}"
        )
        row_time = {(r["M"], r["K"]): r["fp8ops_us"] for r in res["per_token"] if r["layout"] == "row"}
        for r in res["per_token"]:
            print(
                f"{r['M']:6d} {r['K']:6d} {r['layout']:15} {r['fp8ops_us']:9.2f} {r['pct_of_copy']:6.1f} "
                f"{r['fp8ops_us'] / row_time[(r['M'], r['K'])]:7.3f} {r['compiled_ref_us']:9.2f} "
                f"{r['speedup_vs_compiled_ref']:8.2f} {r.get('fp8ops_row_plus_dg_transform_us', float('nan')):9.2f} "
                f"{r.get('dg_transform_us', float('nan')):7.2f}"
            )
    if "end_to_end" in res:
        print("\nquant + deep_gemm.fp8_gemm_nt, N=4096 K=7168 (us per call; 'placed': 20 placements)")
        print(
            f"{'M':>5} {'col_tma route':>14} {'row route':>10} {'saved':>7} {'transform':>10} {'saved/tr':>9} "
            f"{'col_tma placed':>15} {'row placed':>11} {'saved/tr placed':>16}"
        )
        for r in res["end_to_end"]:
            print(
                f"{r['M']:5d} {r['col_tma_route_us']:14.2f} {r['row_major_route_us']:10.2f} {r['saved_us']:7.2f} "
                f"{r['transform_alone_us']:10.2f} {r['saved_over_transform']:9.2f} "
                f"{r['col_tma_route_placed_us']:15.2f} {r['row_major_route_placed_us']:11.2f} "
                f"{r['saved_placed_over_transform']:16.2f}"
            )
    if "group_major" in res:
        print("\ngroup_major_quant, bf16 strided [T, G, D] (us per call)")
        print(f"{'T':>5} {'G':>3} {'D':>5} {'packed':>6} {'fp8ops':>9} {'%copy':>6} {'compiled':>9} {'ref+DGtr':>9}")
        for r in res["group_major"]:
            print(
                f"{r['T']:5d} {r['G']:3d} {r['D']:5d} {r['packed']!s:>6} {r['fp8ops_us']:9.2f} {r['pct_of_copy']:6.1f} "
                f"{r['compiled_ref_us']:9.2f} {r.get('compiled_ref_plus_dg_transform_us', float('nan')):9.2f}"
            )
        print("\npack_ue8m0 (us per call)")
        for r in res["pack_ue8m0"]:
            print(
                f"M={r['M']:6d} S={r['S']:4d} fp8ops {r['fp8ops_pack_us']:7.2f}  "
                f"deep_gemm {r.get('dg_pack_us', float('nan')):7.2f}"
            )


def print_einsum_and_indexer(res: dict) -> None:
    if "einsum" in res:
        print("\ngroup_major_quant + deep_gemm.fp8_einsum bhr,hdr->bhd, G=8 D=1024 N=512 (us per call)")
        print(f"{'T':>5} {'native scales':>14} {'contiguous scales':>18} {'quant alone':>12}")
        for r in res["einsum"]:
            print(
                f"{r['T']:5d} {r['native_route_us']:14.2f} {r['contiguous_scales_route_us']:18.2f} "
                f"{r['quant_alone_us']:12.2f}"
            )
    if "indexer" not in res:
        return
    print("\nindexer_q_quant, bf16, H=64, rope_tail + interleaved + Hadamard (us per call)")
    print(f"{'B':>6} {'fp8ops':>9} {'%copy':>6} {'x floor':>8} {'compiled':>9} {'speedup':>8}")
    for r in res["indexer"]:
        print(
            f"{r['B']:6d} {r['fp8ops_us']:9.2f} {r['pct_of_copy']:6.1f} {r['fp8ops_us'] / res['launch_floor_us']:8.2f} "
            f"{r['compiled_ref_us']:9.2f} {r['compiled_ref_us'] / r['fp8ops_us']:8.2f}"
        )


def plot(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res.get("per_token") or []
    Ks = sorted({r["K"] for r in rows})
    fig, axes = plt.subplots(1, max(1, len(Ks)), figsize=(6 * max(1, len(Ks)), 4.5), squeeze=False)
    for ax, K in zip(axes[0], Ks, strict=False):
        for layout in LAYOUTS:
            sel = [r for r in rows if r["K"] == K and r["layout"] == layout]
            ax.plot([r["M"] for r in sel], [r["fp8ops_us"] for r in sel], marker="o", label=f"fp8ops {layout}")
        for key, label in (
            ("compiled_ref_us", "compiled ref (col_tma)"),
            ("fp8ops_row_plus_dg_transform_us", "row + DeepGEMM transform"),
        ):
            sel = [r for r in rows if r["K"] == K and r["layout"] == "col_tma" and key in r]
            if sel:
                ax.plot([r["M"] for r in sel], [r[key] for r in sel], linestyle="--", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("M")
        ax.set_ylabel("us per call")
        ax.set_title(f"K = {K}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8ops.bench", description=__doc__.splitlines()[0])
    p.add_argument("--json", default="bench.json", help="where to write the results (default bench.json)")
    p.add_argument("--plot", default=None, help="optional PNG plot of time against M")
    p.add_argument("--quick", action="store_true", help="a smaller GPU grid")
    p.add_argument("--cpu", action="store_true", help="run the CPU benchmark even when a GPU is present")
    p.add_argument(
        "--sections",
        default="per_token,e2e,group_major,indexer",
        help="comma-separated GPU sections: per_token, e2e, group_major, indexer",
    )
    args = p.parse_args(argv)
    args.sections = set(args.sections.split(","))
    res = gpu_main(args) if torch.cuda.is_available() and not args.cpu else cpu_main(args)
    print_tables(res)
    print_einsum_and_indexer(res)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=1)
    log(f"results written to {args.json}")
    if args.plot:
        try:
            plot(res, args.plot)
            log(f"plot written to {args.plot}")
        except ImportError:
            log("matplotlib is not installed: no plot")
    return 0


if __name__ == "__main__":
    sys.exit(main())
