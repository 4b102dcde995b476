// Launch shape of the indexer_q_quant kernel: pure host functions of the problem and the device
// (L2 size, resident blocks), tested on the CPU (tests/test_launch_config.py).
#pragma once

#include <cstdint>

#include "fp8ops/indexer.h"

namespace fp8ops {

// Option sets compiled into kernels of their own: a kernel for one set carries neither the
// branches nor the registers of the others. kAny reads every option from the parameters.
enum class IndexerMode {
  kAny,
  kV4,   // DeepSeek-V4: rope_tail, interleaved pairs, Hadamard
  kV32,  // DeepSeek-V3.2: RoPE on the first 64 dims, NeoX pairs, Hadamard
};

// Whether every element offset the kernels compute (q, weight, positions in bytes, cos/sin rows,
// the outputs) is below 2^31, so that the kernels of fixed option sets can compute them in 32 bits;
// other calls run the kAny kernels, whose offsets are 64-bit. p.B and p.H are at least 1.
inline bool indexer_narrow(const IndexerParams& p) {
  constexpr int64_t kLimit = int64_t(1) << 31;
  return p.B * p.H * kIndexerHeadDim < kLimit && (p.B - 1) * p.q_stride_b + p.H * kIndexerHeadDim < kLimit &&
         (p.B - 1) * p.w_stride_b + (p.H - 1) * p.w_stride_h < kLimit &&
         (p.B - 1) * p.pos_stride * (p.pos_int64 ? 8 : 4) < kLimit && p.max_pos * p.cs_stride_pos < kLimit;
}

inline IndexerMode indexer_mode(const IndexerParams& p) {
  if (!p.hadamard || !indexer_narrow(p)) return IndexerMode::kAny;
  if (p.rope_tail && !p.rope_neox) return IndexerMode::kV4;
  if (!p.rope_tail && p.rope_neox) return IndexerMode::kV32;
  return IndexerMode::kAny;
}

struct IndexerConfig {
  int lanes;         // per (token, head): 4 or 8
  int warps;         // per block
  int min_blocks;    // register cap: resident blocks asked of the compiler (0: none)
  IndexerMode mode;  // the option set's own kernels, or kAny
  int stagger_ns;    // spread of the warps' start times (0: none)
  bool share;        // groups shared out per block (kShare)
  bool stream;       // evict-first loads of q (kStream)
};

constexpr int64_t kIndexerWideFrom = int64_t(1) << 14;      // items from which four lanes run
constexpr int64_t kIndexerUncappedFrom = int64_t(1) << 17;  // items from which they run uncapped
// The blocks of the shared-out schedule: seven warps, four resident blocks (28 warps per
// multiprocessor, 72 registers, as with the grid-wide schedule's two-warp blocks).
constexpr int kIndexerShareWarps = 7;
constexpr int kIndexerShareBlocks = 4;
// NOTES: warps that start at once request their first groups together, then wait together for the
// cos/sin rows those groups need and stay in step for several trips; spreading the starts of the
// uncapped and shared-out four-lane shapes over this many ns breaks that up (docs/DESIGN.md).
constexpr int kIndexerStaggerNs = 1500;

// The shape for items = B * H (token, head) pairs. mode: the call's option set when its own
// kernels can run (16-byte loads), else kAny; l2_bytes: the device's L2 size.
// NOTES: eight lanes per head below kIndexerWideFrom items (a shorter path per group wins when
// there is little to overlap); from there four lanes (no shuffles in the Hadamard), for the
// fixed option sets capped at 64 registers below kIndexerUncappedFrom and uncapped above. While
// the outputs take at most half the L2, the fixed option sets load q evict-first (the L2 keeps
// outputs and cos/sin rows instead) and, uncapped, share groups out per block of seven warps.
inline IndexerConfig indexer_config(int64_t items, IndexerMode mode, int64_t l2_bytes) {
  IndexerConfig c{4, 2, 0, mode, 0, false, false};
  const bool fits_l2 = items * kIndexerHeadDim * 2 <= l2_bytes;
  if (items < kIndexerWideFrom) {
    c.lanes = 8;
  } else if (items < kIndexerUncappedFrom && mode != IndexerMode::kAny) {
    c.min_blocks = 16;  // NOTES: the kAny kernels would spill under this cap.
    c.stream = fits_l2;
  } else if (mode != IndexerMode::kAny && fits_l2) {
    c.share = c.stream = true;
    c.warps = kIndexerShareWarps;
    c.min_blocks = kIndexerShareBlocks;
  }
  if (c.lanes == 4 && (c.min_blocks == 0 || c.share)) c.stagger_ns = kIndexerStaggerNs;
  return c;
}

struct IndexerGrid {
  uint32_t blocks;
  uint32_t stagger_ns;
};

// The persistent grid: no more blocks than are resident at once (resident: blocks per SM times
// SMs, 0 when unknown), and start times spread only when every warp has two to six groups.
inline IndexerGrid indexer_grid(uint32_t items, uint32_t items_per_block, int64_t resident, int stagger_ns) {
  IndexerGrid g{(items + items_per_block - 1) / items_per_block, static_cast<uint32_t>(stagger_ns)};
  if (resident <= 0 || g.blocks < 2 * resident || g.blocks >= 6 * resident) g.stagger_ns = 0;
  if (resident > 0 && g.blocks > resident) g.blocks = static_cast<uint32_t>(resident);
  return g;
}

}  // namespace fp8ops
