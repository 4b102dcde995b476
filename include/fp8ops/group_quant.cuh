// Group quantization to e4m3 with the scales written straight into the consumer's layout.
//
// One launch writes q, the scales and every padding byte. Each group of kGroupSize elements is
// handled by kLanes = kGroupSize / kVec consecutive threads, each loading 32 bytes (kVec elements)
// and reducing the group's amax with shuffles inside those lanes. A thread works on kUnroll rows
// at a time, all loads issued before the first reduction, to keep enough bytes in flight on
// large inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "fp8ops/fast_divmod.cuh"
#include "fp8ops/group_quant.h"
#include "fp8ops/numerics.h"

namespace fp8ops {

constexpr int kGroupQuantThreads = 256;

// Programmatic dependent launch (sm_90+): a kernel launched with programmatic stream
// serialization may start while the previous kernel of its stream is still running; it must wait
// for that grid before its first memory access, and it lets the next kernel start early once its
// own loads are issued. In decode graphs this hides most of the launch latency.
__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Launches kernel with programmatic stream serialization allowed (see wait_for_prior_grid).
template <typename... KArgs, typename... Args>
cudaError_t launch_with_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

// Amax of one thread's 16 bytes of x (finite elements only), as a float.
template <typename T>
__device__ __forceinline__ float thread_amax(const uint4 raw) {
  if constexpr (sizeof(T) == 4) {
    return bits_float(finite_amax_bits_f32x4(raw));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return bits_float(finite_amax_bits_16x8<0x7F80u>(raw) << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(finite_amax_bits_16x8<0x7C00u>(raw))));
  }
}

// Two elements of a 32-bit word as floats, times r.
template <typename T>
__device__ __forceinline__ float2 scaled_pair(const uint32_t word, const float r) {
  float2 f;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    f = make_float2(bits_float(word << 16), bits_float(word & 0xFFFF0000u));
  } else {
    f = __half22float2(*reinterpret_cast<const __half2*>(&word));
  }
  return make_float2(f.x * r, f.y * r);
}

// e4m3 codes of one thread's 16 bytes of x, little-endian in 32-bit words.
template <typename T>
__device__ __forceinline__ void quantize16(const uint4 raw, const float r, uint32_t (&codes)[sizeof(T) == 4 ? 1 : 2]) {
  if constexpr (sizeof(T) == 4) {
    const uint32_t lo = e4m3x2_bits_device(bits_float(raw.x) * r, bits_float(raw.y) * r);
    const uint32_t hi = e4m3x2_bits_device(bits_float(raw.z) * r, bits_float(raw.w) * r);
    codes[0] = zero_nan_codes(lo | (hi << 16));
  } else {
    const float2 a = scaled_pair<T>(raw.x, r), b = scaled_pair<T>(raw.y, r);
    const float2 c = scaled_pair<T>(raw.z, r), d = scaled_pair<T>(raw.w, r);
    codes[0] = zero_nan_codes(e4m3x2_bits_device(a.x, a.y) | (e4m3x2_bits_device(b.x, b.y) << 16));
    codes[1] = zero_nan_codes(e4m3x2_bits_device(c.x, c.y) | (e4m3x2_bits_device(d.x, d.y) << 16));
  }
}

// The 2-D work grid: blockDim.x threads walk 16-byte chunks of a row (whole groups, since
// blockDim.x is a multiple of kLanes), blockDim.y rows are in flight per block, and the grid
// strides over rows kUnroll at a time. Column-side offsets are computed once per thread; a row
// costs a few integer operations, with no division unless G > 1.
// Bytes of x per thread and row: two 16-byte loads.
constexpr int kThreadBytes = 32;

// The 2-D work grid: blockDim.x threads walk 32-byte chunks of a row (whole groups, since
// blockDim.x is a multiple of kLanes), blockDim.y rows are in flight per block, and the grid
// strides over rows kUnroll at a time. Column-side offsets are computed once per thread; a row
// costs a few integer operations, with no division unless G > 1.
template <typename T, int kGroupSize, bool kVec16, int kUnroll>
__global__ void __launch_bounds__(kGroupQuantThreads, 3)
    group_quant_kernel(const GroupQuantParams p, const FastDivmod div_g, const uint32_t rows, const bool gather_words) {
  constexpr int kVec = kThreadBytes / sizeof(T);  // elements per thread and row
  constexpr int kHalf = kVec / 2;                 // elements per 16-byte load
  constexpr int kLanes = kGroupSize / kVec;
  static_assert(kLanes >= 1 && kLanes <= 32 && (32 % kLanes) == 0, "a group must tile a warp");

  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool col_valid = chunk * kVec < p.D;
  const uint32_t lane = threadIdx.x % kLanes;
  const int32_t s = static_cast<int32_t>(chunk / kLanes);
  const int64_t col = chunk * kVec;  // element column, in x and in q
  const int64_t scale_col = (p.packed ? s >> 2 : s) * p.s_stride_s;
  const uint32_t row_step = gridDim.y * blockDim.y;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  wait_for_prior_grid();
  allow_next_grid();

  // NOTES: the loop bound is the block's first row, the same for every lane of a warp, so all
  // lanes make the same trips and the full-warp shuffles stay converged.
  for (uint32_t base = blockIdx.y * blockDim.y; base < rows; base += row_step * kUnroll) {
    uint4 raw[kUnroll][2];
    uint32_t r[kUnroll], t[kUnroll], g[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      r[u] = base + threadIdx.y + u * row_step;
      t[u] = div_g.div(r[u]);
      g[u] = r[u] - t[u] * div_g.divisor;
      const bool data = col_valid && r[u] < rows && t[u] < p.T;
      const T* src = x + t[u] * p.x_stride_t + g[u] * p.x_stride_g + col;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (kVec16) {
          raw[u][h] = data ? *reinterpret_cast<const uint4*>(src + h * kHalf) : make_uint4(0, 0, 0, 0);
        } else {
          union {
            uint4 u4;
            T e[kHalf];
          } pack;
#pragma unroll
          for (int i = 0; i < kHalf; ++i) pack.e[i] = data ? src[h * kHalf + i] : T{};
          raw[u][h] = pack.u4;
        }
      }
    }
    float scale[kUnroll];
    uint32_t packed_word[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float amax = fmaxf(thread_amax<T>(raw[u][0]), thread_amax<T>(raw[u][1]));
#pragma unroll
      for (int o = kLanes / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
      scale[u] = group_scale(amax, p.eps, p.ue8m0);
      // NOTES: packed scales: the first lane of every fourth group gathers the exponent bytes of
      // its word's four groups (lanes kLanes apart) and stores the word whole, rather than four
      // byte stores from four groups. Groups past S and rows past T contribute 0.
      packed_word[u] = 0;
      if (gather_words) {
        uint32_t e = col_valid && r[u] < rows && t[u] < p.T ? ue8m0_exponent(scale[u]) : 0u;
#pragma unroll
        for (int j = 1; j < 4; ++j) {
          const uint32_t ej = __shfl_down_sync(0xFFFFFFFFu, e, j * kLanes);
          e |= ((s & 3) == 0 && s + j < p.S ? ej : 0u) << (8 * j);
        }
        packed_word[u] = e;
      }
    }

#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (!col_valid || r[u] >= rows) continue;
      const bool data = t[u] < p.T;
      // Rows below rows = T_q * G always exist in q: data rows, then zero padding rows.
      const float rcp = __frcp_rn(scale[u]);
      uint32_t codes[2][sizeof(T) == 4 ? 1 : 2];
      quantize16<T>(raw[u][0], rcp, codes[0]);
      quantize16<T>(raw[u][1], rcp, codes[1]);
      uint8_t* dst = p.q + static_cast<int64_t>(r[u]) * p.D + col;
      if constexpr (sizeof(T) == 4) {
        *reinterpret_cast<uint2*>(dst) = make_uint2(codes[0][0], codes[1][0]);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(codes[0][0], codes[0][1], codes[1][0], codes[1][1]);
      }
      if (lane != 0) continue;
      const int64_t row_word = t[u] * p.s_stride_t + g[u] * p.s_stride_g;
      if (!p.packed) {
        static_cast<float*>(p.scale)[row_word + scale_col] = data ? scale[u] : 0.0f;
      } else if (gather_words) {
        if ((s & 3) == 0) static_cast<int32_t*>(p.scale)[row_word + scale_col] = static_cast<int32_t>(packed_word[u]);
      } else {
        uint8_t* bytes = reinterpret_cast<uint8_t*>(static_cast<int32_t*>(p.scale) + row_word + scale_col);
        bytes[s & 3] = data ? static_cast<uint8_t>(ue8m0_exponent(scale[u])) : 0;
        // NOTES: the last group also zeroes the unused bytes of its word (groups >= S).
        if (s == p.S - 1) {
          for (int j = (s & 3) + 1; j < 4; ++j) bytes[j] = 0;
        }
      }
      // NOTES: scale rows past q's rows (TMA alignment, at most 3) get no work items of their own:
      // the last q row zeroes them, so that M = 1 costs 1 row of threads and not 4.
      if (t[u] == p.T_q - 1) {
        for (int64_t tp = p.T_q; tp < p.T_s; ++tp) {
          const int64_t pad_word = tp * p.s_stride_t + g[u] * p.s_stride_g + scale_col;
          if (!p.packed) {
            static_cast<float*>(p.scale)[pad_word] = 0.0f;
          } else if ((s & 3) == 0) {
            static_cast<int32_t*>(p.scale)[pad_word] = 0;
          }
        }
      }
    }
  }
}

// Block shape and unroll for the 2-D grid: blockDim.x the largest power of two (<= 256) that
// divides the row's chunk count, so no lane idles, unless that is under a warp; blockDim.y fills
// the block up to 256 threads but not past the row count. Four rows per thread once the grid
// would span several full waves, so that large inputs keep 128 bytes in flight per thread.
template <typename T, int kGroupSize, bool kVec16>
cudaError_t launch_group_quant_impl(const GroupQuantParams& p, uint32_t rows, int sm_count, cudaStream_t stream) {
  constexpr int kVec = kThreadBytes / sizeof(T);
  constexpr uint32_t kLanes = kGroupSize / kVec;
  const uint32_t chunks = static_cast<uint32_t>(p.D / kVec);
  uint32_t bx = 1;
  while (bx < 256 && chunks % (2 * bx) == 0) bx *= 2;
  if (bx < 32) {
    bx = 1;
    while (bx < 256 && bx < chunks) bx *= 2;
  }
  uint32_t by = 1;
  while (bx * by < kGroupQuantThreads && by < rows) by *= 2;
  const uint32_t grid_x = (chunks + bx - 1) / bx;
  const uint32_t row_blocks = (rows + by - 1) / by;
  const uint32_t wave = static_cast<uint32_t>(sm_count) * 6;
  const bool unroll = static_cast<uint64_t>(grid_x) * row_blocks >= 4ull * wave;
  const uint32_t grid_y = std::min<uint32_t>(unroll ? (row_blocks + 3) / 4 : row_blocks, 65535u);
  // A packed word's four groups sit in one warp and one row when the row tile holds whole words.
  const bool gather_words = p.packed && 4 * kLanes <= 32 && bx % (4 * kLanes) == 0;
  const FastDivmod div_g(static_cast<uint32_t>(p.G));
  const dim3 grid(grid_x, grid_y), block(bx, by);
  return unroll ? launch_with_pdl(group_quant_kernel<T, kGroupSize, kVec16, 4>, grid, block, stream, p, div_g, rows,
                                  gather_words)
                : launch_with_pdl(group_quant_kernel<T, kGroupSize, kVec16, 1>, grid, block, stream, p, div_g, rows,
                                  gather_words);
}

// Launches the quantization of p on stream. Returns cudaErrorInvalidValue for an unsupported
// group size or a problem whose row count does not fit the 31-bit index.
template <typename T>
cudaError_t launch_group_quant(const GroupQuantParams& p, int sm_count, cudaStream_t stream) {
  const int64_t rows64 = p.T_q * p.G;  // q rows; the scale-only padding rows ride along
  if (rows64 == 0 || p.S == 0) return cudaSuccess;
  if (rows64 >= (int64_t(1) << 31)) return cudaErrorInvalidValue;
  const uint32_t rows = static_cast<uint32_t>(rows64);
  // 16-byte loads need a 16-byte aligned base and row strides; chunk offsets are multiples of
  // 16 bytes (32 bytes per thread, group sizes of at least 32 elements).
  const bool vec16 = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && (p.x_stride_t * int64_t(sizeof(T))) % 16 == 0 &&
                     (p.x_stride_g * int64_t(sizeof(T))) % 16 == 0;
#define FP8OPS_GROUP_CASE(GS)                                                      \
  case GS:                                                                         \
    return vec16 ? launch_group_quant_impl<T, GS, true>(p, rows, sm_count, stream) \
                 : launch_group_quant_impl<T, GS, false>(p, rows, sm_count, stream);
  switch (p.group_size) {
    FP8OPS_GROUP_CASE(32)
    FP8OPS_GROUP_CASE(64)
    FP8OPS_GROUP_CASE(128)
    default: return cudaErrorInvalidValue;
  }
#undef FP8OPS_GROUP_CASE
}

}  // namespace fp8ops
