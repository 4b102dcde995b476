// Launch shape of silu_mul_quant's kernels (silu_mul_quant.cuh): pure host functions, tested on
// the CPU (tests/test_launch_config.py). The lanes per row are fused_quant.h's row_shape.
#pragma once

#include <algorithm>
#include <cstdint>

#include "fp8ops/fused_quant.h"
#include "fp8ops/fused_quant_launch.h"

namespace fp8ops {

// silu_mul_quant's lanes: each holds units of `adjacent` neighbouring chunks (1 or 2), and the
// units of a row are shared out as row_shape says. Two chunks per unit share the unit's group
// amax shuffles, scale and addressing, which pays where the kernel is bound by instruction issue:
// rows that would give a lane more than two chunks, and, flat, grids of at least
// kSiluPairChunksPerSm chunks per multiprocessor (there a grid of single chunks would hold more
// than three blocks a multiprocessor at rows of 256 lanes). Smaller grids keep one chunk per lane
// and twice the lanes, for latency; so do masked buffers of narrower rows, whose valid rows (often
// a few per expert) only the device knows. Two need bf16 or fp16 rows loaded 16 bytes at a time.
constexpr int64_t kSiluPairChunksPerSm = 768;

// A flat grid of few rows would leave most multiprocessors idle while each of the others works
// through whole rows: its rows are cut into slices, a block per slice and a chunk per lane (the
// last slice holds the rest). Where a row can take two or more slices with one block per
// multiprocessor, the slices are as narrow as that allows, from kSiluSliceMinChunks to
// kSiluSliceMaxChunks chunks in whole warps; otherwise rows wider than kSiluSliceChunks chunks take
// slices of that many while there are at most kSiluSliceRowsPerSm rows per multiprocessor (the row
// kernel would give each of those few blocks several passes). A slice is a multiple of 32 chunks,
// so of any group's chunks: a group never spans two.
constexpr int64_t kSiluSliceChunks = 256;
constexpr int64_t kSiluSliceRowsPerSm = 2;
constexpr int64_t kSiluSliceMinChunks = 64;
constexpr uint32_t kSiluSliceMaxChunks = 512;

// Units (of `adjacent` chunks) that a lane's pass of the row kernel loads at once: one pair, or
// up to four 16-bit chunks (two of fp32); a lane with more units makes further passes.
constexpr uint32_t silu_pass_units(int elem_bytes, uint32_t adjacent) {
  return adjacent == 2 ? 1u : elem_bytes == 4 ? 2u : 4u;
}

// Threads per block of silu_mul_quant's row kernel, for `pass_units` units per lane and pass (the
// kernel's compiled count). A masked grid fills every block slot whatever the counts, and when few
// rows are valid most of its blocks only read masked_m and exit: fewer, larger blocks cost less to
// cycle through, and its rows are dealt out a block at a time (silu_mul_quant.cuh), so a few rows
// still land on as many multiprocessors. Kernels of more than one unit per pass keep
// kRowBlockThreads, since their registers would not fit a block of kSiluMaskedThreads.
constexpr uint32_t kSiluMaskedThreads = 1024;

constexpr uint32_t silu_block_threads(bool masked, uint32_t pass_units) {
  return masked && pass_units == 1 ? kSiluMaskedThreads : kRowBlockThreads;
}

// The most threads a block of silu_mul_quant's row kernel is launched with: silu_block_threads, or,
// for the flat kernels of a pair of chunks a unit, kSiluFlatWideThreads (silu_flat_grid says when).
constexpr uint32_t kSiluFlatWideThreads = 2 * kRowBlockThreads;

constexpr uint32_t silu_kernel_threads(bool masked, uint32_t pass_units, uint32_t adjacent) {
  return !masked && adjacent == 2 ? kSiluFlatWideThreads : silu_block_threads(masked, pass_units);
}

struct SiluShape {
  RowShape row;       // over units of `adjacent` chunks; sliced: a slice's chunks (lanes) and 1, 1
  uint32_t adjacent;  // chunks per unit
  uint32_t slices;    // slices per flat row (1: whole rows)
  uint32_t threads;   // per block (row.rows_per_block rows of row.lanes lanes, or a slice); a flat
                      // grid of pairs may take blocks of twice as many (silu_flat_grid)
};

// chunks: chunks of a row (a multiple of 4: groups hold at least 32 elements); rows: the row
// slots (flat: T_s; masked: E * Mmax).
inline SiluShape silu_shape(int64_t chunks, int64_t rows, bool masked, int elem_bytes, bool vec16, int sm_count) {
  auto sliced = [chunks](int64_t width) -> SiluShape {
    const uint32_t w = static_cast<uint32_t>(width);
    return {{w, 1, 1}, 1, static_cast<uint32_t>((chunks + width - 1) / width), w};
  };
  auto whole = [&](RowShape r, uint32_t adjacent) -> SiluShape {
    const uint32_t units = std::min(row_max_chunks(r.chunks_per_lane), silu_pass_units(elem_bytes, adjacent));
    const uint32_t threads = silu_block_threads(masked, units);
    r.rows_per_block = threads / r.lanes;
    return {r, adjacent, 1, threads};
  };
  if (!masked && rows >= 1 && 2 * rows <= sm_count) {
    const int64_t per_row = sm_count / rows;  // slices per row at one block per multiprocessor
    const int64_t width = std::max<int64_t>(((chunks + per_row - 1) / per_row + 31) / 32 * 32, kSiluSliceMinChunks);
    if (width < chunks && width <= kSiluSliceMaxChunks) return sliced(width);
  }
  if (!masked && chunks > kSiluSliceChunks && rows <= kSiluSliceRowsPerSm * sm_count) return sliced(kSiluSliceChunks);
  const RowShape single = row_shape(chunks, kSiluChunksPerLane);
  const bool large = !masked && rows * chunks >= kSiluPairChunksPerSm * sm_count;
  if (elem_bytes == 2 && vec16 && (single.chunks_per_lane > 2 || large)) {
    return whole(row_shape(chunks / 2, kSiluChunksPerLane), 2);
  }
  return whole(single, 1);
}

// Whether a flat silu_mul_quant looks SiLU up in the bf16 table of silu_mul_quant.cuh instead of
// computing it: bf16 inputs of at least kSiluTableMinValues gate values (rows * H). Each block
// first copies the table (8 KiB) into shared memory, which smaller grids do not win back. Masked
// buffers: the kernels of kSiluMaskedThreads threads over bf16 rows of one chunk a lane, loaded 16
// bytes at a time, always look it up (silu_mul_quant.cuh's kSiluMaskedTable); other masked kernels
// compute SiLU.
constexpr int64_t kSiluTableMinValues = int64_t(1) << 18;

inline bool silu_table(bool bf16, bool masked, int64_t rows, int64_t H) {
  return bf16 && !masked && rows * H >= kSiluTableMinValues;
}

// Whether the flat table kernel of pairs of chunks loads x evict-first (silu_mul_quant.cuh's kStream):
// where x (rows of 2H values of elem_bytes) fills at least a quarter of the L2 (l2_bytes) and the
// codes of the q_rows row slots (H bytes each) at most three eighths of it. NOTES: the L2 then
// keeps the codes being written rather than x, read once; smaller inputs gained nothing, and from
// about half the L2 of codes the same loads ran slower (docs/DESIGN.md).
inline bool silu_stream(int64_t rows, int64_t q_rows, int64_t H, int elem_bytes, int64_t l2_bytes) {
  return 4 * rows * 2 * H * elem_bytes >= l2_bytes && 8 * q_rows * H <= 3 * l2_bytes;
}

// A masked buffer's shape keeps one chunk a unit (silu_shape): the host sees the row slots, not
// the valid rows, which in a decode step are a few per expert. The masked kernels of
// kSiluMaskedThreads threads over bf16 rows loaded 16 bytes at a time count the valid rows first;
// from `rows` of them (kSiluMaskedPairChunksPerSm chunks a multiprocessor) they take units of two
// chunks on 2^lanes_log2 lanes a row and look SiLU up in the table, as large flat grids do. That
// pays later than on flat grids (kSiluPairChunksPerSm): with fewer rows the single chunks, on twice
// the lanes a row, finished first. rows = 0: never (other dtypes or loads, rows of more than one
// unit a lane, or pairs of fewer than 32 lanes, whose rows would share a warp).
constexpr int64_t kSiluMaskedPairChunksPerSm = 4096;

struct SiluPairSwitch {
  uint32_t rows;        // the valid rows from which the kernel takes pairs
  uint32_t lanes_log2;  // log2 of the lanes of a row of pairs
};

inline SiluPairSwitch silu_masked_pairs(int64_t chunks, const SiluShape& s, bool bf16, bool vec16, int sm_count) {
  if (!bf16 || !vec16 || s.threads != kSiluMaskedThreads || s.adjacent != 1) return {0, 0};
  const RowShape pair = row_shape(chunks / 2, kSiluChunksPerLane);
  if (pair.lanes < 32) return {0, 0};
  const int64_t rows = (kSiluMaskedPairChunksPerSm * sm_count + chunks - 1) / chunks;
  return {static_cast<uint32_t>(std::min<int64_t>(rows, 0x7FFFFFFF)), row_lanes_log2(pair)};
}

// silu_mul_quant's flat grid (silu_shape's row shape s, not sliced; units of `adjacent` chunks),
// blocks_per_sm blocks of kRowBlockThreads fitting a multiprocessor and wide_per_sm of
// kSiluFlatWideThreads (0: not offered). The kernels of pairs of chunks are compiled for either
// size. Where their grid of kRowBlockThreads would make more than two passes, it takes blocks of
// kSiluFlatWideThreads (twice the rows a block) up to the resident ones: half the blocks a
// multiprocessor, and of the table kernels half the copies of the table. Where every block of a
// table kernel of one pair of chunks a lane would make a single pass, half as many blocks of
// kRowBlockThreads make two (half the copies, and room for the next grid's blocks under PDL), but
// not where under 7/8 of the multiprocessors would get one, nor for single chunks (slower). Every
// other grid has row_grid_blocks at blocks_per_sm.
struct SiluFlatGrid {
  uint32_t blocks;
  uint32_t threads;
};

inline SiluFlatGrid silu_flat_grid(int64_t rows, const RowShape& s, uint32_t adjacent, bool table, int blocks_per_sm,
                                   int wide_per_sm, int sm_count) {
  const uint32_t blocks = row_grid_blocks(rows, s.rows_per_block, blocks_per_sm, sm_count);
  const int64_t groups = (rows + s.rows_per_block - 1) / s.rows_per_block, half = (groups + 1) / 2;
  if (adjacent == 2 && wide_per_sm > 0 && groups > 2 * int64_t(blocks)) {
    return {row_grid_blocks(rows, 2 * s.rows_per_block, wide_per_sm, sm_count), kSiluFlatWideThreads};
  }
  if (!table || adjacent != 2 || s.chunks_per_lane != 1 || groups > blocks || half * 8 < int64_t(sm_count) * 7) {
    return {blocks, kRowBlockThreads};
  }
  return {static_cast<uint32_t>(half), kRowBlockThreads};
}

}  // namespace fp8ops
