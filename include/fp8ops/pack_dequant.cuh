// CUDA kernels of pack_ue8m0 (the fallback for scales fp8ops did not produce) and dequant (tests
// and debugging).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "fp8ops/launch.cuh"
#include "fp8ops/numerics.h"
#include "fp8ops/pack_dequant.h"

namespace fp8ops {

constexpr int kPackThreads = 256;
constexpr int kPackTileRows = 64;  // rows (m) of a tile
constexpr int kPackTileWords = 8;  // packed words (p) of a tile: 32 scale columns

// A tile transpose through shared memory: reads go along the rows of the (usually row-major)
// fp32 scales, 16 bytes a word where the strides allow it, and the packed words are written
// row index fastest, so both sides are coalesced.
__global__ void __launch_bounds__(kPackThreads) pack_ue8m0_kernel(const PackUe8m0Params p, const bool vec4) {
  __shared__ uint32_t tile[kPackTileWords][kPackTileRows + 1];
  const int64_t b = blockIdx.z;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kPackTileRows;
  const int64_t p0 = static_cast<int64_t>(blockIdx.y) * kPackTileWords;
  wait_for_prior_grid();
  allow_next_grid();
  for (int i = threadIdx.x; i < kPackTileRows * kPackTileWords; i += kPackThreads) {
    const int pl = i % kPackTileWords, ml = i / kPackTileWords;
    const int64_t m = m0 + ml, pw = p0 + pl;
    uint32_t word = 0;  // rows past M and groups past S stay zero
    if (m < p.M && pw < p.P) {
      const float* row = p.in + b * p.in_stride_b + m * p.in_stride_m;
      if (vec4 && 4 * pw + 3 < p.S) {
        const float4 v = *reinterpret_cast<const float4*>(row + 4 * pw);
        word = pack_byte(v.x) | (pack_byte(v.y) << 8) | (pack_byte(v.z) << 16) | (pack_byte(v.w) << 24);
      } else {
        for (int j = 0; j < 4; ++j) {
          const int64_t s = 4 * pw + j;
          if (s < p.S) word |= pack_byte(row[s * p.in_stride_s]) << (8 * j);
        }
      }
    }
    tile[pl][ml] = word;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kPackTileRows * kPackTileWords; i += kPackThreads) {
    const int ml = i % kPackTileRows, pl = i / kPackTileRows;
    const int64_t m = m0 + ml, pw = p0 + pl;
    if (m < p.Ma && pw < p.P) p.out[(b * p.P + pw) * p.Ma + m] = static_cast<int32_t>(tile[pl][ml]);
  }
}

inline cudaError_t launch_pack_ue8m0(const PackUe8m0Params& p, cudaStream_t stream, bool pdl) {
  if (p.B * p.P * p.Ma == 0) return cudaSuccess;
  if (p.B > 65535) return cudaErrorInvalidValue;
  const bool vec4 = p.in_stride_s == 1 && reinterpret_cast<uintptr_t>(p.in) % 16 == 0 && p.in_stride_m % 4 == 0 &&
                    p.in_stride_b % 4 == 0;
  const dim3 grid(static_cast<unsigned>((p.Ma + kPackTileRows - 1) / kPackTileRows),
                  static_cast<unsigned>((p.P + kPackTileWords - 1) / kPackTileWords), static_cast<unsigned>(p.B));
  return launch_kernel(pack_ue8m0_kernel, grid, dim3(kPackThreads), stream, pdl, p, vec4);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  // NOTES: NaN is written as the canonical quiet NaN, as the CPU reference does.
  return v != v ? __ushort_as_bfloat16(0x7FC0) : __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return v != v ? __ushort_as_half(0x7E00) : __float2half_rn(v);
}

constexpr int kDequantThreads = 256;

// One thread per output element; a debugging aid, kept simple rather than fast.
template <typename T>
__global__ void __launch_bounds__(kDequantThreads) dequant_kernel(const DequantParams p, const int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kDequantThreads + threadIdx.x;
  if (i >= total) return;
  const int64_t k = i % p.K;
  const int64_t bm = i / p.K;
  const int64_t m = bm % p.M;
  const int64_t b = bm / p.M;
  const uint8_t c = p.q[b * p.q_stride_b + m * p.q_stride_m + k * p.q_stride_k];
  const float v = e4m3_to_float(c) * dequant_scale(p, b, m, k / p.group_size);
  static_cast<T*>(p.out)[i] = from_float<T>(v);
}

template <typename T>
cudaError_t launch_dequant(const DequantParams& p, cudaStream_t stream) {
  const int64_t total = p.B * p.M * p.K;
  if (total == 0) return cudaSuccess;
  const int64_t blocks = (total + kDequantThreads - 1) / kDequantThreads;
  if (blocks > 0x7FFFFFFF) return cudaErrorInvalidValue;
  dequant_kernel<T><<<static_cast<unsigned>(blocks), kDequantThreads, 0, stream>>>(p, total);
  return cudaGetLastError();
}

}  // namespace fp8ops
