"""The launch shapes (include/fp8ops/group_quant_launch.h, indexer_launch.h) are pure host
functions: these CPU tests pin which kernel and block shape each benchmark problem gets, and
their invariants over many problems."""

import itertools

import pytest
import torch
from helpers import H200_L2, H200_SMS, per_token_problem

import fp8ops
from fp8ops import _layout, _native


def group_major_problem(T, G, D, packed, sms=H200_SMS, x_aligned=True):
    sizes, strides, _ = _layout.group_major_scale_geometry(T, G, D // 128, packed)
    return dict(
        T=T, G=G, D=D, T_q=T, T_s=_layout.align(T, 4), s_stride_t=strides[0], s_stride_g=strides[1],
        s_stride_s=strides[2], group_size=128, packed=packed, elem_bytes=2, x_aligned=x_aligned, sm_count=sms,
        l2_bytes=H200_L2,
    )  # fmt: skip


def shape(c):
    if c["row_blocks"]:
        return ("row_blocks", c["map"], (c["block_x"], c["grid_x"], c["grid_y"]))
    return (c["unroll"], c["map"], (c["block_x"], c["block_y"]))


# (M, K, layout) -> (units per thread, unit map, block) on the H200 (bf16: 16 elements, so 8 lanes
# per group of 128): one row per thread on grids under four waves of 6 x 132 blocks of 256
# threads, with col_tma's rows along a warp, in blocks of 128 threads, or of 256 or 512 where that
# gives a grid of 66 to 132 full blocks (at K = 7168 about 40 to 66 rows, 144 with packed scales);
# beyond, pairs of MN-major rows (col, col_tma, packed) or pairs of groups (row). blockDim.x is the
# largest power of two up to 256 dividing the row's chunks (448 at K = 7168, 128 at 2048, 1024 at
# 16384; 224 for pairs of groups at 7168). From 67 to 1056 rows of K = 7168, a block per row, or
# with MN-major scales 8 blocks per 8 rows ("row_blocks": (block, grid_x, grid_y)).
PER_TOKEN_SHAPES = {
    (1, 7168, "row"): (1, "rows_apart", (64, 1)),
    (1, 7168, "col_tma"): (1, "rows_apart", (64, 1)),
    (16, 7168, "col_tma"): (1, "rows_apart", (8, 16)),
    (64, 7168, "row"): (1, "rows_apart", (64, 4)),
    (48, 7168, "row"): (1, "rows_apart", (64, 4)),
    (48, 7168, "col_tma"): (1, "rows_apart", (8, 16)),
    (96, 7168, "row"): ("row_blocks", "rows_apart", (448, 96, 1)),
    (96, 7168, "col_tma"): ("row_blocks", "mn_rows", (448, 96, 1)),
    (128, 7168, "col_tma_packed"): ("row_blocks", "mn_rows", (448, 128, 1)),
    (1056, 4096, "col_tma_packed"): ("row_blocks", "mn_rows", (256, 1056, 1)),
    (1056, 4608, "col_tma_packed"): ("row_blocks", "mn_rows", (288, 1056, 1)),
    (44, 7168, "col_tma_packed"): (1, "rows_apart", (64, 4)),
    (128, 7168, "row"): ("row_blocks", "rows_apart", (448, 128, 1)),
    (100, 7168, "col_tma"): ("row_blocks", "mn_rows", (448, 104, 1)),
    (66, 7168, "row"): (1, "rows_apart", (64, 2)),
    (160, 7168, "row"): ("row_blocks", "rows_apart", (448, 160, 1)),
    (1056, 7168, "row"): ("row_blocks", "rows_apart", (448, 1056, 1)),
    (1056, 7168, "col_tma"): ("row_blocks", "mn_rows", (448, 1056, 1)),
    (2048, 7168, "row"): (2, "groups", (32, 8)),
    (2048, 7168, "col"): (2, "mn_rows", (64, 4)),
    (2047, 7168, "col"): (4, "rows_apart", (64, 4)),
    (2048, 7168, "col_tma"): (2, "mn_rows", (64, 4)),
    (32768, 7168, "col_tma_packed"): (2, "mn_rows", (64, 4)),
    (32768, 2048, "col_tma"): (2, "mn_rows", (128, 2)),
    (2048, 16384, "col_tma"): (2, "mn_rows", (256, 1)),
}


@pytest.mark.parametrize("key", list(PER_TOKEN_SHAPES))
def test_per_token_benchmark_shapes(key):
    M, K, layout = key
    c = _native.group_quant_launch(per_token_problem(M, K, layout))
    assert shape(c) == PER_TOKEN_SHAPES[key]
    assert c["vec16"] == 1


def test_group_major_takes_pairs_of_groups_and_packed_takes_mn_rows():
    c = _native.group_quant_launch(group_major_problem(4096, 16, 4096, False))
    assert shape(c)[:2] == (2, "groups")
    c = _native.group_quant_launch(group_major_problem(4096, 16, 4096, True))
    assert shape(c)[:2] == (2, "mn_rows") and c["gather_words"] == 1
    c = _native.group_quant_launch(group_major_problem(8, 8, 512, False))
    assert shape(c)[:2] == (1, "rows_apart")
    # Small group-major grids keep 128-thread blocks (the larger blocks are a per-token choice).
    c = _native.group_quant_launch(group_major_problem(64, 16, 512, False))
    assert shape(c) == (1, "rows_apart", (32, 4))


@pytest.mark.parametrize("layout", ("row", "col", "col_tma", "col_tma_packed"))
def test_group_quant_grid_covers_the_work(layout):
    """Every work row and chunk has a thread: grid_y * block_y * units covers the rows (or the
    65535 cap strides over them), grid_x * block_x covers the chunks, and blocks hold at most 256
    threads (512 with one unit per thread), a whole number of groups per row tile."""
    for M, K, gs, eb in itertools.product((1, 3, 5, 17, 100, 4097, 70000), (128, 2048, 7168), (32, 64, 128), (2, 4)):
        if K % gs:
            continue
        c = _native.group_quant_launch(per_token_problem(M, K, layout, gs, eb))
        vec = 32 // eb
        lanes = gs // vec
        if c["row_blocks"]:  # a thread per chunk of a row; a block per row, or 8 per 8 rows (MN-major)
            p = per_token_problem(M, K, layout, gs, eb)
            assert c["block_x"] == K // vec and c["grid_y"] == 1 and c["block_y"] == 1
            assert c["grid_x"] == (-(-p["T_s"] // 8) * 8 if c["map"] == "mn_rows" else p["T_s"])
            continue
        assert c["block_x"] * c["block_y"] <= (512 if c["unroll"] == 1 else 256)
        assert c["block_x"] % lanes == 0 or c["block_x"] >= K // vec
        chunks = K // vec if c["map"] != "groups" else -(-(K // gs) // 2) * lanes
        assert c["grid_x"] * c["block_x"] >= chunks
        per_block = c["block_y"] * (1 if c["map"] == "groups" else c["unroll"])
        assert c["grid_y"] == min(-(-c["rows"] // per_block), 65535)
        if c["map"] == "mn_rows":
            assert c["rows"] % 4 == 0 and c["row_divisor"] == c["rows"]


def test_group_quant_small_grids_take_larger_blocks_for_one_block_per_sm():
    """On small grids (one unit per thread), blocks of 256 or 512 threads only where their grid has
    one block per multiprocessor over at least half of them and every row slot holds a row;
    otherwise 128 threads."""
    for M, K, layout, sms in itertools.product(range(1, 300, 7), (2048, 7168, 16384), ("row", "col_tma"), (132, 78)):
        c = _native.group_quant_launch(per_token_problem(M, K, layout, sms=sms))
        if c["unroll"] != 1 or c["row_blocks"]:
            continue
        threads, blocks = c["block_x"] * c["block_y"], c["grid_x"] * c["grid_y"]
        assert threads <= 128 or (sms / 2 <= blocks <= sms and M % c["block_y"] == 0), (M, K, layout, sms, c)


def test_group_quant_row_blocks_rule():
    """group_quant_row_kernel takes per-token rows of 16-bit x in groups of 128 whose 32-byte chunks
    fill a block of 256 to 512 threads in whole warps, MN-major fp32 scales only with S % 8 == 0,
    aligned for 16-byte loads, over more than half the multiprocessors' count of rows and up to 8
    rows a multiprocessor; never several groups a token (group-major inputs with G > 1)."""
    layouts = ("row", "col", "col_tma", "col_tma_packed")
    for M, K, gs, eb, layout, sms, pad in itertools.product(
        (1, 38, 39, 40, 66, 67, 78, 132, 624, 625, 1056, 1057, 4097),
        (2048, 3584, 4096, 5120, 7168, 8192, 8704),
        (64, 128),
        (2, 4),
        layouts,
        (132, 78),
        (1, 4),
    ):
        p = per_token_problem(M, K, layout, gs, eb, pad_rows_to=pad, sms=sms)
        chunks, S, rows = K * eb // 32, K // gs, p["T_q"]
        mn = layout in ("col", "col_tma")
        want = (gs == 128 and eb == 2 and chunks % 32 == 0 and 256 <= chunks <= 512
                and (S % 8 == 0 or not mn) and 2 * rows > sms and rows <= 8 * sms)  # fmt: skip
        assert _native.group_quant_launch(p)["row_blocks"] == want, (M, K, gs, eb, layout, sms, pad)
    assert not _native.group_quant_launch(per_token_problem(128, 7168, "row", x_aligned=False))["row_blocks"]
    assert not _native.group_quant_launch(group_major_problem(512, 16, 512, False))["row_blocks"]


def test_group_quant_stream_rule():
    """The general kernel loads x evict-first while q (padding rows included) takes at most half
    the L2, with 16-byte loads only; the row blocks never do."""
    for K, eb, layout, pad, l2 in itertools.product(
        (2048, 4096, 7168, 16384), (2, 4), ("row", "col_tma", "col_tma_packed"), (1, 128), (H200_L2, 50 << 20)
    ):
        last = l2 // 2 // K  # the most rows of q that still take evict-first loads
        for M in (1, 17, 2048, last - 200, last - 1, last, last + 1, 4 * last):
            c = _native.group_quant_launch(per_token_problem(M, K, layout, 128, eb, pad_rows_to=pad, l2=l2))
            q_rows = -(-M // pad) * pad
            assert c["stream"] == (not c["row_blocks"] and q_rows <= last), (M, K, eb, layout, pad, l2, c)
    assert not _native.group_quant_launch(per_token_problem(2048, 7168, "row", x_aligned=False))["stream"]
    assert not _native.group_quant_launch(per_token_problem(1, 7168, "row", x_aligned=False))["stream"]
    assert _native.group_quant_launch(per_token_problem(1, 7168, "row"))["stream"]
    assert _native.group_quant_launch(per_token_problem(128, 7168, "row"))["row_blocks"]
    for T, G, D in ((1, 16, 512), (1920, 16, 1024), (1921, 16, 1024), (4096, 16, 4096)):
        want = T * G * D <= H200_L2 // 2
        for packed in (False, True):
            assert _native.group_quant_launch(group_major_problem(T, G, D, packed))["stream"] == want, (T, G, D)
    assert not _native.group_quant_launch(group_major_problem(64, 16, 512, False, x_aligned=False))["stream"]


def test_group_quant_misaligned_input_takes_element_loads():
    c = _native.group_quant_launch(per_token_problem(64, 2048, "row", x_aligned=False))
    assert c["vec16"] == 0


# items = B * 64 heads -> (lanes, warps, register cap, shared out, evict-first, stagger) on the H200:
# eight lanes below 2^14 items, capped four lanes below 2^17, and evict-first (with the shared-out
# schedule when uncapped) while B * 64 * 256 output bytes fit in half of the 60 MiB L2.
INDEXER_SHAPES = {
    1: (8, 2, 0, 0, 0, 0),
    255: (8, 2, 0, 0, 0, 0),
    256: (4, 2, 16, 0, 1, 0),
    512: (4, 2, 16, 0, 1, 0),
    2048: (4, 7, 4, 1, 1, 1500),
    4096: (4, 2, 0, 0, 0, 1500),
    16384: (4, 2, 0, 0, 0, 1500),
}


@pytest.mark.parametrize("B", list(INDEXER_SHAPES))
def test_indexer_benchmark_shapes(B):
    c = _native.indexer_config(B * 64, "v4", H200_L2)
    got = (c["lanes"], c["warps"], c["min_blocks"], c["share"], c["stream"], c["stagger_ns"])
    assert got == INDEXER_SHAPES[B]
    assert c["mode"] == "v4"


def test_indexer_any_mode_never_caps_or_shares():
    for items in (1, 1 << 14, 1 << 16, 1 << 17, 1 << 20):
        c = _native.indexer_config(items, "any", H200_L2)
        assert c["min_blocks"] == 0 and not c["share"] and not c["stream"]


def test_indexer_grid_is_persistent_and_staggers_only_two_to_six_groups_per_warp():
    resident = 132 * 8
    assert _native.indexer_grid(100, 8, resident, 1500) == (13, 0)  # under one wave
    assert _native.indexer_grid(8 * 2 * resident, 8, resident, 1500) == (resident, 1500)
    assert _native.indexer_grid(8 * 6 * resident, 8, resident, 1500) == (resident, 0)
    assert _native.indexer_grid(8 * 3 * resident, 8, 0, 1500) == (3 * resident, 0)  # unknown residency


def test_pdl_setting_round_trips():
    assert fp8ops.pdl_enabled()
    fp8ops.set_pdl(False)
    try:
        assert not fp8ops.pdl_enabled()
        x = torch.randn(5, 256, dtype=torch.bfloat16)
        q, s = fp8ops.per_token_group_quant(x)
        assert q.shape == (5, 256)
    finally:
        fp8ops.set_pdl(True)
    assert fp8ops.pdl_enabled()


# (chunks of 8 elements per row, op) -> (lanes W, chunks per lane, rows per 256-thread block): W is
# the largest power of two up to 256 leaving a lane about 1 chunk (silu) or 2 (rms), but at least
# 16 lanes (or all chunks, when fewer). So silu's H = 2048 (256 chunks) takes 256 lanes of one
# chunk, one row per block; rms's D = 7168 (896 chunks) 256 lanes of 3.5, D = 1536 64 lanes of 3.
ROW_SHAPES = {
    (4, "silu"): (4, 1, 64),
    (16, "silu"): (16, 1, 16),
    (64, "silu"): (64, 1, 4),
    (256, "silu"): (256, 1, 1),
    (2304, "silu"): (256, 9, 1),
    (4, "rms"): (4, 1, 64),
    (64, "rms"): (32, 2, 8),
    (192, "rms"): (64, 3, 4),
    (896, "rms"): (256, 4, 1),
    (2048, "rms"): (256, 8, 1),
}


@pytest.mark.parametrize("chunks, op", list(ROW_SHAPES))
def test_row_shape(chunks, op):
    s = _native.row_shape(chunks, op)
    assert (s["lanes"], s["chunks_per_lane"], s["rows_per_block"]) == ROW_SHAPES[(chunks, op)]
    assert s["compiled_chunks"] >= min(s["chunks_per_lane"], 16)


def test_row_shape_lanes_hold_whole_groups():
    """A group of 128 elements (16 chunks) never spans two rows' lanes, for every row width."""
    for chunks in range(4, 4096, 4):
        for op in ("silu", "rms"):
            lanes = _native.row_shape(chunks, op)["lanes"]
            g = min(16, chunks & -chunks)  # the largest group (in chunks) that divides the row
            assert lanes % g == 0 and lanes <= 256, (chunks, op, lanes)


def silu_shape_of(lanes, units_per_lane, rows_per_block, adjacent, slices, threads):
    """_native.silu_shape's answer, by position."""
    keys = ("lanes", "units_per_lane", "rows_per_block", "adjacent", "slices", "threads")
    return dict(zip(keys, (lanes, units_per_lane, rows_per_block, adjacent, slices, threads), strict=True))


def test_silu_shape_pairs_adjacent_chunks_on_large_or_wide_rows():
    pair = lambda chunks, rows, masked=False, elem=2, vec=True: _native.silu_shape(chunks, rows, masked, elem, vec, 132)  # noqa: E731
    # H = 2048 (256 chunks): one chunk per lane for small grids, two from 768 * 132 chunks.
    assert pair(256, 100) == silu_shape_of(256, 1, 1, 1, 1, 256)
    assert pair(256, 396)["adjacent"] == 2 and pair(256, 395)["adjacent"] == 1
    assert pair(256, 4096) == silu_shape_of(128, 1, 2, 2, 1, 256)
    # Rows that would give a lane more than two chunks: two adjacent chunks per lane at any row
    # count too large for slices; two chunks per lane (H = 1536) stay single on small grids.
    assert pair(896, 265) == silu_shape_of(256, 2, 1, 2, 1, 256)
    assert pair(768, 1, masked=True)["adjacent"] == 2
    assert pair(192, 100) == silu_shape_of(128, 2, 2, 1, 1, 256)
    assert pair(512, 1 << 20, masked=True)["adjacent"] == 1
    # Masked narrow rows, fp32 and rows without 16-byte loads keep one chunk per lane.
    assert pair(256, 32 * 512, masked=True)["adjacent"] == 1
    assert pair(896, 1 << 20, elem=4)["adjacent"] == 1
    assert pair(896, 1 << 20, vec=False)["adjacent"] == 1


def test_silu_shape_slices_rows_of_small_grids():
    shape = lambda chunks, rows, masked=False, elem=2: _native.silu_shape(chunks, rows, masked, elem, True, 132)  # noqa: E731

    def sliced(width, slices):
        return silu_shape_of(width, 1, 1, 1, slices, width)

    # Up to 66 rows: as many slices per row as give a block per multiprocessor, each a whole number
    # of warps, at least 64 chunks and at most 512. H = 2048 (256 chunks): 4 slices of 64 up to 33
    # rows, 3 of 96 at 34, 2 of 128 at 66; H = 7168 (896 chunks): 14 of 64 at one row, 7 of 128 at
    # 16; H = 18432 (2304 chunks): 8 of 288 at 16 rows.
    assert shape(256, 1) == sliced(64, 4) and shape(256, 33) == sliced(64, 4)
    assert shape(256, 34) == sliced(96, 3) and shape(256, 66) == sliced(128, 2)
    assert shape(896, 1) == sliced(64, 14) and shape(896, 16) == sliced(128, 7)
    assert shape(2304, 16) == sliced(288, 8)
    # Rows of at most 64 chunks are not cut; nor masked rows, at any width.
    assert shape(64, 1)["slices"] == 1 and shape(68, 1) == sliced(64, 2)
    assert shape(896, 16, masked=True)["slices"] == 1
    # Past 66 rows, or where narrow slices would be wider than 512 chunks: rows wider than 256
    # chunks take slices of 256 up to 264 rows (two per multiprocessor).
    assert shape(2304, 29) == sliced(256, 9) and shape(2304, 264) == sliced(256, 9)
    assert shape(896, 67) == sliced(256, 4) and shape(896, 264) == sliced(256, 4)
    assert shape(896, 265)["slices"] == 1 and shape(256, 67)["slices"] == 1
    assert shape(260, 100) == sliced(256, 2) and shape(896, 16, elem=4) == sliced(128, 7)


def test_silu_shape_units_tile_rows_and_groups():
    """Every row width (groups of 32 elements or more): the lanes cover the row (or its slices, none
    of them empty, each a whole number of the largest group), a group's units never span two rows'
    lanes, and a block holds whole rows or one slice."""
    for chunks in range(4, 4096, 4):
        for rows in (1, 5, 66, 67, 264, 1 << 16):
            s = _native.silu_shape(chunks, rows, False, 2, True, 132)
            a, lanes, slices = s["adjacent"], s["lanes"], s["slices"]
            width = lanes * s["units_per_lane"] * a  # chunks a row (or slice) of lanes covers
            assert width * slices >= chunks > (slices - 1) * width, (chunks, rows, s)
            if slices > 1:  # a block per slice, a chunk per lane, whole warps and whole groups
                assert a == 1 and s["units_per_lane"] == 1 and s["rows_per_block"] == 1, (chunks, rows, s)
                assert lanes % 32 == 0 and 64 <= lanes <= 512, (chunks, rows, s)
                continue
            g = min(16, chunks & -chunks) // a  # the largest group (in units) that divides the row
            assert lanes % g == 0 and 256 % lanes == 0 and s["rows_per_block"] * lanes == 256, (chunks, rows, s)
            assert s["threads"] == 256, (chunks, rows, s)


def test_silu_shape_masked_blocks():
    """Masked kernels of one unit per lane and pass run blocks of 1024 threads, whole rows of lanes;
    the others, and every flat grid, 256."""
    shape = lambda chunks, elem=2, vec=True, masked=True: _native.silu_shape(chunks, 8 * 256, masked, elem, vec, 132)  # noqa: E731
    # H = 2048 (256 chunks): 256 lanes of one chunk, four rows a block; fp32 the same.
    assert shape(256) == silu_shape_of(256, 1, 4, 1, 1, 1024)
    assert shape(256, elem=4)["threads"] == 1024 and shape(256, vec=False)["threads"] == 1024
    # H = 4096 (512 chunks): two chunks a lane, one pass of two units: 256 threads.
    assert shape(512) == silu_shape_of(256, 2, 1, 1, 1, 256)
    # H = 7168 (896 chunks): pairs, one unit a pass (two passes): 1024; without 16-byte loads no
    # pairs, four units a pass: 256.
    assert shape(896) == silu_shape_of(256, 2, 4, 2, 1, 1024)
    assert shape(896, vec=False)["threads"] == 256
    # Narrow rows: 16 lanes (H = 128) of one chunk, 64 rows a block.
    assert shape(16)["threads"] == 1024 and shape(16)["rows_per_block"] == 64
    assert shape(256, masked=False)["threads"] == 256
    for chunks in range(4, 4096, 4):
        for elem, vec in ((2, True), (2, False), (4, True)):
            s = shape(chunks, elem, vec)
            assert s["threads"] in (256, 1024) and s["rows_per_block"] * s["lanes"] == s["threads"], (chunks, s)


def test_silu_table():
    """silu_mul_quant looks the SiLU up in its table for flat bf16 inputs of 2^18 gate values or
    more (rows * H), and never for fp16 or fp32 or in masked mode."""
    used = _native.silu_table_used
    assert used(True, False, 128, 2048) and not used(True, False, 127, 2048)
    assert used(True, False, 1 << 16, 2048) and used(True, False, 16, 18432) and not used(True, False, 16, 7168)
    assert used(True, False, 1, 1 << 18) and not used(True, False, 0, 1 << 20)
    assert not used(False, False, 1 << 16, 2048) and not used(True, True, 1 << 16, 2048)


def test_silu_stream():
    """The flat bf16 table kernel of pairs loads x evict-first where x fills at least a quarter of
    the L2 and the codes at most three eighths of it."""
    stream = lambda rows, H, q_rows=None, l2=H200_L2: _native.silu_stream(  # noqa: E731
        rows, rows if q_rows is None else q_rows, H, 2, l2
    )
    # H200 (60 MiB): H = 2048 from 1920 rows (15 MiB of x) to 11520 (22.5 MiB of codes).
    assert stream(1920, 2048) and not stream(1919, 2048)
    assert stream(11520, 2048) and not stream(11521, 2048) and not stream(16384, 2048)
    assert stream(11000, 2048, q_rows=11520) and not stream(11000, 2048, q_rows=11521)  # padded rows
    assert stream(549, 7168) and not stream(548, 7168) and stream(3291, 7168) and not stream(3292, 7168)
    assert not stream(1024, 1024) and stream(8192, 1024)
    assert stream(1920, 2048, l2=60 << 20) and not stream(1920, 2048, l2=(60 << 20) + 1)
    for rows in range(0, 20000, 97):
        for H in (512, 1024, 2048, 4096, 7168):
            x, q = rows * 2 * H * 2, rows * H
            assert stream(rows, H) == (4 * x >= H200_L2 and 8 * q <= 3 * H200_L2), (rows, H)


def test_silu_flat_grid():
    """silu_mul_quant's flat grid of the kernels of a pair of chunks a unit: where blocks of 256
    threads would make more than two passes, blocks of 512 (twice the rows) up to the resident ones.
    Where every block of a table kernel of one pair of chunks a lane would make one pass, half the
    blocks of 256 (two passes each), unless fewer than 7/8 of the multiprocessors would then get a
    block. Other grids keep a block of 256 per row group up to the resident blocks."""
    grid = lambda chunks, rows, table=True, elem=2, vec=True, wide=2: _native.silu_flat_grid(  # noqa: E731
        chunks, rows, elem, vec, table, 4, wide, 132
    )
    # H = 2048: pairs on 128 lanes (two rows a block of 256) from 396 rows, below that a chunk a
    # lane on 256.
    assert grid(256, 512) == (128, 256) and grid(256, 1024) == (256, 256) and grid(256, 1056) == (264, 256)
    assert grid(256, 1058) == (528, 256) and grid(256, 2112) == (528, 256)  # up to two passes
    assert grid(256, 2114) == (264, 512) and grid(256, 4096) == (264, 512)  # more than two
    assert grid(256, 4096, wide=0) == (528, 256) and grid(256, 4096, table=False) == (264, 512)
    assert grid(256, 462) == (116, 256)  # 116 blocks: at least 7/8 of 132
    assert grid(64, 1848) == (116, 256) and grid(64, 1856) == (116, 256)  # H = 512: pairs on 32 lanes
    assert grid(256, 395) == (395, 256) and grid(256, 300) == (300, 256)  # single chunks: a block a row
    assert grid(256, 448) == (224, 256)  # pairs, one pass: half the blocks would be under 7/8 of 132
    assert grid(256, 512, table=False) == (256, 256)  # fp16, or under 2^18 values: no table to copy
    assert grid(192, 512) == (256, 256)  # H = 1536: two chunks a lane, a block per two rows
    assert grid(896, 512) == (512, 256)  # H = 7168: two units a lane, two passes a row already
    assert grid(896, 1024) == (528, 256) and grid(896, 2048) == (264, 512)
    assert grid(256, 4096, vec=False) == (528, 256)  # a chunk a lane on 256 lanes, loaded by elements
    assert grid(512, 4096, vec=False) == (528, 256)  # two chunks a lane: two units a pass
    assert grid(256, 16) == (0, 0)  # sliced
    for chunks in (64, 128, 192, 256, 512, 896):
        for rows in range(100, 5000, 37):
            for vec in (True, False):
                shape = _native.silu_shape(chunks, rows, False, 2, vec, 132)
                if shape["slices"] > 1:
                    continue
                rpb = shape["rows_per_block"]
                groups = -(-rows // rpb)
                base = _native.row_grid_blocks(rows, rpb, 4, 132)
                pairs = shape["adjacent"] == 2
                got = grid(chunks, rows, vec=vec)
                if pairs and groups > 2 * base:
                    assert got == (_native.row_grid_blocks(rows, 2 * rpb, 2, 132), 512), (chunks, rows)
                    assert grid(chunks, rows, vec=vec, wide=0) == (base, 256), (chunks, rows)
                elif pairs and shape["units_per_lane"] == 1 and groups <= base and -(-groups // 2) >= 116:
                    assert got == (-(-groups // 2), 256), (chunks, rows)
                else:
                    assert got == (base, 256), (chunks, rows)
                if not (pairs and groups > 2 * base):
                    assert grid(chunks, rows, table=False, vec=vec) == (base, 256), (chunks, rows)


def test_silu_masked_pairs():
    """A masked bf16 buffer run in blocks of 1024 threads of one chunk a lane switches, on the
    device, to units of two chunks and the SiLU table from as many valid rows as hold 4096 chunks
    a multiprocessor, on the lanes of silu_shape's pairs; never for fp16 or fp32, element loads, the
    256-thread kernels, rows already paired, or pairs of fewer than 32 lanes."""
    pairs = lambda chunks, elem=2, bf16=True, vec=True, rows=32 * 512: _native.silu_masked_pairs(  # noqa: E731
        chunks, rows, elem, bf16, vec, 132
    )
    for chunks in (64, 128, 256):
        p = pairs(chunks)
        assert p["rows"] * chunks >= 4096 * 132 > (p["rows"] - 1) * chunks, (chunks, p)
        assert 1 << p["lanes_log2"] == _native.row_shape(chunks // 2, "silu")["lanes"] >= 32, (chunks, p)
        assert _native.silu_table_used(True, False, p["rows"], chunks * 8), chunks
        assert _native.silu_shape(chunks, 32 * 512, True, 2, True, 132)["threads"] == 1024, chunks
    # H = 2048: from 2112 valid rows, pairs on 128 lanes; H = 512: from 8448, on 32.
    assert pairs(256) == {"rows": 2112, "lanes_log2": 7} and pairs(64) == {"rows": 8448, "lanes_log2": 5}
    never = {"rows": 0, "lanes_log2": 0}
    assert pairs(32) == never  # pairs of 16 lanes
    assert pairs(512) == never and pairs(896) == never  # 256-thread blocks; pairs already
    assert pairs(256, bf16=False) == never and pairs(256, elem=4, bf16=False) == never
    assert pairs(256, vec=False) == never


def test_rms_split_cluster():
    """The split kernel takes rows of 32 lanes or more on grids of at most 4 blocks of 32 lanes
    per multiprocessor: a row whose lanes times its chunks per lane (a power of two) fit 256
    threads in one block (1), a wider row in a cluster of lanes / 32 blocks; the row kernel (0)
    takes the others."""
    split = _native.rms_split_cluster
    assert split(1, 896, 132) == 8  # D = 7168: 256 lanes of four chunks
    assert split(66, 896, 132) == 8 and split(67, 896, 132) == 0
    assert split(1, 384, 132) == 4 and split(132, 384, 132) == 4 and split(133, 384, 132) == 0  # D = 3072
    assert split(1, 256, 132) == 1 and split(132, 256, 132) == 1 and split(133, 256, 132) == 0  # D = 2048
    assert split(264, 192, 132) == 1 and split(265, 192, 132) == 0  # D = 1536: 64 lanes of four
    assert split(528, 64, 132) == 1 and split(529, 64, 132) == 0  # D = 512: 32 lanes
    assert split(1, 48, 132) == 0  # 16 lanes
    for chunks in range(4, 2049, 4):
        lanes = _native.row_shape(chunks, "rms")["lanes"]
        per_lane = 1 << (-(-chunks // lanes) - 1).bit_length()
        expected = 0 if lanes < 32 else 1 if lanes * per_lane <= 256 else lanes // 32
        assert split(1, chunks, 132) == expected, chunks


def test_rms_slot_blocks():
    """On the split kernel's grids, rows of 256 lanes of two to four chunks (D = 4096 to 8192)
    without the residual take the slot kernel, a block per chunk slot; the others keep the split or
    the row kernel."""
    slot = _native.rms_slot_blocks
    assert slot(1, 896, False, 132) == 4  # D = 7168: 3.5 chunks a lane
    assert slot(1, 512, False, 132) == 2 and slot(1, 640, False, 132) == 3 and slot(1, 1024, False, 132) == 4
    assert slot(66, 896, False, 132) == 4 and slot(67, 896, False, 132) == 0  # the split kernel's grids only
    assert slot(1, 896, True, 132) == 0  # with the residual
    assert slot(1, 2048, False, 132) == 0  # D = 16384: eight chunks a lane
    for chunks in range(4, 2049, 4):
        lanes, per_lane = _native.row_shape(chunks, "rms")["lanes"], -(-chunks // 256)
        expected = per_lane if lanes == 256 and 2 <= per_lane <= 4 else 0
        assert slot(1, chunks, False, 132) == expected, chunks


def test_rms_pipelined():
    """The pipelined row kernel takes 16-bit rows without a residual, loaded 16 bytes at a time, of
    64 to 256 lanes of exactly two chunks each, where the grid has more than two waves of blocks and
    fewer than 2^31 row slots (it counts rows in 32 bits); every other row takes the kernel of a
    block per row slot."""
    resident = 4 * 132

    def pipelined(chunks, rows, elem_bytes=2, residual=False, vec16=True):
        return _native.rms_pipelined(chunks, rows, elem_bytes, residual, vec16, resident)

    assert pipelined(512, 8192)  # D = 4096: 256 lanes of 2 chunks, a row a block
    assert pipelined(256, 8192) and pipelined(128, 8192)  # D = 2048 and 1024: 128 and 64 lanes
    assert pipelined(512, 2 * resident + 1) and not pipelined(512, 2 * resident)  # more than two waves
    assert pipelined(128, 4 * (2 * resident) + 1) and not pipelined(128, 4 * (2 * resident))  # 4 rows a block
    assert not pipelined(1024, 8192)  # D = 8192: 256 lanes of 4 chunks
    assert not pipelined(896, 8192)  # D = 7168: 256 lanes, 3 or 4 chunks each
    assert not pipelined(192, 8192)  # D = 1536: 64 lanes of 3
    assert not pipelined(64, 1 << 16) and not pipelined(32, 1 << 16)  # D = 512 and 256: 32 and 16 lanes
    assert not pipelined(512, 8192, residual=True) and not pipelined(512, 8192, elem_bytes=4)
    assert not pipelined(512, 8192, vec16=False)
    assert pipelined(512, (1 << 31) - 1) and not pipelined(512, 1 << 31) and not pipelined(128, 1 << 32)
    assert {c for c in range(4, 2049, 4) if pipelined(c, 1 << 20)} == {128, 256, 512}


def test_rms_whole_row():
    """Rows of 256 lanes (512 chunks or more) take the row kernel that knows W, except rows of two
    chunks a lane with the residual (D = 4096 only); rows of fewer lanes keep W a launch argument."""
    whole = _native.rms_whole_row
    assert whole(896, False) and whole(896, True)  # D = 7168: 256 lanes of 3 or 4 chunks
    assert whole(2048, False) and whole(2048, True)  # D = 16384: 8 chunks a lane
    assert whole(512, False) and not whole(512, True)  # D = 4096: 2 chunks a lane
    assert not whole(511, False) and not whole(192, False) and not whole(64, True)  # 128, 64 and 32 lanes
    for chunks in range(1, 2049):
        shape = _native.row_shape(chunks, "rms")
        assert whole(chunks, True) == (shape["lanes"] == 256 and shape["chunks_per_lane"] > 2), chunks
        assert whole(chunks, False) == (shape["lanes"] == 256), chunks


def test_row_grid_caps():
    assert _native.row_grid_blocks(8192, 1, 2, 132) == 264  # silu_mul_quant: at most the resident blocks
    assert _native.row_grid_blocks(100, 4, 2, 132) == 25
    assert _native.row_grid_blocks(100, 4, 0, 132) == 25  # the rms kernel of a block per row: no cap
    assert _native.row_grid_blocks(1 << 20, 4, 0, 132) == 1 << 18
    assert _native.row_grid_blocks(0, 1, 2, 132) == 1
