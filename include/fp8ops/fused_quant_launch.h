// Launch shape shared by the fused row kernels (silu_mul_quant_launch.h, rms_norm_quant_launch.h):
// pure host functions, tested on the CPU (tests/test_launch_config.py). The lanes per row are
// fused_quant.h's row_shape.
#pragma once

#include <cstdint>

#include "fp8ops/fused_quant.h"

namespace fp8ops {

// log2 of a row shape's lanes (a power of two), as the row kernels take it.
inline uint32_t row_lanes_log2(const RowShape& s) { return 31 - __builtin_clz(s.lanes); }

// The chunks per lane a kernel is compiled for: the next power of two, at most 16 (more chunks
// run in further trips of the unrolled loop's kernel of 16).
inline uint32_t row_max_chunks(uint32_t chunks_per_lane) {
  uint32_t c = 1;
  while (c < chunks_per_lane && c < 16) c *= 2;
  return c;
}

// Blocks of the grid that strides over rows: enough for every row, at most
// blocks_per_sm * sm_count (0: no cap, one block per row slot). silu_mul_quant caps it at the
// resident blocks (in masked mode the valid rows are known on the device only), and so does
// rms_norm_quant's pipelined kernel; its other row kernel does not.
inline uint32_t row_grid_blocks(int64_t rows, uint32_t rows_per_block, int blocks_per_sm, int sm_count) {
  const int64_t needed = (rows + rows_per_block - 1) / rows_per_block;
  const int64_t resident = int64_t(blocks_per_sm) * sm_count;
  int64_t blocks = resident > 0 && needed > resident ? resident : needed;
  if (blocks > 0x7FFFFFFF) blocks = 0x7FFFFFFF;
  return static_cast<uint32_t>(blocks < 1 ? 1 : blocks);
}

}  // namespace fp8ops
