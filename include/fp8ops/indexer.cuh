// CUDA kernel of indexer_q_quant: kLanes lanes per (token, head), so a warp works on
// 32 / kLanes heads at once. A head's 128 dims are 16 chunks of 8; lane j of the head holds
// chunks j, j + kLanes, j + 2 kLanes, ..., so register k of a lane is dim
// 8 kLanes (k / 8) + 8 j + k % 8. Then every lane holds the same share of the rotated dims, a
// RoPE pair (2i, 2i + 1) is inside a chunk and a NeoX pair (i, i + 32) inside a lane (four
// lanes) or in lanes j and j ^ 4 (eight). With four lanes the Hadamard's stages that pair dims
// in different lanes (h = 8, 16) come last, after one exchange through shared memory that gives
// each lane 32 consecutive dims; with eight lanes three stages are shuffles. The arithmetic is
// indexer.h's, step for step, in the same order as the CPU reference.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "fp8ops/fast_divmod.cuh"
#include "fp8ops/indexer.h"
#include "fp8ops/indexer_launch.h"
#include "fp8ops/launch.cuh"
#include "fp8ops/numerics.h"

namespace fp8ops {

template <int kLanes>
struct IndexerSplit {
  static_assert(kLanes == 4 || kLanes == 8, "4 or 8 lanes per head");
  static constexpr int kDims = kIndexerHeadDim / kLanes;  // dims per lane
  static constexpr int kChunks = kDims / 8;               // chunks of 8 dims per lane
  static constexpr int kHeadsPerWarp = 32 / kLanes;
  static constexpr int kRopeChunks = kIndexerRopeDim / 8 / kLanes;  // of a lane's chunks, rotated
  // Offset of a lane's chunk t in the head, in dims.
  static __device__ __forceinline__ int chunk_dim(int t, int j) { return 8 * (j + kLanes * t); }
};

// The two floats of a 32-bit word of packed bf16 or fp16 values (low half first).
template <typename T>
__device__ __forceinline__ float2 unpack_pair(uint32_t w) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u));
  } else {
    __half2 h;
    memcpy(&h, &w, sizeof(h));
    return __half22float2(h);
  }
}

// max(a, b) that returns NaN when either is NaN.
__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// n floats from src: 16-byte loads when vec (src 16-byte aligned), else one by one.
template <int N>
__device__ __forceinline__ void load_floats(float (&dst)[N], const float* src, bool vec) {
  if (vec) {  // a compile-time constant where it is called
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const float4 f = reinterpret_cast<const float4*>(src)[i];
      dst[4 * i] = f.x;
      dst[4 * i + 1] = f.y;
      dst[4 * i + 2] = f.z;
      dst[4 * i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = src[i];
  }
}

// A token's position as loaded: both words of an int64 position, or an int32 one and 0.
struct IndexerRawPos {
  uint32_t lo, hi;
};

// Loads of one group's weight and position, issued a loop trip ahead of their use. The loaded
// registers are written by the load instructions themselves (inline PTX, both position dtypes
// into the same registers) and read only where the values are used: an instruction that touched
// them right after the load (a conversion, a sign extension, a move merging the two dtypes'
// results) would wait there for the load and stall the warp for a memory round trip per trip.
__device__ __forceinline__ uint32_t indexer_weight_bits(const void* w, bool lane0) {
  uint32_t bits;
  asm volatile(
      "{\n .reg .pred q;\n .reg .u64 a;\n setp.ne.b32 q, %2, 0;\n cvta.to.global.u64 a, %1;\n mov.b32 %0, 0;\n"
      " @q ld.global.u16 %0, [a];\n}"
      : "=r"(bits)
      : "l"(w), "r"(static_cast<int>(lane0)));
  return bits;
}

// kNarrow: the kernels whose offsets fit in 32 bits (indexer_narrow) compute them in 32 bits.
template <bool kNarrow>
__device__ __forceinline__ IndexerRawPos indexer_position_raw(const IndexerParams& p, uint32_t b) {
  const void* at;
  if constexpr (kNarrow) {
    at = static_cast<const char*>(p.positions) + ((b * static_cast<uint32_t>(p.pos_stride)) << (p.pos_int64 ? 3 : 2));
  } else {
    at = p.pos_int64 ? static_cast<const void*>(static_cast<const int64_t*>(p.positions) + b * p.pos_stride)
                     : static_cast<const void*>(static_cast<const int32_t*>(p.positions) + b * p.pos_stride);
  }
  IndexerRawPos r;
  asm volatile(
      "{\n .reg .pred q;\n .reg .u64 a;\n setp.ne.b32 q, %3, 0;\n cvta.to.global.u64 a, %2;\n mov.b32 %1, 0;\n"
      " @q ld.global.v2.u32 {%0, %1}, [a];\n @!q ld.global.u32 %0, [a];\n}"
      : "=r"(r.lo), "=r"(r.hi)
      : "l"(at), "r"(static_cast<int>(p.pos_int64)));
  return r;
}

// The cos/sin row of a raw position, clamped into the cache.
// NOTES: out-of-range positions are clamped so that no read leaves the cache; SPEC leaves those
// rows' values unspecified (the CPU kernel raises instead).
// kNarrow: max_pos and the row offsets are below 2^31; an int32 position's r.hi is 0, so a value
// is out of range when r.hi != 0 or r.lo > max_pos - 1 as unsigned, and negative by its sign bit.
template <bool kNarrow>
__device__ __forceinline__ const float* indexer_cs_row(const IndexerParams& p, IndexerRawPos r) {
  if constexpr (kNarrow) {
    const uint32_t last = static_cast<uint32_t>(p.max_pos) - 1u;
    const bool neg = static_cast<int32_t>(p.pos_int64 ? r.hi : r.lo) < 0;
    const uint32_t pos = (r.hi != 0u || r.lo > last) ? (neg ? 0u : last) : r.lo;
    return p.cos_sin + pos * static_cast<uint32_t>(p.cs_stride_pos);
  } else {
    const int64_t pos = p.pos_int64 ? static_cast<int64_t>((static_cast<uint64_t>(r.hi) << 32) | r.lo)
                                    : static_cast<int64_t>(static_cast<int32_t>(r.lo));
    return p.cos_sin + (pos < 0 ? 0 : (pos >= p.max_pos ? p.max_pos - 1 : pos)) * p.cs_stride_pos;
  }
}

// q, weight and position of one (token, head), loaded ahead of the work on it.
template <int kLanes>
struct IndexerLoad {
  uint4 raw[IndexerSplit<kLanes>::kChunks];  // this lane's chunks (scalar loads when kVec is false)
  uint32_t w_bits;                           // weight (bf16 or fp16 bits), in lane j == 0 only
  IndexerRawPos pos;                         // the token's position
};

// The 128 q values of token b, head h.
template <typename T, bool kNarrow>
__device__ __forceinline__ const T* indexer_q_head(const IndexerParams& p, uint32_t b, uint32_t h) {
  if constexpr (kNarrow)
    return static_cast<const T*>(p.q) + (b * static_cast<uint32_t>(p.q_stride_b) + h * kIndexerHeadDim);
  return static_cast<const T*>(p.q) + b * p.q_stride_b + h * kIndexerHeadDim;
}

template <typename T, bool kNarrow>
__device__ __forceinline__ const T* indexer_weight_at(const IndexerParams& p, uint32_t b, uint32_t h) {
  if constexpr (kNarrow) {
    return static_cast<const T*>(p.weight) +
           (b * static_cast<uint32_t>(p.w_stride_b) + h * static_cast<uint32_t>(p.w_stride_h));
  }
  return static_cast<const T*>(p.weight) + b * p.w_stride_b + h * p.w_stride_h;
}

// kStream: q's 16-byte loads are marked evict-first (ld.global.cs), so that the L2 keeps the
// outputs and the cos/sin rows rather than q, which is read once (indexer_config).
template <typename T, bool kVec, int kLanes, bool kNarrow, bool kStream>
__device__ __forceinline__ IndexerLoad<kLanes> indexer_load(const IndexerParams& p, const FastDivmod& div_h,
                                                            uint32_t item, int j) {
  using S = IndexerSplit<kLanes>;
  const uint32_t b = div_h.div(item), h = item - b * div_h.divisor;
  IndexerLoad<kLanes> ld;
  const T* src = indexer_q_head<T, kNarrow>(p, b, h);
#pragma unroll
  for (int t = 0; t < S::kChunks; ++t) {
    const T* chunk = src + S::chunk_dim(t, j);
    if constexpr (kVec) {
      ld.raw[t] = kStream ? __ldcs(reinterpret_cast<const uint4*>(chunk)) : *reinterpret_cast<const uint4*>(chunk);
    } else {
      T* e = reinterpret_cast<T*>(&ld.raw[t]);
#pragma unroll
      for (int k = 0; k < 8; ++k) e[k] = chunk[k];
    }
  }
  ld.w_bits = indexer_weight_bits(indexer_weight_at<T, kNarrow>(p, b, h), j == 0);
  ld.pos = indexer_position_raw<kNarrow>(p, b);
  return ld;
}

// The cos and sin values a lane's RoPE pairs use (kN of each), loaded ahead of step 1.
template <int kLanes>
struct IndexerRopeCs {
  static constexpr int kN = kLanes == 8 ? 8 : kIndexerRopePairs / kLanes;
  float c[kN], s[kN];
};

// Loads them from cs, the position's cos/sin row: for interleaved pairs, four per rotated chunk
// t (i = (chunk's dim - first rotated dim) / 2 + k); for NeoX pairs (i, i + 32), eight per chunk
// holding pairs' a (i = dim - first rotated dim), or, with eight lanes, the eight of the pairs
// lanes j and j ^ 4 share.
// N cos and N sin values from pair index i0 of the row cs, into r from position o.
template <int N, int kLanes, bool kVec>
__device__ __forceinline__ void indexer_cs_run(IndexerRopeCs<kLanes>& r, const float* cs, int i0, int o) {
  float c[N], s[N];
  load_floats(c, cs + i0, kVec);
  load_floats(s, cs + kIndexerRopePairs + i0, kVec);
#pragma unroll
  for (int k = 0; k < N; ++k) {
    r.c[o + k] = c[k];
    r.s[o + k] = s[k];
  }
}

template <int kLanes, bool kVec>
__device__ __forceinline__ IndexerRopeCs<kLanes> indexer_cs_load(const IndexerParams& p, const float* cs, int j) {
  using S = IndexerSplit<kLanes>;
  IndexerRopeCs<kLanes> r;
  if (!p.rope_neox) {
#pragma unroll
    for (int t = 0; t < S::kRopeChunks; ++t) indexer_cs_run<4, kLanes, kVec>(r, cs, S::chunk_dim(t, j) / 2, 4 * t);
  } else if constexpr (S::kRopeChunks >= 2) {
#pragma unroll
    for (int t = 0; t < S::kRopeChunks / 2; ++t) indexer_cs_run<8, kLanes, kVec>(r, cs, S::chunk_dim(t, j), 8 * t);
  } else {
    indexer_cs_run<8, kLanes, kVec>(r, cs, 8 * (j & 3), 0);
  }
  return r;
}

// Step 1 (RoPE) on this lane's dims v, whose rotated chunks are t = kT0 .. kT0 + kRopeChunks - 1.
template <int kLanes, int kT0>
__device__ __forceinline__ void indexer_rope(const IndexerParams& p, float (&v)[IndexerSplit<kLanes>::kDims],
                                             const IndexerRopeCs<kLanes>& cs, int j) {
  using S = IndexerSplit<kLanes>;
  if (!p.rope_neox) {
    // Interleaved pairs (2i, 2i + 1): four in each chunk.
#pragma unroll
    for (int t = 0; t < S::kRopeChunks; ++t) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        rope_pair(v[8 * (kT0 + t) + 2 * k], v[8 * (kT0 + t) + 2 * k + 1], cs.c[4 * t + k], cs.s[4 * t + k]);
      }
    }
  } else if constexpr (S::kRopeChunks >= 2) {
    // Pairs (i, i + 32): chunk t and chunk t + kRopeChunks / 2 of the same lane.
    constexpr int kPartner = 8 * (S::kRopeChunks / 2);
#pragma unroll
    for (int t = 0; t < S::kRopeChunks / 2; ++t) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        rope_pair(v[8 * (kT0 + t) + k], v[8 * (kT0 + t) + k + kPartner], cs.c[8 * t + k], cs.s[8 * t + k]);
      }
    }
  } else {
    // kLanes == 8, one rotated chunk per lane: pairs (i, i + 32) are lanes j and j ^ 4.
    constexpr int k0 = 8 * kT0;
    float other[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) other[k] = __shfl_xor_sync(0xFFFFFFFFu, v[k0 + k], 4);
    const bool first = j < 4;  // this lane holds the pairs' a
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      // rope_pair(a, b, c, s) with (a, b) = (v, other) or (other, v); each lane keeps its own.
      v[k0 + k] = first ? rope_first(v[k0 + k], other[k], cs.c[k], cs.s[k])
                        : rope_second(other[k], v[k0 + k], cs.c[k], cs.s[k]);
    }
  }
}

// In-lane Hadamard stage: butterflies on registers (k, k + hs).
template <int kN>
__device__ __forceinline__ void butterfly_stage(float (&v)[kN], int hs) {
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    if ((k & hs) != 0) continue;
    const float lo = v[k], up = v[k + hs];
    v[k] = butterfly_lower(lo, up);
    v[k + hs] = butterfly_upper(lo, up);
  }
}

// Cross-lane Hadamard stage: lanes m apart hold the pairs' values at the same registers.
// NOTES: the lower lane keeps v + o and the upper lane o - v. Both are one fma(v, +-1, o): the
// product is exact, so the result is the rounded sum o + (+-v), which is what add and subtract
// compute (signed zeros included).
template <int kN>
__device__ __forceinline__ void butterfly_lanes(float (&v)[kN], int m, int j) {
  const float sign = (j & m) != 0 ? -1.0f : 1.0f;
#pragma unroll
  for (int k = 0; k < kN; ++k) v[k] = fma_rn(v[k], sign, __shfl_xor_sync(0xFFFFFFFFu, v[k], m));
}

// Four lanes per head: moves a head's values from the load layout (lane j, register 8t + k holds
// dim 32t + 8j + k) to the store layout (lane j, register r holds dim 32j + r) through the head's
// kIndexerSlotUnits 16-byte units of shared memory at head_buf.
// NOTES: unit u = 8a + b (dims 4u .. 4u + 3, a = u >> 3) sits at unit 10a + b of the head's slot,
// and slot k of the block at unit 41k. Lane j writes units 8t + 2j + s at 10t + 2j + s and reads
// units 8j + i at 10j + i, so both are a per-lane base plus an immediate offset; and since 41 and
// 10 are 1 and 2 modulo 8, the eight lanes of a quarter warp (two heads, slots 2q and 2q + 1)
// reach eight different 16-byte bank groups both when writing and when reading.
constexpr int kIndexerSlotUnits = 41;

__device__ __forceinline__ void indexer_transpose(float (&v)[32], const float* head_buf, int j) {
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(head_buf));
  const uint32_t wbase = base + 32u * static_cast<uint32_t>(j);
  const uint32_t rbase = base + 160u * static_cast<uint32_t>(j);
  __syncwarp();  // the previous head's reads are done before its buffer is written again
#pragma unroll
  for (int t = 0; t < 4; ++t) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const float* x = v + 8 * t + 4 * s;
      asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(wbase + 160u * t + 16u * s), "f"(x[0]), "f"(x[1]),
                   "f"(x[2]), "f"(x[3])
                   : "memory");
    }
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v[4 * i]), "=f"(v[4 * i + 1]), "=f"(v[4 * i + 2]), "=f"(v[4 * i + 3])
                 : "r"(rbase + 16u * i)
                 : "memory");
  }
}

// Step 2 (Hadamard, unscaled) on this lane's dims v, in the stage order h = 1, 2, 4, 32, 64, 8,
// 16 of indexer.h. Eight lanes (dim bits 3-5 are the lane): h = 1, 2, 4, 64 in registers and
// h = 32, 8, 16 across lanes. Four lanes (dim bits 3-4 are the lane): h = 1, 2, 4, 32, 64 in
// registers, then indexer_transpose makes dim bits 3-4 register bits, and h = 8, 16 run in
// registers too; v is left in the store layout.
template <int kLanes>
__device__ __forceinline__ void indexer_hadamard(float (&v)[IndexerSplit<kLanes>::kDims], int j,
                                                 const float* head_buf) {
  static_assert(kIndexerHadamardStages[3] == 32 && kIndexerHadamardStages[5] == 8, "stage order of indexer.h");
#pragma unroll
  for (int hs = 1; hs < 8; hs <<= 1) butterfly_stage(v, hs);  // h = 1, 2, 4
  if constexpr (kLanes == 8) {
    butterfly_lanes(v, 4, j);  // h = 32
    butterfly_stage(v, 8);     // h = 64
    butterfly_lanes(v, 1, j);  // h = 8
    butterfly_lanes(v, 2, j);  // h = 16
  } else {
    butterfly_stage(v, 8);   // h = 32
    butterfly_stage(v, 16);  // h = 64
    indexer_transpose(v, head_buf, j);
    butterfly_stage(v, 8);   // h = 8
    butterfly_stage(v, 16);  // h = 16
  }
}

// Steps 1-4 of one (token, head) whose loads are in ld and cs; stores when live. Once ld's q is
// unpacked, reload(ld) may load the next group into it.
template <typename T, int kLanes, bool kNarrow, typename Reload>
__device__ __forceinline__ void indexer_head(const IndexerParams& p, IndexerLoad<kLanes>& ld,
                                             const IndexerRopeCs<kLanes>& cs, uint32_t item, bool live, int j,
                                             const float* head_buf, Reload&& reload) {
  using S = IndexerSplit<kLanes>;
  constexpr int kDims = S::kDims;
  const uint32_t w_bits = ld.w_bits;
  float v[kDims];
#pragma unroll
  for (int c = 0; c < S::kChunks; ++c) {
    const uint32_t w[4] = {ld.raw[c].x, ld.raw[c].y, ld.raw[c].z, ld.raw[c].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = unpack_pair<T>(w[k]);
      v[8 * c + 2 * k] = f.x;
      v[8 * c + 2 * k + 1] = f.y;
    }
  }
  reload(ld);
  if (p.rope_tail) {
    indexer_rope<kLanes, S::kChunks - S::kRopeChunks>(p, v, cs, j);
  } else {
    indexer_rope<kLanes, 0>(p, v, cs, j);
  }
  // With four lanes the Hadamard leaves v in the store layout (lane j holds dims 32j .. 32j + 31).
  const bool store_layout = kLanes == 4 && p.hadamard;
  if (p.hadamard) indexer_hadamard<kLanes>(v, j, head_buf);

  // Step 3. Fast path: the amax with NaN propagation, which is the finite amax whenever it is
  // finite itself; a warp in which some head has a non-finite value takes the exact path.
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kDims; ++k) amax = max_nan(amax, fabsf(v[k]));
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) amax = max_nan(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const bool nonfinite = __any_sync(0xFFFFFFFFu, !(amax <= FLT_MAX));
  if (nonfinite) {
    amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kDims; ++k) amax = fmax_nonan(amax, finite_abs(v[k]));
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  }
  const float scale = group_scale(indexer_amax(amax, p.hadamard), p.eps, false);
  const float m = indexer_multiplier(__frcp_rn(scale), p.hadamard);
  uint32_t words[kDims / 4];
#pragma unroll
  for (int k = 0; k < kDims / 4; ++k) {
    words[k] = e4m3x2_bits_device(v[4 * k] * m, v[4 * k + 1] * m) |
               (e4m3x2_bits_device(v[4 * k + 2] * m, v[4 * k + 3] * m) << 16);
  }
  if (nonfinite) {
#pragma unroll
    for (int k = 0; k < kDims / 4; ++k) words[k] = zero_nan_codes(words[k]);
  }
  if (!live) return;
  uint8_t* dst = kNarrow ? p.q_out + item * kIndexerHeadDim : p.q_out + static_cast<int64_t>(item) * kIndexerHeadDim;
  if (store_layout) {
    uint4* out = reinterpret_cast<uint4*>(dst + 32 * j);
#pragma unroll
    for (int t = 0; t < kDims / 16; ++t) {
      out[t] = make_uint4(words[4 * t], words[4 * t + 1], words[4 * t + 2], words[4 * t + 3]);
    }
  } else {
#pragma unroll
    for (int t = 0; t < S::kChunks; ++t) {
      *reinterpret_cast<uint2*>(dst + S::chunk_dim(t, j)) = make_uint2(words[2 * t], words[2 * t + 1]);
    }
  }
  // The weight's bits are the low half of w_bits (the high half is 0).
  if (j == 0) p.w_out[item] = indexer_weight(unpack_pair<T>(w_bits).x, p.weight_scale, scale);
}

// Before the wait for the previous grid (prefetch_l2): the L2 lines of the warp's first group
// of q, one per lane (8 or 16 lanes), and its first token's position. The persistent grid is one
// wave, so every warp does this; those resident while the previous grid finishes gain (prefetching
// the first two groups measured slower, docs/DESIGN.md).
template <typename T, int kLanes, bool kNarrow>
__device__ __forceinline__ void indexer_prefetch(const IndexerParams& p, const FastDivmod& div_h, uint32_t g,
                                                 uint32_t items, int lane) {
  constexpr int kHeads = IndexerSplit<kLanes>::kHeadsPerWarp;
  constexpr int kLinesPerHead = kIndexerHeadDim * sizeof(T) / 128;
  const uint32_t item = g * kHeads + lane / kLinesPerHead;
  if (lane >= kHeads * kLinesPerHead || item >= items) return;
  const uint32_t b = div_h.div(item), h = item - b * div_h.divisor;
  prefetch_l2(reinterpret_cast<const char*>(indexer_q_head<T, kNarrow>(p, b, h)) + (lane % kLinesPerHead) * 128);
  // The address indexer_position_raw reads, written as a byte offset: a pointer select here
  // changes the register allocation of the whole kernel.
  if (lane == 0) prefetch_l2(static_cast<const char*>(p.positions) + b * p.pos_stride * (p.pos_int64 ? 8 : 4));
}

// The parameters with kMode's options as compile-time constants (the copy is dissolved into
// registers, so the constants reach every use).
template <IndexerMode kMode>
__device__ __forceinline__ IndexerParams indexer_fixed(IndexerParams p) {
  if constexpr (kMode != IndexerMode::kAny) {
    p.rope_tail = kMode == IndexerMode::kV4;
    p.rope_neox = kMode == IndexerMode::kV32;
    p.hadamard = true;  // the position dtype stays a run-time choice (same registers)
  }
  return p;
}

// Each warp works on groups of 32 / kLanes consecutive (token, head) items, with the next group's
// loads issued during the work on the current one (as soon as its q is unpacked), so that the grid
// can be sized to what is resident and still keep loads in flight. Which groups a warp takes:
//  - by default group g, then g + (warps in the grid), and so on;
//  - kShare: block b of the grid's n owns groups [G b / n, G (b + 1) / n) of the G; its warps
//    take the first kWarps in order and then the next one not taken, from a counter in shared
//    memory, so that a warp that is served faster takes more, and the warps working on one token
//    at a time are the block's (its cos/sin row is read by one multiprocessor).
// kWarps warps per block; kMinBlocks > 0 asks the compiler for that many resident blocks per
// multiprocessor (a register cap); kStream: evict-first loads of q (indexer_load).
template <typename T, bool kVec, int kLanes, int kWarps, int kMinBlocks, IndexerMode kMode, bool kShare, bool kStream>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    indexer_q_quant_kernel(const IndexerParams params, const FastDivmod div_h, const uint32_t items,
                           const uint32_t stagger_ns, const bool prefetch) {
  using S = IndexerSplit<kLanes>;
  // The kernels of fixed option sets run only where every offset fits in 32 bits (indexer_narrow).
  constexpr bool kNarrow = kMode != IndexerMode::kAny;
  const IndexerParams p = indexer_fixed<kMode>(params);
  // Four lanes: a slot of kIndexerSlotUnits 16-byte units per head for the Hadamard's change of
  // layout (indexer_transpose).
  __shared__ __align__(16) float transpose_buf[kLanes == 4 ? kWarps * S::kHeadsPerWarp * kIndexerSlotUnits * 4 : 1];
  const int lane = threadIdx.x & 31;
  const int j = lane % kLanes;  // this lane's part of the head
  const float* head_buf = transpose_buf + (kLanes == 4 ? (threadIdx.x / kLanes) * kIndexerSlotUnits * 4 : 0);
  const uint32_t groups = (items + S::kHeadsPerWarp - 1) / S::kHeadsPerWarp;
  const uint32_t stride = gridDim.x * kWarps;
  const uint32_t warp = threadIdx.x / 32;
  uint32_t g = blockIdx.x * kWarps + warp, g_end = groups;
  __shared__ uint32_t next_group;  // kShare: the block's next group not taken
  if constexpr (kShare) {
    const uint32_t begin = static_cast<uint32_t>(uint64_t(groups) * blockIdx.x / gridDim.x);
    g_end = static_cast<uint32_t>(uint64_t(groups) * (blockIdx.x + 1) / gridDim.x);
    g = begin + warp;
    if (threadIdx.x == 0) next_group = begin + kWarps;
    __syncthreads();
  }
  if (prefetch && g < g_end) indexer_prefetch<T, kLanes, kNarrow>(p, div_h, g, items, lane);
  wait_for_prior_grid();
  allow_next_grid();
  if (g >= g_end) return;  // the whole warp leaves together
  // Warp i of the grid's n starts about stagger_ns * i / n ns late (0: no delay); with kShare,
  // warp i of the block's kWarps.
  if (stagger_ns != 0) {
    __nanosleep(kShare ? static_cast<uint32_t>(stagger_ns * warp / kWarps)
                       : static_cast<uint32_t>(uint64_t(stagger_ns) * g / stride));
  }
  // A lane group past the end works on the last item (every lane takes part in the shuffles)
  // and stores nothing.
  uint32_t raw_item = g * S::kHeadsPerWarp + lane / kLanes;
  IndexerLoad<kLanes> cur =
      indexer_load<T, kVec, kLanes, kNarrow, kStream>(p, div_h, raw_item < items ? raw_item : items - 1, j);
  for (;;) {
    uint32_t g_next = g + stride;
    if constexpr (kShare) {
      // A group is taken once; a warp takes groups until it gets one past g_end, so every group
      // before g_end is taken.
      uint32_t taken = 0;
      if (lane == 0) taken = atomicAdd(&next_group, 1u);
      g_next = __shfl_sync(0xFFFFFFFFu, taken, 0);
    }
    const bool more = g_next < g_end;  // the same in the whole warp
    const uint32_t raw_next = g_next * S::kHeadsPerWarp + lane / kLanes;
    // The current group's cos/sin first: its latency is the one that work on this group waits for.
    const IndexerRopeCs<kLanes> cs = indexer_cs_load<kLanes, kVec>(p, indexer_cs_row<kNarrow>(p, cur.pos), j);
    const bool live = raw_item < items;
    // The next group's loads go into cur once its q is unpacked, so no trip copies registers.
    indexer_head<T, kLanes, kNarrow>(
        p, cur, cs, live ? raw_item : items - 1, live, j, head_buf, [&](IndexerLoad<kLanes>& ld) {
          if (more)
            ld = indexer_load<T, kVec, kLanes, kNarrow, kStream>(p, div_h, raw_next < items ? raw_next : items - 1, j);
        });
    if (!more) break;
    raw_item = raw_next;
    g = g_next;
  }
}

template <typename T, bool kVec, int kLanes, int kWarps, int kMinBlocks, IndexerMode kMode, bool kShare = false,
          bool kStream = false>
cudaError_t launch_indexer_shape(const IndexerParams& p, uint32_t items, int stagger_ns, int sm_count,
                                 cudaStream_t stream, bool pdl) {
  constexpr uint32_t kItemsPerBlock = kWarps * IndexerSplit<kLanes>::kHeadsPerWarp;
  constexpr auto kernel = indexer_q_quant_kernel<T, kVec, kLanes, kWarps, kMinBlocks, kMode, kShare, kStream>;
  const int64_t resident = int64_t(resident_blocks_per_sm<kernel>(kWarps * 32)) * sm_count;
  const IndexerGrid g = indexer_grid(items, kItemsPerBlock, resident, stagger_ns);
  return launch_kernel(kernel, dim3(g.blocks), dim3(kWarps * 32), stream, pdl, p,
                       FastDivmod(static_cast<uint32_t>(p.H)), items, g.stagger_ns, true);
}

template <typename T, bool kVec, IndexerMode kMode>
cudaError_t launch_indexer_mode(const IndexerParams& p, uint32_t items, const IndexerConfig& c, int sm_count,
                                cudaStream_t stream, bool pdl) {
  if (c.lanes == 8) return launch_indexer_shape<T, kVec, 8, 2, 0, kMode>(p, items, c.stagger_ns, sm_count, stream, pdl);
  if constexpr (kMode != IndexerMode::kAny) {
    if (c.share) {
      return launch_indexer_shape<T, kVec, 4, kIndexerShareWarps, kIndexerShareBlocks, kMode, true, true>(
          p, items, c.stagger_ns, sm_count, stream, pdl);
    }
    if (c.min_blocks == 16) {
      return c.stream ? launch_indexer_shape<T, kVec, 4, 2, 16, kMode, false, true>(p, items, c.stagger_ns, sm_count,
                                                                                    stream, pdl)
                      : launch_indexer_shape<T, kVec, 4, 2, 16, kMode>(p, items, c.stagger_ns, sm_count, stream, pdl);
    }
  }
  return launch_indexer_shape<T, kVec, 4, 2, 0, kMode>(p, items, c.stagger_ns, sm_count, stream, pdl);
}

template <typename T, bool kVec>
cudaError_t launch_indexer_vec(const IndexerParams& p, uint32_t items, int sm_count, int64_t l2_bytes,
                               cudaStream_t stream, bool pdl) {
  // With 16-byte loads the DeepSeek option sets have kernels of their own.
  const IndexerConfig c = indexer_config(items, kVec ? indexer_mode(p) : IndexerMode::kAny, l2_bytes);
  if constexpr (kVec) {
    if (c.mode == IndexerMode::kV4)
      return launch_indexer_mode<T, kVec, IndexerMode::kV4>(p, items, c, sm_count, stream, pdl);
    if (c.mode == IndexerMode::kV32)
      return launch_indexer_mode<T, kVec, IndexerMode::kV32>(p, items, c, sm_count, stream, pdl);
  }
  return launch_indexer_mode<T, kVec, IndexerMode::kAny>(p, items, c, sm_count, stream, pdl);
}

// Launches indexer_q_quant on stream (with PDL when pdl is set); B * H must be below 2^31
// (prepare.cpp checks it). sm_count: the device's multiprocessors (the persistent grids' size);
// l2_bytes: its L2 size.
template <typename T>
cudaError_t launch_indexer_q_quant(const IndexerParams& p, int sm_count, int64_t l2_bytes, cudaStream_t stream,
                                   bool pdl) {
  const int64_t items = p.B * p.H;
  if (items == 0) return cudaSuccess;
  if (items >= (int64_t(1) << 31)) return cudaErrorInvalidValue;
  // 16-byte loads of q and of the cos/sin rows when both allow them, else element loads of both.
  const bool vec = reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && (p.q_stride_b * int64_t(sizeof(T))) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.cos_sin) % 16 == 0 && p.cs_stride_pos % 4 == 0;
  const uint32_t n = static_cast<uint32_t>(items);
  return vec ? launch_indexer_vec<T, true>(p, n, sm_count, l2_bytes, stream, pdl)
             : launch_indexer_vec<T, false>(p, n, sm_count, l2_bytes, stream, pdl);
}

}  // namespace fp8ops
