"""The library's plain C entry points (csrc/settings.cpp), reached through ctypes: the launch
settings, and the pure launch-shape functions that the CPU tests pin."""

from __future__ import annotations

import ctypes
import functools

_I64 = ctypes.c_int64
_I64P = ctypes.POINTER(ctypes.c_int64)


@functools.cache
def _lib() -> ctypes.CDLL:
    from . import _LIBRARY  # the path torch.ops.load_library loaded

    lib = ctypes.CDLL(_LIBRARY)
    lib.fp8ops_set_pdl.argtypes = [ctypes.c_int]
    lib.fp8ops_pdl_enabled.restype = ctypes.c_int
    lib.fp8ops_group_quant_launch.argtypes = [_I64P, _I64P]
    lib.fp8ops_indexer_config.argtypes = [_I64, _I64, _I64, _I64P]
    lib.fp8ops_indexer_grid.argtypes = [_I64, _I64, _I64, _I64, _I64P]
    lib.fp8ops_row_shape.argtypes = [_I64, _I64, _I64P]
    lib.fp8ops_silu_shape.argtypes = [_I64, _I64, _I64, _I64, _I64, _I64, _I64P]
    lib.fp8ops_rms_split_cluster.argtypes = [_I64, _I64, _I64]
    lib.fp8ops_rms_split_cluster.restype = _I64
    lib.fp8ops_rms_slot_blocks.argtypes = [_I64, _I64, _I64, _I64]
    lib.fp8ops_rms_slot_blocks.restype = _I64
    lib.fp8ops_silu_table_bounds.argtypes = [_I64P]
    lib.fp8ops_silu_table.argtypes = [_I64P]
    lib.fp8ops_silu_masked_pairs.argtypes = [_I64, _I64, _I64, _I64, _I64, _I64, _I64P]
    lib.fp8ops_silu_table_used.argtypes = [_I64, _I64, _I64, _I64]
    lib.fp8ops_silu_table_used.restype = _I64
    lib.fp8ops_silu_flat_grid.argtypes = [_I64] * 8 + [_I64P]
    lib.fp8ops_silu_stream.argtypes = [_I64] * 5
    lib.fp8ops_silu_stream.restype = _I64
    lib.fp8ops_rms_pipelined.argtypes = [_I64, _I64, _I64, _I64, _I64, _I64]
    lib.fp8ops_rms_pipelined.restype = _I64
    lib.fp8ops_rms_whole_row.argtypes = [_I64, _I64]
    lib.fp8ops_rms_whole_row.restype = _I64
    lib.fp8ops_row_grid_blocks.argtypes = [_I64, _I64, _I64, _I64]
    lib.fp8ops_row_grid_blocks.restype = _I64
    lib.fp8ops_exp_fp32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _I64]
    lib.fp8ops_silu_fp32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _I64]
    lib.fp8ops_rms_inverse.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _I64, ctypes.c_float, ctypes.c_float]
    lib.fp8ops_rms_fast_range.argtypes = [ctypes.c_void_p]
    lib.fp8ops_silu_mul_cuda.argtypes = [ctypes.c_void_p] * 3 + [_I64, _I64, _I64, ctypes.c_void_p]
    lib.fp8ops_silu_mul_cuda.restype = ctypes.c_int
    lib.fp8ops_rms_inverse_sweep_cuda.argtypes = [_I64, ctypes.c_float] + [_I64] * 3 + [ctypes.c_void_p] * 2
    lib.fp8ops_rms_inverse_sweep_cuda.restype = ctypes.c_int
    return lib


def set_pdl(enabled: bool) -> None:
    """Turn programmatic dependent launch (PDL) on or off for every later fp8ops kernel launch.

    With PDL (the default, on sm_90+) a kernel may start while the previous kernel of its stream
    finishes, and waits for it before touching memory: results are the same either way. The
    setting is process-wide and read at launch, so a CUDA graph keeps the setting it was captured
    with."""
    _lib().fp8ops_set_pdl(1 if enabled else 0)


def pdl_enabled() -> bool:
    """Whether fp8ops launches its kernels with programmatic dependent launch."""
    return bool(_lib().fp8ops_pdl_enabled())


def group_quant_launch(problem: dict) -> dict:
    """The group quantization kernel's launch shape (include/fp8ops/group_quant_launch.h)."""
    keys = ("T", "G", "D", "T_q", "T_s", "s_stride_t", "s_stride_g", "s_stride_s", "group_size", "packed")
    vals = [int(problem[k]) for k in keys]
    vals += [problem["elem_bytes"], int(problem["x_aligned"]), problem["sm_count"], problem["l2_bytes"]]
    out = (_I64 * 12)()
    _lib().fp8ops_group_quant_launch((_I64 * 14)(*vals), out)
    names = (
        "unroll", "map", "grid_x", "grid_y", "block_x", "block_y", "rows", "row_divisor", "gather_words", "vec16",
        "row_blocks", "stream",
    )  # fmt: skip
    res = dict(zip(names, out, strict=True))
    res["map"] = ("rows_apart", "mn_rows", "groups")[res["map"]]
    return res


INDEXER_MODES = ("any", "v4", "v32")


def indexer_config(items: int, mode: str, l2_bytes: int) -> dict:
    """The indexer kernel's launch configuration (include/fp8ops/indexer_launch.h)."""
    out = (_I64 * 7)()
    _lib().fp8ops_indexer_config(items, INDEXER_MODES.index(mode), l2_bytes, out)
    names = ("lanes", "warps", "min_blocks", "mode", "stagger_ns", "share", "stream")
    res = dict(zip(names, out, strict=True))
    res["mode"] = INDEXER_MODES[res["mode"]]
    return res


def indexer_grid(items: int, items_per_block: int, resident: int, stagger_ns: int) -> tuple[int, int]:
    """(blocks, stagger_ns) of the indexer's persistent grid."""
    out = (_I64 * 2)()
    _lib().fp8ops_indexer_grid(items, items_per_block, resident, stagger_ns, out)
    return out[0], out[1]


def row_shape(chunks: int, op: str) -> dict:
    """How the row kernel of `op` ("silu" or "rms") shares a row of `chunks` 8-element chunks out
    (include/fp8ops/fused_quant.h)."""
    out = (_I64 * 4)()
    _lib().fp8ops_row_shape(chunks, ("silu", "rms").index(op), out)
    return dict(zip(("lanes", "chunks_per_lane", "rows_per_block", "compiled_chunks"), out, strict=True))


def silu_shape(chunks: int, rows: int, masked: bool, elem_bytes: int, vec16: bool, sm_count: int) -> dict:
    """How silu_mul_quant shares its rows out: units of `adjacent` chunks over `lanes` lanes, each
    row cut into `slices`, in blocks of `threads` (include/fp8ops/silu_mul_quant_launch.h)."""
    out = (_I64 * 6)()
    _lib().fp8ops_silu_shape(chunks, rows, int(masked), elem_bytes, int(vec16), sm_count, out)
    keys = ("lanes", "units_per_lane", "rows_per_block", "adjacent", "slices", "threads")
    return dict(zip(keys, out, strict=True))


def silu_masked_pairs(chunks: int, rows: int, elem_bytes: int, bf16: bool, vec16: bool, sm_count: int) -> dict:
    """From how many valid rows the masked silu_mul_quant kernel of a buffer of `rows` row slots
    takes units of two chunks and the SiLU table (0: never), and the log2 of the lanes of such a
    row (include/fp8ops/silu_mul_quant_launch.h)."""
    out = (_I64 * 2)()
    _lib().fp8ops_silu_masked_pairs(chunks, rows, elem_bytes, int(bf16), int(vec16), sm_count, out)
    return {"rows": out[0], "lanes_log2": out[1]}


def silu_table_bounds() -> tuple:
    """The bf16 magnitudes lo <= |bits| < hi that silu_mul_quant's bf16 SiLU table covers
    (include/fp8ops/fused_quant.h)."""
    out = (_I64 * 2)()
    _lib().fp8ops_silu_table_bounds(out)
    return int(out[0]), int(out[1])


def silu_table_used(bf16: bool, masked: bool, rows: int, H: int) -> bool:
    """Whether silu_mul_quant looks the bf16 SiLU up in its table for `rows` data rows of H gate
    values (include/fp8ops/silu_mul_quant_launch.h)."""
    return bool(_lib().fp8ops_silu_table_used(int(bf16), int(masked), rows, H))


def silu_stream(rows: int, q_rows: int, H: int, elem_bytes: int, l2_bytes: int) -> bool:
    """Whether the flat bf16 table kernel of pairs of chunks loads x evict-first, for `rows` data
    rows and `q_rows` row slots of H gate values on a device with l2_bytes of L2
    (include/fp8ops/silu_mul_quant_launch.h)."""
    return bool(_lib().fp8ops_silu_stream(rows, q_rows, H, elem_bytes, l2_bytes))


def silu_table() -> list:
    """The entries of the bf16 SiLU table built into the library (include/fp8ops/silu_table.h)."""
    lo, hi = silu_table_bounds()
    out = (_I64 * (2 * (hi - lo)))()
    _lib().fp8ops_silu_table(out)
    return list(out)


def rms_split_cluster(rows: int, chunks: int, sm_count: int) -> int:
    """The cluster size of rms_norm_quant's split kernel for `rows` row slots of `chunks` chunks
    (1: one block per row, no cluster), or 0 where the row kernel runs
    (include/fp8ops/rms_norm_quant_launch.h)."""
    return _lib().fp8ops_rms_split_cluster(rows, chunks, sm_count)


def rms_slot_blocks(rows: int, chunks: int, residual: bool, sm_count: int) -> int:
    """The blocks per row of rms_norm_quant's slot kernel for `rows` row slots of `chunks` chunks,
    or 0 where it does not run (include/fp8ops/rms_norm_quant_launch.h)."""
    return _lib().fp8ops_rms_slot_blocks(rows, chunks, int(residual), sm_count)


def rms_whole_row(chunks: int, residual: bool) -> bool:
    """Whether rms_norm_quant's row kernel for rows of `chunks` chunks knows at compile time that a
    row has 256 lanes (include/fp8ops/rms_norm_quant_launch.h)."""
    return bool(_lib().fp8ops_rms_whole_row(chunks, int(residual)))


def rms_pipelined(chunks: int, rows: int, elem_bytes: int, residual: bool, vec16: bool, resident_blocks: int) -> bool:
    """Whether rms_norm_quant's row kernel for `rows` row slots of `chunks` chunks is the pipelined
    one, with `resident_blocks` of its blocks on the device at once
    (include/fp8ops/rms_norm_quant_launch.h)."""
    return bool(_lib().fp8ops_rms_pipelined(chunks, rows, elem_bytes, int(residual), int(vec16), resident_blocks))


def silu_flat_grid(
    chunks: int,
    rows: int,
    elem_bytes: int,
    vec16: bool,
    table: bool,
    resident_per_sm: int,
    wide_per_sm: int,
    sm_count: int,
) -> tuple[int, int]:
    """The blocks and threads a block of silu_mul_quant's flat row kernel for `rows` row slots of
    `chunks` chunks, with the bf16 SiLU table or not, `resident_per_sm` of its blocks of 256
    threads and `wide_per_sm` of 512 fitting a multiprocessor; (0, 0) where the rows are sliced
    (include/fp8ops/silu_mul_quant_launch.h)."""
    out = (_I64 * 2)()
    _lib().fp8ops_silu_flat_grid(
        chunks, rows, elem_bytes, int(vec16), int(table), resident_per_sm, wide_per_sm, sm_count, out
    )
    return out[0], out[1]


def row_grid_blocks(rows: int, rows_per_block: int, resident_per_sm: int, sm_count: int) -> int:
    """Blocks of the row kernels' grid (include/fp8ops/fused_quant_launch.h)."""
    return _lib().fp8ops_row_grid_blocks(rows, rows_per_block, resident_per_sm, sm_count)


def _map_fp32(fn, x):
    import torch

    src = x.detach().to("cpu", torch.float32).contiguous()
    out = torch.empty_like(src)
    fn(src.data_ptr(), out.data_ptr(), src.numel())
    return out


def exp_fp32(x):
    """fp8ops' own fp32 exp (include/fp8ops/numerics.h), elementwise on a CPU float32 tensor."""
    return _map_fp32(_lib().fp8ops_exp_fp32, x)


def silu_fp32(x):
    """fp8ops' fp32 SiLU, g / (1 + exp(-g)), elementwise on a CPU float32 tensor."""
    return _map_fp32(_lib().fp8ops_silu_fp32, x)


def rms_inverse(sums, D, norm_eps):
    """rms_norm_quant's step 3, 1 / sqrt(sum / D + norm_eps) (fused_quant.h's rms_inverse), on a
    CPU float32 tensor of sums of squares."""
    fn = _lib().fp8ops_rms_inverse
    return _map_fp32(lambda src, out, n: fn(src, out, n, float(D), float(norm_eps)), sums)


def rms_fast_range() -> tuple:
    """The sums and values of ms + eps, lo <= v <= hi, for which rms_norm_quant's device inverse
    takes its fast-path steps (include/fp8ops/fused_quant.h's kRmsFastMin and kRmsFastMax)."""
    out = (ctypes.c_float * 2)()
    _lib().fp8ops_rms_fast_range(out)
    return float(out[0]), float(out[1])


def silu_mul_cuda(gate, up, path="flat"):
    """silu_mul_quant's activation T(T(silu(gate)) * up) computed by the CUDA kernels' device code
    on one of their paths: "flat" (the flat kernels' SiLU), "masked" (the shortcut of the masked
    kernels without the table) or "table" (bf16 only: the SiLU table of large flat grids and of the
    other masked kernels). gate and up are contiguous CUDA tensors of one dtype, numel a multiple
    of 8; for the tests. A NaN comes back with any payload."""
    import torch

    assert gate.is_cuda and gate.is_contiguous() and up.is_contiguous() and gate.shape == up.shape
    assert gate.dtype == up.dtype and gate.numel() % 8 == 0
    assert path in ("flat", "masked") or (path == "table" and gate.dtype == torch.bfloat16)
    out = torch.empty_like(gate)
    code = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}[gate.dtype]
    stream = torch.cuda.current_stream(gate.device).cuda_stream
    with torch.cuda.device(gate.device):
        err = _lib().fp8ops_silu_mul_cuda(
            gate.data_ptr(),
            up.data_ptr(),
            out.data_ptr(),
            gate.numel(),
            code,
            ("flat", "masked", "table").index(path),
            stream,
        )
    if err != 0:
        raise RuntimeError(f"fp8ops: silu_mul_cuda: CUDA error {err}")
    return out


def rms_inverse_sweep_cuda(D, norm_eps, part, lo, hi, device=0):
    """How many fp32 bit patterns in [lo, hi) give another result from rms_norm_quant's device
    inverse than from the correctly rounded ops (rms_norm_quant.cuh's rms_inverse_sweep_kernel; part
    0: the whole inverse, as a sum, for divisor D; 1: its quotient; 2: the product by 1 / D, equal
    only for D a power of two; 3: its reciprocal square root, as ms + eps). For the tests."""
    import torch

    count = torch.zeros(1, dtype=torch.int64, device=f"cuda:{device}")
    stream = torch.cuda.current_stream(count.device).cuda_stream
    with torch.cuda.device(count.device):
        err = _lib().fp8ops_rms_inverse_sweep_cuda(
            int(D), float(norm_eps), int(part), int(lo), int(hi), count.data_ptr(), stream
        )
    if err != 0:
        raise RuntimeError(f"fp8ops: rms_inverse_sweep_cuda: CUDA error {err}")
    return int(count.item())
