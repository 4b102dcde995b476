#include "settings.h"

#include <atomic>
#include <cstdint>
#include <iterator>

#include "fp8ops/group_quant_launch.h"
#include "fp8ops/indexer_launch.h"
#include "fp8ops/rms_norm_quant_launch.h"
#include "fp8ops/silu_mul_quant_launch.h"
#include "fp8ops/silu_table.h"

namespace fp8ops {
namespace {
std::atomic<bool> g_pdl{true};
}  // namespace

bool pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }

}  // namespace fp8ops

FP8OPS_C_API void fp8ops_set_pdl(int enabled) { fp8ops::g_pdl.store(enabled != 0, std::memory_order_relaxed); }
FP8OPS_C_API int fp8ops_pdl_enabled() { return fp8ops::pdl_enabled() ? 1 : 0; }

// group_quant_launch for the problem in[0..12]: T, G, D, T_q, T_s, s_stride_t, s_stride_g,
// s_stride_s, group_size, packed, elem_bytes, x_aligned (16-byte aligned base and row strides),
// sm_count, l2_bytes. Writes out[0..11]: unroll, map, grid_x, grid_y, block_x, block_y, rows,
// row_divisor, gather_words, vec16, row_blocks, stream.
FP8OPS_C_API void fp8ops_group_quant_launch(const int64_t* in, int64_t* out) {
  fp8ops::GroupQuantParams p{};
  p.T = in[0];
  p.G = in[1];
  p.D = in[2];
  p.T_q = in[3];
  p.T_s = in[4];
  p.s_stride_t = in[5];
  p.s_stride_g = in[6];
  p.s_stride_s = in[7];
  p.group_size = static_cast<int32_t>(in[8]);
  p.S = static_cast<int32_t>(p.D / p.group_size);
  p.packed = in[9] != 0;
  p.ue8m0 = p.packed;
  p.x_stride_t = in[11] != 0 ? p.D : 1;  // an odd stride is never 16-byte aligned
  p.x_stride_g = in[11] != 0 ? p.D : 1;
  const fp8ops::GroupQuantLaunch c =
      fp8ops::group_quant_launch(p, static_cast<int>(in[10]), static_cast<int>(in[12]), in[13]);
  const int64_t r[12] = {c.unroll,       static_cast<int64_t>(c.map),
                         c.grid_x,       c.grid_y,
                         c.block_x,      c.block_y,
                         c.rows,         c.row_divisor,
                         c.gather_words, c.vec16,
                         c.row_blocks,   c.stream};
  for (int i = 0; i < 12; ++i) out[i] = r[i];
}

// indexer_config for (items, mode (0 kAny, 1 kV4, 2 kV32), l2_bytes). Writes out[0..6]: lanes,
// warps, min_blocks, mode, stagger_ns, share, stream.
FP8OPS_C_API void fp8ops_indexer_config(int64_t items, int64_t mode, int64_t l2_bytes, int64_t* out) {
  const fp8ops::IndexerConfig c = fp8ops::indexer_config(items, static_cast<fp8ops::IndexerMode>(mode), l2_bytes);
  const int64_t r[7] = {c.lanes, c.warps, c.min_blocks, static_cast<int64_t>(c.mode), c.stagger_ns, c.share, c.stream};
  for (int i = 0; i < 7; ++i) out[i] = r[i];
}

// indexer_grid: writes out[0..1]: blocks, stagger_ns.
FP8OPS_C_API void fp8ops_indexer_grid(int64_t items, int64_t items_per_block, int64_t resident, int64_t stagger_ns,
                                      int64_t* out) {
  const fp8ops::IndexerGrid g = fp8ops::indexer_grid(
      static_cast<uint32_t>(items), static_cast<uint32_t>(items_per_block), resident, static_cast<int>(stagger_ns));
  out[0] = g.blocks;
  out[1] = g.stagger_ns;
}

// fused_quant.h's row_shape and fused_quant_launch.h's chunk count for a row of `chunks` chunks,
// for silu_mul_quant (op 0) or rms_norm_quant (op 1). Writes out[0..3]: lanes, chunks_per_lane,
// rows_per_block, compiled chunks per lane.
FP8OPS_C_API void fp8ops_row_shape(int64_t chunks, int64_t op, int64_t* out) {
  const fp8ops::RowShape s =
      fp8ops::row_shape(chunks, op == 0 ? fp8ops::kSiluChunksPerLane : fp8ops::kRmsChunksPerLane);
  out[0] = s.lanes;
  out[1] = s.chunks_per_lane;
  out[2] = s.rows_per_block;
  out[3] = fp8ops::row_max_chunks(s.chunks_per_lane);
}

// silu_mul_quant_launch.h's silu_shape: writes out[0..5]: lanes, units per lane, rows_per_block,
// chunks per unit, slices per row, threads per block.
FP8OPS_C_API void fp8ops_silu_shape(int64_t chunks, int64_t rows, int64_t masked, int64_t elem_bytes, int64_t vec16,
                                    int64_t sm_count, int64_t* out) {
  const fp8ops::SiluShape s = fp8ops::silu_shape(chunks, rows, masked != 0, static_cast<int>(elem_bytes), vec16 != 0,
                                                 static_cast<int>(sm_count));
  out[0] = s.row.lanes;
  out[1] = s.row.chunks_per_lane;
  out[2] = s.row.rows_per_block;
  out[3] = s.adjacent;
  out[4] = s.slices;
  out[5] = s.threads;
}

// silu_mul_quant_launch.h's silu_masked_pairs for a masked buffer of `rows` row slots (bf16: 1 for
// bf16 rows, else 16-bit or 32-bit rows of elem_bytes): writes out[0] = the valid rows from which
// the masked kernel takes pairs (0: never), out[1] = the log2 of their lanes.
FP8OPS_C_API void fp8ops_silu_masked_pairs(int64_t chunks, int64_t rows, int64_t elem_bytes, int64_t bf16,
                                           int64_t vec16, int64_t sm_count, int64_t* out) {
  const int sms = static_cast<int>(sm_count);
  const fp8ops::SiluShape s = fp8ops::silu_shape(chunks, rows, true, static_cast<int>(elem_bytes), vec16 != 0, sms);
  const fp8ops::SiluPairSwitch p = fp8ops::silu_masked_pairs(chunks, s, bf16 != 0, vec16 != 0, sms);
  out[0] = p.rows;
  out[1] = p.lanes_log2;
}

// silu_mul_quant_launch.h's silu_stream: 1 when the flat table kernel of pairs loads x evict-first.
FP8OPS_C_API int64_t fp8ops_silu_stream(int64_t rows, int64_t q_rows, int64_t H, int64_t elem_bytes, int64_t l2_bytes) {
  return fp8ops::silu_stream(rows, q_rows, H, static_cast<int>(elem_bytes), l2_bytes) ? 1 : 0;
}

// silu_mul_quant_launch.h's silu_flat_grid: writes out[0..1], the blocks and threads a block of the
// flat row kernel's grid for `rows` row slots of `chunks` chunks (silu_shape; 0, 0 for a sliced
// shape), with resident_per_sm blocks of kRowBlockThreads and wide_per_sm of kSiluFlatWideThreads
// of that kernel on each multiprocessor.
FP8OPS_C_API void fp8ops_silu_flat_grid(int64_t chunks, int64_t rows, int64_t elem_bytes, int64_t vec16, int64_t table,
                                        int64_t resident_per_sm, int64_t wide_per_sm, int64_t sm_count, int64_t* out) {
  const int sms = static_cast<int>(sm_count);
  const fp8ops::SiluShape s = fp8ops::silu_shape(chunks, rows, false, static_cast<int>(elem_bytes), vec16 != 0, sms);
  out[0] = out[1] = 0;
  if (s.slices > 1) return;
  const fp8ops::SiluFlatGrid g = fp8ops::silu_flat_grid(
      rows, s.row, s.adjacent, table != 0, static_cast<int>(resident_per_sm), static_cast<int>(wide_per_sm), sms);
  out[0] = g.blocks;
  out[1] = g.threads;
}

// silu_mul_quant_launch.h's silu_table: 1 where silu_mul_quant looks the bf16 SiLU up in its table.
FP8OPS_C_API int64_t fp8ops_silu_table_used(int64_t bf16, int64_t masked, int64_t rows, int64_t H) {
  return fp8ops::silu_table(bf16 != 0, masked != 0, rows, H);
}

// fused_quant.h's bf16 SiLU table bounds: out[0] = kSiluTableLo, out[1] = kSiluTableHi.
FP8OPS_C_API void fp8ops_silu_table_bounds(int64_t* out) {
  out[0] = fp8ops::kSiluTableLo;
  out[1] = fp8ops::kSiluTableHi;
}

// silu_table.h's entries, the table the bf16 kernels copy to shared memory: out[0 .. kSiluTableEntries).
FP8OPS_C_API void fp8ops_silu_table(int64_t* out) {
  static constexpr uint16_t kTable[] = {FP8OPS_SILU_TABLE_DATA};
  static_assert(std::size(kTable) == fp8ops::kSiluTableEntries, "silu_table.h is out of date");
  for (uint32_t i = 0; i < fp8ops::kSiluTableEntries; ++i) out[i] = kTable[i];
}

// rms_norm_quant_launch.h's rms_split_cluster for `rows` row slots of `chunks` chunks: the cluster
// size of the split kernel (1: one block per row), or 0 for the row kernel.
FP8OPS_C_API int64_t fp8ops_rms_split_cluster(int64_t rows, int64_t chunks, int64_t sm_count) {
  return fp8ops::rms_split_cluster(rows, fp8ops::row_shape(chunks, fp8ops::kRmsChunksPerLane),
                                   static_cast<int>(sm_count));
}

// The blocks per row of rms_norm_quant's slot kernel for `rows` row slots of `chunks` chunks
// (rms_norm_quant_launch.h's rms_slot_blocks), or 0 where it does not run.
FP8OPS_C_API int64_t fp8ops_rms_slot_blocks(int64_t rows, int64_t chunks, int64_t residual, int64_t sm_count) {
  const fp8ops::RowShape s = fp8ops::row_shape(chunks, fp8ops::kRmsChunksPerLane);
  return fp8ops::rms_slot_blocks(rows, s, residual != 0, static_cast<int>(sm_count));
}

// rms_norm_quant_launch.h's rms_pipelined for `rows` row slots of `chunks` chunks, with
// resident_blocks blocks of the pipelined kernel on the device: 1 where the row kernel is the
// pipelined one.
FP8OPS_C_API int64_t fp8ops_rms_pipelined(int64_t chunks, int64_t rows, int64_t elem_bytes, int64_t residual,
                                          int64_t vec16, int64_t resident_blocks) {
  return fp8ops::rms_pipelined(fp8ops::row_shape(chunks, fp8ops::kRmsChunksPerLane), chunks, rows,
                               static_cast<int>(elem_bytes), residual != 0, vec16 != 0, resident_blocks);
}

// rms_norm_quant_launch.h's rms_whole_row for rows of `chunks` chunks: 1 where the row kernel knows
// W = 256 at compile time.
FP8OPS_C_API int64_t fp8ops_rms_whole_row(int64_t chunks, int64_t residual) {
  return fp8ops::rms_whole_row(fp8ops::row_shape(chunks, fp8ops::kRmsChunksPerLane), residual != 0);
}

FP8OPS_C_API int64_t fp8ops_row_grid_blocks(int64_t rows, int64_t rows_per_block, int64_t resident_per_sm,
                                            int64_t sm_count) {
  return fp8ops::row_grid_blocks(rows, static_cast<uint32_t>(rows_per_block), static_cast<int>(resident_per_sm),
                                 static_cast<int>(sm_count));
}

// numerics.h's exp_fp32 and silu_fp32 over n values (the tests hold them to float64 references).
FP8OPS_C_API void fp8ops_exp_fp32(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp8ops::exp_fp32(in[i]);
}

FP8OPS_C_API void fp8ops_silu_fp32(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp8ops::silu_fp32(in[i]);
}

// fused_quant.h's kRmsFastMin and kRmsFastMax: out[0] and out[1].
FP8OPS_C_API void fp8ops_rms_fast_range(float* out) {
  out[0] = fp8ops::kRmsFastMin;
  out[1] = fp8ops::kRmsFastMax;
}

// fused_quant.h's rms_inverse over n sums of squares.
FP8OPS_C_API void fp8ops_rms_inverse(const float* in, float* out, int64_t n, float D, float norm_eps) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp8ops::rms_inverse(in[i], D, norm_eps);
}
