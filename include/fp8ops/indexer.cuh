// CUDA kernel of indexer_q_quant: eight lanes per (token, head), lane j of the eight holding dims
// 16j..16j+15, so a warp works on four heads at once. Hadamard stages h = 1..8 stay inside a lane;
// h = 16, 32, 64 pair lanes 1, 2 and 4 apart (shuffles). The arithmetic is indexer.h's, step for
// step, in the same order as the CPU reference.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "fp8ops/fast_divmod.cuh"
#include "fp8ops/group_quant.cuh"
#include "fp8ops/indexer.h"
#include "fp8ops/numerics.h"

namespace fp8ops {

constexpr int kIndexerLanes = 8;                               // lanes per (token, head)
constexpr int kIndexerDims = kIndexerHeadDim / kIndexerLanes;  // dims per lane: 16
constexpr int kIndexerHeadsPerWarp = 32 / kIndexerLanes;

template <typename T>
__device__ __forceinline__ float elem_to_float(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return __half2float(v);
  }
}

// n floats from src: 16-byte loads when vec (src 16-byte aligned), else one by one.
template <int N>
__device__ __forceinline__ void load_floats(float (&dst)[N], const float* src, bool vec) {
  if (vec) {
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

// q, weight and position of one (token, head), loaded ahead of the work on it.
template <typename T>
struct IndexerLoad {
  uint4 raw[2];  // dims 16j..16j+15 (scalar loads when kVec16 is false)
  float w;       // weight, in lane j == 0 only
  int64_t pos;   // clamped position
};

template <typename T, bool kVec16>
__device__ __forceinline__ IndexerLoad<T> indexer_load(const IndexerParams& p, uint32_t b, uint32_t h, int j) {
  IndexerLoad<T> ld;
  const T* src = static_cast<const T*>(p.q) + b * p.q_stride_b + h * kIndexerHeadDim + kIndexerDims * j;
  if constexpr (kVec16) {
    ld.raw[0] = reinterpret_cast<const uint4*>(src)[0];
    ld.raw[1] = reinterpret_cast<const uint4*>(src)[1];
  } else {
    T* e = reinterpret_cast<T*>(ld.raw);
#pragma unroll
    for (int k = 0; k < kIndexerDims; ++k) e[k] = src[k];
  }
  ld.w = j == 0 ? elem_to_float<T>(static_cast<const T*>(p.weight)[b * p.w_stride_b + h * p.w_stride_h]) : 0.0f;
  // NOTES: out-of-range positions are clamped so that no read leaves the cache; SPEC leaves those
  // rows' values unspecified (the CPU kernel raises instead).
  const int64_t pos = indexer_position(p, b);
  ld.pos = pos < 0 ? 0 : (pos >= p.max_pos ? p.max_pos - 1 : pos);
  return ld;
}

// RoPE, Hadamard and quantization of one (token, head) whose loads are in ld; stores when live.
template <typename T>
__device__ __forceinline__ void indexer_head(const IndexerParams& p, const IndexerLoad<T>& ld, uint32_t item, bool live,
                                             int j, bool cs_vec) {
  float v[kIndexerDims];
  const T* e = reinterpret_cast<const T*>(ld.raw);
#pragma unroll
  for (int k = 0; k < kIndexerDims; ++k) v[k] = elem_to_float<T>(e[k]);

  const float* cs = p.cos_sin + ld.pos * p.cs_stride_pos;
  const int rel = kIndexerDims * j - (p.rope_tail ? kIndexerHeadDim - kIndexerRopeDim : 0);
  const bool in_rope = rel >= 0 && rel < kIndexerRopeDim;  // a lane's 16 dims are all in or all out
  if (!p.rope_neox) {
    // Interleaved pairs (2i, 2i + 1), i = rel / 2 + k: all inside the lane.
    if (in_rope) {
      float c[kIndexerDims / 2], s[kIndexerDims / 2];
      load_floats(c, cs + rel / 2, cs_vec);
      load_floats(s, cs + kIndexerRopePairs + rel / 2, cs_vec);
#pragma unroll
      for (int k = 0; k < kIndexerDims / 2; ++k) rope_pair(v[2 * k], v[2 * k + 1], c[k], s[k]);
    }
  } else {
    // Pairs (i, i + 32): the partner's dims are 2 lanes away.
    float other[kIndexerDims];
#pragma unroll
    for (int k = 0; k < kIndexerDims; ++k) other[k] = __shfl_xor_sync(0xFFFFFFFFu, v[k], 2);
    if (in_rope) {
      const bool first = rel < kIndexerRopePairs;  // this lane holds the pair's a
      const int i0 = first ? rel : rel - kIndexerRopePairs;
      float c[kIndexerDims], s[kIndexerDims];
      load_floats(c, cs + i0, cs_vec);
      load_floats(s, cs + kIndexerRopePairs + i0, cs_vec);
#pragma unroll
      for (int k = 0; k < kIndexerDims; ++k) {
        // rope_pair(a, b, c, s) with (a, b) = (v, other) or (other, v); each lane keeps its own.
        v[k] = first ? sub_rn(mul_rn(v[k], c[k]), mul_rn(other[k], s[k]))
                     : add_rn(mul_rn(other[k], s[k]), mul_rn(v[k], c[k]));
      }
    }
  }

  if (p.hadamard) {
#pragma unroll
    for (int hs = 1; hs < kIndexerDims; hs <<= 1) {
#pragma unroll
      for (int k = 0; k < kIndexerDims; ++k) {
        if ((k & hs) != 0) continue;
        const float lo = v[k], up = v[k + hs];
        v[k] = butterfly_lower(lo, up);
        v[k + hs] = butterfly_upper(lo, up);
      }
    }
    // NOTES: across lanes, the lower lane keeps v + o and the upper lane o - v; o - v is
    // o + (-v) in IEEE arithmetic, so both are one add of (+-v) and o.
#pragma unroll
    for (int m = 1; m < kIndexerLanes; m <<= 1) {
      const uint32_t flip = (j & m) != 0 ? 0x80000000u : 0u;
#pragma unroll
      for (int k = 0; k < kIndexerDims; ++k) {
        const float o = __shfl_xor_sync(0xFFFFFFFFu, v[k], m);
        v[k] = add_rn(__uint_as_float(__float_as_uint(v[k]) ^ flip), o);
      }
    }
#pragma unroll
    for (int k = 0; k < kIndexerDims; ++k) v[k] = mul_rn(v[k], kInvSqrt128);
  }

  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kIndexerDims; ++k) amax = fmax_nonan(amax, finite_abs(v[k]));
#pragma unroll
  for (int o = kIndexerLanes / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const float scale = group_scale(amax, p.eps, false);
  const float r = __frcp_rn(scale);
  uint32_t words[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    words[k] = zero_nan_codes(e4m3x2_bits_device(v[4 * k] * r, v[4 * k + 1] * r) |
                              (e4m3x2_bits_device(v[4 * k + 2] * r, v[4 * k + 3] * r) << 16));
  }
  if (!live) return;
  *reinterpret_cast<uint4*>(p.q_out + static_cast<int64_t>(item) * kIndexerHeadDim + kIndexerDims * j) =
      make_uint4(words[0], words[1], words[2], words[3]);
  if (j == 0) p.w_out[item] = indexer_weight(ld.w, p.weight_scale, scale);
}

// Each warp works on kRounds groups of four consecutive (token, head) items, all loads issued
// before the first is worked on; kWarps warps per block.
template <typename T, bool kVec16, int kWarps, int kRounds>
__global__ void __launch_bounds__(kWarps * 32)
    indexer_q_quant_kernel(const IndexerParams p, const FastDivmod div_h, const uint32_t items, const bool cs_vec) {
  const int lane = threadIdx.x & 31;
  const int j = lane % kIndexerLanes;  // this lane's part of the head: dims 16j..16j+15
  const uint32_t first = (blockIdx.x * kWarps + threadIdx.x / 32) * (kIndexerHeadsPerWarp * kRounds);
  wait_for_prior_grid();
  allow_next_grid();
  if (first >= items) return;  // the whole warp leaves together
  IndexerLoad<T> ld[kRounds];
  uint32_t item[kRounds];
  bool live[kRounds];
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const uint32_t raw_item = first + r * kIndexerHeadsPerWarp + lane / kIndexerLanes;
    live[r] = raw_item < items;
    // A lane group past the end works on the last item (every lane takes part in the shuffles)
    // and stores nothing.
    item[r] = live[r] ? raw_item : items - 1;
    const uint32_t b = div_h.div(item[r]);
    ld[r] = indexer_load<T, kVec16>(p, b, item[r] - b * div_h.divisor, j);
  }
#pragma unroll
  for (int r = 0; r < kRounds; ++r) indexer_head<T>(p, ld[r], item[r], live[r], j, cs_vec);
}

// Launch shape: 2 warps per block (the best of 1, 2, 4 and 8 on the H200, docs/PERF.md), one group
// of four items per warp up to 2^17 items and two from there (docs/PERF.md, sweep 4). FP8OPS_TUNE_IDX_WARPS and
// FP8OPS_TUNE_IDX_ROUNDS force it in benchmarking builds (FP8OPS_TUNING).
struct IndexerConfig {
  int warps;   // per block
  int rounds;  // groups of four items per warp
};

inline IndexerConfig indexer_config(int64_t items) {
  IndexerConfig c{2, items >= (int64_t(1) << 17) ? 2 : 1};
#if defined(FP8OPS_TUNING)
  if (const char* v = std::getenv("FP8OPS_TUNE_IDX_WARPS")) c.warps = std::atoi(v);
  if (const char* v = std::getenv("FP8OPS_TUNE_IDX_ROUNDS")) c.rounds = std::atoi(v);
#endif
  return c;
}

template <typename T, bool kVec16, int kWarps, int kRounds>
cudaError_t launch_indexer_shape(const IndexerParams& p, uint32_t items, bool cs_vec, cudaStream_t stream) {
  constexpr uint32_t kItemsPerBlock = kWarps * kIndexerHeadsPerWarp * kRounds;
  const dim3 grid((items + kItemsPerBlock - 1) / kItemsPerBlock), block(kWarps * 32);
  return launch_with_pdl(indexer_q_quant_kernel<T, kVec16, kWarps, kRounds>, grid, block, stream, p,
                         FastDivmod(static_cast<uint32_t>(p.H)), items, cs_vec);
}

template <typename T, bool kVec16>
cudaError_t launch_indexer_vec(const IndexerParams& p, uint32_t items, bool cs_vec, cudaStream_t stream) {
  const IndexerConfig c = indexer_config(items);
  if constexpr (kTuningBuild) {
    if (c.warps == 1 && c.rounds == 1) return launch_indexer_shape<T, kVec16, 1, 1>(p, items, cs_vec, stream);
    if (c.warps == 4 && c.rounds == 1) return launch_indexer_shape<T, kVec16, 4, 1>(p, items, cs_vec, stream);
    if (c.warps == 8 && c.rounds == 1) return launch_indexer_shape<T, kVec16, 8, 1>(p, items, cs_vec, stream);
    if (c.warps == 2 && c.rounds == 4) return launch_indexer_shape<T, kVec16, 2, 4>(p, items, cs_vec, stream);
    if (c.warps == 4 && c.rounds == 2) return launch_indexer_shape<T, kVec16, 4, 2>(p, items, cs_vec, stream);
  }
  return c.rounds == 2 ? launch_indexer_shape<T, kVec16, 2, 2>(p, items, cs_vec, stream)
                       : launch_indexer_shape<T, kVec16, 2, 1>(p, items, cs_vec, stream);
}

// Launches indexer_q_quant on stream; B * H must be below 2^31 (prepare.cpp checks it).
template <typename T>
cudaError_t launch_indexer_q_quant(const IndexerParams& p, cudaStream_t stream) {
  const int64_t items = p.B * p.H;
  if (items == 0) return cudaSuccess;
  if (items >= (int64_t(1) << 31)) return cudaErrorInvalidValue;
  const bool vec16 = reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && (p.q_stride_b * int64_t(sizeof(T))) % 16 == 0;
  const bool cs_vec = reinterpret_cast<uintptr_t>(p.cos_sin) % 16 == 0 && p.cs_stride_pos % 4 == 0;
  const uint32_t n = static_cast<uint32_t>(items);
  return vec16 ? launch_indexer_vec<T, true>(p, n, cs_vec, stream) : launch_indexer_vec<T, false>(p, n, cs_vec, stream);
}

}  // namespace fp8ops
