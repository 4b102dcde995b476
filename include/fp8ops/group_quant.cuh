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

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
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

// L2 prefetch of the line holding ptr: a hint that changes no value any load returns (the L2 is
// the device memory's point of coherence, and a prefetch is not a read), so it may run before
// wait_for_prior_grid. A kernel's blocks that become resident while the previous grid is still
// finishing request their first lines then, and their loads after the wait find them in L2
// (docs/PERF.md, sweep 28). The ptr must lie in an allocation.
__device__ __forceinline__ void prefetch_l2(const void* ptr) { asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr)); }

#if defined(FP8OPS_TUNING)
constexpr bool kTuningBuild = true;
// Benchmarking builds only: the integer value of the environment variable name, or dflt when it
// is not set (the FP8OPS_TUNE_* variables that force launch shapes).
inline int tune_env(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : dflt;
}
#else
constexpr bool kTuningBuild = false;
#endif

// Launches kernel with programmatic stream serialization allowed (see wait_for_prior_grid).
// Benchmarking builds (FP8OPS_TUNING) launch without it when FP8OPS_TUNE_PDL=0, and issue no
// early prefetches (prefetch_l2) when FP8OPS_TUNE_PREFETCH=0 (prefetch_ahead).
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
#if defined(FP8OPS_TUNING)
  static const bool pdl = tune_env("FP8OPS_TUNE_PDL", 1) != 0;
  config.numAttrs = pdl ? 1 : 0;
#endif
  return cudaLaunchKernelEx(&config, kernel, args...);
}

// Whether kernels prefetch their first lines before waiting for the previous grid.
inline bool prefetch_ahead() {
#if defined(FP8OPS_TUNING)
  static const bool on = tune_env("FP8OPS_TUNE_PREFETCH", 1) != 0;
  return on;
#else
  return true;
#endif
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

// Bytes of x per thread and row: two 16-byte loads.
constexpr int kThreadBytes = 32;

// One 16-byte load of x. With kStream, a non-coherent load that skips L1 (x is read once and is
// not written while the kernel runs); benchmarking builds only, as it measured slower on the H200.
template <bool kStream>
__device__ __forceinline__ uint4 load16(const void* ptr) {
  if constexpr (kStream) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
    return v;
  } else {
    return *reinterpret_cast<const uint4*>(ptr);
  }
}

// How a thread's kUnroll units (rows, or groups of one row) map to the work grid (t, g, s):
//  - kRowsApart: row r = t * G + g over the T_q * G rows of q; a thread's units are rows
//    slot_step apart, of one scale group.
//  - kMnRows (scales MN-major: s_stride_t == 1, and 4-word aligned strides): row r = g * T_s + t
//    over the G * T_s rows of the scale tensor; a thread's units are consecutive t of one g, so
//    their scales are kUnroll consecutive words that one vector store writes. Rows t >= T_q
//    write scales only.
//  - kGroups (fp32 scales): rows as in kRowsApart, one per slot; a thread's two units are scale
//    groups 2i and 2i + 1 of that row. With s_stride_s == 1 (and 2-word aligned strides) their
//    scales are consecutive words that one 8-byte store writes; otherwise one word each.
// Outside kMnRows, scale rows past T_q (TMA padding) have no work item: the grid's slots zero
// them right after their first loads (zero_pad_rows in the kernel).
enum class UnitMap { kRowsApart, kMnRows, kGroups };

struct RowMap {
  uint32_t t, g;
};

// The 2-D work grid: blockDim.x threads walk 32-byte chunks of a row (whole groups, since
// blockDim.x is a multiple of kLanes; with kGroups a chunk is one per group of a pair), blockDim.y
// row slots are in flight per block, and the grid strides over rows. Column-side offsets are
// computed once per thread; a row costs a few integer operations and one multiply-shift division
// (by G, or by T_s with kMnRows). Blocks below prefetch_blocks (in launch order) prefetch their
// first lines before waiting for the previous grid (prefetch_l2).
// NOTES: pairs of groups (kGroups) are held to 48 registers, five resident blocks of 256 threads
// like the MN-major pairs of rows, with no spills; under the cap of three blocks they took 56
// registers, four blocks, and the row layout ran 2-3% slower than the MN-major layouts on large
// inputs (docs/PERF.md, sweep 30).
template <typename T, int kGroupSize, bool kVec16, int kUnroll, UnitMap kMap, bool kStream>
__global__ void __launch_bounds__(kGroupQuantThreads, kMap == UnitMap::kGroups ? 5 : 3)
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
          raw[u][h] = data[u] ? load16<kStream>(src + h * kHalf) : make_uint4(0, 0, 0, 0);
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
      // NOTES: a UE8M0 scale is a power of two, so its reciprocal is an exponent subtraction,
      // equal to __frcp_rn's; skipping __frcp_rn (and its branch to a slow path) measured 0.06-0.17
      // us faster per call at small M with packed scales (docs/PERF.md, run 16).
      const float rcp = p.ue8m0 ? ue8m0_reciprocal(scale[u]) : __frcp_rn(scale[u]);
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

// Launch configuration of the group quantization kernel. A switch at -1 (unroll at 0) lets the
// launcher choose; the others force it (benchmarking builds, through tuned_config).
struct GroupQuantConfig {
  int unroll = 0;                    // units per thread: 1, 2 or 4; 0 chooses by size
  int mn_vec = -1;                   // MN-major vector scale stores when the layout allows: 0, 1
  int group_vec = -1;                // pairs of groups per thread (kGroups) for fp32 scales: 0, 1 (2: any)
  int gather = -1;                   // packed words gathered by shuffles outside kMnRows: 0, 1
  int mn_small = -1;                 // one-row grids, per-token MN-major fp32 scales, rows along warps
  int stream = -1;                   // streaming loads: 0, 1
  int threads = kGroupQuantThreads;  // per block, at most kGroupQuantThreads
  int small_threads = 128;           // per block when the grid is small (one row per thread)
  int wave_blocks = 6;               // resident blocks per SM assumed when counting waves
  int unroll_waves = 4;              // waves from which rows are unrolled
};

#if defined(FP8OPS_TUNING)
// Benchmarking builds only: the configuration can be forced through the environment
// (FP8OPS_TUNE_UNROLL, FP8OPS_TUNE_MNVEC, FP8OPS_TUNE_GVEC, FP8OPS_TUNE_GATHER, FP8OPS_TUNE_MNSMALL,
// FP8OPS_TUNE_STREAM, FP8OPS_TUNE_WAVES, FP8OPS_TUNE_THREADS, FP8OPS_TUNE_SMALL_THREADS), read once.
inline GroupQuantConfig tuned_config() {
  static const GroupQuantConfig c = [] {
    GroupQuantConfig c;
    c.unroll = tune_env("FP8OPS_TUNE_UNROLL", c.unroll);
    c.mn_vec = tune_env("FP8OPS_TUNE_MNVEC", c.mn_vec);
    c.group_vec = tune_env("FP8OPS_TUNE_GVEC", c.group_vec);
    c.gather = tune_env("FP8OPS_TUNE_GATHER", c.gather);
    c.mn_small = tune_env("FP8OPS_TUNE_MNSMALL", c.mn_small);
    c.stream = tune_env("FP8OPS_TUNE_STREAM", c.stream);
    c.unroll_waves = tune_env("FP8OPS_TUNE_WAVES", c.unroll_waves);
    c.threads = std::min(tune_env("FP8OPS_TUNE_THREADS", c.threads), kGroupQuantThreads);
    c.small_threads = std::min(tune_env("FP8OPS_TUNE_SMALL_THREADS", c.small_threads), kGroupQuantThreads);
    return c;
  }();
  return c;
}
#else
inline GroupQuantConfig tuned_config() { return GroupQuantConfig{}; }
#endif

// Resident blocks per multiprocessor of kKernel at threads per block (a power of two), asked once
// per kernel and block size (the same on every device of the architecture the library runs on);
// 0 when the query failed, whose error is cleared so that no later check reports it.
template <auto kKernel>
int resident_blocks_per_sm(uint32_t threads) {
  static std::array<std::atomic<int>, 11> cache{};  // by log2(threads); 0: not asked yet
  std::atomic<int>& slot = cache[std::min(31 - __builtin_clz(threads | 1u), 10)];
  int n = slot.load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, static_cast<int>(threads), 0) != cudaSuccess) {
      (void)cudaGetLastError();
      n = -1;
    }
    slot.store(n, std::memory_order_relaxed);
  }
  return n > 0 ? n : 0;
}

// Launches a group quantization kernel; the blocks of its first wave prefetch their first lines.
template <auto kKernel>
cudaError_t launch_group_quant_grid(dim3 grid, dim3 block, int sm_count, cudaStream_t stream, const GroupQuantParams& p,
                                    const FastDivmod& div, uint32_t rows, bool gather_words) {
  const uint32_t first_wave =
      prefetch_ahead() ? static_cast<uint32_t>(resident_blocks_per_sm<kKernel>(block.x * block.y) * sm_count) : 0u;
  return launch_with_pdl(kKernel, grid, block, stream, p, div, rows, gather_words, first_wave);
}

template <typename T, int kGroupSize, bool kVec16, int kUnroll, UnitMap kMap>
cudaError_t launch_group_quant_kernel(bool stream_loads, dim3 grid, dim3 block, int sm_count, cudaStream_t stream,
                                      const GroupQuantParams& p, const FastDivmod& div, uint32_t rows,
                                      bool gather_words) {
  if constexpr (kTuningBuild) {
    if (stream_loads) {
      return launch_group_quant_grid<group_quant_kernel<T, kGroupSize, kVec16, kUnroll, kMap, true>>(
          grid, block, sm_count, stream, p, div, rows, gather_words);
    }
  }
  return launch_group_quant_grid<group_quant_kernel<T, kGroupSize, kVec16, kUnroll, kMap, false>>(
      grid, block, sm_count, stream, p, div, rows, gather_words);
}

// Block shape and unroll for the 2-D grid: blockDim.x the largest power of two (<= 256) that
// divides the row's chunk count, so no lane idles, unless that is under a warp; blockDim.y fills
// the block up to 256 threads but not past the row count. Several units per thread once the grid
// would span several full waves, so that large inputs keep more bytes in flight per thread.
template <typename T, int kGroupSize, bool kVec16>
cudaError_t launch_group_quant_impl(const GroupQuantParams& p, int sm_count, cudaStream_t stream) {
  constexpr int kVec = kThreadBytes / sizeof(T);
  constexpr uint32_t kLanes = kGroupSize / kVec;
  const GroupQuantConfig cfg = tuned_config();
  const uint32_t q_rows = static_cast<uint32_t>(p.T_q * p.G);
  uint32_t chunks = static_cast<uint32_t>(p.D / kVec);
  uint32_t bx = 1, by = 1;
  auto shape_block = [&](uint32_t threads) {
    bx = 1;
    while (bx < threads && chunks % (2 * bx) == 0) bx *= 2;
    if (bx < 32) {
      bx = 1;
      while (bx < threads && bx < chunks) bx *= 2;
    }
    by = 1;
    while (bx * by < threads && by < q_rows) by *= 2;
  };
  shape_block(static_cast<uint32_t>(cfg.threads));
  const uint32_t wave = static_cast<uint32_t>(sm_count) * cfg.wave_blocks;
  // NOTES: measured on the H200 (docs/PERF.md, launch-shape sweep): one row per thread, in blocks
  // of 128 threads, until the grid of 256-thread blocks spans several waves; then two units per
  // thread whose scales one vector store writes (2 rows with MN-major scales, 2 groups with
  // row-major fp32 scales), or 4 rows otherwise.
  const bool auto_unroll = cfg.unroll != 1 && cfg.unroll != 2 && cfg.unroll != 4;
  const uint64_t blocks = static_cast<uint64_t>((chunks + bx - 1) / bx) * ((q_rows + by - 1) / by);
  const bool small = blocks < static_cast<uint64_t>(cfg.unroll_waves) * wave;
  if (auto_unroll && small && cfg.small_threads > 0) {
    shape_block(static_cast<uint32_t>(cfg.small_threads));
    // NOTES: one row per thread with per-token MN-major fp32 scales (G == 1): a warp takes one
    // group of up to 32 / kLanes consecutive rows (more groups only when there are fewer rows), so
    // that the scale words its first lanes store are consecutive, one segment, instead of one
    // word in each of its groups' columns (sweep 15: M=64 K=7168 col_tma 1.59 us against 1.83).
    // Packed scales keep a warp across groups: their bytes then share one word (measured equal or
    // faster).
    if (p.s_stride_t == 1 && p.G == 1 && !p.packed && cfg.mn_small != 0 && q_rows > 1) {
      bx = kLanes;
      while (bx < 32 && bx * q_rows < 32) bx *= 2;
      by = 1;
      while (bx * by < static_cast<uint32_t>(cfg.small_threads) && by < q_rows) by *= 2;
    }
  }
  // A packed word's four groups sit in one warp and one row when the row tile holds whole words.
  const bool whole_words = p.packed && 4 * kLanes <= 32 && bx % (4 * kLanes) == 0;
  // Vector scale stores: MN-major scales whose rows come in whole vectors at aligned offsets, or
  // fp32 scales consecutive along s with 8-byte aligned rows.
  const bool mn_layout = p.s_stride_t == 1 && p.T_s % 4 == 0 && p.s_stride_s % 4 == 0 && p.s_stride_g % 4 == 0 &&
                         reinterpret_cast<uintptr_t>(p.scale) % 16 == 0 && (!p.packed || whole_words);
  const bool s_layout = !p.packed && p.s_stride_s == 1 && p.s_stride_t % 2 == 0 && p.s_stride_g % 2 == 0 &&
                        reinterpret_cast<uintptr_t>(p.scale) % 8 == 0;
  // NOTES: group-major fp32 scales (G > 1, MN-major) also take pairs of groups, with one word
  // store per group: a thread's two rows would be a token stride apart in x, and pairs of groups
  // measured 1-5% faster there (sweep 14). Per-token MN-major scales keep pairs of rows.
  // Benchmarking builds: FP8OPS_TUNE_GVEC=2 gives every MN-major fp32 layout pairs of groups.
  const bool s_mn = !p.packed && p.s_stride_s != 1 && (p.G > 1 || (kTuningBuild && cfg.group_vec == 2));
  const bool s_ok = (s_layout || s_mn) && cfg.group_vec != 0;
  const bool mn_ok = mn_layout && cfg.mn_vec != 0 && !(s_mn && s_ok);
  int unroll = !auto_unroll ? cfg.unroll : small ? 1 : mn_ok || s_ok ? 2 : 4;
  const bool mn_vec = unroll > 1 && mn_ok;
  const bool s_vec = unroll == 2 && !mn_vec && s_ok;
  // Shapes instantiated everywhere: 1 row; 2 rows with MN-major vector stores; 2 groups; 4 rows.
  // The others exist in benchmarking builds only.
  if (!kTuningBuild && unroll > 1) unroll = mn_vec || s_vec ? 2 : 4;
  // Outside kMnRows a packed word is gathered only when asked (benchmarking builds): its groups
  // store their bytes themselves, with no shuffles on the way to the store.
  const bool gather_words = whole_words && (mn_vec || cfg.gather == 1);
  if (s_vec) {
    // Chunks of the pairs of groups: kLanes per pair.
    chunks = static_cast<uint32_t>((p.S + 1) / 2) * kLanes;
    shape_block(static_cast<uint32_t>(cfg.threads));
  }
  const uint32_t grid_x = (chunks + bx - 1) / bx;
  const bool stream_loads = kTuningBuild && cfg.stream == 1;
  const uint32_t rows = mn_vec ? static_cast<uint32_t>(p.T_s * p.G) : q_rows;
  const uint32_t rows_per_block = by * (s_vec ? 1 : unroll);
  const uint32_t grid_y = std::min<uint32_t>((rows + rows_per_block - 1) / rows_per_block, 65535u);
  const FastDivmod div(static_cast<uint32_t>(mn_vec ? p.T_s : p.G));
  const dim3 grid(grid_x, grid_y), block(bx, by);
#define FP8OPS_LAUNCH(U, MAP)                                                                                       \
  launch_group_quant_kernel<T, kGroupSize, kVec16, U, UnitMap::MAP>(stream_loads, grid, block, sm_count, stream, p, \
                                                                    div, rows, gather_words)
  if (unroll == 1) return FP8OPS_LAUNCH(1, kRowsApart);
  if (mn_vec && unroll == 2) return FP8OPS_LAUNCH(2, kMnRows);
  if (s_vec) return FP8OPS_LAUNCH(2, kGroups);
  if constexpr (kTuningBuild) {
    if (mn_vec) return FP8OPS_LAUNCH(4, kMnRows);
    if (unroll == 2) return FP8OPS_LAUNCH(2, kRowsApart);
  }
  return FP8OPS_LAUNCH(4, kRowsApart);
#undef FP8OPS_LAUNCH
}

// Launches the quantization of p on stream. Returns cudaErrorInvalidValue for an unsupported
// group size or a problem whose row count does not fit the 31-bit index.
template <typename T>
cudaError_t launch_group_quant(const GroupQuantParams& p, int sm_count, cudaStream_t stream) {
  if (p.T_q * p.G == 0 || p.S == 0) return cudaSuccess;
  // Rows (of q, or of the padded scales) index with 31 bits.
  if (p.T_s * p.G >= (int64_t(1) << 31) || p.T_q * p.G >= (int64_t(1) << 31)) return cudaErrorInvalidValue;
  // 16-byte loads need a 16-byte aligned base and row strides; chunk offsets are multiples of
  // 16 bytes (32 bytes per thread, group sizes of at least 32 elements).
  const bool vec16 = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && (p.x_stride_t * int64_t(sizeof(T))) % 16 == 0 &&
                     (p.x_stride_g * int64_t(sizeof(T))) % 16 == 0;
#define FP8OPS_GROUP_CASE(GS)                                                \
  case GS:                                                                   \
    return vec16 ? launch_group_quant_impl<T, GS, true>(p, sm_count, stream) \
                 : launch_group_quant_impl<T, GS, false>(p, sm_count, stream);
  switch (p.group_size) {
    FP8OPS_GROUP_CASE(32)
    FP8OPS_GROUP_CASE(64)
    FP8OPS_GROUP_CASE(128)
    default: return cudaErrorInvalidValue;
  }
#undef FP8OPS_GROUP_CASE
}

}  // namespace fp8ops
