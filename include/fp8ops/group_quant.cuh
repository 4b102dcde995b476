// Group quantization to e4m3 with the scales written straight into the consumer's layout.
//
// One launch writes q, the scales and every padding byte. Each group of kGroupSize elements is
// handled by kLanes = kGroupSize / kVec consecutive threads, each loading 32 bytes (kVec elements)
// and reducing the group's amax with shuffles inside those lanes. On large inputs a thread works
// on kUnroll units (rows, or groups of one row) at a time, all loads issued before the first
// reduction, to keep enough bytes in flight; where the layout allows, the units' scales are
// consecutive words and one vector store writes them (UnitMap).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "fp8ops/fast_divmod.cuh"
#include "fp8ops/group_quant.h"
#include "fp8ops/group_quant_launch.h"
#include "fp8ops/launch.cuh"
#include "fp8ops/numerics.h"

namespace fp8ops {

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

// e4m3 codes of one thread's 16 bytes of x, little-endian in 32-bit words; NaN codes to 0 unless
// the caller knows that no element is a NaN (maybe_nan false).
template <typename T>
__device__ __forceinline__ void quantize16(const uint4 raw, const float r, uint32_t (&codes)[sizeof(T) == 4 ? 1 : 2],
                                           const bool maybe_nan = true) {
  if constexpr (sizeof(T) == 4) {
    const uint32_t lo = e4m3x2_bits_device(bits_float(raw.x) * r, bits_float(raw.y) * r);
    const uint32_t hi = e4m3x2_bits_device(bits_float(raw.z) * r, bits_float(raw.w) * r);
    codes[0] = zero_nan_codes(lo | (hi << 16));
  } else {
    const float2 a = scaled_pair<T>(raw.x, r), b = scaled_pair<T>(raw.y, r);
    const float2 c = scaled_pair<T>(raw.z, r), d = scaled_pair<T>(raw.w, r);
    codes[0] = e4m3x2_bits_device(a.x, a.y) | (e4m3x2_bits_device(b.x, b.y) << 16);
    codes[1] = e4m3x2_bits_device(c.x, c.y) | (e4m3x2_bits_device(d.x, d.y) << 16);
    if (maybe_nan) codes[0] = zero_nan_codes(codes[0]), codes[1] = zero_nan_codes(codes[1]);
  }
}

// The largest magnitude of a thread's 16 elements of a 16-bit T, as T's bits, and whether it is an
// inf or a NaN: only then are the finite filter and the zeroing of NaN codes needed.
template <typename T>
__device__ __forceinline__ uint32_t magnitude_bits16(const uint4 (&raw)[2], bool& nonfinite) {
  const uint32_t m = max_halves(__vmaxu2(magnitude_pairs_16x8(raw[0]), magnitude_pairs_16x8(raw[1])));
  nonfinite = m >= kInfBits<T>;
  return m;
}

struct RowMap {
  uint32_t t, g;
};

// The 2-D work grid: blockDim.x threads walk 32-byte chunks of a row (whole groups, since
// blockDim.x is a multiple of kLanes; with kGroups a chunk is one per group of a pair), blockDim.y
// row slots are in flight per block, and the grid strides over rows. Column-side offsets are
// computed once per thread; a row costs a few integer operations and one multiply-shift division
// (by G, or by T_s with kMnRows). Blocks below prefetch_blocks (in launch order) prefetch their
// first lines before waiting for the previous grid (prefetch_l2). kStream: x's 16-byte loads are
// marked evict-first (group_quant_stream).
// NOTES: pairs of groups (kGroups) are capped at 48 registers, five resident blocks of 256
// threads like the MN-major pairs of rows, with no spills; at 56 registers (four blocks) the row
// layout ran slower than the MN-major layouts on large inputs (docs/DESIGN.md).
template <typename T, int kGroupSize, bool kVec16, bool kStream, int kUnroll, UnitMap kMap>
__global__ void __launch_bounds__(kUnroll == 1 ? kGroupQuantOneWaveThreads : kGroupQuantThreads,
                                  kUnroll == 1               ? 2
                                  : kMap == UnitMap::kGroups ? 5
                                                             : 3)
    group_quant_kernel(const GroupQuantParams p, const FastDivmod div_rows, const uint32_t rows,
                       const bool gather_words, const uint32_t prefetch_blocks) {
  constexpr int kVec = kThreadBytes / sizeof(T);  // elements per thread and row
  constexpr int kHalf = kVec / 2;                 // elements per 16-byte load
  constexpr int kLanes = kGroupSize / kVec;
  constexpr bool kMnVec = kMap == UnitMap::kMnRows;
  constexpr bool kSVec = kMap == UnitMap::kGroups;
  constexpr int kRowsPerUnit = kSVec ? 0 : 1;  // how far apart units are in rows (0: same row)
  static_assert(kLanes >= 1 && kLanes <= 32 && (32 % kLanes) == 0, "a group must tile a warp");
  static_assert(!kMnVec || kUnroll == 2 || kUnroll == 4, "vector scale stores need 2 or 4 rows");
  static_assert(!kSVec || kUnroll == 2, "pairs of groups");
  static_assert(kVec16 || !kStream, "evict-first loads are 16-byte loads");

  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint32_t lane = threadIdx.x % kLanes;
  // Scale group of each column of the thread (one, or kGroups' two), its element column (in x
  // and in q) and its scale word column.
  constexpr int kCols = kSVec ? kUnroll : 1;
  int32_t s[kCols];
  int64_t col[kCols], scale_col[kCols];
  bool col_valid[kCols];
#pragma unroll
  for (int u = 0; u < kCols; ++u) {
    // NOTES: the two forms are the same arithmetic; each kept where it measured fewer registers.
    if constexpr (kSVec) {
      s[u] = static_cast<int32_t>(chunk / kLanes) * 2 + u;
      col[u] = static_cast<int64_t>(s[u]) * kGroupSize + lane * kVec;
      col_valid[u] = s[u] < p.S;
    } else {
      s[u] = static_cast<int32_t>(chunk / kLanes);
      col[u] = chunk * kVec;
      col_valid[u] = col[u] < p.D;
    }
    scale_col[u] = (p.packed ? s[u] >> 2 : s[u]) * p.s_stride_s;
  }
  const uint32_t slot_step = gridDim.y * blockDim.y;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  bool waited = false;

  // TMA padding rows of the scales outside kMnRows (T_q <= t < T_s, at most 3 per g): pad row
  // r = (t - T_q) * G + g goes to slot r % slot_step and there to lane (r / slot_step) % kLanes
  // of each group, so that a slot's few pad rows are one store per lane. Issued once, after the
  // thread's first loads (or at the end when it has no rows), so that no load waits for them.
  bool pad_pending = !kMnVec && p.T_s > p.T_q;
  auto zero_pad_rows = [&] {
    pad_pending = false;
    const uint32_t pad_rows = static_cast<uint32_t>((p.T_s - p.T_q) * p.G);
    for (uint32_t r = blockIdx.y * blockDim.y + threadIdx.y + lane * slot_step; r < pad_rows; r += kLanes * slot_step) {
      const uint32_t k = div_rows.div(r);
      const int64_t row_word = (p.T_q + k) * p.s_stride_t + (r - k * div_rows.divisor) * p.s_stride_g;
#pragma unroll
      for (int u = 0; u < kCols; ++u) {
        if (!col_valid[u]) continue;
        if (!p.packed) {
          static_cast<float*>(p.scale)[row_word + scale_col[u]] = 0.0f;
        } else if ((s[u] & 3) == 0) {
          static_cast<int32_t*>(p.scale)[row_word + scale_col[u]] = 0;
        }
      }
    }
  };

  // NOTES: the loop bound is the block's first slot, the same for every lane of a warp, so all
  // lanes make the same trips and the full-warp shuffles stay converged.
  // A slot is one row (kRowsApart: a thread's rows are slot_step apart; kGroups: one row) or
  // kUnroll consecutive rows (kMnRows); a block's rows advance by slot_step times the rows a
  // thread has.
  constexpr int kThreadRows = kSVec ? 1 : kUnroll;
  for (uint32_t base = blockIdx.y * blockDim.y * (kMnVec ? kUnroll : 1); base < rows; base += slot_step * kThreadRows) {
    uint4 raw[kUnroll][2];
    RowMap rm[kUnroll];
    bool live[kUnroll];  // the row exists in the work grid
    bool data[kUnroll];  // the row holds x data (t < T) and the unit's group exists
    if constexpr (kMnVec) {
      const uint32_t r0 = base + threadIdx.y * kUnroll;
      const uint32_t g0 = div_rows.div(r0);
      const uint32_t t0 = r0 - g0 * div_rows.divisor;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) rm[u] = {t0 + u, g0};
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) live[u] = r0 < rows;
    } else {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t r = base + threadIdx.y + u * kRowsPerUnit * slot_step;
        const uint32_t t = div_rows.div(r);
        rm[u] = {t, r - t * div_rows.divisor};
        live[u] = r < rows;
      }
    }
    const T* srcs[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int cu = kSVec ? u : 0;  // the unit's column
      data[u] = col_valid[cu] && live[u] && rm[u].t < p.T;
      srcs[u] = x + rm[u].t * p.x_stride_t + rm[u].g * p.x_stride_g + col[cu];
    }
    if (!waited) {
      // The first units' lines, requested before the wait by the blocks of the first wave (those
      // that can start while the previous grid is finishing), one prefetch per line: the thread
      // whose 32 bytes start it. Later blocks would only add requests for lines they load at once.
      if (blockIdx.y * gridDim.x + blockIdx.x < prefetch_blocks) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (data[u] && (reinterpret_cast<uintptr_t>(srcs[u]) & 127) < kThreadBytes) prefetch_l2(srcs[u]);
        }
      }
      wait_for_prior_grid();
      allow_next_grid();
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const T* src = srcs[u];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (kVec16) {
          const uint4* v = reinterpret_cast<const uint4*>(src + h * kHalf);
          raw[u][h] = !data[u] ? make_uint4(0, 0, 0, 0) : kStream ? __ldcs(v) : *v;
        } else {
          union {
            uint4 u4;
            T e[kHalf];
          } pack;
#pragma unroll
          for (int i = 0; i < kHalf; ++i) pack.e[i] = data[u] ? src[h * kHalf + i] : T{};
          raw[u][h] = pack.u4;
        }
      }
    }
    if (!kMnVec && pad_pending) zero_pad_rows();
    float scale[kUnroll];
    uint32_t packed_word[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float amax = fmaxf(thread_amax<T>(raw[u][0]), thread_amax<T>(raw[u][1]));
#pragma unroll
      for (int o = kLanes / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
      scale[u] = group_scale(amax, p.eps, p.ue8m0);
      // NOTES: packed scales with MN-major vector stores: the first lane of every fourth group
      // gathers the exponent bytes of its word's four groups (lanes kLanes apart) and stores the
      // word whole. Groups past S and rows past T give 0.
      packed_word[u] = 0;
      if (gather_words) {
        const int cu = kSVec ? u : 0;
        uint32_t e = data[u] ? ue8m0_exponent_of_power(scale[u]) : 0u;
#pragma unroll
        for (int j = 1; j < 4; ++j) {
          const uint32_t ej = __shfl_down_sync(0xFFFFFFFFu, e, j * kLanes);
          e |= ((s[cu] & 3) == 0 && s[cu] + j < p.S ? ej : 0u) << (8 * j);
        }
        packed_word[u] = e;
      }
    }

#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int cu = kSVec ? u : 0;
      // Rows below T_q always exist in q: data rows, then zero padding rows.
      if (!col_valid[cu] || !live[u] || (kMnVec && rm[u].t >= p.T_q)) continue;
      // The one-wave kernel (small grids, bound by latency) takes the reciprocal with no branch.
      // The unrolled kernels (large grids, bound by memory) keep __frcp_rn's fast path and its
      // branch to a slow path never taken: without it their stores were scheduled otherwise and
      // ran slower. A UE8M0 scale is a power of two: its reciprocal is an exponent subtraction.
      const float rcp = kUnroll == 1 ? group_reciprocal(scale[u], p.ue8m0)
                        : p.ue8m0    ? ue8m0_reciprocal(scale[u])
                                     : __frcp_rn(scale[u]);
      uint32_t codes[2][sizeof(T) == 4 ? 1 : 2];
      quantize16<T>(raw[u][0], rcp, codes[0]);
      quantize16<T>(raw[u][1], rcp, codes[1]);
      uint8_t* dst = p.q + (static_cast<int64_t>(rm[u].t) * p.G + rm[u].g) * p.D + col[cu];
      if constexpr (sizeof(T) == 4) {
        *reinterpret_cast<uint2*>(dst) = make_uint2(codes[0][0], codes[1][0]);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(codes[0][0], codes[0][1], codes[1][0], codes[1][1]);
      }
    }

    if (lane != 0 || !col_valid[0]) continue;
    if constexpr (kMnVec) {
      // kUnroll consecutive scale words of one (g, s), written by one vector store.
      if (!live[0] || (p.packed && (s[0] & 3) != 0)) continue;
      uint32_t w[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) w[u] = p.packed ? packed_word[u] : (data[u] ? float_bits(scale[u]) : 0u);
      uint32_t* dst = static_cast<uint32_t*>(p.scale) + rm[0].g * p.s_stride_g + rm[0].t + scale_col[0];
      if constexpr (kUnroll == 4) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
      } else {
        *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
      }
    } else if constexpr (kSVec) {
      // The scales of groups s and s + 1 of one row (fp32): one 8-byte store when they are
      // consecutive (the launcher checked the alignment), else one word each; one word when s is
      // the row's last group.
      if (!live[0]) continue;
      float* dst = static_cast<float*>(p.scale) + rm[0].t * p.s_stride_t + rm[0].g * p.s_stride_g;
      const float w0 = data[0] ? scale[0] : 0.0f, w1 = data[1] ? scale[1] : 0.0f;
      if (p.s_stride_s == 1 && col_valid[1]) {
        *reinterpret_cast<float2*>(dst + scale_col[0]) = make_float2(w0, w1);
      } else {
        dst[scale_col[0]] = w0;
        if (col_valid[1]) dst[scale_col[1]] = w1;
      }
    } else {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (!live[u]) continue;
        const int64_t word = rm[u].t * p.s_stride_t + rm[u].g * p.s_stride_g + scale_col[0];
        if (!p.packed) {
          static_cast<float*>(p.scale)[word] = data[u] ? scale[u] : 0.0f;
        } else if (gather_words) {
          if ((s[0] & 3) == 0) static_cast<int32_t*>(p.scale)[word] = static_cast<int32_t>(packed_word[u]);
        } else {
          // NOTES: the four groups of a word store their own bytes (lanes of one warp when the row
          // tile holds whole words, so one request); the last group also zeroes the word's unused
          // bytes (groups >= S).
          uint8_t* bytes = reinterpret_cast<uint8_t*>(static_cast<int32_t*>(p.scale) + word);
          bytes[s[0] & 3] = data[u] ? static_cast<uint8_t>(ue8m0_exponent_of_power(scale[u])) : 0;
          if (s[0] == p.S - 1) {
            for (int j = (s[0] & 3) + 1; j < 4; ++j) bytes[j] = 0;
          }
        }
      }
    }
  }
  if (!waited) {
    wait_for_prior_grid();
    allow_next_grid();
  }
  if (!kMnVec && pad_pending) zero_pad_rows();
}

// Per-token rows of group_quant_row_blocks (group_quant_launch.h): 16-bit x, groups of 128, rows
// of whole warps of 32-byte chunks. Row-major fp32 scales (kRowMajor): a block per row, thread c
// holding elements [16 c, 16 c + 16). MN-major scales: a block per 8 rows and an eighth of their
// chunks, so that the scales of 8 consecutive rows (a 32-byte sector) come from one block, or
// from two with packed scales; a sector written piecemeal by 8 blocks was slower. fp32 (kMn): a
// warp per 4 rows of one group, S / 8 groups a block. Packed UE8M0 (kMnPacked): a warp per row
// and word (its four groups), the 8 * S / 4 (row, word) units of 8 rows taken word by word, S / 4
// of them a block; two shuffles gather a word's bytes for lane 0 to store. The only work after
// the wait for the previous grid is the row's own: a thread's indices, no row loop, and the
// finite filter and the zeroing of NaN codes only in a warp that holds an inf or a NaN.
enum class RowScales { kRowMajor, kMn, kMnPacked };

template <typename T, RowScales kScales>
__global__ void __launch_bounds__(kGroupQuantOneWaveThreads, 2) group_quant_row_kernel(const GroupQuantParams p) {
  static_assert(sizeof(T) == 2, "16-bit x");
  constexpr int kVec = kThreadBytes / sizeof(T), kHalf = kVec / 2, kLanes = 128 / kVec;
  const uint32_t w = threadIdx.x >> 5, l = threadIdx.x & 31u;
  uint32_t c, s;
  int64_t t;
  if constexpr (kScales == RowScales::kMn) {
    s = (blockIdx.x & 7u) * (blockDim.x >> 6) + (w >> 1);
    t = static_cast<int64_t>(blockIdx.x >> 3) * 8 + (w & 1u) * 4 + l / kLanes;
    c = s * kLanes + (l % kLanes);
  } else if constexpr (kScales == RowScales::kMnPacked) {
    const uint32_t u = (blockIdx.x & 7u) * (blockDim.x >> 5) + w;  // (row, word) unit of the 8 rows
    s = (u >> 3) * 4 + l / kLanes;
    t = static_cast<int64_t>(blockIdx.x >> 3) * 8 + (u & 7u);
    c = s * kLanes + (l % kLanes);
  } else {
    c = threadIdx.x;
    s = c / kLanes;
    t = blockIdx.x;
  }
  const bool data = t < p.T;
  const T* src = static_cast<const T*>(p.x) + t * p.x_stride_t + c * kVec;
  if (data && (reinterpret_cast<uintptr_t>(src) & 127) < kThreadBytes) prefetch_l2(src);
  wait_for_prior_grid();
  allow_next_grid();
  uint4 raw[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
  if (data) {
    raw[0] = *reinterpret_cast<const uint4*>(src);
    raw[1] = *reinterpret_cast<const uint4*>(src + kHalf);
  }
  bool nf;
  const uint32_t m = magnitude_bits16<T>(raw, nf);
  const bool any_nf = __any_sync(0xFFFFFFFFu, nf);
  float amax;
  if (any_nf) {
    amax = fmaxf(thread_amax<T>(raw[0]), thread_amax<T>(raw[1]));
  } else {
    amax = magnitude_bits_float<T>(m);
  }
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const float scale = group_scale(amax, p.eps, p.ue8m0);
  const float rcp = group_reciprocal(scale, p.ue8m0);
  uint32_t codes[2][2];
  quantize16<T>(raw[0], rcp, codes[0], any_nf);
  quantize16<T>(raw[1], rcp, codes[1], any_nf);
  if (t < p.T_q) {
    *reinterpret_cast<uint4*>(p.q + t * p.D + c * kVec) =
        make_uint4(codes[0][0], codes[0][1], codes[1][0], codes[1][1]);
  }
  if constexpr (kScales == RowScales::kMnPacked) {
    uint32_t word = (data ? ue8m0_exponent_of_power(scale) : 0u) << (8 * (l / kLanes));
    word |= __shfl_xor_sync(0xFFFFFFFFu, word, kLanes);
    word |= __shfl_xor_sync(0xFFFFFFFFu, word, 2 * kLanes);
    if (l == 0 && t < p.T_s) static_cast<uint32_t*>(p.scale)[t * p.s_stride_t + (s >> 2) * p.s_stride_s] = word;
  } else if (c % kLanes == 0 && (kScales == RowScales::kRowMajor || t < p.T_s)) {  // rows of the last 8 past T_s: none
    static_cast<float*>(p.scale)[t * p.s_stride_t + s * p.s_stride_s] = data ? scale : 0.0f;
  }
}

// Launches kKernel with the shape c; the blocks of its first wave (those that can start while the
// previous grid is finishing) prefetch their first lines.
template <auto kKernel>
cudaError_t launch_group_quant_grid(const GroupQuantLaunch& c, const GroupQuantParams& p, int sm_count,
                                    cudaStream_t stream, bool pdl) {
  const dim3 block(c.block_x, c.block_y);
  const uint32_t first_wave = first_wave_blocks<kKernel>(block.x * block.y, sm_count);
  return launch_kernel(kKernel, dim3(c.grid_x, c.grid_y), block, stream, pdl, p, FastDivmod(c.row_divisor), c.rows,
                       c.gather_words, first_wave);
}

template <typename T, int kGroupSize, bool kVec16, bool kStream>
cudaError_t launch_group_quant_shape(const GroupQuantLaunch& c, const GroupQuantParams& p, int sm_count,
                                     cudaStream_t stream, bool pdl) {
  if (c.unroll == 1)
    return launch_group_quant_grid<group_quant_kernel<T, kGroupSize, kVec16, kStream, 1, UnitMap::kRowsApart>>(
        c, p, sm_count, stream, pdl);
  if (c.map == UnitMap::kMnRows)
    return launch_group_quant_grid<group_quant_kernel<T, kGroupSize, kVec16, kStream, 2, UnitMap::kMnRows>>(
        c, p, sm_count, stream, pdl);
  if (c.map == UnitMap::kGroups)
    return launch_group_quant_grid<group_quant_kernel<T, kGroupSize, kVec16, kStream, 2, UnitMap::kGroups>>(
        c, p, sm_count, stream, pdl);
  return launch_group_quant_grid<group_quant_kernel<T, kGroupSize, kVec16, kStream, 4, UnitMap::kRowsApart>>(
      c, p, sm_count, stream, pdl);
}

// Launches the quantization of p on stream (with PDL when pdl is set), on a device of sm_count
// multiprocessors and l2_bytes of L2. Returns cudaErrorInvalidValue for an unsupported group size
// or a problem whose row count does not fit the 31-bit index.
template <typename T>
cudaError_t launch_group_quant(const GroupQuantParams& p, int sm_count, int64_t l2_bytes, cudaStream_t stream,
                               bool pdl) {
  if (p.T_q * p.G == 0 || p.S == 0) return cudaSuccess;
  // Rows (of q, or of the padded scales) index with 31 bits.
  if (p.T_s * p.G >= (int64_t(1) << 31) || p.T_q * p.G >= (int64_t(1) << 31)) return cudaErrorInvalidValue;
  const GroupQuantLaunch c = group_quant_launch(p, sizeof(T), sm_count, l2_bytes);
  if constexpr (sizeof(T) == 2) {
    if (c.row_blocks) {
      const dim3 grid(c.grid_x), block(c.block_x);
      if (c.map == UnitMap::kRowsApart)
        return launch_kernel(group_quant_row_kernel<T, RowScales::kRowMajor>, grid, block, stream, pdl, p);
      return p.packed ? launch_kernel(group_quant_row_kernel<T, RowScales::kMnPacked>, grid, block, stream, pdl, p)
                      : launch_kernel(group_quant_row_kernel<T, RowScales::kMn>, grid, block, stream, pdl, p);
    }
  }
#define FP8OPS_GROUP_CASE(GS)                                                                        \
  case GS:                                                                                           \
    if (!c.vec16) return launch_group_quant_shape<T, GS, false, false>(c, p, sm_count, stream, pdl); \
    return c.stream ? launch_group_quant_shape<T, GS, true, true>(c, p, sm_count, stream, pdl)       \
                    : launch_group_quant_shape<T, GS, true, false>(c, p, sm_count, stream, pdl);
  switch (p.group_size) {
    FP8OPS_GROUP_CASE(32)
    FP8OPS_GROUP_CASE(64)
    FP8OPS_GROUP_CASE(128)
    default: return cudaErrorInvalidValue;
  }
#undef FP8OPS_GROUP_CASE
}

}  // namespace fp8ops
