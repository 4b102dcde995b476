// CUDA kernels of silu_mul_quant: SiLU(gate) * up fused with the per-group quant, one pass over
// memory, flat or over DeepEP's masked [E, Mmax, 2H] buffer. Rows are shared out as
// silu_mul_quant_launch.h's silu_shape says; the arithmetic is numerics.h's, step for step, in the
// order the CPU reference follows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "fp8ops/fused_quant.cuh"
#include "fp8ops/launch.cuh"
#include "fp8ops/silu_mul_quant_launch.h"
#include "fp8ops/silu_table.h"

namespace fp8ops {

// Whether every value of a raw chunk has kSiluFastMin <= |g| <= kSiluFastMax (false for zeros,
// inf and NaN), from the bits: 16-bit magnitudes two at a time for bf16 and fp16.
template <typename T>
__device__ __forceinline__ bool silu_fast_range(const RawChunk<T>& r) {
  if constexpr (sizeof(T) == 4) {
    bool ok = true;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t w[4] = {r.w[i].x, r.w[i].y, r.w[i].z, r.w[i].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float a = fabsf(__uint_as_float(w[j]));
        ok = ok && a >= kSiluFastMin && a <= kSiluFastMax;
      }
    }
    return ok;
  } else {
    // The bounds as T's bits (kSiluFastMin is below fp16's range: any nonzero fp16 is above it).
    constexpr uint32_t kLo = std::is_same_v<T, __nv_bfloat16> ? 0x2180u : 0x0001u;
    constexpr uint32_t kHi = std::is_same_v<T, __nv_bfloat16> ? 0x4220u : 0x5100u;
    const uint32_t w[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
    uint32_t lo = 0xFFFFFFFFu, hi = 0u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t m = w[j] & 0x7FFF7FFFu;
      lo = __vminu2(lo, m);
      hi = __vmaxu2(hi, m);
    }
    return min(lo & 0xFFFFu, lo >> 16) >= kLo && max(hi & 0xFFFFu, hi >> 16) <= kHi;
  }
}

// s = silu(g) for a chunk: silu_fp32, or, kFast, silu_fp32_in_range (no branch, no select) for a
// chunk whose values are all in its range.
template <typename T, bool kFast>
__device__ __forceinline__ void silu_chunk(const RawChunk<T>& graw, float (&s)[kChunkElems]) {
  float g[kChunkElems];
  raw_to_floats<T>(graw, g);
#pragma unroll
  for (int i = 0; i < kChunkElems; ++i) s[i] = kFast ? silu_fp32_in_range(g[i]) : silu_fp32(g[i]);
}

// a = T(s * u) for a chunk of s already in T (bf16 or fp16): one packed multiply rounded to T.
// The product of two T values is exact in fp32, so rounding it once to T is what T(float(s) *
// float(u)) gives.
template <typename T>
__device__ __forceinline__ RawChunk<T> times_up_raw(const RawChunk<T>& sr, const RawChunk<T>& uraw) {
  static_assert(sizeof(T) == 2, "bf16 or fp16");
  const uint32_t sw[4] = {sr.w[0].x, sr.w[0].y, sr.w[0].z, sr.w[0].w};
  const uint32_t uw[4] = {uraw.w[0].x, uraw.w[0].y, uraw.w[0].z, uraw.w[0].w};
  uint32_t aw[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      aw[i] = bf162_bits(__hmul2_rn(bits_bf162(sw[i]), bits_bf162(uw[i])));
    } else {
      aw[i] = half2_bits(__hmul2_rn(bits_half2(sw[i]), bits_half2(uw[i])));
    }
  }
  RawChunk<T> r;
  r.w[0] = make_uint4(aw[0], aw[1], aw[2], aw[3]);
  return r;
}

// a = T(T(s) * u) for a chunk of fp32 s.
template <typename T>
__device__ __forceinline__ RawChunk<T> times_up(const float (&s)[kChunkElems], const RawChunk<T>& uraw) {
  if constexpr (sizeof(T) == 4) {
    float u[kChunkElems], a[kChunkElems];
    raw_to_floats<T>(uraw, u);
#pragma unroll
    for (int i = 0; i < kChunkElems; ++i) a[i] = mul_rn(s[i], u[i]);
    return floats_to_raw<T>(a);
  } else {
    return times_up_raw<T>(pack_round<T>(s), uraw);
  }
}

// ---- bf16 SiLU by table. T(silu(g)) depends on g's 16 bits b only. A bf16 kernel copies
// d(b) = T(silu(g)) - b (mod 2^16) for kSiluTableLo <= |b| < kSiluTableHi (2^-9 <= |g| < 128;
// silu_table.h, generated from silu_fp32) into shared memory. Below that range, down to 2^-125,
// T(silu(g)) = g / 2 = b - 0x80, which is d(kSiluTableLo): the index is clamped up to it (a CPU
// test holds this over every bf16 value). Chunks with a zero, a subnormal, |g| >= 128, an inf or
// a NaN take silu_fp32.
static_assert(kSiluTableSign == 0x800u, "the sign bit indexes the second half");

static __device__ __align__(16) const uint16_t silu_table_data[kSiluTableEntries] = {FP8OPS_SILU_TABLE_DATA};

// The block's copy of the table into `table` (16-byte aligned shared memory), as one group of
// asynchronous copies; cp_async_wait_all and a barrier before the first lookup.
__device__ __forceinline__ void load_silu_table(uint16_t* table) {
  constexpr uint32_t kCopies = kSiluTableEntries * sizeof(uint16_t) / 16;
  for (uint32_t i = threadIdx.x; i < kCopies; i += blockDim.x) cp_async16(table + 8 * i, silu_table_data + 8 * i, true);
  cp_async_commit();
}

// Whether every value of kN bf16 chunks has 0x100 <= |b| < kSiluTableHi (2^-125 <= |g| < 128,
// where g / 2 is still normal). Each word times 2, less 0x200 in each half, is one instruction:
// a half then holds 2|b| - 0x200 modulo 2^16 (the high half plus the low half's sign bit), which
// is below 2 * (kSiluTableHi - 0x100) exactly when |b| is in range. A borrow out of the low half
// happens only when that half is out of range itself. One packed maximum over all the words.
template <int kN>
__device__ __forceinline__ bool silu_table_range(const RawChunk<__nv_bfloat16>* r) {
  constexpr uint32_t k2 = 0x200u * 0x10001u;
  uint32_t hi;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const uint4 w = r[i].w[0];
    const uint32_t h = __vmaxu2(__vmaxu2(w.x * 2u - k2, w.y * 2u - k2), __vmaxu2(w.z * 2u - k2, w.w * 2u - k2));
    hi = i == 0 ? h : __vmaxu2(hi, h);
  }
  return max_halves(hi) < 2u * (kSiluTableHi - 0x100u);
}

// T(silu(g)) for a chunk of bf16 values in silu_table_range, two values a word: the table offsets
// of both at once (magnitude clamped up to kSiluTableLo, then the sign bit as entry 0x800), then
// both values plus their d in one signed 16-bit add per half. b and T(silu(g)) have the same sign,
// so d and each sum fit in 16 signed bits (a CPU test holds this over the domain); the maximum
// with -2^15 leaves the sums as they are.
__device__ __forceinline__ RawChunk<__nv_bfloat16> silu_table_chunk(const uint16_t* table,
                                                                    const RawChunk<__nv_bfloat16>& g) {
  constexpr uint32_t kLo2 = kSiluTableLo * 0x10001u;
  const uint32_t gw[4] = {g.w[0].x, g.w[0].y, g.w[0].z, g.w[0].w};
  uint32_t sw[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t w = gw[i];
    // Byte offsets (twice the index) of both entries.
    const uint32_t off = ((__vmaxu2(w & 0x7FFF7FFFu, kLo2) - kLo2) << 1) | ((w >> 3) & 0x10001000u);
    const char* const base = reinterpret_cast<const char*>(table);
    const uint32_t d_lo = *reinterpret_cast<const uint16_t*>(base + (off & 0xFFFFu));
    const uint32_t d_hi = *reinterpret_cast<const uint16_t*>(base + (off >> 16));
    sw[i] = __viaddmax_s16x2(w, __byte_perm(d_lo, d_hi, 0x5410), 0x80008000u);
  }
  RawChunk<__nv_bfloat16> r;
  r.w[0] = make_uint4(sw[0], sw[1], sw[2], sw[3]);
  return r;
}

// a = T(T(silu(g)) * u) for the chunks k with live[k] (the others are not meaningful): SiLU on
// the fast path for all of them, or, when a live value is outside its range (rare: zeros,
// |g| > 40, non-finite), by silu_fp32 for all of them. The zeros of chunks that are not live
// (past a row's end, or in a row without data) never choose the slow path, and a lane without
// a live chunk skips the SiLU.
// kShortcut (bf16): the fast path is silu_approx, a shorter chain of steps, which rounds to bf16
// as silu_fp32 does except near a midpoint of bf16's values; those few values take the exact SiLU,
// by warp vote per value slot, so every lane of the warp calls it. The masked kernels without the
// table take it (kSiluMaskedTable): their few valid rows per expert wait on each row's chain of
// steps. (For fp16, with eight times the values near a midpoint and a subnormal range to check, it
// was slower.)
// kTable (bf16, the table in shared memory): SiLU by silu_table_chunk when every live chunk is in
// the table's domain, else as above.
template <typename T, int kN, bool kShortcut = false, bool kTable = false, int kAdj = 1>
__device__ __forceinline__ void silu_mul_chunks(const RawChunk<T> (&graw)[kN], const RawChunk<T> (&uraw)[kN],
                                                const bool (&live)[kN], RawChunk<T> (&a)[kN],
                                                const uint16_t* table = nullptr) {
  if constexpr (kTable) {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "the SiLU table is bf16's");
    // The kAdj chunks of a unit are live or not together: one range test for each unit.
    bool any = false, in = true;
#pragma unroll
    for (int k = 0; k < kN; k += kAdj) {
      any = any || live[k];
      in = in && (!live[k] || silu_table_range<kAdj>(&graw[k]));
    }
    if (any && in) {
#pragma unroll
      for (int k = 0; k < kN; ++k) a[k] = times_up_raw<T>(silu_table_chunk(table, graw[k]), uraw[k]);
      return;
    }
  }
  bool any = false, fast = true;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    any = any || live[k];
    fast = fast && (!live[k] || silu_fast_range<T>(graw[k]));
  }
  if constexpr (kShortcut && std::is_same_v<T, __nv_bfloat16>) {
    // Chunk by chunk, so that a chunk's gate and SiLU values are dead once its a is.
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      float sv[kChunkElems] = {};
      bool near = false;  // a value of the chunk needs the exact SiLU
      if (any && fast) {
#pragma unroll
        for (int i = 0; i < kChunkElems; ++i) {
          sv[i] = silu_approx(raw_elem16<T>(graw[k], i));
          near = near || near_bf16_midpoint(sv[i]);
        }
      } else if (any) {
        silu_chunk<T, false>(graw[k], sv);
      }
      if (__any_sync(0xFFFFFFFFu, near)) {
#pragma unroll
        for (int i = 0; i < kChunkElems; ++i) {
          const bool mine = near && near_bf16_midpoint(sv[i]);
          if (__any_sync(0xFFFFFFFFu, mine)) {
            const float exact = silu_fp32_in_range(raw_elem16<T>(graw[k], i));
            if (mine) sv[i] = exact;
          }
        }
      }
      if (any) a[k] = times_up<T>(sv, uraw[k]);
    }
    return;
  }
  if (!any) return;
  float sv[kN][kChunkElems];
  if (fast) {
#pragma unroll
    for (int k = 0; k < kN; ++k) silu_chunk<T, true>(graw[k], sv[k]);
  } else {
#pragma unroll
    for (int k = 0; k < kN; ++k) silu_chunk<T, false>(graw[k], sv[k]);
  }
#pragma unroll
  for (int k = 0; k < kN; ++k) a[k] = times_up<T>(sv[k], uraw[k]);
}

// The activation alone, chunk by chunk (n / 8 threads), for the tests: silu_mul_quant's steps up
// to the quantization, on the path a kernel takes (kPath: 0 the flat kernels' SiLU, 1 the shortcut
// of masked kernels without the table, 2 the bf16 table), written out raw (a NaN of any payload).
// Every lane stays to the end: the shortcut votes across the warp.
template <typename T, int kPath>
__global__ void silu_mul_values_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ a,
                                       int64_t chunks) {
  __shared__ __align__(16) uint16_t table[kPath == 2 ? kSiluTableEntries : 1];
  if constexpr (kPath == 2) {
    load_silu_table(table);
    cp_async_wait_all();
    __syncthreads();
  }
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool live[1] = {c < chunks};
  const RawChunk<T> g[1] = {load_raw8<T, false>(gate + c * kChunkElems, live[0])};
  const RawChunk<T> u[1] = {load_raw8<T, false>(up + c * kChunkElems, live[0])};
  RawChunk<T> r[1];
  silu_mul_chunks<T, 1, kPath == 1, kPath == 2>(g, u, live, r, table);
  if (live[0]) store_raw8<T, false>(a + c * kChunkElems, r[0]);
}

template <typename T>
cudaError_t launch_silu_mul_values(const void* gate, const void* up, void* a, int64_t n, int path,
                                   cudaStream_t stream) {
  const int64_t chunks = n / kChunkElems;
  if (path < 0 || path > 2 || (path == 2 && !std::is_same_v<T, __nv_bfloat16>)) return cudaErrorInvalidValue;
  if (chunks == 0) return cudaSuccess;
  const uint32_t blocks = static_cast<uint32_t>((chunks + 255) / 256);
  const T *g = static_cast<const T*>(gate), *u = static_cast<const T*>(up);
  T* const out = static_cast<T*>(a);
  if (path == 1) {
    silu_mul_values_kernel<T, 1><<<blocks, 256, 0, stream>>>(g, u, out, chunks);
  } else if (path == 0) {
    silu_mul_values_kernel<T, 0><<<blocks, 256, 0, stream>>>(g, u, out, chunks);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    silu_mul_values_kernel<T, 2><<<blocks, 256, 0, stream>>>(g, u, out, chunks);
  }
  return cudaGetLastError();
}

// ---- silu_mul_quant. A block's threads (masked: silu_block_threads; flat: silu_flat_grid's) hold
// threads / W rows of W lanes, each lane units of kAdj adjacent chunks (silu_shape); the grid
// strides over the rows (flat: the T_s rows; masked: the valid rows of every expert, counted by a
// prefix sum of masked_m, so the work follows the valid rows, not E * Mmax).
constexpr int kMaskedMaxExperts = 1024;

// A masked_m count clamped into [0, cap] (cap = Mmax), as the CUDA kernel takes it.
__device__ __forceinline__ int32_t clamp_count(int32_t m, int32_t cap) { return m < 0 ? 0 : (m > cap ? cap : m); }

// The inclusive prefix sum of v over the 32 lanes of a warp (lane: the caller's lane index).
__device__ __forceinline__ int32_t warp_inclusive_sum(int32_t v, uint32_t lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int32_t n = __shfl_up_sync(0xFFFFFFFFu, v, off);
    if (static_cast<int>(lane) >= off) v += n;
  }
  return v;
}

// Whether a masked kernel holds the SiLU table: bf16 rows loaded 16 bytes at a time, in the blocks
// of kSiluMaskedThreads of one chunk a unit. It looks SiLU up in it, and may switch to pairs on the
// device (silu_mul_quant_launch.h's silu_masked_pairs), whose body its registers leave room for.
template <typename T, bool kVec, int kMaxChunks, bool kMasked, int kAdj>
constexpr bool kSiluMaskedTable = kMasked && kVec && std::is_same_v<T, __nv_bfloat16> && kAdj == 1 &&
                                  silu_block_threads(kMasked, kMaxChunks) == kSiluMaskedThreads;

template <typename T, bool kVec, int kMaxChunks, bool kMasked, int kAdj, bool kTable, bool kStream = false>
__device__ __forceinline__ void silu_rows(const SiluMulQuantParams& p, uint32_t lanes_log2, uint32_t rows,
                                          bool warp_scan, int32_t incl, const int32_t* prefix, uint16_t* silu_table);

// A row kernel's threads a block: silu_block_threads, but as launched where the kernel may be
// launched with more (the flat kernels of pairs of chunks, silu_flat_grid).
template <bool kMasked, int kMaxChunks, int kAdj>
__device__ __forceinline__ uint32_t silu_threads() {
  constexpr uint32_t kThreads = silu_block_threads(kMasked, kMaxChunks);
  return silu_kernel_threads(kMasked, kMaxChunks, kAdj) == kThreads ? kThreads : blockDim.x;
}

// kMaxChunks: units per lane a pass (silu_mul_quant_launch.h's silu_pass_units at most), whose loads
// are in flight at once; more run in further passes. Blocks of up to silu_kernel_threads threads.
// kStream: x is loaded evict-first (silu_mul_quant_launch.h's silu_stream).
template <typename T, bool kVec, int kMaxChunks, bool kMasked, int kAdj, bool kTable, bool kStream = false>
__global__ void __launch_bounds__(silu_kernel_threads(kMasked, kMaxChunks, kAdj))
    silu_mul_quant_kernel(const SiluMulQuantParams p, const uint32_t lanes_log2, const SiluPairSwitch pairs) {
  static_assert(!kTable || (std::is_same_v<T, __nv_bfloat16> && !kMasked), "the SiLU table: flat bf16 rows");
  static_assert(!kStream || (kTable && kAdj == 2), "evict-first loads: the flat table kernel of pairs");
  constexpr bool kMaskedTable = kSiluMaskedTable<T, kVec, kMaxChunks, kMasked, kAdj>;
  __shared__ int32_t prefix[kMasked ? kMaskedMaxExperts + 1 : 1];
  __shared__ __align__(16) uint16_t silu_table[kTable || kMaskedTable ? kSiluTableEntries : 1];
  // The table is constant, so its copy may start before the wait for the previous grid; it is
  // waited for after the first row's loads.
  if constexpr (kTable || kMaskedTable) load_silu_table(silu_table);
  const uint32_t W = 1u << lanes_log2;
  const uint32_t lane = threadIdx.x & (W - 1), slot = threadIdx.x >> lanes_log2;
  const uint32_t rows_per_block = silu_threads<kMasked, kMaxChunks, kAdj>() >> lanes_log2;
  const int64_t chunks = p.H / kChunkElems;
  // Before waiting for the previous grid: the L2 prefetch of this block's first row (flat) or of
  // masked_m (launch.cuh says why that is safe).
  if constexpr (kMasked) {
    if (threadIdx.x * 32 < p.E) prefetch_l2(p.masked_m + threadIdx.x * 32);
  } else {
    const int64_t t = static_cast<int64_t>(blockIdx.x) * rows_per_block + slot;
    if (t < p.T) prefetch_row_lines<T>(static_cast<const T*>(p.x) + t * p.x_stride_t, p.H, lane, W, chunks);
  }
  wait_for_prior_grid();
  allow_next_grid();
  int64_t total = p.T_s;
  // Masked: the prefix sums of the clamped counts. With at most 32 experts and whole warps per
  // row, every warp scans them itself, lane e holding expert e's running sum, and finds a row's
  // expert by ballot: no barrier and no shared memory on the way to the first row's loads.
  // Otherwise warp 0 writes them to shared memory for a binary search.
  const bool warp_scan = kMasked && p.E <= 32 && lanes_log2 >= 5;
  int32_t incl = 0;  // warp_scan: lane e's running sum through expert e (the total past E)
  if constexpr (kMasked) {
    const int32_t cap = static_cast<int32_t>(p.T_q);
    if (warp_scan) {
      const uint32_t l = threadIdx.x & 31u;
      if (l < p.E) incl = clamp_count(p.masked_m[l], cap);
      incl = warp_inclusive_sum(incl, l);
      total = __shfl_sync(0xFFFFFFFFu, incl, 31);
    } else {
      // Warp 0: each lane sums a run of clamped counts, a shuffle scan over the lanes, then the
      // running sums written back as prefix[e + 1].
      if (threadIdx.x < 32) {
        const int E = static_cast<int>(p.E);
        const int per = (E + 31) / 32, base = static_cast<int>(threadIdx.x) * per;
        int32_t local = 0;
        for (int i = 0; i < per; ++i) {
          if (base + i < E) {
            const int32_t c = clamp_count(p.masked_m[base + i], cap);
            prefix[base + i + 1] = c;
            local += c;
          }
        }
        int32_t run = warp_inclusive_sum(local, threadIdx.x) - local;
        for (int i = 0; i < per; ++i) {
          if (base + i < E) {
            run += prefix[base + i + 1];
            prefix[base + i + 1] = run;
          }
        }
        if (threadIdx.x == 0) prefix[0] = 0;
      }
      __syncthreads();
      total = prefix[p.E];
    }
    if (blockIdx.x == 0) {
      const int64_t pad_words = masked_pad_words(p);
      for (int64_t i = threadIdx.x; i < pad_words; i += blockDim.x) {
        static_cast<uint32_t*>(p.out.scale)[masked_pad_word_offset(p, i)] = 0u;
      }
    }
  }
  // Row indices are 32-bit (prepare bounds rows times scale groups below 2^31).
  const uint32_t rows = static_cast<uint32_t>(total);
  // From silu_masked_pairs' count of valid rows the whole grid (rows is the grid's) takes the body
  // of large flat grids: units of two adjacent chunks and SiLU from the table.
  if constexpr (kMaskedTable) {
    if (pairs.rows != 0 && rows >= pairs.rows) {
      silu_rows<T, kVec, 1, true, 2, true>(p, pairs.lanes_log2, rows, warp_scan, incl, prefix, silu_table);
      return;
    }
  }
  silu_rows<T, kVec, kMaxChunks, kMasked, kAdj, kTable || kMaskedTable, kStream>(p, lanes_log2, rows, warp_scan, incl,
                                                                                 prefix, silu_table);
}

// The grid's rows (flat: the T_s row slots; masked: the `rows` valid rows, whose expert the warp's
// running sums `incl` (warp_scan) or the block's `prefix` sums give), on W = 2^lanes_log2 lanes a
// row, units of kAdj adjacent chunks. With kTable, the kernel has started the copy of the table
// into silu_table before the wait for the prior grid.
template <typename T, bool kVec, int kMaxChunks, bool kMasked, int kAdj, bool kTable, bool kStream>
__device__ __forceinline__ void silu_rows(const SiluMulQuantParams& p, uint32_t lanes_log2, uint32_t rows,
                                          bool warp_scan, int32_t incl, const int32_t* prefix, uint16_t* silu_table) {
  const uint32_t W = 1u << lanes_log2;
  const uint32_t lane = threadIdx.x & (W - 1), slot = threadIdx.x >> lanes_log2;
  const uint32_t rows_per_block = silu_threads<kMasked, kMaxChunks, kAdj>() >> lanes_log2;
  const uint32_t group_lanes = static_cast<uint32_t>(p.out.group_size) / (kChunkElems * kAdj);
  const int64_t chunks = p.H / kChunkElems;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  // Chunk indices are 32-bit (a row of 2^32 chunks would not fit in a GPU's memory); element
  // offsets are 64-bit.
  const uint32_t n_units = static_cast<uint32_t>(chunks / kAdj);
  // Row v of the slots' sequence: its expert, token and kind.
  auto locate = [&](uint32_t v, uint32_t& e, uint32_t& t) -> RowKind {
    if constexpr (kMasked) {
      if (warp_scan) {  // v is the warp's: the experts whose rows all lie before v are 0..e-1
        e = __popc(__ballot_sync(0xFFFFFFFFu, static_cast<uint32_t>(incl) <= v));
        const int32_t start = __shfl_sync(0xFFFFFFFFu, incl, (e - 1) & 31u);
        t = v - (e == 0 ? 0u : static_cast<uint32_t>(start));
        return v < rows ? RowKind::kData : RowKind::kNone;
      }
      int lo = 0, hi = static_cast<int>(p.E);  // the last expert whose rows start at or before v
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (static_cast<uint32_t>(prefix[mid]) <= v) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      e = static_cast<uint32_t>(lo);
      t = v - static_cast<uint32_t>(prefix[lo]);
      return v < rows ? RowKind::kData : RowKind::kNone;
    } else {
      e = 0;
      t = v;
      return flat_row_kind<int64_t>(t, p.T, p.T_q, p.T_s);
    }
  };
  // A pass: kMaxChunks units of kAdj adjacent chunks per lane, c0 = lane + pass * pass_units,
  // loaded together. Every lane makes the same passes (units past the row's end are not loaded),
  // so each pass's shuffles see the whole warp.
  constexpr int kPassChunks = kMaxChunks * kAdj;
  const uint32_t pass_log2 = lanes_log2 + (31 - __clz(kMaxChunks));
  const uint32_t passes = (n_units + (1u << pass_log2) - 1) >> pass_log2;
  auto load_pass = [&](uint32_t e, uint32_t t, RowKind kind, uint32_t c0, RawChunk<T>(&g)[kPassChunks],
                       RawChunk<T>(&u)[kPassChunks]) {
    const T* gate = x + static_cast<int64_t>(e) * p.x_stride_e + static_cast<int64_t>(t) * p.x_stride_t;
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      const uint32_t c = c0 + k * W;
      const bool load = c < n_units && kind == RowKind::kData;
#pragma unroll
      for (int i = 0; i < kAdj; ++i) {
        const uint64_t off = static_cast<uint64_t>(c * kAdj + i) * kChunkElems;
        u[k * kAdj + i] = load_raw8<T, kVec, false, kStream>(gate + p.H + off, load);
        g[k * kAdj + i] = load_raw8<T, kVec, false, kStream>(gate + off, load);
      }
    }
  };
  // The grid strides over the rows. A block's slots take consecutive rows, but in the masked blocks
  // of kSiluMaskedThreads: there slot s of block b starts at row b + s * gridDim.x, so that the few
  // valid rows of a decode step go one to a block, on as many multiprocessors, and a warp stops
  // once its first slot (`lead`) has no row left (the slots of a warp make the same passes). The
  // next pass's loads (of this row, or of the slot's next row) are issued before the current
  // pass's work, so that they are in flight during it.
  constexpr bool kDeal = kMasked && silu_block_threads(kMasked, kMaxChunks) == kSiluMaskedThreads;
  const uint32_t row_step = gridDim.x * rows_per_block;
  const uint32_t stride = kDeal ? gridDim.x : 1u;  // from a slot's row to the next slot's
  const uint32_t lead = kDeal ? slot & ~((32u >> min(lanes_log2, 5u)) - 1u) : 0u;
  uint32_t v0 = blockIdx.x * (kDeal ? 1u : rows_per_block);  // slot 0's row
  // A masked grid with the table keeps its warps without rows for the barrier after the copy, so
  // that no block leaves while its copy is in flight.
  constexpr bool kTableCopy = kTable && kMasked;
  const bool has_rows = v0 + lead * stride < rows;
  if (!kTableCopy && !has_rows) return;
  uint32_t e = 0, t = 0, pass = 0;
  RowKind kind = has_rows ? locate(v0 + slot * stride, e, t) : RowKind::kNone;
  RawChunk<T> graw[kPassChunks], uraw[kPassChunks];
  load_pass(e, t, kind, lane, graw, uraw);
  if constexpr (kTable) {
    cp_async_wait_all();
    __syncthreads();
    if (kTableCopy && !has_rows) return;
  }
  for (;;) {
    uint32_t ne = e, nt = t, next_pass = pass + 1, next_v0 = v0;
    RowKind next_kind = kind;
    if (next_pass == passes) {
      next_pass = 0;
      next_v0 += row_step;
      next_kind = next_v0 + lead * stride < rows ? locate(next_v0 + slot * stride, ne, nt) : RowKind::kNone;
    }
    RawChunk<T> gnext[kPassChunks], unext[kPassChunks];
    load_pass(ne, nt, next_kind, lane + (next_pass << pass_log2), gnext, unext);
    const uint32_t c0 = lane + (pass << pass_log2);
    RawChunk<T> a[kPassChunks] = {};  // a lane without a live chunk leaves them zeros
    bool live[kPassChunks];
#pragma unroll
    for (int k = 0; k < kPassChunks; ++k) live[k] = kind == RowKind::kData && c0 + (k / kAdj) * W < n_units;
    silu_mul_chunks<T, kPassChunks, kMasked && !kTable, kTable, kAdj>(graw, uraw, live, a, silu_table);
    quant_store_chunks<T, kMaxChunks, kAdj>(p.out, a, kind, e, t, c0, W, n_units, group_lanes);
    if (next_v0 + lead * stride >= rows) break;
#pragma unroll
    for (int k = 0; k < kPassChunks; ++k) graw[k] = gnext[k], uraw[k] = unext[k];
    e = ne, t = nt, pass = next_pass, v0 = next_v0, kind = next_kind;
  }
}

// ---- silu_mul_quant on small flat grids (silu_shape's slices): block b holds slice b % slices
// of row slot b / slices, blockDim.x chunks of it (the last slice the rest), a chunk per lane;
// the grid has a block per slice, so each block makes one pass.
template <typename T, bool kVec, bool kTable>
__global__ void __launch_bounds__(kSiluSliceMaxChunks)
    silu_mul_quant_slice_kernel(const SiluMulQuantParams p, const uint32_t slices) {
  static_assert(!kTable || std::is_same_v<T, __nv_bfloat16>, "the SiLU table: bf16 rows");
  const uint32_t t = blockIdx.x / slices, slice = blockIdx.x - t * slices, width = blockDim.x;
  const uint32_t group_lanes = static_cast<uint32_t>(p.out.group_size) / kChunkElems;
  const int64_t chunks = p.H / kChunkElems, c0 = static_cast<int64_t>(slice) * width;
  const int64_t end = min(c0 + width, chunks), c = c0 + threadIdx.x;
  const T* __restrict__ gate = static_cast<const T*>(p.x) + t * p.x_stride_t;
  __shared__ __align__(16) uint16_t silu_table[kTable ? kSiluTableEntries : 1];
  if constexpr (kTable) load_silu_table(silu_table);
  // Before waiting for the previous grid: the L2 prefetch of the slice's lines (launch.cuh says
  // why that is safe).
  if (t < p.T) prefetch_row_lines<T>(gate + c0 * kChunkElems, p.H, threadIdx.x, width, end - c0);
  wait_for_prior_grid();
  allow_next_grid();
  const RowKind kind = flat_row_kind<int64_t>(t, p.T, p.T_q, p.T_s);
  const bool live[1] = {kind == RowKind::kData && c < end};
  const RawChunk<T> u[1] = {load_raw8<T, kVec>(gate + p.H + c * kChunkElems, live[0])};
  const RawChunk<T> g[1] = {load_raw8<T, kVec>(gate + c * kChunkElems, live[0])};
  if constexpr (kTable) {
    cp_async_wait_all();
    __syncthreads();
  }
  RawChunk<T> a[1] = {};
  silu_mul_chunks<T, 1, false, kTable>(g, u, live, a, silu_table);
  quant_store_chunks<T, 1>(p.out, a, kind, 0, t, static_cast<uint32_t>(c), width, static_cast<uint32_t>(end),
                           group_lanes);
}

// ---- Launchers.
template <typename T, bool kVec, bool kMasked, int kAdj, bool kTable>
cudaError_t launch_silu_mul_quant_impl(const SiluMulQuantParams& p, const RowShape& s, SiluPairSwitch pairs,
                                       int sm_count, int64_t l2_bytes, cudaStream_t stream, bool pdl) {
  const uint32_t max_chunks = row_max_chunks(s.chunks_per_lane);
  const uint32_t lanes_log2 = row_lanes_log2(s);
  const int64_t rows = kMasked ? p.E * p.T_q : p.T_s;
  // A pass of two-chunk units holds one: two per pass would double the registers in flight.
  constexpr int kMaxUnits = static_cast<int>(silu_pass_units(sizeof(T), kAdj));
#define FP8OPS_SILU_LAUNCH(C)                                                                           \
  {                                                                                                     \
    constexpr int kUnits = C > kMaxUnits ? kMaxUnits : C;                                               \
    constexpr auto kernel = silu_mul_quant_kernel<T, kVec, kUnits, kMasked, kAdj, kTable>;              \
    constexpr uint32_t kThreads = silu_block_threads(kMasked, kUnits);                                  \
    const int per_sm = resident_blocks_per_sm<kernel>(kThreads);                                        \
    if constexpr (kMasked) {                                                                            \
      const uint32_t blocks = row_grid_blocks(rows, kThreads >> lanes_log2, per_sm, sm_count);          \
      return launch_kernel(kernel, dim3(blocks), dim3(kThreads), stream, pdl, p, lanes_log2, pairs);    \
    } else {                                                                                            \
      constexpr uint32_t kWide = silu_kernel_threads(kMasked, kUnits, kAdj);                            \
      const int wide_per_sm = kWide > kThreads ? resident_blocks_per_sm<kernel>(kWide) : 0;             \
      const SiluFlatGrid g = silu_flat_grid(rows, s, kAdj, kTable, per_sm, wide_per_sm, sm_count);      \
      auto chosen = kernel;                                                                             \
      if constexpr (kTable && kAdj == 2) {                                                              \
        if (silu_stream(p.T, p.T_s, p.H, sizeof(T), l2_bytes))                                          \
          chosen = silu_mul_quant_kernel<T, kVec, kUnits, kMasked, kAdj, kTable, true>;                 \
      }                                                                                                 \
      return launch_kernel(chosen, dim3(g.blocks), dim3(g.threads), stream, pdl, p, lanes_log2, pairs); \
    }                                                                                                   \
  }
  FP8OPS_CHUNKS_CASES(FP8OPS_SILU_LAUNCH)
#undef FP8OPS_SILU_LAUNCH
}

template <typename T, bool kVec, bool kMasked, bool kTable>
cudaError_t launch_silu_mul_quant_shape(const SiluMulQuantParams& p, const SiluShape& s, SiluPairSwitch pairs,
                                        int sm_count, int64_t l2_bytes, cudaStream_t stream, bool pdl) {
  if constexpr (kVec && sizeof(T) == 2) {
    if (s.adjacent == 2)
      return launch_silu_mul_quant_impl<T, kVec, kMasked, 2, kTable>(p, s.row, pairs, sm_count, l2_bytes, stream, pdl);
  }
  return launch_silu_mul_quant_impl<T, kVec, kMasked, 1, kTable>(p, s.row, pairs, sm_count, l2_bytes, stream, pdl);
}

template <typename T, bool kTable>
cudaError_t launch_silu_mul_quant_flat(const SiluMulQuantParams& p, const SiluShape& s, bool vec, int sm_count,
                                       int64_t l2_bytes, cudaStream_t stream, bool pdl) {
  if (s.slices > 1) {
    const dim3 grid(static_cast<uint32_t>(p.T_s * s.slices)), block(s.row.lanes);
    return vec ? launch_kernel(silu_mul_quant_slice_kernel<T, true, kTable>, grid, block, stream, pdl, p, s.slices)
               : launch_kernel(silu_mul_quant_slice_kernel<T, false, kTable>, grid, block, stream, pdl, p, s.slices);
  }
  return vec ? launch_silu_mul_quant_shape<T, true, false, kTable>(p, s, {0, 0}, sm_count, l2_bytes, stream, pdl)
             : launch_silu_mul_quant_shape<T, false, false, kTable>(p, s, {0, 0}, sm_count, l2_bytes, stream, pdl);
}

template <typename T>
cudaError_t launch_silu_mul_quant(const SiluMulQuantParams& p, int sm_count, int64_t l2_bytes, cudaStream_t stream,
                                  bool pdl) {
  const bool masked = p.masked_m != nullptr;
  const int64_t slots = masked ? p.E * p.T_q : p.T_s;
  if (slots == 0 || p.H == 0) return cudaSuccess;
  if (masked && p.E > kMaskedMaxExperts) return cudaErrorInvalidValue;
  const bool vec = row_vec_ok<T>(p.x, p.x_stride_t, p.x_stride_e) && (p.H * int64_t(sizeof(T))) % 16 == 0;
  const SiluShape s = silu_shape(p.H / kChunkElems, slots, masked, sizeof(T), vec, sm_count);
  if (masked) {
    const SiluPairSwitch pairs =
        silu_masked_pairs(p.H / kChunkElems, s, std::is_same_v<T, __nv_bfloat16>, vec, sm_count);
    return vec ? launch_silu_mul_quant_shape<T, true, true, false>(p, s, pairs, sm_count, l2_bytes, stream, pdl)
               : launch_silu_mul_quant_shape<T, false, true, false>(p, s, pairs, sm_count, l2_bytes, stream, pdl);
  }
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (silu_table(true, false, p.T, p.H)) {
      return launch_silu_mul_quant_flat<T, true>(p, s, vec, sm_count, l2_bytes, stream, pdl);
    }
  }
  return launch_silu_mul_quant_flat<T, false>(p, s, vec, sm_count, l2_bytes, stream, pdl);
}

}  // namespace fp8ops
