// Launch shape of rms_norm_quant's kernels (rms_norm_quant.cuh): pure host functions, tested on
// the CPU (tests/test_launch_config.py). The lanes per row are fused_quant.h's row_shape, which
// also fixes the order of summation.
#pragma once

#include <cstdint>

#include "fp8ops/fused_quant.h"
#include "fp8ops/fused_quant_launch.h"

namespace fp8ops {

// rms_norm_quant keeps a row in registers: at most 8 chunks per lane, so D <= 8 * 8 * 256.
constexpr uint32_t kRmsMaxChunksPerLane = 8;
constexpr int64_t kRmsMaxD = int64_t(kRmsMaxChunksPerLane) * kChunkElems * kRowBlockThreads;

// rms_norm_quant's kernel. A grid of few rows leaves most multiprocessors idle while one works
// through each row; there the split kernel gives a row of W >= 32 lanes a thread per chunk (each
// lane's sum is still one thread's chain, in the same order). A row whose threads fit one block
// of at most kRowBlockThreads takes one block; a wider row is shared out to a cluster of W / 32
// blocks, so its work runs on several multiprocessors at once (one block of 512 or 1024 threads
// was slower on grids of up to 16 rows). It takes the grids of at most kRmsSplitBlocksPerSm
// blocks of 32 lanes per multiprocessor; returns the cluster size (1: one block, no cluster), or 0
// for the row kernel (one block per row, or per several rows of fewer lanes).
constexpr int64_t kRmsSplitBlocksPerSm = 4;

inline uint32_t rms_split_cluster(int64_t rows, const RowShape& s, int sm_count) {
  if (s.lanes < 32) return 0;
  const uint32_t parts = s.lanes / 32;
  if (rows * parts > kRmsSplitBlocksPerSm * sm_count) return 0;
  return s.lanes * row_max_chunks(s.chunks_per_lane) <= kRowBlockThreads ? 1 : parts;
}

// On the split kernel's grids (rms_split_cluster), `rows` row slots of 256 lanes of two to four
// chunks (D = 4096 to 8192) without the residual take the slot kernel instead: a block per chunk
// slot, each summing the whole row itself, so no cluster and no exchange. Returns its blocks per
// row (the row's chunk slots), or 0. With the residual, blocks that read the row could not also
// write it back without a cluster.
inline uint32_t rms_slot_blocks(int64_t rows, const RowShape& s, bool residual, int sm_count) {
  if (residual || s.lanes != kRowBlockThreads || s.chunks_per_lane < 2 || s.chunks_per_lane > 4) return 0;
  return rms_split_cluster(rows, s, sm_count) != 0 ? s.chunks_per_lane : 0;
}

// Whether rms_norm_quant's row kernel for rows of 256 lanes (W = 256, a row per block) knows W at
// compile time, which spares it instructions (its addresses, shuffles and tests): rows of more
// than two chunks a lane, and of two without the residual. That kernel of two chunks with the
// residual took more registers, so fewer blocks a multiprocessor, and was slower.
constexpr bool rms_whole_kernel(uint32_t max_chunks, bool residual) {
  return max_chunks >= 4 || (max_chunks == 2 && !residual);
}

inline bool rms_whole_row(const RowShape& s, bool residual) {
  return s.lanes == kRowBlockThreads && rms_whole_kernel(row_max_chunks(s.chunks_per_lane), residual);
}

// Whether rms_norm_quant's row kernel is pipelined (rms_norm_quant.cuh says how), for `rows` row
// slots of `chunks` chunks, resident_blocks blocks of the pipelined kernel fitting at once: 16-bit
// rows without a residual, loaded 16 bytes at a time, of 64 to 256 lanes of two chunks (D = 1024,
// 2048, 4096), in more than two waves of blocks. Only those ran faster pipelined (DESIGN.md). The
// kernel counts rows in 32 bits: fewer than 2^31 of them (such rows of 2 KiB or more could not fit
// a GPU's memory anyway).
inline bool rms_pipelined(const RowShape& s, int64_t chunks, int64_t rows, int elem_bytes, bool residual, bool vec16,
                          int64_t resident_blocks) {
  const int64_t blocks = (rows + s.rows_per_block - 1) / s.rows_per_block;
  return elem_bytes == 2 && !residual && vec16 && s.chunks_per_lane == 2 && s.lanes >= 64 &&
         int64_t(s.lanes) * 2 == chunks && blocks > 2 * resident_blocks && rows < (int64_t(1) << 31);
}

}  // namespace fp8ops
