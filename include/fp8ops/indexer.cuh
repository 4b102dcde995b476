// CUDA kernel of indexer_q_quant: one warp per (token, head), lane l holding dims 4l..4l+3, eight
// (token, head) pairs per 256-thread block. RoPE pairs and Hadamard butterflies that cross lanes
// go through shuffles; the arithmetic is indexer.h's, step for step.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "fp8ops/group_quant.cuh"
#include "fp8ops/indexer.h"
#include "fp8ops/numerics.h"

namespace fp8ops {

constexpr int kIndexerThreads = 256;
constexpr int kIndexerWarpsPerBlock = kIndexerThreads / 32;

template <typename T>
__device__ __forceinline__ float elem_to_float(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return __half2float(v);
  }
}

template <typename T, bool kVec8>
__global__ void __launch_bounds__(kIndexerThreads) indexer_q_quant_kernel(const IndexerParams p) {
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kIndexerWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  wait_for_prior_grid();
  allow_next_grid();
  if (warp >= p.B * p.H) return;  // the whole warp leaves together
  const int64_t b = warp / p.H, h = warp - (warp / p.H) * p.H;

  float v[4];
  const T* src = static_cast<const T*>(p.q) + b * p.q_stride_b + h * kIndexerHeadDim + 4 * lane;
  if constexpr (kVec8) {
    const uint2 raw = *reinterpret_cast<const uint2*>(src);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = elem_to_float<T>(e[k]);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = elem_to_float<T>(src[k]);
  }

  // NOTES: out-of-range positions are clamped so that no read leaves the cache; SPEC leaves those
  // rows' values unspecified (the CPU kernel raises instead).
  int64_t pos = indexer_position(p, b);
  pos = pos < 0 ? 0 : (pos >= p.max_pos ? p.max_pos - 1 : pos);
  const float* cs = p.cos_sin + pos * p.cs_stride_pos;
  const int rope_base = p.rope_tail ? kIndexerHeadDim - kIndexerRopeDim : 0;
  const int rel = 4 * lane - rope_base;  // this lane's first dim, relative to the rotated half
  const bool in_rope = rel >= 0 && rel < kIndexerRopeDim;

  if (!p.rope_neox) {
    if (in_rope) {
      const int i = rel / 2;
      rope_pair(v[0], v[1], cs[i], cs[kIndexerRopePairs + i]);
      rope_pair(v[2], v[3], cs[i + 1], cs[kIndexerRopePairs + i + 1]);
    }
  } else {
    // Pair (i, i + 32): the partner's dims are 8 lanes away.
    float other[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) other[k] = __shfl_xor_sync(0xFFFFFFFFu, v[k], 8);
    if (in_rope) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int r = rel + k;
        const int i = r % kIndexerRopePairs;
        const float c = cs[i], s = cs[kIndexerRopePairs + i];
        float a = r < kIndexerRopePairs ? v[k] : other[k];
        float bb = r < kIndexerRopePairs ? other[k] : v[k];
        rope_pair(a, bb, c, s);
        v[k] = r < kIndexerRopePairs ? a : bb;
      }
    }
  }

  if (p.hadamard) {
    // h = 1 and h = 2 inside the lane, h = 4 .. 64 across lanes (lane mask h / 4).
    float t0 = butterfly_lower(v[0], v[1]), t1 = butterfly_upper(v[0], v[1]);
    float t2 = butterfly_lower(v[2], v[3]), t3 = butterfly_upper(v[2], v[3]);
    v[0] = butterfly_lower(t0, t2);
    v[2] = butterfly_upper(t0, t2);
    v[1] = butterfly_lower(t1, t3);
    v[3] = butterfly_upper(t1, t3);
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
      const bool upper = (lane & m) != 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float o = __shfl_xor_sync(0xFFFFFFFFu, v[k], m);
        v[k] = upper ? butterfly_upper(o, v[k]) : butterfly_lower(v[k], o);
      }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = mul_rn(v[k], kInvSqrt128);
  }

  float amax =
      fmax_nonan(fmax_nonan(finite_abs(v[0]), finite_abs(v[1])), fmax_nonan(finite_abs(v[2]), finite_abs(v[3])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const float scale = group_scale(amax, p.eps, false);
  const float r = __frcp_rn(scale);
  const uint32_t codes =
      zero_nan_codes(e4m3x2_bits_device(v[0] * r, v[1] * r) | (e4m3x2_bits_device(v[2] * r, v[3] * r) << 16));
  *reinterpret_cast<uint32_t*>(p.q_out + warp * kIndexerHeadDim + 4 * lane) = codes;
  if (lane == 0) {
    const float w = elem_to_float<T>(static_cast<const T*>(p.weight)[b * p.w_stride_b + h * p.w_stride_h]);
    p.w_out[warp] = indexer_weight(w, p.weight_scale, scale);
  }
}

template <typename T>
cudaError_t launch_indexer_q_quant(const IndexerParams& p, cudaStream_t stream) {
  const int64_t warps = p.B * p.H;
  if (warps == 0) return cudaSuccess;
  const int64_t blocks = (warps + kIndexerWarpsPerBlock - 1) / kIndexerWarpsPerBlock;
  if (blocks > 0x7FFFFFFF) return cudaErrorInvalidValue;
  const bool vec8 = reinterpret_cast<uintptr_t>(p.q) % 8 == 0 && (p.q_stride_b * int64_t(sizeof(T))) % 8 == 0;
  const dim3 grid(static_cast<unsigned>(blocks)), block(kIndexerThreads);
  return vec8 ? launch_with_pdl(indexer_q_quant_kernel<T, true>, grid, block, stream, p)
              : launch_with_pdl(indexer_q_quant_kernel<T, false>, grid, block, stream, p);
}

}  // namespace fp8ops
