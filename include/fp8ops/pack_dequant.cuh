// CUDA kernels of pack_ue8m0 (the fallback for scales fp8ops did not produce) and dequant (tests
// and debugging).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "fp8ops/fast_divmod.cuh"
#include "fp8ops/group_quant.cuh"
#include "fp8ops/numerics.h"
#include "fp8ops/pack_dequant.h"

namespace fp8ops {

constexpr int kPackThreads = 256;

// One thread per output word, row index fastest, so that the word stores are coalesced.
__global__ void __launch_bounds__(kPackThreads)
    pack_ue8m0_kernel(const PackUe8m0Params p, const FastDivmod div_ma, const FastDivmod div_p,
                      const uint32_t total) {
  const uint32_t w = blockIdx.x * kPackThreads + threadIdx.x;
  wait_for_prior_grid();
  allow_next_grid();
  if (w >= total) return;
  const uint32_t bp = div_ma.div(w);
  const int64_t m = w - bp * div_ma.divisor;
  const uint32_t b = div_p.div(bp);
  const int64_t pw = bp - b * div_p.divisor;
  uint32_t word = 0;
  if (m < p.M) {
    const float* row = p.in + b * p.in_stride_b + m * p.in_stride_m;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t s = 4 * pw + j;
      if (s < p.S) word |= pack_byte(row[s * p.in_stride_s]) << (8 * j);
    }
  }
  p.out[w] = static_cast<int32_t>(word);
}

inline cudaError_t launch_pack_ue8m0(const PackUe8m0Params& p, cudaStream_t stream) {
  const int64_t total64 = p.B * p.P * p.Ma;
  if (total64 == 0) return cudaSuccess;
  if (total64 >= (int64_t(1) << 31)) return cudaErrorInvalidValue;
  const uint32_t total = static_cast<uint32_t>(total64);
  return launch_with_pdl(pack_ue8m0_kernel, dim3((total + kPackThreads - 1) / kPackThreads), dim3(kPackThreads), stream, p,
                         FastDivmod(static_cast<uint32_t>(p.Ma)), FastDivmod(static_cast<uint32_t>(p.P)), total);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
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
