// Group quantization to e4m3 with the scales written straight into the consumer's layout.
//
// One launch writes q, the scales and every padding byte. Each group of kGroupSize elements is
// handled by kLanes = kGroupSize / kVec consecutive threads, each loading 16 bytes (kVec elements)
// and reducing the group's amax with shuffles inside those lanes. A thread works on kUnroll groups
// at a time, all loads issued before the first reduction, to keep enough bytes in flight on
// large inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "fp8ops/fast_divmod.cuh"
#include "fp8ops/group_quant.h"
#include "fp8ops/numerics.h"

namespace fp8ops {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }

constexpr int kGroupQuantThreads = 256;

template <typename T, int kGroupSize, bool kVec16, int kUnroll>
__global__ void __launch_bounds__(kGroupQuantThreads)
    group_quant_kernel(const GroupQuantParams p, const FastDivmod div_s, const FastDivmod div_g,
                       const uint32_t total) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kLanes = kGroupSize / kVec;
  static_assert(kLanes >= 1 && kLanes <= 32 && (32 % kLanes) == 0, "a group must tile a warp");
  static_assert(kVec % 2 == 0, "codes are converted in pairs");

  const uint32_t lane = threadIdx.x % kLanes;
  // NOTES: shuffles use only this group's lanes, since neighbouring groups of a warp can leave the
  // loop at different iterations.
  const uint32_t group_mask =
      (kLanes == 32 ? 0xFFFFFFFFu : ((1u << kLanes) - 1u) << ((threadIdx.x % 32) / kLanes * kLanes));
  const uint32_t slot = (blockIdx.x * kGroupQuantThreads + threadIdx.x) / kLanes;
  const uint32_t nslots = gridDim.x * (kGroupQuantThreads / kLanes);
  const T* __restrict__ x = static_cast<const T*>(p.x);

  for (uint32_t base = slot; base < total; base += nslots * kUnroll) {
    float v[kUnroll][kVec];
    int64_t t[kUnroll], g[kUnroll], rg[kUnroll];
    int32_t s[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t w = base + u * nslots;
      valid[u] = w < total;
      const uint32_t r = div_s.div(w);
      s[u] = static_cast<int32_t>(w - r * div_s.divisor);
      const uint32_t tt = div_g.div(r);
      rg[u] = r;
      t[u] = tt;
      g[u] = r - tt * div_g.divisor;
      const bool data = valid[u] && t[u] < p.T;
      const int64_t off = t[u] * p.x_stride_t + g[u] * p.x_stride_g +
                          static_cast<int64_t>(s[u]) * kGroupSize + lane * kVec;
      if constexpr (kVec16) {
        union {
          uint4 u4;
          T e[kVec];
        } pack;
        pack.u4 = data ? *reinterpret_cast<const uint4*>(x + off) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int i = 0; i < kVec; ++i) v[u][i] = to_float<T>(pack.e[i]);
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) v[u][i] = data ? to_float<T>(x[off + i]) : 0.0f;
      }
    }

#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kVec; ++i) amax = fmax_nonan(amax, finite_abs(v[u][i]));
#pragma unroll
      for (int o = kLanes / 2; o > 0; o >>= 1)
        amax = fmax_nonan(amax, __shfl_xor_sync(group_mask, amax, o));
      if (!valid[u]) continue;

      const bool data = t[u] < p.T;
      const float scale = group_scale(amax, p.eps, p.ue8m0 || p.packed);
      if (t[u] < p.T_q) {
        const float r = __frcp_rn(scale);
        uint16_t c[kVec / 2];
#pragma unroll
        for (int i = 0; i < kVec / 2; ++i)
          c[i] = e4m3x2_bits_device(scaled_clamped(v[u][2 * i], r), scaled_clamped(v[u][2 * i + 1], r));
        uint8_t* dst = p.q + rg[u] * p.D + static_cast<int64_t>(s[u]) * kGroupSize + lane * kVec;
        if constexpr (kVec == 8) {
          *reinterpret_cast<uint2*>(dst) = make_uint2(c[0] | (uint32_t(c[1]) << 16), c[2] | (uint32_t(c[3]) << 16));
        } else {
          *reinterpret_cast<uint32_t*>(dst) = c[0] | (uint32_t(c[1]) << 16);
        }
      }
      if (lane != 0) continue;
      const int64_t word = scale_word_offset(p, t[u], g[u], s[u]);
      if (p.packed) {
        uint8_t* bytes = reinterpret_cast<uint8_t*>(static_cast<int32_t*>(p.scale) + word);
        bytes[s[u] & 3] = data ? static_cast<uint8_t>(ue8m0_exponent(scale)) : 0;
        // NOTES: the last group also zeroes the unused bytes of its word (groups >= S).
        if (s[u] == p.S - 1) {
          for (int j = (s[u] & 3) + 1; j < 4; ++j) bytes[j] = 0;
        }
      } else {
        static_cast<float*>(p.scale)[word] = data ? scale : 0.0f;
      }
    }
  }
}

// Grid size and unroll for `total` groups: one group per thread-lane set while the grid fits in a
// few waves, four per set beyond that, so that large inputs keep 64 bytes in flight per thread.
template <typename T, int kGroupSize, bool kVec16>
cudaError_t launch_group_quant_impl(const GroupQuantParams& p, uint32_t total, int sm_count,
                                    cudaStream_t stream) {
  constexpr int kLanes = kGroupSize / (16 / sizeof(T));
  constexpr uint32_t kGroupsPerBlock = kGroupQuantThreads / kLanes;
  const FastDivmod div_s(static_cast<uint32_t>(p.S));
  const FastDivmod div_g(static_cast<uint32_t>(p.G));
  const uint32_t blocks = (total + kGroupsPerBlock - 1) / kGroupsPerBlock;
  const uint32_t wave = static_cast<uint32_t>(sm_count) * (2048 / kGroupQuantThreads);
  if (blocks >= 4u * wave) {
    group_quant_kernel<T, kGroupSize, kVec16, 4>
        <<<(blocks + 3) / 4, kGroupQuantThreads, 0, stream>>>(p, div_s, div_g, total);
  } else {
    group_quant_kernel<T, kGroupSize, kVec16, 1>
        <<<blocks, kGroupQuantThreads, 0, stream>>>(p, div_s, div_g, total);
  }
  return cudaGetLastError();
}

// Launches the quantization of p on stream. Returns cudaErrorInvalidValue for an unsupported
// group size or a problem whose group count does not fit the 31-bit index.
template <typename T>
cudaError_t launch_group_quant(const GroupQuantParams& p, int sm_count, cudaStream_t stream) {
  const int64_t total64 = p.T_s * p.G * p.S;
  if (total64 == 0) return cudaSuccess;
  if (total64 >= (int64_t(1) << 31)) return cudaErrorInvalidValue;
  const uint32_t total = static_cast<uint32_t>(total64);
  // 16-byte loads need a 16-byte aligned base and row strides; group offsets are multiples of
  // 32 elements and so always aligned.
  const bool vec16 = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
                     (p.x_stride_t * int64_t(sizeof(T))) % 16 == 0 &&
                     (p.x_stride_g * int64_t(sizeof(T))) % 16 == 0;
#define FP8OPS_GROUP_CASE(GS)                                                      \
  case GS:                                                                         \
    return vec16 ? launch_group_quant_impl<T, GS, true>(p, total, sm_count, stream) \
                 : launch_group_quant_impl<T, GS, false>(p, total, sm_count, stream);
  switch (p.group_size) {
    FP8OPS_GROUP_CASE(32)
    FP8OPS_GROUP_CASE(64)
    FP8OPS_GROUP_CASE(128)
    default:
      return cudaErrorInvalidValue;
  }
#undef FP8OPS_GROUP_CASE
}

}  // namespace fp8ops
