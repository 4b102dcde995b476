"""fp8ops benchmark and self-check: python -m fp8ops.bench

On a GPU: measures the copy rate and the launch floor, self-checks every CUDA kernel against the
CPU kernel bit for bit, then times each op (CUDA-graph replay of 20 back-to-back calls, median
over replays, inputs of a tenth of the L2 or more rotated past it) beside its baselines in the
same run: the leanest torch expression compiled per shape, the unfused route a fused op
replaces, and, with deep_gemm installed, DeepGEMM's layout transform and the GEMM end to end.

Without a GPU: self-checks the CPU kernels against the torch expressions of the SPEC and times
them on a small grid (wall clock, labelled as CPU figures).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time

import torch

import fp8ops
from fp8ops import baselines as lean
from fp8ops import reference as ref
from fp8ops.timing import (
    CALLS_PER_GRAPH,
    copy_bandwidth_tbps,
    graph_time_us,
    launch_floor_us,
    n_sets_for,
    pct_of_copy,
    wall_median_us,
)

LAYOUTS = ("row", "col", "col_tma", "col_tma_packed")
GPU_SECTIONS = ("per_token", "e2e", "group_major", "indexer", "silu", "rms", "block")
CPU_SECTIONS = ("per_token", "silu", "rms", "block")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def compiled(fn):
    """fn compiled the way a careful user would: whole graph, static shapes (one graph per shape)."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
    return torch.compile(fn, fullgraph=True, dynamic=False)


def storage_bytes(*tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


# ------------------------------------------------------------------------------------- checks


def self_check_cpu() -> int:
    """The CPU kernels equal the torch expressions of SPEC, bit for bit."""
    n = 0
    for M in (1, 5, 17, 130):
        x = (torch.randn(M, 2048) * torch.exp(torch.randn(M, 1) * 3)).bfloat16()
        for layout in LAYOUTS:
            for ue8m0 in (False, True):
                got = fp8ops.per_token_group_quant(x, 128, layout, ue8m0)
                want = ref.per_token_group_quant(x, 128, layout, ue8m0)
                _require_same(got, want, f"per_token_group_quant M={M} {layout} ue8m0={ue8m0}")
                n += 1
        _require_same(fp8ops.block_quant(x), ref.block_quant(x), f"block_quant M={M}")
        n += 1
    return n


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.cpu().reshape(-1).contiguous().view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


def _require_same(got, want, what):
    for a, b in zip(got, want, strict=True):
        same = a.shape == b.shape and a.stride() == b.stride() and torch.equal(_bytes(a), _bytes(b))
        if not same:
            raise SystemExit(f"SELF-CHECK FAILED: {what}")


def self_check_cuda() -> int:
    """Every CUDA kernel equals its CPU kernel, bit for bit, padding included."""
    n = 0
    for M in (1, 5, 17, 130, 1031):
        x = (torch.randn(M, 7168, device="cuda") * torch.exp(torch.randn(M, 1, device="cuda") * 3)).bfloat16()
        w = torch.randn(7168, dtype=torch.bfloat16, device="cuda")
        for layout in LAYOUTS:
            cases = [
                (fp8ops.per_token_group_quant, (x, 128, layout, False, 4)),
                (fp8ops.silu_mul_quant, (x, 128, layout, False, 4)),
                (fp8ops.rms_norm_quant, (x, w, 1e-6, None, 128, layout, False, 4)),
            ]
            for op, args in cases:
                cpu_args = [a.cpu() if torch.is_tensor(a) else a for a in args]
                _require_same(op(*args), op(*cpu_args), f"{op.__name__} M={M} {layout}")
                n += 1
        _require_same(fp8ops.block_quant(x), fp8ops.block_quant(x.cpu()), f"block_quant M={M}")
        n += 1
    xm = torch.randn(8, 64, 4096, dtype=torch.bfloat16, device="cuda")
    m = torch.randint(0, 65, (8,), dtype=torch.int32, device="cuda")
    got = fp8ops.silu_mul_quant(xm, 128, "col_tma", masked_m=m)
    want = fp8ops.silu_mul_quant(xm.cpu(), 128, "col_tma", masked_m=m.cpu())
    for e in range(8):
        k = int(m[e])
        _require_same((got[0][e, :k], got[1][e, :k]), (want[0][e, :k], want[1][e, :k]), f"masked silu e={e}")
    return n + 1


# ----------------------------------------------------------------------------------- sections


def _per_token(x, layout, ue8m0=False):
    return fp8ops.per_token_group_quant(x, 128, layout, ue8m0)


def _scales_then(transform, quant, x):
    """A quantizer producing row-major scales, then a layout transform of those scales."""
    return transform(quant(x)[1])


def bench_per_token(ctx, Ms, Ks):
    dg, copy = ctx["dg"], ctx["copy_TBps"]
    compiled_lean = {layout: compiled(functools.partial(lean.quant, layout=layout)) for layout in LAYOUTS}
    rows = []
    for K in Ks:
        for M in Ms:
            probe = fp8ops.per_token_group_quant(torch.empty(M, K, dtype=torch.bfloat16, device="cuda"), 128, "col_tma")
            xs = [(torch.randn(M, K, dtype=torch.bfloat16, device="cuda"),) for _ in range(n_sets_for(3 * M * K))]
            # fp8ops' four layouts back to back first, then the baselines, so that the layouts are
            # compared under the same conditions.
            shape_rows = []
            for layout in LAYOUTS:
                out = fp8ops.per_token_group_quant(xs[0][0], 128, layout)
                row = {"M": M, "K": K, "layout": layout, "bytes": M * K * 2 + storage_bytes(*out)}
                row["fp8ops_us"] = graph_time_us(functools.partial(_per_token, layout=layout), xs)
                if layout == "col_tma" and K == 7168:
                    # Published per-token figures time one x in every call: partly cached reads.
                    row["fp8ops_same_input_us"] = graph_time_us(functools.partial(_per_token, layout=layout), xs[:1])
                shape_rows.append(row)
            for row in shape_rows:
                layout = row["layout"]
                row["compiled_lean_us"] = graph_time_us(compiled_lean[layout], xs)
                if dg is not None and layout in ("col_tma", "col_tma_packed"):
                    packed = layout == "col_tma_packed"
                    transform = (
                        dg.get_mn_major_tma_aligned_packed_ue8m0_tensor
                        if packed
                        else dg.get_mn_major_tma_aligned_tensor
                    )
                    ours_row = functools.partial(_per_token, layout="row", ue8m0=packed)
                    row["row_then_dg_transform_us"] = graph_time_us(
                        functools.partial(_scales_then, transform, ours_row), xs
                    )
                row["pct_of_copy"] = pct_of_copy(row["bytes"], row["fp8ops_us"], copy)
                row["speedup_vs_compiled"] = row["compiled_lean_us"] / row["fp8ops_us"]
                rows.append(row)
                log(
                    f"  M={M:6d} K={K:6d} {layout:15s} fp8ops {row['fp8ops_us']:9.2f} us "
                    f"({row['pct_of_copy']:5.1f}% of copy)  compiled {row['compiled_lean_us']:9.2f} us"
                )
            del probe
    return rows


def _quant_gemm(dg, layout, w, ws, x, out):
    q, s = fp8ops.per_token_group_quant(x, 128, layout)
    dg.fp8_gemm_nt((q, s), (w, ws), out)


def bench_end_to_end(ctx, Ms=(1, 4, 16, 64, 128), N=4096, K=7168):
    """per-token quant + DeepGEMM fp8_gemm_nt: col_tma scales against row-major scales that
    DeepGEMM transforms inside the call."""
    dg = ctx["dg"]
    w, ws = fp8ops.block_quant(torch.randn(N, K, device="cuda", dtype=torch.bfloat16))
    rows = []
    for M in Ms:
        sets = [
            (
                torch.randn(M, K, dtype=torch.bfloat16, device="cuda"),
                torch.empty(M, N, dtype=torch.bfloat16, device="cuda"),
            )
            for _ in range(4)
        ]
        row = {"M": M, "N": N, "K": K}
        for route, layout in (("col_tma_route", "col_tma"), ("row_route", "row")):
            row[f"{route}_us"] = graph_time_us(functools.partial(_quant_gemm, dg, layout, w, ws), sets)
        row["saved_us"] = row["row_route_us"] - row["col_tma_route_us"]
        rows.append(row)
        log(f"  e2e M={M:4d}: col_tma route {row['col_tma_route_us']:7.2f} us, row route {row['row_route_us']:7.2f} us")
    return rows


def bench_group_major(ctx, Ts, Gs=(8, 16), Ds=(512, 4096)):
    dg, copy = ctx["dg"], ctx["copy_TBps"]
    rows = []
    compiled_lean = {p: compiled(functools.partial(lean.group_major_quant, packed=p)) for p in (False, True)}
    for T, G, D, packed in ((T, G, D, p) for T in Ts for G in Gs for D in Ds for p in (False, True)):
        xs = [
            (torch.randn(T, G, D + 128, dtype=torch.bfloat16, device="cuda")[:, :, :D],)
            for _ in range(n_sets_for(T * G * D * 3))
        ]
        out = fp8ops.group_major_quant(xs[0][0], packed=packed)
        row = {"T": T, "G": G, "D": D, "packed": packed, "bytes": T * G * D * 2 + storage_bytes(*out)}
        row["fp8ops_us"] = graph_time_us(functools.partial(fp8ops.group_major_quant, packed=packed), xs)
        row["compiled_lean_us"] = graph_time_us(compiled_lean[packed], xs)
        row["pct_of_copy"] = pct_of_copy(row["bytes"], row["fp8ops_us"], copy)
        rows.append(row)
        log(
            f"  group-major T={T:5d} G={G:3d} D={D:5d} packed={packed!s:5s} fp8ops {row['fp8ops_us']:8.2f} us "
            f"({row['pct_of_copy']:5.1f}% of copy), compiled {row['compiled_lean_us']:8.2f} us"
        )
    pack_rows = []
    for M, S in ((128, 56), (4096, 56), (32768, 56)):
        s = [(ref.ue8m0_round(torch.rand(M, S, device="cuda") + 1e-3),) for _ in range(n_sets_for(M * S * 5))]
        row = {"M": M, "S": S, "fp8ops_us": graph_time_us(fp8ops.pack_ue8m0, s)}
        if dg is not None:
            row["dg_pack_us"] = graph_time_us(dg.get_mn_major_tma_aligned_packed_ue8m0_tensor, s)
        pack_rows.append(row)
        dg_us = row.get("dg_pack_us", math.nan)
        log(f"  pack_ue8m0 M={M} S={S}: fp8ops {row['fp8ops_us']:.2f} us, deep_gemm {dg_us:.2f} us")
    return rows, pack_rows


def bench_indexer(ctx, Bs, H=64, max_pos=65536):
    """indexer_q_quant (DeepSeek-V4 options) against the lean fp32 expression compiled per shape."""
    copy = ctx["copy_TBps"]
    cs = torch.randn(max_pos, 64, device="cuda")
    compiled_lean = compiled(lean.indexer_q_quant)
    rows = []
    for B in Bs:
        per_call = B * H * (128 * 3 + 2 + 4) + B * (64 * 4 + 8)
        sets = [
            (
                torch.randn(B, H, 128, dtype=torch.bfloat16, device="cuda"),
                torch.randn(B, H + 8, dtype=torch.bfloat16, device="cuda")[:, :H],
                0.5,
                cs,
                torch.randint(0, max_pos, (B,), device="cuda"),
            )
            for _ in range(n_sets_for(per_call))
        ]
        row = {"B": B, "H": H, "bytes": per_call}
        row["fp8ops_us"] = graph_time_us(fp8ops.indexer_q_quant, sets)
        row["compiled_lean_us"] = graph_time_us(compiled_lean, sets)
        row["pct_of_copy"] = pct_of_copy(per_call, row["fp8ops_us"], copy)
        row["x_floor"] = row["fp8ops_us"] / ctx["launch_floor_us"]
        rows.append(row)
        log(f"  indexer B={B:6d}: fp8ops {row['fp8ops_us']:8.2f} us ({row['pct_of_copy']:5.1f}% of copy)")
    return rows


def _silu(x, layout="col_tma_packed", masked_m=None):
    return fp8ops.silu_mul_quant(x, 128, layout, masked_m=masked_m)


# Flat rows of dense MLPs' wider intermediates (DeepSeek-V3's 18432), besides H = 2048: decode
# steps and small batches, whose few rows silu_mul_quant cuts into slices.
SILU_WIDE = ((1, 7168), (16, 7168), (128, 7168), (16, 18432), (32, 18432))


def bench_silu(ctx, Ms, H=2048, wide=SILU_WIDE):
    """silu_mul_quant, UE8M0 packed scales (DeepGEMM SM100's layout, as the peers' figures), flat
    and masked, against the unfused route and the lean compiled expression. Masked rows also time
    the same buffers with every count zero: the fixed cost of a masked call, which must read
    masked_m after the previous grid completes before it can load a row."""
    copy, floor = ctx["copy_TBps"], ctx["launch_floor_us"]
    compiled_lean = compiled(lean.silu_mul_quant)
    rows = []
    for M, h in [(M, H) for M in Ms] + list(wide):
        xs = [(torch.randn(M, 2 * h, dtype=torch.bfloat16, device="cuda"),) for _ in range(n_sets_for(M * h * 5))]
        out = _silu(xs[0][0])
        row = {"mode": "flat", "M": M, "H": h, "bytes": M * h * 4 + storage_bytes(*out)}
        row["fp8ops_us"] = graph_time_us(_silu, xs)
        row["unfused_us"] = graph_time_us(lean.silu_mul_then_fp8ops, xs)
        row["compiled_lean_us"] = graph_time_us(compiled_lean, xs)
        row["pct_of_copy"] = pct_of_copy(row["bytes"], row["fp8ops_us"], copy)
        row["x_floor"] = row["fp8ops_us"] / floor
        rows.append(row)
        log(
            f"  silu flat M={M:6d} H={h:5d}: fp8ops {row['fp8ops_us']:8.2f} us ({row['pct_of_copy']:5.1f}% of copy), "
            f"unfused {row['unfused_us']:8.2f}, compiled {row['compiled_lean_us']:8.2f}"
        )
    gen = torch.Generator().manual_seed(0)
    for E, Mmax, avg in ((8, 256, 8), (32, 256, 8), (32, 256, 32), (32, 512, 128), (8, 1024, 512)):
        sets = []
        valid = 0
        for _ in range(4):
            counts = torch.poisson(torch.full((E,), float(avg)), generator=gen).clamp(max=Mmax).to(torch.int32)
            valid += int(counts.sum())
            x = torch.randn(E, Mmax, 2 * H, dtype=torch.bfloat16, device="cuda")
            sets.append((x, "col_tma_packed", counts.cuda()))
        valid_rows = valid / len(sets)
        nbytes = int(valid_rows * (H * 4 + H + H // 128))
        row = {"mode": "masked", "E": E, "Mmax": Mmax, "H": H, "avg_valid": valid_rows / E, "bytes": nbytes}
        row["fp8ops_us"] = graph_time_us(_silu, sets)
        row["no_valid_rows_us"] = graph_time_us(_silu, [(s[0], s[1], torch.zeros_like(s[2])) for s in sets])
        row["unfused_whole_buffer_us"] = graph_time_us(lean.silu_mul_then_fp8ops, [(s[0],) for s in sets])
        row["valid_bytes_at_copy_us"] = nbytes / (copy * 1e12) * 1e6
        row["pct_of_copy"] = pct_of_copy(nbytes, row["fp8ops_us"], copy)
        rows.append(row)
        log(
            f"  silu masked E={E} Mmax={Mmax} avg={row['avg_valid']:.1f}: fp8ops {row['fp8ops_us']:7.2f} us "
            f"(no valid rows {row['no_valid_rows_us']:5.2f}), "
            f"unfused whole buffer {row['unfused_whole_buffer_us']:8.2f}"
        )
    return rows


def _rms(x, r, w, layout="col_tma"):
    return fp8ops.rms_norm_quant(x, w, 1e-6, r, 128, layout)


def _rms_gemm(dg, w_q, w_s, route, x, r, w, out):
    q, s = route(x, r, w)
    dg.fp8_gemm_nt((q, s), (w_q, w_s), out)


def bench_rms(ctx, Ms, Ds=(7168, 4096, 1536, 512)):
    """rms_norm_quant (col_tma; with and without the residual add) against the eager and the
    compiled routes (add, F.rms_norm, fp8ops' quant), and the row layout for comparison."""
    copy, floor, dg = ctx["copy_TBps"], ctx["launch_floor_us"], ctx["dg"]
    route_compiled = compiled(lean.add_rms_norm_then_fp8ops)
    rows, gemm_rows = [], []
    for D, M, with_res in ((D, M, r) for D in Ds for M in Ms for r in (True, False)):
        per_call = M * D * 2 * (3 if with_res else 1)
        sets = []
        for _ in range(n_sets_for(per_call + M * D)):
            x = torch.randn(M, D, dtype=torch.bfloat16, device="cuda")
            r = torch.randn(M, D, dtype=torch.bfloat16, device="cuda") if with_res else None
            sets.append((x, r, torch.randn(D, dtype=torch.bfloat16, device="cuda")))
        out = _rms(*sets[0])
        nbytes = per_call + D * 2 + storage_bytes(*out)
        row = {"D": D, "M": M, "residual": with_res, "bytes": nbytes}
        row["fp8ops_us"] = graph_time_us(_rms, sets)
        if D == 7168:
            row["fp8ops_row_us"] = graph_time_us(functools.partial(_rms, layout="row"), sets)
        row["eager_route_us"] = graph_time_us(lean.add_rms_norm_then_fp8ops, sets)
        row["compiled_route_us"] = graph_time_us(route_compiled, sets)
        row["pct_of_copy"] = pct_of_copy(nbytes, row["fp8ops_us"], copy)
        row["x_floor"] = row["fp8ops_us"] / floor
        if dg is not None and D == 7168 and with_res and M <= 2048:
            gemm_rows.append((row, sets))
        rows.append(row)
        log(
            f"  rms D={D:5d} M={M:5d} residual={with_res!s:5s}: fp8ops {row['fp8ops_us']:8.2f} us "
            f"({row['pct_of_copy']:5.1f}% of copy), eager {row['eager_route_us']:8.2f}, "
            f"compiled {row['compiled_route_us']:8.2f}"
        )
    # The routes into the GEMM run after every quant-only row: a row timed right after the GEMM's
    # graphs measured slower than the same row timed alone.
    for row, sets in gemm_rows:
        N, M, D = 4096, row["M"], row["D"]
        w_q, w_s = fp8ops.block_quant(torch.randn(N, D, device="cuda", dtype=torch.bfloat16))
        gsets = [(*s, torch.empty(M, N, dtype=torch.bfloat16, device="cuda")) for s in sets]
        row["e2e_fused_gemm_us"] = graph_time_us(functools.partial(_rms_gemm, dg, w_q, w_s, _rms), gsets)
        eager = lean.add_rms_norm_then_fp8ops
        row["e2e_eager_gemm_us"] = graph_time_us(functools.partial(_rms_gemm, dg, w_q, w_s, eager), gsets)
        row["e2e_compiled_gemm_us"] = graph_time_us(functools.partial(_rms_gemm, dg, w_q, w_s, route_compiled), gsets)
    return rows


def bench_block(ctx, shapes):
    """block_quant against DeepGEMM's per_block_cast_to_fp8 expression compiled per shape."""
    copy = ctx["copy_TBps"]
    compiled_cast = compiled(lean.per_block_cast)
    rows = []
    for shape in shapes:
        numel = math.prod(shape)
        sets = [(torch.randn(*shape, dtype=torch.bfloat16, device="cuda"),) for _ in range(n_sets_for(3 * numel))]
        out = fp8ops.block_quant(sets[0][0])
        row = {"shape": "x".join(map(str, shape)), "bytes": numel * 2 + storage_bytes(*out)}
        row["fp8ops_us"] = graph_time_us(fp8ops.block_quant, sets)
        flat = [(s[0].view(-1, shape[-1]),) for s in sets]  # experts stacked along N: the same blocks
        row["compiled_lean_us"] = graph_time_us(compiled_cast, flat)
        row["pct_of_copy"] = pct_of_copy(row["bytes"], row["fp8ops_us"], copy)
        rows.append(row)
        log(f"  block {row['shape']}: fp8ops {row['fp8ops_us']:9.2f} us ({row['pct_of_copy']:5.1f}% of copy)")
        del sets, flat, out
        torch.cuda.empty_cache()
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
    log("self-check: CPU kernels vs torch expressions, CUDA kernels vs CPU kernels ...")
    n = self_check_cpu() + self_check_cuda()
    log(f"self-check passed ({n} cases)")
    ctx = {"dg": dg, "copy_TBps": copy_bandwidth_tbps(), "launch_floor_us": launch_floor_us()}
    log(f"copy {ctx['copy_TBps']:.3f} TB/s (read + write), launch floor {ctx['launch_floor_us']:.2f} us per call")
    q = args.quick
    result = {
        "device": props.name,
        "torch": torch.__version__,
        "deep_gemm": dg is not None,
        "copy_TBps": ctx["copy_TBps"],
        "launch_floor_us": ctx["launch_floor_us"],
        "calls_per_graph": CALLS_PER_GRAPH,
        "pdl": fp8ops.pdl_enabled(),
    }
    # Each section's sizes: (quick grid, full grid).
    sizes = {
        "per_token": (((1, 16, 128, 2048, 32768), (7168,)),
                      ((1, 4, 16, 64, 128, 512, 2048, 8192, 32768), (2048, 7168, 16384))),
        "group_major": (((1, 4096), (16,)), ((1, 8, 64, 512, 4096), (8, 16))),
        "indexer": ((1, 256, 2048, 16384), (1, 8, 64, 256, 512, 2048, 16384)),
        "silu": ((1, 16, 512, 4096, 16384), (1, 16, 128, 512, 1024, 2048, 4096, 8192, 16384)),
        "rms": (((1, 16, 2048, 8192), (7168, 4096, 512)), ((1, 16, 128, 2048, 8192), (7168, 4096, 1536, 512))),
        "block": (((7168, 18432), (2048, 7168)), ((7168, 18432), (2048, 7168), (256, 2048, 7168))),
    }  # fmt: skip
    pick = {k: v[0] if q else v[1] for k, v in sizes.items()}
    plan = {
        "per_token": lambda: bench_per_token(ctx, *pick["per_token"]),
        "e2e": lambda: bench_end_to_end(ctx) if dg is not None else [],
        "group_major": lambda: bench_group_major(ctx, *pick["group_major"]),
        "indexer": lambda: bench_indexer(ctx, pick["indexer"]),
        "silu": lambda: bench_silu(ctx, pick["silu"]),
        "rms": lambda: bench_rms(ctx, *pick["rms"]),
        "block": lambda: bench_block(ctx, pick["block"]),
    }
    seconds = {}
    for name in args.sections:
        t0 = time.perf_counter()
        log(f"{name}:")
        out = plan[name]()
        if name == "group_major":
            result["group_major"], result["pack_ue8m0"] = out
        else:
            result[name] = out
        seconds[name] = round(time.perf_counter() - t0, 1)
    result["section_seconds"] = seconds
    return result


# --------------------------------------------------------------------------------------- CPU


def cpu_main(args) -> dict:
    log("No CUDA device: CPU reference kernels only (wall clock, not GPU figures).")
    n = self_check_cpu()
    log(f"self-check passed ({n} cases)")
    Ms = (1, 16, 128) if args.quick else (1, 16, 128, 512)
    result = {"device": "cpu", "torch": torch.__version__}
    w = torch.randn(2048, dtype=torch.bfloat16)
    # Each section: the fp8ops CPU kernel and the torch expression of SPEC, on the same x.
    calls = {
        "per_token": (functools.partial(fp8ops.per_token_group_quant, scale_layout="col_tma"),
                      functools.partial(ref.per_token_group_quant, scale_layout="col_tma")),
        "silu": (fp8ops.silu_mul_quant, ref.silu_mul_quant),
        "rms": (functools.partial(fp8ops.rms_norm_quant, weight=w), functools.partial(ref.rms_norm_quant, weight=w)),
        "block": (fp8ops.block_quant, ref.block_quant),
    }  # fmt: skip
    for name in args.sections:
        ours, theirs = calls[name]
        rows = []
        for M in Ms:
            x = torch.randn(M, 2048, dtype=torch.bfloat16)
            row = {"M": M, "K": 2048}
            row["fp8ops_cpu_us"] = wall_median_us(functools.partial(ours, x))
            row["torch_cpu_us"] = wall_median_us(functools.partial(theirs, x))
            rows.append(row)
            log(f"  {name} M={M:4d}: fp8ops {row['fp8ops_cpu_us']:9.1f} us, torch {row['torch_cpu_us']:9.1f} us")
        result[name] = rows
    return result


# ---------------------------------------------------------------------------------- reporting

# Each section's table: (title, columns of (key, header, width, format)).
TABLES = {
    "per_token": ("per_token_group_quant, bf16, group 128 (us per call)", [
        ("M", "M", 6, "d"), ("K", "K", 6, "d"), ("layout", "layout", 15, "s"), ("fp8ops_us", "fp8ops", 9, ".2f"),
        ("pct_of_copy", "%copy", 6, ".1f"), ("compiled_lean_us", "compiled", 9, ".2f"),
        ("speedup_vs_compiled", "speedup", 8, ".2f"), ("row_then_dg_transform_us", "row+DGtr", 9, ".2f"),
        ("fp8ops_same_input_us", "same x", 7, ".2f")]),
    "e2e": ("per-token quant + deep_gemm.fp8_gemm_nt, N=4096 K=7168 (us per call)", [
        ("M", "M", 5, "d"), ("col_tma_route_us", "col_tma route", 14, ".2f"), ("row_route_us", "row route", 10, ".2f"),
        ("saved_us", "saved", 7, ".2f")]),
    "group_major": ("group_major_quant, bf16 strided [T, G, D] (us per call)", [
        ("T", "T", 5, "d"), ("G", "G", 3, "d"), ("D", "D", 5, "d"), ("packed", "packed", 6, "s"),
        ("fp8ops_us", "fp8ops", 9, ".2f"), ("pct_of_copy", "%copy", 6, ".1f"),
        ("compiled_lean_us", "compiled", 9, ".2f")]),
    "pack_ue8m0": ("pack_ue8m0 (us per call)", [
        ("M", "M", 6, "d"), ("S", "S", 4, "d"), ("fp8ops_us", "fp8ops", 8, ".2f"),
        ("dg_pack_us", "deep_gemm", 10, ".2f")]),
    "indexer": ("indexer_q_quant, bf16, H=64, DeepSeek-V4 options (us per call)", [
        ("B", "B", 6, "d"), ("fp8ops_us", "fp8ops", 9, ".2f"), ("pct_of_copy", "%copy", 6, ".1f"),
        ("x_floor", "x floor", 8, ".2f"), ("compiled_lean_us", "compiled", 9, ".2f")]),
    "silu": ("silu_mul_quant, bf16, col_tma_packed (us per call)", [
        ("mode", "mode", 6, "s"), ("M", "M", 6, "d"), ("H", "H", 6, "d"), ("E", "E", 3, "d"), ("Mmax", "Mmax", 5, "d"),
        ("avg_valid", "avg m", 6, ".1f"), ("fp8ops_us", "fp8ops", 9, ".2f"), ("no_valid_rows_us", "no rows", 8, ".2f"),
        ("pct_of_copy", "%copy", 6, ".1f"),
        ("x_floor", "x floor", 8, ".2f"), ("unfused_us", "unfused", 9, ".2f"),
        ("compiled_lean_us", "compiled", 9, ".2f"), ("unfused_whole_buffer_us", "unfused(all)", 12, ".2f"),
        ("valid_bytes_at_copy_us", "copy(valid)", 11, ".2f")]),
    "rms": ("rms_norm_quant, bf16, col_tma (us per call)", [
        ("D", "D", 5, "d"), ("M", "M", 5, "d"), ("residual", "resid", 5, "s"), ("fp8ops_us", "fp8ops", 9, ".2f"),
        ("pct_of_copy", "%copy", 6, ".1f"), ("x_floor", "x floor", 8, ".2f"), ("fp8ops_row_us", "row", 8, ".2f"),
        ("eager_route_us", "eager", 9, ".2f"), ("compiled_route_us", "compiled", 9, ".2f"),
        ("e2e_fused_gemm_us", "+gemm", 8, ".2f"), ("e2e_eager_gemm_us", "eag+gemm", 9, ".2f"),
        ("e2e_compiled_gemm_us", "cmp+gemm", 9, ".2f")]),
    "block": ("block_quant, bf16, 128 x 128 blocks (us per call)", [
        ("shape", "shape", 16, "s"), ("fp8ops_us", "fp8ops", 10, ".2f"), ("pct_of_copy", "%copy", 6, ".1f"),
        ("compiled_lean_us", "compiled", 10, ".2f")]),
}  # fmt: skip
CPU_TABLE = [("M", "M", 6, "d"), ("K", "K", 6, "d"), ("fp8ops_cpu_us", "fp8ops us", 11, ".1f"),
             ("torch_cpu_us", "torch us", 11, ".1f")]  # fmt: skip


def _cell(row, key, width, fmt):
    v = row.get(key)
    if v is None:
        return f"{'-':>{width}}"
    if fmt == "s":
        return f"{v!s:>{width}}"
    return f"{v:{width}{fmt}}"


def print_tables(res: dict) -> None:
    cpu = res["device"] == "cpu"
    if cpu:
        print("\nCPU reference kernels (wall clock, median of 15; NOT GPU figures)")
    else:
        print(
            f"\n{res['device']}: copy {res['copy_TBps']:.3f} TB/s, launch floor {res['launch_floor_us']:.2f} us "
            f"(per call, {res['calls_per_graph']} calls per CUDA graph, PDL {'on' if res['pdl'] else 'off'})"
        )
    for key, (title, cols) in TABLES.items():
        rows = res.get(key)
        if not rows:
            continue
        cols = CPU_TABLE if cpu else cols
        print(f"\n{key if cpu else title}")
        print(" ".join(f"{h:>{w}}" for _, h, w, _ in cols))
        for r in rows:
            print(" ".join(_cell(r, k, w, f) for k, _, w, f in cols))


# Each section's plot: (x key, the keys whose values make separate lines, [(y key, label)]).
PLOTS = {
    "per_token": ("M", ("K", "layout"), [("fp8ops_us", "fp8ops"), ("compiled_lean_us", "compiled")]),
    "e2e": ("M", (), [("col_tma_route_us", "col_tma route"), ("row_route_us", "row route")]),
    "group_major": ("T", ("G", "D", "packed"), [("fp8ops_us", "fp8ops"), ("compiled_lean_us", "compiled")]),
    "indexer": ("B", (), [("fp8ops_us", "fp8ops"), ("compiled_lean_us", "compiled")]),
    "silu": ("M", ("H",), [("fp8ops_us", "fp8ops"), ("unfused_us", "unfused"), ("compiled_lean_us", "compiled")]),
    "rms": ("M", ("D", "residual"), [("fp8ops_us", "fp8ops"), ("compiled_route_us", "compiled route")]),
    "block": ("bytes", (), [("fp8ops_us", "fp8ops"), ("compiled_lean_us", "compiled")]),
}
CPU_PLOT = ("M", (), [("fp8ops_cpu_us", "fp8ops CPU"), ("torch_cpu_us", "torch CPU")])


def plot(res: dict, path: str) -> bool:
    """A panel per section that ran, each op against its baselines; False (and no file) when no
    section produced rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cpu = res["device"] == "cpu"
    panels = [k for k in PLOTS if res.get(k)]
    if not panels:
        return False
    cols = min(3, len(panels))
    fig, axes = plt.subplots(
        math.ceil(len(panels) / cols), cols, figsize=(6 * cols, 4.5 * math.ceil(len(panels) / cols)), squeeze=False
    )
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, panels, strict=False):
        xkey, split, series = CPU_PLOT if cpu else PLOTS[key]
        rows = [r for r in res[key] if xkey in r]
        groups = sorted({tuple(r.get(k) for k in split) for r in rows}, key=str)
        for g in groups:
            sel = [r for r in rows if tuple(r.get(k) for k in split) == g]
            for ykey, label in series:
                pts = sorted((r[xkey], r[ykey]) for r in sel if ykey in r)
                if pts:
                    tag = " ".join([label] + [f"{k}={v}" for k, v in zip(split, g, strict=True)])
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=tag)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xkey)
        ax.set_ylabel("us per call")
        ax.set_title(("CPU " if cpu else "") + key)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def _check_writable(path: str, flag: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise SystemExit(f"fp8ops.bench: {flag} {path}: the folder {folder} does not exist or is not writable")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m fp8ops.bench",
        description="fp8ops benchmark and self-check (GPU timings, or CPU reference kernels without a GPU).",
    )
    p.add_argument("--json", default="bench.json", help="where to write the results (default bench.json)")
    p.add_argument("--plot", default=None, help="a PNG with one panel per section that ran (needs matplotlib)")
    p.add_argument("--quick", action="store_true", help="a smaller grid of sizes")
    p.add_argument("--cpu", action="store_true", help="run the CPU benchmark even when a GPU is present")
    p.add_argument(
        "--sections",
        default=None,
        help=f"comma-separated sections; GPU: {','.join(GPU_SECTIONS)} (default all); CPU: {','.join(CPU_SECTIONS)}",
    )
    args = p.parse_args(argv)
    args.gpu = torch.cuda.is_available() and not args.cpu
    known = GPU_SECTIONS if args.gpu else CPU_SECTIONS
    chosen = args.sections.split(",") if args.sections else list(known)
    unknown = [s for s in chosen if s not in known]
    if unknown:
        where = "on the GPU" if args.gpu else "on the CPU"
        p.error(f"unknown section(s) {', '.join(unknown)} {where}; choose from {', '.join(known)}")
    args.sections = [s for s in known if s in chosen]
    _check_writable(args.json, "--json")
    if args.plot:
        _check_writable(args.plot, "--plot")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            p.error("--plot needs matplotlib (pip install matplotlib)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    res = gpu_main(args) if args.gpu else cpu_main(args)
    print_tables(res)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=1)
    log(f"results written to {args.json}")
    if args.plot:
        if plot(res, args.plot):
            log(f"plot written to {args.plot}")
        else:
            log("no section produced rows: no plot written")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
