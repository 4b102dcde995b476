// Launch shape of the group quantization kernel: a pure host function of the problem and the
// device's multiprocessor count and L2 size, tested on the CPU (tests/test_launch_config.py).
#pragma once

#include <algorithm>
#include <cstdint>

#include "fp8ops/group_quant.h"

namespace fp8ops {

constexpr int kGroupQuantThreads = 256;          // per block on large grids
constexpr int kGroupQuantSmallThreads = 128;     // per block on small grids (one row per thread)
constexpr int kGroupQuantOneWaveThreads = 512;   // at most, per block on grids of a block per SM
constexpr int kGroupQuantWaveBlocks = 6;         // resident blocks per SM assumed when counting waves
constexpr int kGroupQuantUnrollWaves = 4;        // waves of 256-thread blocks from which units unroll
constexpr int kThreadBytes = 32;                 // bytes of x per thread and row: two 16-byte loads
constexpr int kGroupQuantRowBlockRowsPerSm = 8;  // rows per SM up to which row blocks run

// How a thread's kUnroll units (rows, or groups of one row) map to the work grid (t, g, s):
//  - kRowsApart: row r = t * G + g over the T_q * G rows of q; a thread's units are rows
//    slot_step apart, of one scale group.
//  - kMnRows (scales MN-major: s_stride_t == 1, and 4-word aligned strides): row r = g * T_s + t
//    over the G * T_s rows of the scale tensor; a thread's units are consecutive t of one g, so
//    their scales are kUnroll consecutive words that one vector store writes. Rows t >= T_q
//    write scales only.
//  - kGroups (fp32 scales): rows as in kRowsApart, one per slot; a thread's two units are scale
//    groups 2i and 2i + 1 of that row. With s_stride_s == 1 (and 2-word aligned strides) their
//    scales are consecutive words that one 8-byte store writes; otherwise one word each.
// Outside kMnRows, scale rows past T_q (TMA padding) have no work item: the grid's slots zero
// them right after their first loads.
enum class UnitMap { kRowsApart, kMnRows, kGroups };

struct GroupQuantLaunch {
  int unroll;   // units per thread: 1, 2 or 4
  UnitMap map;  // kRowsApart (1 or 4 rows), kMnRows (2 rows) or kGroups (2 groups)
  uint32_t grid_x, grid_y;
  uint32_t block_x, block_y;
  uint32_t rows;         // rows of the work grid
  uint32_t row_divisor;  // what a row index is divided by: G, or T_s with kMnRows
  bool gather_words;     // packed words gathered by shuffles and stored whole
  bool vec16;            // 16-byte loads of x
  bool row_blocks;       // group_quant_row_kernel (group_quant_row_blocks); map kMnRows: 8-row blocks
  bool stream;           // evict-first 16-byte loads of x (group_quant_stream)
};

// Whether a problem takes group_quant_row_kernel: per-token rows (G == 1) of 16-bit x with 16-byte
// loads in groups of 128, whose 32-byte chunks fill a block of 256 to 512 threads (K = 4096 to
// 8192) in whole warps, MN-major fp32 scales only when the row's groups split into 8 slices
// (S % 8 == 0; packed scales are MN-major), and more rows than half the multiprocessors, up to
// kGroupQuantRowBlockRowsPerSm per multiprocessor. On those grids the general kernel's row tiles
// and strided loops were a large share of a thread's instructions. Past them its unrolled kernel,
// with more bytes in flight per thread, is faster.
inline bool group_quant_row_blocks(const GroupQuantParams& p, int elem_bytes, bool vec16, int sm_count) {
  const int64_t chunks = p.D * elem_bytes / kThreadBytes;
  return p.G == 1 && elem_bytes == 2 && vec16 && p.group_size == 128 && chunks % 32 == 0 &&
         2 * chunks >= kGroupQuantOneWaveThreads && chunks <= kGroupQuantOneWaveThreads &&
         (p.packed ? p.s_stride_t == 1 : p.s_stride_t != 1 || p.S % 8 == 0) && 2 * p.T_q > sm_count &&
         p.T_q <= static_cast<int64_t>(kGroupQuantRowBlockRowsPerSm) * sm_count;
}

// Whether the general kernel loads x evict-first (ld.global.cs): 16-byte loads while q takes at
// most half the L2 (l2_bytes). NOTES: the L2 then keeps the codes and scales being written rather
// than x, read once; on larger grids evict-first loads ran slower (docs/DESIGN.md).
inline bool group_quant_stream(const GroupQuantParams& p, bool vec16, int64_t l2_bytes) {
  return vec16 && 2 * p.T_q * p.G * p.D <= l2_bytes;
}

// elem_bytes: 2 (bf16, fp16) or 4 (fp32); l2_bytes: the device's L2 size. The problem must be
// non-empty, with a supported group size and fewer than 2^31 rows (launch_group_quant checks both).
// NOTES: one row per thread, in blocks of 128 to 512 threads, until the grid of 256-thread
// blocks spans kGroupQuantUnrollWaves waves; then two units per thread whose scales one vector
// store writes (2 rows with MN-major scales, 2 groups with fp32 scales consecutive along s, and
// group-major fp32 scales, whose two rows would be a token stride apart in x), else 4 rows.
inline GroupQuantLaunch group_quant_launch(const GroupQuantParams& p, int elem_bytes, int sm_count, int64_t l2_bytes) {
  const uint32_t vec = kThreadBytes / elem_bytes;  // elements per thread and row
  const uint32_t lanes = static_cast<uint32_t>(p.group_size) / vec;
  const uint32_t q_rows = static_cast<uint32_t>(p.T_q * p.G);
  uint32_t chunks = static_cast<uint32_t>(p.D / vec);
  uint32_t bx = 1, by = 1;
  // blockDim.x: the largest power of two (<= threads) that divides the row's chunk count, so no
  // lane idles, unless that is under a warp; blockDim.y fills the block but not past the rows.
  auto shape_block = [&](uint32_t threads) {
    bx = 1;
    while (bx < threads && chunks % (2 * bx) == 0) bx *= 2;
    if (bx < 32) {
      bx = 1;
      while (bx < threads && bx < chunks) bx *= 2;
    }
    by = 1;
    while (bx * by < threads && by < q_rows) by *= 2;
  };
  shape_block(kGroupQuantThreads);
  const uint32_t wave = static_cast<uint32_t>(sm_count) * kGroupQuantWaveBlocks;
  const uint64_t blocks = static_cast<uint64_t>((chunks + bx - 1) / bx) * ((q_rows + by - 1) / by);
  const bool small = blocks < static_cast<uint64_t>(kGroupQuantUnrollWaves) * wave;
  // NOTES: per-token MN-major fp32 scales: a warp takes one group of up to 32 / lanes
  // consecutive rows, so that the scale words its first lanes store are one segment instead of
  // one word in each of its groups' columns. Packed scales keep a warp across groups: their bytes
  // then share one word.
  auto shape_small = [&](uint32_t threads) {
    shape_block(threads);
    if (p.s_stride_t == 1 && p.G == 1 && !p.packed && q_rows > 1) {
      bx = lanes;
      while (bx < 32 && bx * q_rows < 32) bx *= 2;
      by = 1;
      while (bx * by < threads && by < q_rows) by *= 2;
    }
    return static_cast<uint64_t>((chunks + bx - 1) / bx) * ((q_rows + by - 1) / by);
  };
  if (small) {
    // NOTES: per-token grids take the largest block (up to kGroupQuantOneWaveThreads) whose grid
    // is one block per multiprocessor over at least half of them, with no row slot left empty,
    // else kGroupQuantSmallThreads: such grids of larger blocks measured faster than more,
    // smaller blocks (docs/DESIGN.md).
    uint32_t threads = kGroupQuantSmallThreads;
    for (uint32_t t = kGroupQuantOneWaveThreads; p.G == 1 && t > kGroupQuantSmallThreads; t /= 2) {
      const uint64_t n = shape_small(t);
      if (n <= static_cast<uint64_t>(sm_count) && 2 * n >= static_cast<uint64_t>(sm_count) && q_rows % by == 0) {
        threads = t;
        break;
      }
    }
    shape_small(threads);
  }
  // A packed word's four groups sit in one warp and one row when the row tile holds whole words.
  const bool whole_words = p.packed && 4 * lanes <= 32 && bx % (4 * lanes) == 0;
  const uintptr_t scale_addr = reinterpret_cast<uintptr_t>(p.scale);
  // Vector scale stores: MN-major scales whose rows come in whole vectors at aligned offsets, or
  // fp32 scales consecutive along s with 8-byte aligned rows.
  const bool mn_layout = p.s_stride_t == 1 && p.T_s % 4 == 0 && p.s_stride_s % 4 == 0 && p.s_stride_g % 4 == 0 &&
                         scale_addr % 16 == 0 && (!p.packed || whole_words);
  const bool s_layout =
      !p.packed && p.s_stride_s == 1 && p.s_stride_t % 2 == 0 && p.s_stride_g % 2 == 0 && scale_addr % 8 == 0;
  const bool s_group_major = !p.packed && p.s_stride_s != 1 && p.G > 1;
  const bool s_ok = s_layout || s_group_major;
  const bool mn_ok = mn_layout && !(s_group_major && s_ok);

  GroupQuantLaunch c{};
  c.unroll = small ? 1 : (mn_ok || s_ok) ? 2 : 4;
  const bool mn_vec = c.unroll > 1 && mn_ok;
  const bool s_vec = c.unroll == 2 && !mn_vec && s_ok;
  c.map = mn_vec ? UnitMap::kMnRows : s_vec ? UnitMap::kGroups : UnitMap::kRowsApart;
  c.gather_words = whole_words && mn_vec;
  if (s_vec) {
    chunks = static_cast<uint32_t>((p.S + 1) / 2) * lanes;  // kLanes chunks per pair of groups
    shape_block(kGroupQuantThreads);
  }
  c.grid_x = (chunks + bx - 1) / bx;
  c.rows = mn_vec ? static_cast<uint32_t>(p.T_s * p.G) : q_rows;
  const uint32_t rows_per_block = by * (s_vec ? 1 : c.unroll);
  c.grid_y = std::min<uint32_t>((c.rows + rows_per_block - 1) / rows_per_block, 65535u);
  c.block_x = bx;
  c.block_y = by;
  c.row_divisor = static_cast<uint32_t>(mn_vec ? p.T_s : p.G);
  // 16-byte loads need a 16-byte aligned base and row strides; chunk offsets are multiples of
  // 16 bytes (32 bytes per thread, group sizes of at least 32 elements).
  c.vec16 = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && (p.x_stride_t * elem_bytes) % 16 == 0 &&
            (p.x_stride_g * elem_bytes) % 16 == 0;
  c.row_blocks = group_quant_row_blocks(p, elem_bytes, c.vec16, sm_count);
  c.stream = !c.row_blocks && group_quant_stream(p, c.vec16, l2_bytes);
  if (c.row_blocks) {
    // A block per row of the T_s scale rows, a thread per chunk; with MN-major scales 8 blocks per
    // 8 rows.
    const bool mn = p.s_stride_t == 1;
    c.unroll = 1;
    c.map = mn ? UnitMap::kMnRows : UnitMap::kRowsApart;
    c.block_x = static_cast<uint32_t>(p.D / vec);
    c.block_y = 1;
    c.grid_x = static_cast<uint32_t>(mn ? (p.T_s + 7) / 8 * 8 : p.T_s);
    c.grid_y = 1;
    c.rows = static_cast<uint32_t>(p.T_s);
    c.row_divisor = 1;
    c.gather_words = false;
  }
  return c;
}

}  // namespace fp8ops
