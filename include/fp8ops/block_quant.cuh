// CUDA kernel of block_quant: weights [E, N, K] quantized per 128 x 128 block, one fp32 scale a
// block (a power of two with ue8m0), in the layout DeepGEMM and torch._scaled_mm read for weights.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fp8ops/fused_quant.cuh"
#include "fp8ops/launch.cuh"

namespace fp8ops {

// ---- block_quant: one block of 256 threads per 128 x 128 tile; thread i holds chunk i % 16 of
// tile rows i / 16 + 16 j (j < 8), so a warp reads two full 128-element rows per load.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kRowBlockThreads) block_quant_kernel(const BlockQuantParams p) {
  constexpr int kRowsPerThread = kBlockQuantTile * kBlockQuantTile / kChunkElems / kRowBlockThreads;  // 8
  __shared__ float warp_amax[kRowBlockThreads / 32];
  const int64_t e = blockIdx.z, n0 = static_cast<int64_t>(blockIdx.y) * kBlockQuantTile;
  const int64_t k = static_cast<int64_t>(blockIdx.x) * kBlockQuantTile + (threadIdx.x % 16) * kChunkElems;
  const int row0 = threadIdx.x / 16;
  const T* __restrict__ w = static_cast<const T*>(p.w) + e * p.w_stride_e;
  const bool full_chunk = k + kChunkElems <= p.K;
  wait_for_prior_grid();
  allow_next_grid();
  // Raw 16-byte words in registers (half the registers of floats), converted where used.
  RawChunk<T> v[kRowsPerThread];
#pragma unroll
  for (int j = 0; j < kRowsPerThread; ++j) {
    const int64_t n = n0 + row0 + 16 * j;
    const T* src = w + n * p.w_stride_n + k;
    if (n < p.N && full_chunk) {
      v[j] = load_raw8<T, kVec>(src, true);
    } else {
      float f[kChunkElems];
#pragma unroll
      for (int i = 0; i < kChunkElems; ++i) f[i] = n < p.N && k + i < p.K ? load_elem(src, i) : 0.0f;
      v[j] = floats_to_raw<T>(f);
    }
  }
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kRowsPerThread; ++j) amax = fmax_nonan(amax, raw_finite_amax<T>(v[j]));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
  if ((threadIdx.x & 31) == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kRowBlockThreads / 32; ++i) amax = fmaxf(amax, warp_amax[i]);
  const float scale = group_scale(amax, p.eps, p.ue8m0);
  const float rcp = group_reciprocal(scale, p.ue8m0);
  const bool aligned_q = p.K % kChunkElems == 0;
#pragma unroll
  for (int j = 0; j < kRowsPerThread; ++j) {
    const int64_t n = n0 + row0 + 16 * j;
    if (n >= p.N || k >= p.K) continue;
    float f[kChunkElems];
    raw_to_floats<T>(v[j], f);
    const uint2 c = codes8(f, rcp);
    uint8_t* dst = p.q + (e * p.N + n) * p.K + k;
    if (full_chunk && aligned_q) {
      *reinterpret_cast<uint2*>(dst) = c;
    } else {
      for (int i = 0; i < kChunkElems && k + i < p.K; ++i)
        dst[i] = static_cast<uint8_t>((i < 4 ? c.x : c.y) >> (8 * (i & 3)));
    }
  }
  if (threadIdx.x == 0) p.scale[(e * p.NB + blockIdx.y) * p.KB + blockIdx.x] = scale;
}

// ---- Launchers.
template <typename T>
cudaError_t launch_block_quant(const BlockQuantParams& p, cudaStream_t stream, bool pdl) {
  if (p.E * p.N * p.K == 0) return cudaSuccess;
  if (p.E > 65535 || p.NB > 65535 || p.KB > 0x7FFFFFFF) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<uint32_t>(p.KB), static_cast<uint32_t>(p.NB), static_cast<uint32_t>(p.E));
  return row_vec_ok<T>(p.w, p.w_stride_n, p.w_stride_e)
             ? launch_kernel(block_quant_kernel<T, true>, grid, dim3(kRowBlockThreads), stream, pdl, p)
             : launch_kernel(block_quant_kernel<T, false>, grid, dim3(kRowBlockThreads), stream, pdl, p);
}

}  // namespace fp8ops
