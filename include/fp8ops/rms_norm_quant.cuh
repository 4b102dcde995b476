// CUDA kernels of rms_norm_quant: residual add + RMSNorm fused with the per-group quant, one
// pass over memory. The row kernels keep each row in registers between its sum of squares and its
// quantization; the split and slot kernels share a row of a small grid out to several blocks.
// Rows are shared out as fused_quant.h's row_shape says, which also fixes the order of the sum.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "fp8ops/fused_quant.cuh"
#include "fp8ops/launch.cuh"
#include "fp8ops/rms_norm_quant_launch.h"

namespace fp8ops {

// Entry 0 of the pairwise sums of the n <= kMax values v[0..n): s[i] + s[i ^ o] for o = kMax / 2,
// ..., 2, 1, skipping o >= n (fused_quant.h's order over a row's warp sums). The offsets are
// compile-time constants (unrolled), so s stays in registers.
template <uint32_t kMax>
__device__ __forceinline__ float pairwise_sum(const float* v, uint32_t n) {
  float s[kMax];
#pragma unroll
  for (uint32_t i = 0; i < kMax; ++i) s[i] = i < n ? v[i] : 0.0f;
#pragma unroll
  for (uint32_t off = kMax / 2; off > 0; off >>= 1) {
    if (off >= n) continue;
    float m[kMax];
#pragma unroll
    for (uint32_t i = 0; i < kMax; ++i) m[i] = add_rn(s[i], s[i ^ off]);
#pragma unroll
    for (uint32_t i = 0; i < kMax; ++i) s[i] = m[i];
  }
  return s[0];
}

// ---- Distributed shared memory (sm_90 clusters): a block receives 32-bit values from blocks of
// its cluster into its shared memory, and an mbarrier of its own counts their bytes in.

// Thread 0 initializes the block's mbarrier at bar (one arrival: the block's own expect_bytes),
// then the cluster syncs, so that no block sends to a barrier before it is initialized.
__device__ __forceinline__ void cluster_init_mbarrier(uint32_t bar) {
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}

// The block's arrival on its mbarrier: its phase completes once `bytes` more bytes have come in.
__device__ __forceinline__ void mbarrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Stores v at shared address addr of cluster block `block`, counted by that block's mbarrier bar
// (addr and bar are this block's addresses of them).
__device__ __forceinline__ void send_to_block(float v, uint32_t addr, uint32_t bar, uint32_t block) {
  uint32_t to, to_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(to) : "r"(addr), "r"(block));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(to_bar) : "r"(bar), "r"(block));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(to),
               "r"(__float_as_uint(v)), "r"(to_bar)
               : "memory");
}

// Waits until the mbarrier's first phase has completed; what was sent is then visible.
__device__ __forceinline__ void mbarrier_wait_first_phase(uint32_t bar) {
  asm volatile(
      "{\n .reg .pred done;\n WAIT_%=:\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], 0;\n"
      " @!done bra WAIT_%=;\n}" ::"r"(bar)
      : "memory");
}

// A chunk's squares folded into a lane's chain of fused multiply-adds, in element order (SPEC
// section 9, step 2, in fused_quant.h's lane layout); every rms_norm_quant kernel sums with it.
__device__ __forceinline__ float fold_squares(const float (&v)[kChunkElems], float acc) {
#pragma unroll
  for (int i = 0; i < kChunkElems; ++i) acc = fma_rn(v[i], v[i], acc);
  return acc;
}

// The lane sums added pairwise within a warp (SPEC section 9, step 2): acc[j] + acc[j ^ o] for
// o = 16, ..., 2, 1, skipping o >= W (a row of W < 32 lanes, W a power of two, is summed within
// its lanes); every lane ends with its row's or its 32 lanes' sum.
__device__ __forceinline__ float warp_pair_sums(float acc, uint32_t W = 32) {
#pragma unroll
  for (uint32_t off = 16; off > 0; off >>= 1) {
    if (off < W) acc = add_rn(acc, __shfl_xor_sync(0xFFFFFFFFu, acc, off));
  }
  return acc;
}

// rms_inverse on the device (SPEC section 9, step 3). A sum and an ms + eps inside fused_quant.h's
// [kRmsFastMin, kRmsFastMax] take the compiler's fast-path steps of the division, the square root
// and the reciprocal with no range check between them; anything else (a zero, inf or NaN sum, an
// eps of 0 with a tiny sum) takes rms_inverse. D and rD (1 / D correctly rounded, fused_quant.h's
// rms_divisor_reciprocal) come from the parameters, so no thread converts D itself. With kPow2 (D a
// power of two) rD is 1 / D exactly and ms the sum times it: the quotient's real number, rounded
// once. The GPU tests sweep every fp32 sum of the range for every D, and every ms + eps of it.
template <bool kPow2>
__device__ __forceinline__ float rms_inverse_fast(float sum, float D, float rD, float norm_eps) {
  const float ms = kPow2 ? __fmul_rn(sum, rD) : div_rn_by(sum, D, rD);
  const float v = __fadd_rn(ms, norm_eps);
  const float inv = rsqrt_rn_fast(v);
  const bool fast = sum >= kRmsFastMin && sum <= kRmsFastMax && v >= kRmsFastMin && v <= kRmsFastMax;
  return fast ? inv : rms_inverse(sum, D, norm_eps);
}

// For the tests: how many fp32 bit patterns b in [lo, hi) (as a sum, or as v = ms + eps) give
// another result on the device than the correctly rounded ops of fused_quant.h, added to *count.
// part 0: rms_inverse_fast (kPow2 when D is a power of two) against rms_inverse; 1: its quotient
// div_rn_by against div_rn(b, D); 2: the product b * (1 / D) against div_rn(b, D), equal only for a
// power of two; 3: rsqrt_rn_fast against div_rn(1, sqrt_rn(b)).
__global__ void rms_inverse_sweep_kernel(float D, float rD, float norm_eps, int part, uint64_t lo, uint64_t hi,
                                         unsigned long long* count) {
  const bool pow2 = (__float_as_uint(D) & 0x7FFFFFu) == 0;  // D >= 8, a normal
  unsigned long long differ = 0;
  for (uint64_t b = lo + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; b < hi;
       b += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(static_cast<uint32_t>(b));
    float got, want;
    if (part == 0) {
      got = pow2 ? rms_inverse_fast<true>(x, D, rD, norm_eps) : rms_inverse_fast<false>(x, D, rD, norm_eps);
      want = rms_inverse(x, D, norm_eps);
    } else if (part == 3) {
      got = rsqrt_rn_fast(x);
      want = div_rn(1.0f, sqrt_rn(x));
    } else {
      got = part == 1 ? div_rn_by(x, D, rD) : __fmul_rn(x, rD);
      want = div_rn(x, D);
    }
    differ += __float_as_uint(got) != __float_as_uint(want);
  }
  for (int off = 16; off > 0; off >>= 1) differ += __shfl_xor_sync(0xFFFFFFFFu, differ, off);
  if ((threadIdx.x & 31) == 0 && differ) atomicAdd(count, differ);
}

inline cudaError_t launch_rms_inverse_sweep(int64_t D, float norm_eps, int part, uint64_t lo, uint64_t hi,
                                            unsigned long long* count, cudaStream_t stream) {
  if (D < 8 || D > kRmsMaxD || part < 0 || part > 3 || lo > hi || hi > (uint64_t{1} << 32)) {
    return cudaErrorInvalidValue;
  }
  if (lo == hi) return cudaSuccess;
  const uint64_t blocks = std::min<uint64_t>((hi - lo + 255) / 256, 8192);  // then a grid-stride loop
  rms_inverse_sweep_kernel<<<static_cast<uint32_t>(blocks), 256, 0, stream>>>(
      static_cast<float>(D), rms_divisor_reciprocal(D), norm_eps, part, lo, hi, count);
  return cudaGetLastError();
}

// y = T(r * inv * weight) for a chunk (SPEC section 9, step 4), rounded in pairs, from floats or
// from raw chunks; both rms_norm_quant kernels end with it.
template <typename T>
__device__ __forceinline__ RawChunk<T> rms_scaled(const float (&v)[kChunkElems], const float (&wf)[kChunkElems],
                                                  float inv) {
  float y[kChunkElems];
#pragma unroll
  for (int i = 0; i < kChunkElems; ++i) y[i] = mul_rn(mul_rn(v[i], inv), wf[i]);
  return pack_round<T>(y);
}
template <typename T>
__device__ __forceinline__ RawChunk<T> rms_scaled(const RawChunk<T>& r, const RawChunk<T>& w, float inv) {
  float v[kChunkElems], wf[kChunkElems];
  raw_to_floats<T>(r, v);
  raw_to_floats<T>(w, wf);
  return rms_scaled<T>(v, wf, inv);
}

// v through an opaque register copy, so that the compiler holds it rather than recompute it from
// the raw words it came from (a value used on both sides of a barrier).
__device__ __forceinline__ float held_float(float v) {
  float h;
  asm("mov.b32 %0, %1;" : "=f"(h) : "f"(v));
  return h;
}

// ---- rms_norm_quant: each row's r = T(x + residual) stays in registers between the sum of
// squares and the quantization, so x, residual and weight are read once. The weight is loaded
// with the row, before the sum, so that its latency hides behind the row's.
// kPipe (rms_norm_quant_launch.h's rms_pipelined): the grid holds the resident blocks only, and each
// copies the thread's chunks of its next row into shared memory while it works on the current
// row, so that the next row's loads are in flight meanwhile. It holds the row's and the weight's
// values as floats, which its registers allow, so that neither is unpacked twice.
// kRmsFirstWarpInverse: in the kernel of three or four 16-bit chunks a lane without the residual,
// loaded 16 bytes at a time, only a row's first warp adds the warp sums and takes the inverse, and
// shares it through shared memory; that frees the registers for five resident blocks, not four.
template <typename T, bool kVec, int kMaxChunks, bool kResidual>
constexpr bool kRmsFirstWarpInverse = kVec && !kResidual && sizeof(T) == 2 && kMaxChunks == 4;

template <typename T, bool kVec, int kMaxChunks, bool kResidual>
constexpr int kRmsMinBlocks = kMaxChunks * sizeof(T) > 8                             ? 1
                              : kResidual                                            ? 3
                              : kRmsFirstWarpInverse<T, kVec, kMaxChunks, kResidual> ? 5
                                                                                     : 4;

template <typename T, bool kVec, int kMaxChunks, bool kResidual, bool kWhole, bool kPipe>
__global__ void __launch_bounds__(kRowBlockThreads, kRmsMinBlocks<T, kVec, kMaxChunks, kResidual>)
    rms_norm_quant_kernel(const RmsNormQuantParams p, const uint32_t lanes_log2, const uint32_t prefetch_blocks) {
  static_assert(!kPipe || (kVec && !kResidual), "a pipelined row is loaded 16 bytes at a time, with no residual");
  static_assert(!kWhole || kMaxChunks >= 2, "a row of 256 lanes has at least 512 chunks");
  // The pipelined kernel of rows of 256 lanes takes the inverse in the first warp too: the other
  // warps' copies of that step cost more than their wait for the first warp's.
  constexpr bool kFirstWarpInverse = kRmsFirstWarpInverse<T, kVec, kMaxChunks, kResidual> || (kPipe && kWhole);
  __shared__ float warp_sums[kRowBlockThreads / 32];
  __shared__ float row_inv[kFirstWarpInverse ? kRowBlockThreads / 64 : 1];  // per row of W > 32 lanes
  // kPipe: two stages of the threads' chunks of a row, chunk k of thread i at k * 256 + i.
  __shared__ RawChunk<T> stages[kPipe ? 2 * kMaxChunks * kRowBlockThreads : 1];
  // kWhole: W = 256, a row per block, known to the compiler (its addresses, shuffles and tests).
  const uint32_t W = kWhole ? kRowBlockThreads : 1u << lanes_log2;
  const uint32_t lane = kWhole ? threadIdx.x : threadIdx.x & (W - 1);
  const uint32_t slot = kWhole ? 0u : threadIdx.x >> lanes_log2;
  const uint32_t rows_per_block = kRowBlockThreads / W;
  // Chunk slots k < kSure hold a chunk of the row in every lane: row_shape gives W <= C and
  // C > kMaxChunks / 2 * W, and a pipelined row has C = 2W = kMaxChunks * W (rms_pipelined).
  constexpr int kSure = kPipe ? kMaxChunks : kMaxChunks / 2 > 0 ? kMaxChunks / 2 : 1;
  const uint32_t group_lanes = static_cast<uint32_t>(p.out.group_size) / kChunkElems;
  const int64_t D = p.out.D;
  const uint32_t chunks = static_cast<uint32_t>(D / kChunkElems);
  // kPipe: D = 16 W, a power of two (rms_pipelined), so ms is the sum times 1 / D.
  auto inverse = [&](float sum) { return rms_inverse_fast<kPipe>(sum, p.D_f, p.D_recip, p.norm_eps); };
  const T* __restrict__ x = static_cast<const T*>(p.x);
  T* __restrict__ res = static_cast<T*>(p.residual);
  const T* __restrict__ weight = static_cast<const T*>(p.weight);
  // Before waiting for the previous grid: the L2 prefetch of this block's first row and of the
  // weight (launch.cuh says why that is safe), by the blocks of the first wave only (those that
  // can start while the previous grid is finishing; later ones would load the lines at once).
  if (const int64_t t = static_cast<int64_t>(blockIdx.x) * rows_per_block + slot;
      t < p.T && blockIdx.x < prefetch_blocks) {
    prefetch_row_lines<T>(x + t * p.x_stride, 0, lane, W, chunks);
    if constexpr (kResidual) prefetch_row_lines<T>(res + t * p.r_stride, 0, lane, W, chunks);
    if (blockIdx.x == 0) prefetch_row_lines<T>(weight, 0, lane, W, chunks);
  }
  wait_for_prior_grid();
  allow_next_grid();
  // A pipelined grid's row slots fit 31 bits (rms_pipelined), which spares 64-bit row arithmetic.
  using Row = std::conditional_t<kPipe, uint32_t, int64_t>;
  const Row row_step = static_cast<Row>(gridDim.x) * rows_per_block;
  // kPipe: the copy of the thread's chunks of row slot v + slot into the stage at dst, as one group
  // of asynchronous copies. Every slot holds a chunk (kSure), so only the row is tested: a row
  // without data copies zeros (its source, row 0, is not read). The shared addresses of the
  // thread's first chunk in the stage read and in the one filled are swapped after each row, so
  // that no row recomputes them from the thread index.
  constexpr uint32_t kSlotBytes = kRowBlockThreads * sizeof(RawChunk<T>);
  uint32_t stage_read = kPipe ? shared_addr(&stages[threadIdx.x]) : 0u;
  uint32_t stage_fill = stage_read + kMaxChunks * kSlotBytes;
  auto stage_row = [&](Row v, uint32_t dst) {
    const Row tt = v + slot;
    const bool ok = tt < static_cast<Row>(p.T);
    const T* const x_lane = x + (ok ? tt : 0) * p.x_stride + static_cast<uint64_t>(lane) * kChunkElems;
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      const uint4* src = reinterpret_cast<const uint4*>(x_lane + static_cast<uint64_t>(k) * W * kChunkElems);
#pragma unroll
      for (int i = 0; i < RawChunk<T>::kWords; ++i) cp_async16_at(dst + k * kSlotBytes + i * 16, src + i, ok);
    }
    cp_async_commit();
  };
  // The weight's chunks: loaded with each row (its latency hides behind the row's), at block scope
  // so that L1 may serve them, or once by a pipelined block, whose row comes from shared memory and
  // would wait for them; kept over the rows of the other kernels, they took registers. A pipelined
  // block holds their values as floats over its rows, then starts its first row's copy.
  RawChunk<T> w[kMaxChunks];
  float wf[kPipe ? kMaxChunks : 1][kChunkElems];
  if constexpr (kPipe) {
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      w[k] = load_raw8<T, kVec>(weight + static_cast<uint64_t>(lane + k * W) * kChunkElems, true);  // kSure
    }
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      raw_to_floats<T>(w[k], wf[k]);
#pragma unroll
      for (int i = 0; i < kChunkElems; ++i) wf[k][i] = held_float(wf[k][i]);
    }
    stage_row(static_cast<Row>(blockIdx.x) * rows_per_block, stage_read);
  }
  for (Row v0 = static_cast<Row>(blockIdx.x) * rows_per_block; v0 < static_cast<Row>(p.T_s); v0 += row_step) {
    const Row t = v0 + slot;
    const RowKind kind = flat_row_kind<Row>(t, static_cast<Row>(p.T), static_cast<Row>(p.T_q), static_cast<Row>(p.T_s));
    const bool data = kind == RowKind::kData;
    // Every load of the row first (x, the residual and, but in kPipe, the weight), then
    // r = T(x + residual) kept raw (kPipe: as floats too). kPipe: the next row's copy starts, then
    // this row's (started a row earlier) is read.
    RawChunk<T> r[kMaxChunks];
    float xf[kPipe ? kMaxChunks : 1][kChunkElems];  // kPipe: the row's values, held as floats
    float acc = 0.0f;
    // Kernels of four chunks a lane: slot k holds no chunk of the row in any lane of the warp
    // when the warp's first lane has none there (the fourth at D = 1536; in the upper half of the
    // row's warps at D = 7168). Such slots are loaded as zeros; the warp skips their sum and
    // scaling, whose results would be those zeros.
    auto slot_live = [&](int k) { return kMaxChunks != 4 || k < 2 || (lane & ~31u) + k * W < chunks; };
    // Whether this lane's chunk slot k holds a chunk of the row (slots k < kSure always do), and
    // of a data row.
    auto in_chunks = [&](int k) { return k < kSure || lane + k * W < chunks; };
    auto in_row = [&](int k) { return data && in_chunks(k); };
    {
      // A row without data reads row 0 (T >= 1 when T_s >= 1; launch_rms_norm_quant checks), so
      // that slots k < kSure load with no predicate (and no zeros first). Its values go unused:
      // such a row stores zero codes and scales, and nothing into the residual.
      const int64_t t_read = data ? t : 0;
      const T* const x_row = x + t_read * p.x_stride;
      T* const res_row = kResidual ? res + t_read * p.r_stride : nullptr;
      // Element offset of the lane's chunk slot k. kWhole: lane * 8 + k * W * 8 in 64 bits, the
      // lane's part shared by every slot and k's part an address immediate (W is known).
      auto slot_offset = [&](int k) {
        if constexpr (kWhole) {
          return static_cast<uint64_t>(lane) * kChunkElems + static_cast<uint64_t>(k) * W * kChunkElems;
        } else {
          return static_cast<uint64_t>(lane + k * W) * kChunkElems;
        }
      };
      RawChunk<T> rres[kResidual ? kMaxChunks : 1];
      if constexpr (kPipe) {
        stage_row(v0 + row_step, stage_fill);
        cp_async_wait_all_but_last();
#pragma unroll
        for (int k = 0; k < kMaxChunks; ++k) {
#pragma unroll
          for (int i = 0; i < RawChunk<T>::kWords; ++i) r[k].w[i] = load_shared16(stage_read + k * kSlotBytes + i * 16);
        }
        const uint32_t filled = stage_fill;
        stage_fill = stage_read;
        stage_read = filled;
      } else {
#pragma unroll
        for (int k = 0; k < kMaxChunks; ++k) {
          r[k] = load_raw8<T, kVec>(x_row + slot_offset(k), in_chunks(k));
          if constexpr (kResidual) rres[k] = load_raw8<T, kVec>(res_row + slot_offset(k), in_chunks(k));
        }
      }
      if constexpr (!kPipe) {
#pragma unroll
        for (int k = 0; k < kMaxChunks; ++k) {
          w[k] = load_raw8<T, kVec, true>(weight + slot_offset(k), in_chunks(k));
        }
      }
#pragma unroll
      for (int k = 0; k < kMaxChunks; ++k) {
        if (!slot_live(k)) continue;
        float v[kChunkElems];
        raw_to_floats<T>(r[k], v);
        if constexpr (kPipe) {
#pragma unroll
          for (int i = 0; i < kChunkElems; ++i) v[i] = xf[k][i] = held_float(v[i]);
        }
        if constexpr (kResidual) {
          float rv[kChunkElems];
          raw_to_floats<T>(rres[k], rv);
#pragma unroll
          for (int i = 0; i < kChunkElems; ++i) v[i] = add_rn(v[i], rv[i]);
          r[k] = floats_to_raw<T>(v);  // rounded to T; NaN canonical, as the residual is stored
          raw_to_floats<T>(r[k], v);
          if (in_row(k)) store_raw8<T, kVec>(res_row + slot_offset(k), r[k]);
        }
        // A chunk not loaded is zeros, and fma(0, 0, acc) is acc: no test needed.
        acc = fold_squares(v, acc);
      }
    }
    // The pairwise sums of fused_quant.h: within 32 lanes, then over the row's warps.
    acc = warp_pair_sums(acc, W);
    if (W > 32) {
      const uint32_t warps = W / 32, first = (threadIdx.x / W) * warps;
      if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = acc;
      __syncthreads();
      if constexpr (kFirstWarpInverse) {
        if (lane == 0) {
          row_inv[slot] = inverse(pairwise_sum<kRowBlockThreads / 32>(warp_sums + first, warps));
        }
      } else {
        acc = pairwise_sum<kRowBlockThreads / 32>(warp_sums + first, warps);
      }
      __syncthreads();
    }
    const float inv = kFirstWarpInverse && W > 32 ? row_inv[slot] : inverse(acc);
    // y = T(r * inv * weight), rounded to T in pairs, then quantized.
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      if constexpr (kPipe) {
        r[k] = rms_scaled<T>(xf[k], wf[k], inv);
      } else if (slot_live(k)) {
        r[k] = rms_scaled<T>(r[k], w[k], inv);
      }
    }
    quant_store_chunks<T, kMaxChunks, 1, kSure, !kResidual>(p.out, r, kind, 0, t, lane, W, chunks, group_lanes);
    if constexpr (!kPipe) break;  // a block per row slot (launch_rms_row): no second pass
  }
}

// ---- rms_norm_quant, split (small grids; rms_norm_quant_launch.h's rms_split_cluster): row t gets
// a thread per chunk, its W lanes in one block (kCluster false; W * kK <= kRowBlockThreads) or in a
// cluster of W / 32 blocks, block `rank` holding lanes 32 * rank .. 32 * rank + 31. Band k of a
// block's threads, a thread per lane of the block, holds chunk lane + k * W. The sum keeps the row
// kernel's order: each lane's chain runs in one thread (k = 0) over the lane's chunks staged in
// shared memory, and the 32-lane sums, gathered in shared memory (sent to every block of the
// cluster through distributed shared memory), are added as the row kernel adds its warps'.
template <typename T, bool kVec, int kK, bool kResidual, bool kCluster>
__global__ void __launch_bounds__(kCluster ? 32 * kK : kRowBlockThreads)
    rms_norm_quant_split_kernel(const RmsNormQuantParams p, const uint32_t lanes_log2) {
  constexpr uint32_t kMaxParts = kRowBlockThreads / 32;
  constexpr uint32_t kBlockLanes = kCluster ? 32 : kRowBlockThreads / kK;
  constexpr int64_t kChunksPerLine = 128 / (kChunkElems * sizeof(T));
  __shared__ RawChunk<T> staged[kK][kBlockLanes];
  __shared__ float part[kMaxParts];  // the row's 32-lane sums, in lane order
  // Cluster: an mbarrier, complete when every sum is in part.
  __shared__ alignas(8) uint64_t sums_ready;
  const uint32_t W = 1u << lanes_log2, parts = W / 32;
  const uint32_t block_lanes_log2 = kCluster ? 5 : lanes_log2;
  const uint32_t rank = kCluster ? cooperative_groups::this_cluster().block_rank() : 0;
  const uint32_t bar = shared_addr(&sums_ready);
  if constexpr (kCluster) cluster_init_mbarrier(bar);
  const uint32_t l = threadIdx.x & ((1u << block_lanes_log2) - 1), k = threadIdx.x >> block_lanes_log2;
  const uint32_t lane = (rank << block_lanes_log2) + l;
  const uint32_t group_lanes = static_cast<uint32_t>(p.out.group_size) / kChunkElems;
  const int64_t t = blockIdx.x / (kCluster ? parts : 1), chunks = p.out.D / kChunkElems,
                c = lane + static_cast<int64_t>(k) * W;
  const T* __restrict__ x = static_cast<const T*>(p.x) + t * p.x_stride + c * kChunkElems;
  T* __restrict__ res = kResidual ? static_cast<T*>(p.residual) + t * p.r_stride + c * kChunkElems : nullptr;
  const T* __restrict__ weight = static_cast<const T*>(p.weight) + c * kChunkElems;
  // Before waiting for the previous grid: the L2 prefetch of the row's lines and, by row 0's
  // blocks, of the weight's (launch.cuh says why that is safe), one thread per line.
  if (c < chunks && c % kChunksPerLine == 0) {
    if (t < p.T) {
      prefetch_l2(x);
      if constexpr (kResidual) prefetch_l2(res);
    }
    if (t == 0) prefetch_l2(weight);
  }
  wait_for_prior_grid();
  allow_next_grid();
  const RowKind kind = flat_row_kind<int64_t>(t, p.T, p.T_q, p.T_s);
  const bool live = kind == RowKind::kData && c < chunks;
  RawChunk<T> r = load_raw8<T, kVec>(x, live);
  const RawChunk<T> w = load_raw8<T, kVec>(weight, live);
  if constexpr (kResidual) {
    const RawChunk<T> rres = load_raw8<T, kVec>(res, live);
    float v[kChunkElems], rv[kChunkElems];
    raw_to_floats<T>(r, v);
    raw_to_floats<T>(rres, rv);
#pragma unroll
    for (int i = 0; i < kChunkElems; ++i) v[i] = add_rn(v[i], rv[i]);
    r = floats_to_raw<T>(v);  // rounded to T; NaN canonical, as the residual is stored
    if (live) store_raw8<T, kVec>(res, r);
  }
  staged[k][l] = r;
  __syncthreads();
  if (k == 0) {
    float acc = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
      if (kind == RowKind::kData && lane + static_cast<int64_t>(kk) * W < chunks) {
        float v[kChunkElems];
        raw_to_floats<T>(staged[kk][l], v);
        acc = fold_squares(v, acc);
      }
    }
    acc = warp_pair_sums(acc);
    if constexpr (kCluster) {
      if (l == 0) mbarrier_expect_bytes(bar, parts * sizeof(float));
      if (l < parts) send_to_block(acc, shared_addr(part + rank), bar, l);
    } else if ((l & 31) == 0) {
      part[l >> 5] = acc;
    }
  }
  if constexpr (kCluster) {
    mbarrier_wait_first_phase(bar);
  } else {
    __syncthreads();
  }
  const float inv = rms_inverse_fast<false>(pairwise_sum<kMaxParts>(part, parts), p.D_f, p.D_recip, p.norm_eps);
  const RawChunk<T> a[1] = {rms_scaled<T>(r, w, inv)};
  quant_store_chunks<T, 1>(p.out, a, kind, 0, t, static_cast<uint32_t>(c), W, static_cast<uint32_t>(chunks),
                           group_lanes);
}

// ---- rms_norm_quant, slot (small grids; rms_norm_quant_launch.h's rms_slot_blocks): row t of 256
// lanes without the residual goes to `per_row` blocks, one per chunk slot. Each block loads the
// whole row and sums it as the row kernel does (SPEC's order, no exchange between blocks), then
// block j scales and quantizes chunk slot j of every lane (chunks lane + j * 256).
template <typename T, bool kVec, int kMaxChunks>
__global__ void __launch_bounds__(kRowBlockThreads)
    rms_norm_quant_slot_kernel(const RmsNormQuantParams p, const uint32_t per_row) {
  constexpr uint32_t W = kRowBlockThreads;
  constexpr uint32_t kWarps = kRowBlockThreads / 32;
  __shared__ float warp_sums[kWarps];
  const uint32_t lane = threadIdx.x;
  const int64_t t = blockIdx.x / per_row;
  const uint32_t j = blockIdx.x % per_row;
  const uint32_t group_lanes = static_cast<uint32_t>(p.out.group_size) / kChunkElems;
  const uint32_t chunks = static_cast<uint32_t>(p.out.D / kChunkElems);
  const T* __restrict__ x = static_cast<const T*>(p.x) + t * p.x_stride;
  const T* __restrict__ weight = static_cast<const T*>(p.weight);
  // Before waiting for the previous grid: the L2 prefetch of the row's lines by its first block,
  // and of the weight's by row 0's (launch.cuh says why that is safe).
  if (t < p.T && j == 0) prefetch_row_lines<T>(x, 0, lane, W, chunks);
  if (t == 0 && j == 0) prefetch_row_lines<T>(weight, 0, lane, W, chunks);
  wait_for_prior_grid();
  allow_next_grid();
  const RowKind kind = flat_row_kind<int64_t>(t, p.T, p.T_q, p.T_s);
  const bool data = kind == RowKind::kData;
  RawChunk<T> r[kMaxChunks];
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    const uint32_t c = lane + k * W;
    r[k] = load_raw8<T, kVec>(x + static_cast<uint64_t>(c) * kChunkElems, data && c < chunks);
  }
  const uint32_t c = lane + j * W;
  const RawChunk<T> w = load_raw8<T, kVec>(weight + static_cast<uint64_t>(c) * kChunkElems, data && c < chunks);
  // A chunk not loaded is zeros, and fma(0, 0, acc) is acc: every slot is summed.
  float acc = 0.0f;
  RawChunk<T> mine = r[0];
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    if (k == static_cast<int>(j)) mine = r[k];
    float v[kChunkElems];
    raw_to_floats<T>(r[k], v);
    acc = fold_squares(v, acc);
  }
  acc = warp_pair_sums(acc);
  if ((lane & 31) == 0) warp_sums[lane / 32] = acc;
  __syncthreads();
  if ((lane & ~31u) + j * W >= chunks) return;  // the warp holds no chunk of slot j
  const float inv = rms_inverse_fast<false>(pairwise_sum<kWarps>(warp_sums, kWarps), p.D_f, p.D_recip, p.norm_eps);
  const RawChunk<T> a[1] = {rms_scaled<T>(mine, w, inv)};
  quant_store_chunks<T, 1, 1, 0, true>(p.out, a, kind, 0, t, c, W, chunks, group_lanes);
}

// ---- Launchers.
// A row kernel's launch, its grid capped at blocks_per_sm blocks a multiprocessor (the pipelined
// kernels' resident blocks; 0 for the others: a block per row slot).
template <auto kKernel>
cudaError_t launch_rms_row(const RmsNormQuantParams& p, const RowShape& s, int blocks_per_sm, int sm_count,
                           cudaStream_t stream, bool pdl) {
  const uint32_t blocks = row_grid_blocks(p.T_s, s.rows_per_block, blocks_per_sm, sm_count);
  if (blocks_per_sm == 0 && int64_t(blocks) * s.rows_per_block < p.T_s) return cudaErrorInvalidValue;
  const uint32_t first_wave = first_wave_blocks<kKernel>(kRowBlockThreads, sm_count);
  const uint32_t lanes_log2 = row_lanes_log2(s);
  return launch_kernel(kKernel, dim3(blocks), dim3(kRowBlockThreads), stream, pdl, p, lanes_log2, first_wave);
}

// The row kernel of kC chunks a lane, pipelined where rms_pipelined says so.
template <typename T, bool kVec, int kC, bool kResidual, bool kWhole>
cudaError_t launch_rms_row_kernel(const RmsNormQuantParams& p, const RowShape& s, int sm_count, cudaStream_t stream,
                                  bool pdl) {
  if constexpr (kVec && !kResidual && sizeof(T) == 2 && kC == 2) {
    constexpr auto kPiped = rms_norm_quant_kernel<T, kVec, kC, kResidual, kWhole, true>;
    const int per_sm = resident_blocks_per_sm<kPiped>(kRowBlockThreads);
    if (rms_pipelined(s, p.out.D / kChunkElems, p.T_s, sizeof(T), kResidual, kVec, int64_t(per_sm) * sm_count)) {
      return launch_rms_row<kPiped>(p, s, per_sm, sm_count, stream, pdl);
    }
  }
  return launch_rms_row<rms_norm_quant_kernel<T, kVec, kC, kResidual, kWhole, false>>(p, s, 0, sm_count, stream, pdl);
}

// More than four chunks a lane imply 256 lanes (row_shape): that kernel always knows W.
template <typename T, bool kVec, bool kResidual>
cudaError_t launch_rms_norm_quant_impl(const RmsNormQuantParams& p, const RowShape& s, int sm_count,
                                       cudaStream_t stream, bool pdl) {
  const uint32_t max_chunks = row_max_chunks(s.chunks_per_lane);
  const bool whole = rms_whole_row(s, kResidual);
#define FP8OPS_RMS_LAUNCH(C)                                                                              \
  {                                                                                                       \
    constexpr int kC = C > 8 ? 8 : C;                                                                     \
    if constexpr (rms_whole_kernel(kC, kResidual)) {                                                      \
      if (whole) return launch_rms_row_kernel<T, kVec, kC, kResidual, true>(p, s, sm_count, stream, pdl); \
    }                                                                                                     \
    if constexpr (kC <= 4) {                                                                              \
      return launch_rms_row_kernel<T, kVec, kC, kResidual, false>(p, s, sm_count, stream, pdl);           \
    } else {                                                                                              \
      return cudaErrorInvalidValue;                                                                       \
    }                                                                                                     \
  }
  FP8OPS_CHUNKS_CASES(FP8OPS_RMS_LAUNCH)
#undef FP8OPS_RMS_LAUNCH
}

template <typename T, bool kVec, bool kResidual>
cudaError_t launch_rms_norm_quant_split(const RmsNormQuantParams& p, const RowShape& s, uint32_t cluster,
                                        cudaStream_t stream, bool pdl) {
  const uint32_t lanes_log2 = row_lanes_log2(s);
  const uint32_t max_chunks = row_max_chunks(s.chunks_per_lane);
  if (cluster == 1) {  // the row's lanes times max_chunks fit one block (rms_split_cluster)
    const dim3 grid(static_cast<uint32_t>(p.T_s)), block(s.lanes * max_chunks);
    return max_chunks == 2 ? launch_kernel(rms_norm_quant_split_kernel<T, kVec, 2, kResidual, false>, grid, block,
                                           stream, pdl, p, lanes_log2)
                           : launch_kernel(rms_norm_quant_split_kernel<T, kVec, 4, kResidual, false>, grid, block,
                                           stream, pdl, p, lanes_log2);
  }
  const dim3 grid(static_cast<uint32_t>(p.T_s * cluster));
#define FP8OPS_RMS_SPLIT_LAUNCH(K)                                                                             \
  return launch_kernel_clustered(rms_norm_quant_split_kernel<T, kVec, K, kResidual, true>, grid, dim3(32 * K), \
                                 cluster, stream, pdl, p, lanes_log2)
  switch (max_chunks) {
    case 2: FP8OPS_RMS_SPLIT_LAUNCH(2);
    case 4: FP8OPS_RMS_SPLIT_LAUNCH(4);
    default: FP8OPS_RMS_SPLIT_LAUNCH(8);
  }
#undef FP8OPS_RMS_SPLIT_LAUNCH
}

// The slot kernel of kC chunk slots a lane (per_row of them hold chunks).
template <typename T, int kC>
cudaError_t launch_rms_norm_quant_slot(const RmsNormQuantParams& p, uint32_t per_row, bool vec, cudaStream_t stream,
                                       bool pdl) {
  const dim3 grid(static_cast<uint32_t>(p.T_s * per_row)), block(kRowBlockThreads);
  return vec ? launch_kernel(rms_norm_quant_slot_kernel<T, true, kC>, grid, block, stream, pdl, p, per_row)
             : launch_kernel(rms_norm_quant_slot_kernel<T, false, kC>, grid, block, stream, pdl, p, per_row);
}

template <typename T>
cudaError_t launch_rms_norm_quant(const RmsNormQuantParams& p, int sm_count, cudaStream_t stream, bool pdl) {
  if (p.T_s == 0 || p.out.D == 0) return cudaSuccess;
  if (p.T == 0) return cudaErrorInvalidValue;  // padding rows come only with data rows
  const RowShape s = row_shape(p.out.D / kChunkElems, kRmsChunksPerLane);
  if (s.chunks_per_lane > kRmsMaxChunksPerLane) return cudaErrorInvalidValue;
  const bool vec = row_vec_ok<T>(p.x, p.x_stride) && row_vec_ok<T>(p.weight, 0) &&
                   (p.residual == nullptr || row_vec_ok<T>(p.residual, p.r_stride));
  if (const uint32_t per_row = rms_slot_blocks(p.T_s, s, p.residual != nullptr, sm_count); per_row != 0) {
    return per_row == 2 ? launch_rms_norm_quant_slot<T, 2>(p, per_row, vec, stream, pdl)
                        : launch_rms_norm_quant_slot<T, 4>(p, per_row, vec, stream, pdl);
  }
  if (const uint32_t cluster = rms_split_cluster(p.T_s, s, sm_count); cluster != 0) {
    if (p.residual != nullptr) {
      return vec ? launch_rms_norm_quant_split<T, true, true>(p, s, cluster, stream, pdl)
                 : launch_rms_norm_quant_split<T, false, true>(p, s, cluster, stream, pdl);
    }
    return vec ? launch_rms_norm_quant_split<T, true, false>(p, s, cluster, stream, pdl)
               : launch_rms_norm_quant_split<T, false, false>(p, s, cluster, stream, pdl);
  }
  if (p.residual != nullptr) {
    return vec ? launch_rms_norm_quant_impl<T, true, true>(p, s, sm_count, stream, pdl)
               : launch_rms_norm_quant_impl<T, false, true>(p, s, sm_count, stream, pdl);
  }
  return vec ? launch_rms_norm_quant_impl<T, true, false>(p, s, sm_count, stream, pdl)
             : launch_rms_norm_quant_impl<T, false, false>(p, s, sm_count, stream, pdl);
}

}  // namespace fp8ops
