// CUDA kernels of silu_mul_quant and rms_norm_quant (a producer fused with the per-group quant,
// one pass over memory) and of block_quant (weights per 128 x 128 block). Rows are shared out as
// fused_quant.h's RowShape says; the arithmetic is numerics.h's, step for step, in the order the
// CPU reference follows.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "fp8ops/fused_quant.h"
#include "fp8ops/fused_quant_launch.h"
#include "fp8ops/launch.cuh"
#include "fp8ops/numerics.h"
#include "fp8ops/silu_table.h"

namespace fp8ops {

// ---- Element conversions. Rounding to bf16 / fp16 is to nearest even, NaN to the canonical quiet
// NaN (as torch and the CPU reference write it).
template <typename T>
__device__ __forceinline__ float elem_to_float(uint32_t bits) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(bits << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
}

template <typename T>
__device__ __forceinline__ uint32_t float_to_elem_bits(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return v != v ? 0x7FC0u : static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v)));
  } else {
    return v != v ? 0x7E00u : static_cast<uint32_t>(__half_as_ushort(__float2half_rn(v)));
  }
}

__device__ __forceinline__ uint32_t bf162_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ uint32_t half2_bits(__half2 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ __nv_bfloat162 bits_bf162(uint32_t u) { return *reinterpret_cast<__nv_bfloat162*>(&u); }
__device__ __forceinline__ __half2 bits_half2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// Element i of src as a float.
template <typename T>
__device__ __forceinline__ float load_elem(const T* src, int64_t i) {
  if constexpr (sizeof(T) == 4) {
    return src[i];
  } else {
    return elem_to_float<T>(reinterpret_cast<const uint16_t*>(src)[i]);
  }
}

// A chunk of 8 elements of T as raw 16-byte words (two for fp32).
template <typename T>
struct RawChunk {
  static constexpr int kWords = sizeof(T) == 4 ? 2 : 1;
  uint4 w[kWords];
};

// 16 bytes at src when ok, else zeros: one predicated load with no branch around it. A relaxed
// (strong) load: the compiler keeps such loads in program order, so a batch of them is issued
// together instead of each being moved down to its first use (which exposes the latency again).
// kCta: relaxed at block scope, which the multiprocessor's L1 may serve (gpu scope reads the L2):
// for data that many blocks of a multiprocessor read and nothing writes, such as rms_norm_quant's
// weight. kStream: at gpu scope, marked evict-first in the L2 (a cache-policy operand), for data
// read once that the L2 need not keep (fused_quant_launch.h's silu_stream).
#define FP8OPS_LOAD16_IF(scope, hint, policy)                                                      \
  "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n" \
  " mov.b32 %3, 0;\n @p ld.relaxed." scope ".global" hint ".v4.u32 {%0, %1, %2, %3}, [%4]" policy ";\n}"
template <bool kCta = false, bool kStream = false>
__device__ __forceinline__ uint4 load16_if(const uint4* src, bool ok) {
  static_assert(!(kCta && kStream), "evict-first loads are at gpu scope");
  uint4 r;
  const int pred = static_cast<int>(ok);
  if constexpr (kCta) {
    asm volatile(FP8OPS_LOAD16_IF("cta", "", "") : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(src), "r"(pred));
  } else if constexpr (kStream) {
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile(FP8OPS_LOAD16_IF("gpu", ".L2::cache_hint", ", %6")
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(src), "r"(pred), "l"(policy));
  } else {
    asm volatile(FP8OPS_LOAD16_IF("gpu", "", "") : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(src), "r"(pred));
  }
  return r;
}
#undef FP8OPS_LOAD16_IF

// The 32-bit shared-memory address of p.
__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Asynchronous 16-byte copy from global to shared memory (zeros when !ok, src then unread), and
// the groups of such copies: commit closes the thread's group; the waits leave at most the last
// group pending, or none.
__device__ __forceinline__ void cp_async16_at(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool ok) {
  cp_async16_at(shared_addr(dst), src, ok);
}
// 16 bytes of shared memory at the 32-bit address src, read in program order after the waits above.
__device__ __forceinline__ uint4 load_shared16(uint32_t src) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(src)
               : "memory");
  return v;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all_but_last() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// The raw chunk at src (zeros when !ok): 16-byte loads when kVec, else element loads.
template <typename T, bool kVec, bool kCta = false, bool kStream = false>
__device__ __forceinline__ RawChunk<T> load_raw8(const T* __restrict__ src, bool ok) {
  static_assert(kVec || !kStream, "evict-first loads are 16-byte loads");
  RawChunk<T> r;
  if constexpr (kVec) {
#pragma unroll
    for (int i = 0; i < RawChunk<T>::kWords; ++i) {
      r.w[i] = load16_if<kCta, kStream>(reinterpret_cast<const uint4*>(src) + i, ok);
    }
    return r;
  }
  if (!ok) {
#pragma unroll
    for (int i = 0; i < RawChunk<T>::kWords; ++i) r.w[i] = make_uint4(0u, 0u, 0u, 0u);
    return r;
  }
  if constexpr (sizeof(T) == 4) {
    const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
    r.w[0] = make_uint4(s[0], s[1], s[2], s[3]);
    r.w[1] = make_uint4(s[4], s[5], s[6], s[7]);
  } else {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
    uint32_t v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = s[2 * i] | (static_cast<uint32_t>(s[2 * i + 1]) << 16);
    r.w[0] = make_uint4(v[0], v[1], v[2], v[3]);
  }
  return r;
}

// Element i of a 16-bit raw chunk as a float.
template <typename T>
__device__ __forceinline__ float raw_elem16(const RawChunk<T>& r, int i) {
  const uint32_t w[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
  return elem_to_float<T>((i & 1) ? w[i >> 1] >> 16 : w[i >> 1] & 0xFFFFu);
}

template <typename T>
__device__ __forceinline__ void raw_to_floats(const RawChunk<T>& r, float (&v)[kChunkElems]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      v[4 * i] = __uint_as_float(r.w[i].x), v[4 * i + 1] = __uint_as_float(r.w[i].y);
      v[4 * i + 2] = __uint_as_float(r.w[i].z), v[4 * i + 3] = __uint_as_float(r.w[i].w);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kChunkElems; ++i) v[i] = raw_elem16<T>(r, i);
  }
}

// 8 floats rounded to T (to nearest even) as a raw chunk, two per conversion instruction. A NaN
// stays a NaN of any payload: for values that are only quantized (a NaN codes to 0), not stored.
template <typename T>
__device__ __forceinline__ RawChunk<T> pack_round(const float (&v)[kChunkElems]) {
  RawChunk<T> r;
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      r.w[i] = make_uint4(__float_as_uint(v[4 * i]), __float_as_uint(v[4 * i + 1]), __float_as_uint(v[4 * i + 2]),
                          __float_as_uint(v[4 * i + 3]));
    }
  } else {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        w[i] = bf162_bits(__floats2bfloat162_rn(v[2 * i], v[2 * i + 1]));
      } else {
        w[i] = half2_bits(__floats2half2_rn(v[2 * i], v[2 * i + 1]));
      }
    }
    r.w[0] = make_uint4(w[0], w[1], w[2], w[3]);
  }
  return r;
}

// max(|a|, |b|) in each 16-bit lane of two words of T, a NaN (magnitude bits above inf's) if
// either is one; the sign bits are the xor of the operands' and the caller masks them.
template <typename T>
__device__ __forceinline__ uint32_t abs_max2(uint32_t a, uint32_t b) {
  uint32_t d;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  } else {
    asm("max.NaN.xorsign.abs.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  }
  return d;
}

// The bits of the largest |value| of kN raw chunks, as T's bit pattern (for non-negative floats
// the order of the patterns is the order of the values), and whether that is an inf or a NaN. Only
// such a chunk needs the finite filter of raw_finite_amax and the NaN codes zeroed. For 16-bit T:
// one packed maximum over all the chunks' words, then one over its two halves; kAbsMax
// (rms_norm_quant's kernels without the residual, docs/DESIGN.md) takes floating-point maxima of
// magnitudes instead, a word pair an instruction, then the same against the halves swapped.
template <typename T, int kN, bool kAbsMax = false>
__device__ __forceinline__ uint32_t raw_magnitude_bits_n(const RawChunk<T>* r, bool& nonfinite) {
  uint32_t m = 0u;
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint4 w = r[i].w[j];
        m = max(m, max(max(w.x & 0x7FFFFFFFu, w.y & 0x7FFFFFFFu), max(w.z & 0x7FFFFFFFu, w.w & 0x7FFFFFFFu)));
      }
    }
    nonfinite = m >= 0x7F800000u;
  } else if constexpr (kAbsMax) {
    uint32_t m2;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const uint4 w = r[i].w[0];
      const uint32_t mi = abs_max2<T>(abs_max2<T>(w.x, w.y), abs_max2<T>(w.z, w.w));
      m2 = i == 0 ? mi : abs_max2<T>(m2, mi);
    }
    m = abs_max2<T>(m2, __byte_perm(m2, 0u, 0x1032)) & 0x7FFFu;
    nonfinite = m >= kInfBits<T>;
  } else {
    uint32_t m2;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const uint32_t mi = magnitude_pairs_16x8(r[i].w[0]);
      m2 = i == 0 ? mi : __vmaxu2(m2, mi);
    }
    m = max_halves(m2);
    nonfinite = m >= kInfBits<T>;
  }
  return m;
}

// 8 floats that are exact values of T (or NaN, canonicalized) as a raw chunk. For bf16 and fp16:
// pack_round, then, only for a chunk that holds a NaN, each element again with the canonical NaN.
template <typename T>
__device__ __forceinline__ RawChunk<T> floats_to_raw(const float (&v)[kChunkElems]) {
  RawChunk<T> r = pack_round<T>(v);
  if constexpr (sizeof(T) == 4) {
    uint32_t b[kChunkElems];
#pragma unroll
    for (int i = 0; i < kChunkElems; ++i) b[i] = v[i] != v[i] ? kCanonicalNanF32 : __float_as_uint(v[i]);
#pragma unroll
    for (int i = 0; i < 2; ++i) r.w[i] = make_uint4(b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]);
  } else {
    bool nonfinite;
    if (raw_magnitude_bits_n<T, 1>(&r, nonfinite) > kInfBits<T>) {
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = float_to_elem_bits<T>(v[2 * i]) | (float_to_elem_bits<T>(v[2 * i + 1]) << 16);
      r.w[0] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  return r;
}

template <typename T, bool kVec>
__device__ __forceinline__ void store_raw8(T* __restrict__ dst, const RawChunk<T>& r) {
  if constexpr (kVec) {
#pragma unroll
    for (int i = 0; i < RawChunk<T>::kWords; ++i) reinterpret_cast<uint4*>(dst)[i] = r.w[i];
  } else {
    uint32_t* d = reinterpret_cast<uint32_t*>(dst);
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
        d[4 * i] = r.w[i].x, d[4 * i + 1] = r.w[i].y, d[4 * i + 2] = r.w[i].z, d[4 * i + 3] = r.w[i].w;
    } else {
      uint16_t* h = reinterpret_cast<uint16_t*>(dst);
      const uint32_t w[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
        h[2 * i] = static_cast<uint16_t>(w[i]), h[2 * i + 1] = static_cast<uint16_t>(w[i] >> 16);
    }
  }
}

// The bit pattern of the amax of a 16-bit raw chunk's finite elements.
template <typename T>
__device__ __forceinline__ uint32_t raw_finite_amax_bits16(const RawChunk<T>& r) {
  static_assert(sizeof(T) == 2, "16-bit T");
  return finite_amax_bits_16x8<kInfBits<T>>(r.w[0]);
}

// The amax of a raw chunk's finite elements.
template <typename T>
__device__ __forceinline__ float raw_finite_amax(const RawChunk<T>& r) {
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(max(finite_amax_bits_f32x4(r.w[0]), finite_amax_bits_f32x4(r.w[1])));
  } else {
    return magnitude_bits_float<T>(raw_finite_amax_bits16<T>(r));
  }
}

// L2 prefetch of the 128-byte lines of a row of `chunks` chunks (and of those `second` elements
// further, when nonzero): lines lane, lane + W, ..., one request each.
template <typename T>
__device__ __forceinline__ void prefetch_row_lines(const T* row, int64_t second, uint32_t lane, uint32_t W,
                                                   int64_t chunks) {
  constexpr int64_t kElemsPerLine = 128 / sizeof(T);
  const uint32_t lines = static_cast<uint32_t>((chunks * kChunkElems + kElemsPerLine - 1) / kElemsPerLine);
  for (uint32_t l = lane; l < lines; l += W) {
    prefetch_l2(row + l * kElemsPerLine);
    if (second != 0) prefetch_l2(row + second + l * kElemsPerLine);
  }
}

// What a row slot holds.
enum class RowKind : int { kNone, kData, kQPad, kScalePad };

// The e4m3 codes of 8 values times r, little-endian in two words; NaN codes to 0 (the zeroing
// is skipped when the caller knows no value is a NaN).
__device__ __forceinline__ uint2 codes8(const float (&v)[kChunkElems], float r, bool maybe_nan = true) {
  uint32_t lo = e4m3x2_bits_device(v[0] * r, v[1] * r) | (e4m3x2_bits_device(v[2] * r, v[3] * r) << 16);
  uint32_t hi = e4m3x2_bits_device(v[4] * r, v[5] * r) | (e4m3x2_bits_device(v[6] * r, v[7] * r) << 16);
  if (maybe_nan) lo = zero_nan_codes(lo), hi = zero_nan_codes(hi);
  return make_uint2(lo, hi);
}

// Quantizes a lane's units of kAdj adjacent chunks (unit c0 + k * W of row (e, t) is chunks
// (c0 + k * W) * kAdj + i, i < kAdj, held in a[k * kAdj + i]; c0 is the lane's first) and stores
// their codes and, from each group's first lane, the scales. Every lane of the warp calls it: a
// group's amax is reduced over the group_lanes lanes that hold its units, for all k at once.
// Unit indices are 32-bit (a row of 2^32 chunks would not fit in a GPU's memory); addresses are
// 64-bit. The caller guarantees that slots k < kSure hold a unit in every lane (no bounds test).
// kAbsMax: raw_magnitude_bits_n's floating-point maxima.
template <typename T, int kN, int kAdj = 1, int kSure = 0, bool kAbsMax = false>
__device__ __forceinline__ void quant_store_chunks(const RowQuantOut& o, const RawChunk<T> (&a)[kN * kAdj],
                                                   RowKind kind, int64_t e, int64_t t, uint32_t c0, uint32_t W,
                                                   uint32_t units, uint32_t group_lanes) {
  static_assert(kAdj == 1 || kAdj == 2, "one or two adjacent chunks per unit");
  // 16-bit T with an even number of units: two units' amax travel as their bit patterns in one
  // word, so that one shuffle and one packed maximum serve both.
  constexpr bool kPairedAmax = sizeof(T) == 2 && kN % 2 == 0;
  const bool data = kind == RowKind::kData;
  float amax[kN];
  uint32_t amax_bits[kN];
  bool nonfinite[kN];
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    // The magnitudes of every unit, then those outside the row's data dropped by a select (a
    // unit's chunks need not hold values there).
    const bool in = data && (k < kSure || c0 + k * W < units);
    bool nf;
    uint32_t m = raw_magnitude_bits_n<T, kAdj, kAbsMax>(&a[k * kAdj], nf);
    nonfinite[k] = in && nf;
    m = in ? m : 0u;
    if constexpr (kPairedAmax) {
      amax_bits[k] = m;
    } else if (nonfinite[k]) {
      amax[k] = raw_finite_amax<T>(a[k * kAdj]);
#pragma unroll
      for (int i = 1; i < kAdj; ++i) amax[k] = fmaxf(amax[k], raw_finite_amax<T>(a[k * kAdj + i]));
    } else {
      amax[k] = magnitude_bits_float<T>(m);
    }
  }
  bool any_nonfinite = false;
#pragma unroll
  for (int k = 0; k < kN; ++k) any_nonfinite |= nonfinite[k];
  // group_lanes <= 16 (group_size <= 128): every lane takes part in each shuffle; a level past
  // the group's lanes exchanges with lane ^ 0, itself.
  if constexpr (kPairedAmax) {
    // One branch for all of the lane's units: those holding an inf or a NaN take the finite filter.
    if (any_nonfinite) {
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        uint32_t m = raw_finite_amax_bits16<T>(a[k * kAdj]);
#pragma unroll
        for (int i = 1; i < kAdj; ++i) m = max(m, raw_finite_amax_bits16<T>(a[k * kAdj + i]));
        amax_bits[k] = nonfinite[k] ? m : amax_bits[k];
      }
    }
    uint32_t pair[kN / 2];
#pragma unroll
    for (int j = 0; j < kN / 2; ++j) pair[j] = amax_bits[2 * j] | (amax_bits[2 * j + 1] << 16);
#pragma unroll
    for (uint32_t off = 16 / kAdj / 2; off > 0; off >>= 1) {
      const uint32_t lane_mask = off & (group_lanes - 1);
#pragma unroll
      for (int j = 0; j < kN / 2; ++j) pair[j] = __vmaxu2(pair[j], __shfl_xor_sync(0xFFFFFFFFu, pair[j], lane_mask));
    }
#pragma unroll
    for (int j = 0; j < kN / 2; ++j) {
      amax[2 * j] = magnitude_bits_float<T>(pair[j] & 0xFFFFu);
      amax[2 * j + 1] = magnitude_bits_float<T>(pair[j] >> 16);
    }
  } else {
#pragma unroll
    for (uint32_t off = 16 / kAdj / 2; off > 0; off >>= 1) {
      const uint32_t lane_mask = off & (group_lanes - 1);
#pragma unroll
      for (int k = 0; k < kN; ++k) amax[k] = fmaxf(amax[k], __shfl_xor_sync(0xFFFFFFFFu, amax[k], lane_mask));
    }
  }
  if (kind == RowKind::kNone) return;
  const bool codes_out = kind != RowKind::kScalePad;
  const uint32_t in_group = c0 & (group_lanes - 1);  // W is a multiple of group_lanes
  const bool first_lane = in_group == 0;
  const uint32_t group_log2 = __ffs(static_cast<int>(group_lanes)) - 1;
  uint8_t* const q_row = o.q + (e * o.q_rows + t) * o.D;
  int32_t* const s_row = static_cast<int32_t*>(o.scale) + row_scale_base(o, e, t);
  // The scale kind (fp32, UE8M0 fp32, packed UE8M0) is the same for the whole grid, and whether
  // the row holds data the same for all of the lane's units: each case has its own copy of the
  // loop, so that no unit tests them.
  // kMaybeNan: whether a unit may hold an inf or a NaN, whose NaN codes are zeroed (the units
  // that do say so in nonfinite); a lane of several units takes one branch for all of them.
  auto store_units = [&](auto ue8m0_tag, auto packed_tag, auto data_tag, auto nan_tag) {
    constexpr bool kUe8m0 = decltype(ue8m0_tag)::value, kPacked = decltype(packed_tag)::value;
    constexpr bool kData = decltype(data_tag)::value, kMaybeNan = decltype(nan_tag)::value;
    // fp32 scales of two to four single-chunk units a lane (a group then has at least four lanes):
    // lane j of a group keeps unit j's scale and stores it after the loop, one store instruction a
    // warp in place of one a unit.
    constexpr bool kGather = kData && !kPacked && kAdj == 1 && kN >= 2 && kN <= 4;
    float gathered = 0.0f;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const uint32_t c = c0 + k * W;
      if (k >= kSure && c >= units) break;
      const float scale = kData ? group_scale(amax[k], o.eps, kUe8m0) : 0.0f;
      if (kData || codes_out) {
        uint2 codes[kAdj];
#pragma unroll
        for (int i = 0; i < kAdj; ++i) codes[i] = make_uint2(0u, 0u);
        if constexpr (kData) {
          const float r = group_reciprocal(scale, kUe8m0);
#pragma unroll
          for (int i = 0; i < kAdj; ++i) {
            float v[kChunkElems];
            raw_to_floats<T>(a[k * kAdj + i], v);
            codes[i] = codes8(v, r, kMaybeNan && nonfinite[k]);
          }
        }
        uint8_t* const dst = q_row + static_cast<uint64_t>(c) * (kAdj * kChunkElems);
        if constexpr (kAdj == 1) {
          *reinterpret_cast<uint2*>(dst) = codes[0];
        } else {
          *reinterpret_cast<uint4*>(dst) = make_uint4(codes[0].x, codes[0].y, codes[1].x, codes[1].y);
        }
      }
      if constexpr (kGather) {
        gathered = in_group == static_cast<uint32_t>(k) ? scale : gathered;
      } else if (first_lane) {
        const uint32_t s = c >> group_log2;  // c / group_lanes, a power of two
        int32_t* const word = s_row + scale_group_offset(o, s, kPacked);
        if constexpr (!kPacked) {
          *reinterpret_cast<float*>(word) = scale;
        } else {
          // The group's byte; the last group of a row also zeroes the bytes after it in its word.
          uint8_t* bytes = reinterpret_cast<uint8_t*>(word);
          const uint32_t b = kData ? ue8m0_exponent_of_power(scale) : 0u;
          const uint32_t j = s & 3;
          if (s != static_cast<uint32_t>(o.S - 1) || j == 3) {
            bytes[j] = static_cast<uint8_t>(b);
          } else if (j == 0) {
            *reinterpret_cast<uint32_t*>(bytes) = b;
          } else if (j == 1) {
            bytes[1] = static_cast<uint8_t>(b);
            *reinterpret_cast<uint16_t*>(bytes + 2) = 0;
          } else {
            *reinterpret_cast<uint16_t*>(bytes + 2) = static_cast<uint16_t>(b);
          }
        }
      }
    }
    if constexpr (kGather) {
      // Unit in_group of this group: its first lane's chunk is c0 - in_group + in_group * W, and it
      // exists exactly when this lane's chunk of that unit does (units is a multiple of group_lanes).
      const uint32_t c = c0 - in_group + in_group * W;
      if (in_group < static_cast<uint32_t>(kN) &&
          ((kSure > 0 && in_group < static_cast<uint32_t>(kSure)) || c < units)) {
        *reinterpret_cast<float*>(s_row + scale_group_offset(o, c >> group_log2, false)) = gathered;
      }
    }
  };
  using Yes = std::true_type;
  using No = std::false_type;
  // A data row's units: the copy without NaN zeroing for lanes of several units holding no inf or
  // NaN. A lane of one unit keeps the one loop, whose test of nonfinite[0] is that branch already.
  auto store_data = [&](auto ue8m0_tag, auto packed_tag) {
    if (kN == 1 || any_nonfinite) {
      store_units(ue8m0_tag, packed_tag, Yes{}, Yes{});
    } else {
      store_units(ue8m0_tag, packed_tag, Yes{}, No{});
    }
  };
  if (!data) {  // zero codes (none in a scale padding row) and zero scales
    if (o.packed) {
      store_units(No{}, Yes{}, No{}, No{});
    } else {
      store_units(No{}, No{}, No{}, No{});
    }
  } else if (o.packed) {
    store_data(Yes{}, Yes{});
  } else if (o.ue8m0) {
    store_data(Yes{}, No{});
  } else {
    store_data(No{}, No{});
  }
}

// The kind of flat row t, in the row kernel's integer type I.
template <typename I>
__device__ __forceinline__ RowKind flat_row_kind(I t, I T, I T_q, I T_s) {
  return t < T ? RowKind::kData : t < T_q ? RowKind::kQPad : t < T_s ? RowKind::kScalePad : RowKind::kNone;
}

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
// device (fused_quant_launch.h's silu_masked_pairs), whose body its registers leave room for.
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

// kMaxChunks: units per lane a pass (fused_quant_launch.h's silu_pass_units at most), whose loads
// are in flight at once; more run in further passes. Blocks of up to silu_kernel_threads threads.
// kStream: x is loaded evict-first (fused_quant_launch.h's silu_stream).
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

// Entry 0 of the pairwise sums of the n <= kMax values v[0..n): s[i] + s[i ^ o] for o = kMax / 2,
// ..., 2, 1, skipping o >= n (fused_quant.h's order over a row's warp sums). The offsets are
// compile-time constants (unrolled), so s stays in registers.
template <uint32_t kMax>
__device__ __forceinline__ float pairwise_sum(const float* v, uint32_t n) {
  float s[kMax];
#pragma unroll
  for (uint32_t i = 0; i < kMax; ++i) s[i] = i < n ? v[i] : 0.0f;
#pragma unroll
  for (uint32_t off = kMax / 2; off > 0; off >>= 1) {
    if (off >= n) continue;
    float m[kMax];
#pragma unroll
    for (uint32_t i = 0; i < kMax; ++i) m[i] = add_rn(s[i], s[i ^ off]);
#pragma unroll
    for (uint32_t i = 0; i < kMax; ++i) s[i] = m[i];
  }
  return s[0];
}

// ---- Distributed shared memory (sm_90 clusters): a block receives 32-bit values from blocks of
// its cluster into its shared memory, and an mbarrier of its own counts their bytes in.

// Thread 0 initializes the block's mbarrier at bar (one arrival: the block's own expect_bytes),
// then the cluster syncs, so that no block sends to a barrier before it is initialized.
__device__ __forceinline__ void cluster_init_mbarrier(uint32_t bar) {
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}

// The block's arrival on its mbarrier: its phase completes once `bytes` more bytes have come in.
__device__ __forceinline__ void mbarrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Stores v at shared address addr of cluster block `block`, counted by that block's mbarrier bar
// (addr and bar are this block's addresses of them).
__device__ __forceinline__ void send_to_block(float v, uint32_t addr, uint32_t bar, uint32_t block) {
  uint32_t to, to_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(to) : "r"(addr), "r"(block));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(to_bar) : "r"(bar), "r"(block));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(to),
               "r"(__float_as_uint(v)), "r"(to_bar)
               : "memory");
}

// Waits until the mbarrier's first phase has completed; what was sent is then visible.
__device__ __forceinline__ void mbarrier_wait_first_phase(uint32_t bar) {
  asm volatile(
      "{\n .reg .pred done;\n WAIT_%=:\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], 0;\n"
      " @!done bra WAIT_%=;\n}" ::"r"(bar)
      : "memory");
}

// A chunk's squares folded into a lane's chain of fused multiply-adds, in element order (SPEC
// section 9, step 2, in fused_quant.h's lane layout); every rms_norm_quant kernel sums with it.
__device__ __forceinline__ float fold_squares(const float (&v)[kChunkElems], float acc) {
#pragma unroll
  for (int i = 0; i < kChunkElems; ++i) acc = fma_rn(v[i], v[i], acc);
  return acc;
}

// The lane sums added pairwise within a warp (SPEC section 9, step 2): acc[j] + acc[j ^ o] for
// o = 16, ..., 2, 1, skipping o >= W (a row of W < 32 lanes, W a power of two, is summed within
// its lanes); every lane ends with its row's or its 32 lanes' sum.
__device__ __forceinline__ float warp_pair_sums(float acc, uint32_t W = 32) {
#pragma unroll
  for (uint32_t off = 16; off > 0; off >>= 1) {
    if (off < W) acc = add_rn(acc, __shfl_xor_sync(0xFFFFFFFFu, acc, off));
  }
  return acc;
}

// rms_inverse on the device (SPEC section 9, step 3). A sum and an ms + eps inside fused_quant.h's
// [kRmsFastMin, kRmsFastMax] take the compiler's fast-path steps of the division, the square root
// and the reciprocal with no range check between them; anything else (a zero, inf or NaN sum, an
// eps of 0 with a tiny sum) takes rms_inverse. D and rD (1 / D correctly rounded, fused_quant.h's
// rms_divisor_reciprocal) come from the parameters, so no thread converts D itself. With kPow2 (D a
// power of two) rD is 1 / D exactly and ms the sum times it: the quotient's real number, rounded
// once. The GPU tests sweep every fp32 sum of the range for every D, and every ms + eps of it.
template <bool kPow2>
__device__ __forceinline__ float rms_inverse_fast(float sum, float D, float rD, float norm_eps) {
  const float ms = kPow2 ? __fmul_rn(sum, rD) : div_rn_by(sum, D, rD);
  const float v = __fadd_rn(ms, norm_eps);
  const float inv = rsqrt_rn_fast(v);
  const bool fast = sum >= kRmsFastMin && sum <= kRmsFastMax && v >= kRmsFastMin && v <= kRmsFastMax;
  return fast ? inv : rms_inverse(sum, D, norm_eps);
}

// For the tests: how many fp32 bit patterns b in [lo, hi) (as a sum, or as v = ms + eps) give
// another result on the device than the correctly rounded ops of fused_quant.h, added to *count.
// part 0: rms_inverse_fast (kPow2 when D is a power of two) against rms_inverse; 1: its quotient
// div_rn_by against div_rn(b, D); 2: the product b * (1 / D) against div_rn(b, D), equal only for a
// power of two; 3: rsqrt_rn_fast against div_rn(1, sqrt_rn(b)).
__global__ void rms_inverse_sweep_kernel(float D, float rD, float norm_eps, int part, uint64_t lo, uint64_t hi,
                                         unsigned long long* count) {
  const bool pow2 = (__float_as_uint(D) & 0x7FFFFFu) == 0;  // D >= 8, a normal
  unsigned long long differ = 0;
  for (uint64_t b = lo + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; b < hi;
       b += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(static_cast<uint32_t>(b));
    float got, want;
    if (part == 0) {
      got = pow2 ? rms_inverse_fast<true>(x, D, rD, norm_eps) : rms_inverse_fast<false>(x, D, rD, norm_eps);
      want = rms_inverse(x, D, norm_eps);
    } else if (part == 3) {
      got = rsqrt_rn_fast(x);
      want = div_rn(1.0f, sqrt_rn(x));
    } else {
      got = part == 1 ? div_rn_by(x, D, rD) : __fmul_rn(x, rD);
      want = div_rn(x, D);
    }
    differ += __float_as_uint(got) != __float_as_uint(want);
  }
  for (int off = 16; off > 0; off >>= 1) differ += __shfl_xor_sync(0xFFFFFFFFu, differ, off);
  if ((threadIdx.x & 31) == 0 && differ) atomicAdd(count, differ);
}

inline cudaError_t launch_rms_inverse_sweep(int64_t D, float norm_eps, int part, uint64_t lo, uint64_t hi,
                                            unsigned long long* count, cudaStream_t stream) {
  if (D < 8 || D > kRmsMaxD || part < 0 || part > 3 || lo > hi || hi > (uint64_t{1} << 32)) {
    return cudaErrorInvalidValue;
  }
  if (lo == hi) return cudaSuccess;
  const uint64_t blocks = std::min<uint64_t>((hi - lo + 255) / 256, 8192);  // then a grid-stride loop
  rms_inverse_sweep_kernel<<<static_cast<uint32_t>(blocks), 256, 0, stream>>>(
      static_cast<float>(D), rms_divisor_reciprocal(D), norm_eps, part, lo, hi, count);
  return cudaGetLastError();
}

// y = T(r * inv * weight) for a chunk (SPEC section 9, step 4), rounded in pairs, from floats or
// from raw chunks; both rms_norm_quant kernels end with it.
template <typename T>
__device__ __forceinline__ RawChunk<T> rms_scaled(const float (&v)[kChunkElems], const float (&wf)[kChunkElems],
                                                  float inv) {
  float y[kChunkElems];
#pragma unroll
  for (int i = 0; i < kChunkElems; ++i) y[i] = mul_rn(mul_rn(v[i], inv), wf[i]);
  return pack_round<T>(y);
}
template <typename T>
__device__ __forceinline__ RawChunk<T> rms_scaled(const RawChunk<T>& r, const RawChunk<T>& w, float inv) {
  float v[kChunkElems], wf[kChunkElems];
  raw_to_floats<T>(r, v);
  raw_to_floats<T>(w, wf);
  return rms_scaled<T>(v, wf, inv);
}

// v through an opaque register copy, so that the compiler holds it rather than recompute it from
// the raw words it came from (a value used on both sides of a barrier).
__device__ __forceinline__ float held_float(float v) {
  float h;
  asm("mov.b32 %0, %1;" : "=f"(h) : "f"(v));
  return h;
}

// ---- rms_norm_quant: each row's r = T(x + residual) stays in registers between the sum of
// squares and the quantization, so x, residual and weight are read once. The weight is loaded
// with the row, before the sum, so that its latency hides behind the row's.
// kPipe (fused_quant_launch.h's rms_pipelined): the grid holds the resident blocks only, and each
// copies the thread's chunks of its next row into shared memory while it works on the current
// row, so that the next row's loads are in flight meanwhile. It holds the row's and the weight's
// values as floats, which its registers allow, so that neither is unpacked twice.
// kRmsFirstWarpInverse: in the kernel of three or four 16-bit chunks a lane without the residual,
// loaded 16 bytes at a time, only a row's first warp adds the warp sums and takes the inverse, and
// shares it through shared memory; that frees the registers for five resident blocks, not four.
template <typename T, bool kVec, int kMaxChunks, bool kResidual>
constexpr bool kRmsFirstWarpInverse = kVec && !kResidual && sizeof(T) == 2 && kMaxChunks == 4;

template <typename T, bool kVec, int kMaxChunks, bool kResidual>
constexpr int kRmsMinBlocks = kMaxChunks * sizeof(T) > 8                             ? 1
                              : kResidual                                            ? 3
                              : kRmsFirstWarpInverse<T, kVec, kMaxChunks, kResidual> ? 5
                                                                                     : 4;

template <typename T, bool kVec, int kMaxChunks, bool kResidual, bool kWhole, bool kPipe>
__global__ void __launch_bounds__(kRowBlockThreads, kRmsMinBlocks<T, kVec, kMaxChunks, kResidual>)
    rms_norm_quant_kernel(const RmsNormQuantParams p, const uint32_t lanes_log2, const uint32_t prefetch_blocks) {
  static_assert(!kPipe || (kVec && !kResidual), "a pipelined row is loaded 16 bytes at a time, with no residual");
  static_assert(!kWhole || kMaxChunks >= 2, "a row of 256 lanes has at least 512 chunks");
  // The pipelined kernel of rows of 256 lanes takes the inverse in the first warp too: the other
  // warps' copies of that step cost more than their wait for the first warp's.
  constexpr bool kFirstWarpInverse = kRmsFirstWarpInverse<T, kVec, kMaxChunks, kResidual> || (kPipe && kWhole);
  __shared__ float warp_sums[kRowBlockThreads / 32];
  __shared__ float row_inv[kFirstWarpInverse ? kRowBlockThreads / 64 : 1];  // per row of W > 32 lanes
  // kPipe: two stages of the threads' chunks of a row, chunk k of thread i at k * 256 + i.
  __shared__ RawChunk<T> stages[kPipe ? 2 * kMaxChunks * kRowBlockThreads : 1];
  // kWhole: W = 256, a row per block, known to the compiler (its addresses, shuffles and tests).
  const uint32_t W = kWhole ? kRowBlockThreads : 1u << lanes_log2;
  const uint32_t lane = kWhole ? threadIdx.x : threadIdx.x & (W - 1);
  const uint32_t slot = kWhole ? 0u : threadIdx.x >> lanes_log2;
  const uint32_t rows_per_block = kRowBlockThreads / W;
  // Chunk slots k < kSure hold a chunk of the row in every lane: row_shape gives W <= C and
  // C > kMaxChunks / 2 * W, and a pipelined row has C = 2W = kMaxChunks * W (rms_pipelined).
  constexpr int kSure = kPipe ? kMaxChunks : kMaxChunks / 2 > 0 ? kMaxChunks / 2 : 1;
  const uint32_t group_lanes = static_cast<uint32_t>(p.out.group_size) / kChunkElems;
  const int64_t D = p.out.D;
  const uint32_t chunks = static_cast<uint32_t>(D / kChunkElems);
  // kPipe: D = 16 W, a power of two (rms_pipelined), so ms is the sum times 1 / D.
  auto inverse = [&](float sum) { return rms_inverse_fast<kPipe>(sum, p.D_f, p.D_recip, p.norm_eps); };
  const T* __restrict__ x = static_cast<const T*>(p.x);
  T* __restrict__ res = static_cast<T*>(p.residual);
  const T* __restrict__ weight = static_cast<const T*>(p.weight);
  // Before waiting for the previous grid: the L2 prefetch of this block's first row and of the
  // weight (launch.cuh says why that is safe), by the blocks of the first wave only (those that
  // can start while the previous grid is finishing; later ones would load the lines at once).
  if (const int64_t t = static_cast<int64_t>(blockIdx.x) * rows_per_block + slot;
      t < p.T && blockIdx.x < prefetch_blocks) {
    prefetch_row_lines<T>(x + t * p.x_stride, 0, lane, W, chunks);
    if constexpr (kResidual) prefetch_row_lines<T>(res + t * p.r_stride, 0, lane, W, chunks);
    if (blockIdx.x == 0) prefetch_row_lines<T>(weight, 0, lane, W, chunks);
  }
  wait_for_prior_grid();
  allow_next_grid();
  // A pipelined grid's row slots fit 31 bits (rms_pipelined), which spares 64-bit row arithmetic.
  using Row = std::conditional_t<kPipe, uint32_t, int64_t>;
  const Row row_step = static_cast<Row>(gridDim.x) * rows_per_block;
  // kPipe: the copy of the thread's chunks of row slot v + slot into the stage at dst, as one group
  // of asynchronous copies. Every slot holds a chunk (kSure), so only the row is tested: a row
  // without data copies zeros (its source, row 0, is not read). The shared addresses of the
  // thread's first chunk in the stage read and in the one filled are swapped after each row, so
  // that no row recomputes them from the thread index.
  constexpr uint32_t kSlotBytes = kRowBlockThreads * sizeof(RawChunk<T>);
  uint32_t stage_read = kPipe ? shared_addr(&stages[threadIdx.x]) : 0u;
  uint32_t stage_fill = stage_read + kMaxChunks * kSlotBytes;
  auto stage_row = [&](Row v, uint32_t dst) {
    const Row tt = v + slot;
    const bool ok = tt < static_cast<Row>(p.T);
    const T* const x_lane = x + (ok ? tt : 0) * p.x_stride + static_cast<uint64_t>(lane) * kChunkElems;
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      const uint4* src = reinterpret_cast<const uint4*>(x_lane + static_cast<uint64_t>(k) * W * kChunkElems);
#pragma unroll
      for (int i = 0; i < RawChunk<T>::kWords; ++i) cp_async16_at(dst + k * kSlotBytes + i * 16, src + i, ok);
    }
    cp_async_commit();
  };
  // The weight's chunks: loaded with each row (its latency hides behind the row's), at block scope
  // so that L1 may serve them, or once by a pipelined block, whose row comes from shared memory and
  // would wait for them; kept over the rows of the other kernels, they took registers. A pipelined
  // block holds their values as floats over its rows, then starts its first row's copy.
  RawChunk<T> w[kMaxChunks];
  float wf[kPipe ? kMaxChunks : 1][kChunkElems];
  if constexpr (kPipe) {
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      w[k] = load_raw8<T, kVec>(weight + static_cast<uint64_t>(lane + k * W) * kChunkElems, true);  // kSure
    }
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      raw_to_floats<T>(w[k], wf[k]);
#pragma unroll
      for (int i = 0; i < kChunkElems; ++i) wf[k][i] = held_float(wf[k][i]);
    }
    stage_row(static_cast<Row>(blockIdx.x) * rows_per_block, stage_read);
  }
  for (Row v0 = static_cast<Row>(blockIdx.x) * rows_per_block; v0 < static_cast<Row>(p.T_s); v0 += row_step) {
    const Row t = v0 + slot;
    const RowKind kind = flat_row_kind<Row>(t, static_cast<Row>(p.T), static_cast<Row>(p.T_q), static_cast<Row>(p.T_s));
    const bool data = kind == RowKind::kData;
    // Every load of the row first (x, the residual and, but in kPipe, the weight), then
    // r = T(x + residual) kept raw (kPipe: as floats too). kPipe: the next row's copy starts, then
    // this row's (started a row earlier) is read.
    RawChunk<T> r[kMaxChunks];
    float xf[kPipe ? kMaxChunks : 1][kChunkElems];  // kPipe: the row's values, held as floats
    float acc = 0.0f;
    // Kernels of four chunks a lane: slot k holds no chunk of the row in any lane of the warp
    // when the warp's first lane has none there (the fourth at D = 1536; in the upper half of the
    // row's warps at D = 7168). Such slots are loaded as zeros; the warp skips their sum and
    // scaling, whose results would be those zeros.
    auto slot_live = [&](int k) { return kMaxChunks != 4 || k < 2 || (lane & ~31u) + k * W < chunks; };
    // Whether this lane's chunk slot k holds a chunk of the row (slots k < kSure always do), and
    // of a data row.
    auto in_chunks = [&](int k) { return k < kSure || lane + k * W < chunks; };
    auto in_row = [&](int k) { return data && in_chunks(k); };
    {
      // A row without data reads row 0 (T >= 1 when T_s >= 1; launch_rms_norm_quant checks), so
      // that slots k < kSure load with no predicate (and no zeros first). Its values go unused:
      // such a row stores zero codes and scales, and nothing into the residual.
      const int64_t t_read = data ? t : 0;
      const T* const x_row = x + t_read * p.x_stride;
      T* const res_row = kResidual ? res + t_read * p.r_stride : nullptr;
      // Element offset of the lane's chunk slot k. kWhole: lane * 8 + k * W * 8 in 64 bits, the
      // lane's part shared by every slot and k's part an address immediate (W is known).
      auto slot_offset = [&](int k) {
        if constexpr (kWhole) {
          return static_cast<uint64_t>(lane) * kChunkElems + static_cast<uint64_t>(k) * W * kChunkElems;
        } else {
          return static_cast<uint64_t>(lane + k * W) * kChunkElems;
        }
      };
      RawChunk<T> rres[kResidual ? kMaxChunks : 1];
      if constexpr (kPipe) {
        stage_row(v0 + row_step, stage_fill);
        cp_async_wait_all_but_last();
#pragma unroll
        for (int k = 0; k < kMaxChunks; ++k) {
#pragma unroll
          for (int i = 0; i < RawChunk<T>::kWords; ++i) r[k].w[i] = load_shared16(stage_read + k * kSlotBytes + i * 16);
        }
        const uint32_t filled = stage_fill;
        stage_fill = stage_read;
        stage_read = filled;
      } else {
#pragma unroll
        for (int k = 0; k < kMaxChunks; ++k) {
          r[k] = load_raw8<T, kVec>(x_row + slot_offset(k), in_chunks(k));
          if constexpr (kResidual) rres[k] = load_raw8<T, kVec>(res_row + slot_offset(k), in_chunks(k));
        }
      }
      if constexpr (!kPipe) {
#pragma unroll
        for (int k = 0; k < kMaxChunks; ++k) {
          w[k] = load_raw8<T, kVec, true>(weight + slot_offset(k), in_chunks(k));
        }
      }
#pragma unroll
      for (int k = 0; k < kMaxChunks; ++k) {
        if (!slot_live(k)) continue;
        float v[kChunkElems];
        raw_to_floats<T>(r[k], v);
        if constexpr (kPipe) {
#pragma unroll
          for (int i = 0; i < kChunkElems; ++i) v[i] = xf[k][i] = held_float(v[i]);
        }
        if constexpr (kResidual) {
          float rv[kChunkElems];
          raw_to_floats<T>(rres[k], rv);
#pragma unroll
          for (int i = 0; i < kChunkElems; ++i) v[i] = add_rn(v[i], rv[i]);
          r[k] = floats_to_raw<T>(v);  // rounded to T; NaN canonical, as the residual is stored
          raw_to_floats<T>(r[k], v);
          if (in_row(k)) store_raw8<T, kVec>(res_row + slot_offset(k), r[k]);
        }
        // A chunk not loaded is zeros, and fma(0, 0, acc) is acc: no test needed.
        acc = fold_squares(v, acc);
      }
    }
    // The pairwise sums of fused_quant.h: within 32 lanes, then over the row's warps.
    acc = warp_pair_sums(acc, W);
    if (W > 32) {
      const uint32_t warps = W / 32, first = (threadIdx.x / W) * warps;
      if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = acc;
      __syncthreads();
      if constexpr (kFirstWarpInverse) {
        if (lane == 0) {
          row_inv[slot] = inverse(pairwise_sum<kRowBlockThreads / 32>(warp_sums + first, warps));
        }
      } else {
        acc = pairwise_sum<kRowBlockThreads / 32>(warp_sums + first, warps);
      }
      __syncthreads();
    }
    const float inv = kFirstWarpInverse && W > 32 ? row_inv[slot] : inverse(acc);
    // y = T(r * inv * weight), rounded to T in pairs, then quantized.
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      if constexpr (kPipe) {
        r[k] = rms_scaled<T>(xf[k], wf[k], inv);
      } else if (slot_live(k)) {
        r[k] = rms_scaled<T>(r[k], w[k], inv);
      }
    }
    quant_store_chunks<T, kMaxChunks, 1, kSure, !kResidual>(p.out, r, kind, 0, t, lane, W, chunks, group_lanes);
    if constexpr (!kPipe) break;  // a block per row slot (launch_rms_row): no second pass
  }
}

// ---- rms_norm_quant, split (small grids; fused_quant_launch.h's rms_split_cluster): row t gets
// a thread per chunk, its W lanes in one block (kCluster false; W * kK <= kRowBlockThreads) or in a
// cluster of W / 32 blocks, block `rank` holding lanes 32 * rank .. 32 * rank + 31. Band k of a
// block's threads, a thread per lane of the block, holds chunk lane + k * W. The sum keeps the row
// kernel's order: each lane's chain runs in one thread (k = 0) over the lane's chunks staged in
// shared memory, and the 32-lane sums, gathered in shared memory (sent to every block of the
// cluster through distributed shared memory), are added as the row kernel adds its warps'.
template <typename T, bool kVec, int kK, bool kResidual, bool kCluster>
__global__ void __launch_bounds__(kCluster ? 32 * kK : kRowBlockThreads)
    rms_norm_quant_split_kernel(const RmsNormQuantParams p, const uint32_t lanes_log2) {
  constexpr uint32_t kMaxParts = kRowBlockThreads / 32;
  constexpr uint32_t kBlockLanes = kCluster ? 32 : kRowBlockThreads / kK;
  constexpr int64_t kChunksPerLine = 128 / (kChunkElems * sizeof(T));
  __shared__ RawChunk<T> staged[kK][kBlockLanes];
  __shared__ float part[kMaxParts];  // the row's 32-lane sums, in lane order
  // Cluster: an mbarrier, complete when every sum is in part.
  __shared__ alignas(8) uint64_t sums_ready;
  const uint32_t W = 1u << lanes_log2, parts = W / 32;
  const uint32_t block_lanes_log2 = kCluster ? 5 : lanes_log2;
  const uint32_t rank = kCluster ? cooperative_groups::this_cluster().block_rank() : 0;
  const uint32_t bar = shared_addr(&sums_ready);
  if constexpr (kCluster) cluster_init_mbarrier(bar);
  const uint32_t l = threadIdx.x & ((1u << block_lanes_log2) - 1), k = threadIdx.x >> block_lanes_log2;
  const uint32_t lane = (rank << block_lanes_log2) + l;
  const uint32_t group_lanes = static_cast<uint32_t>(p.out.group_size) / kChunkElems;
  const int64_t t = blockIdx.x / (kCluster ? parts : 1), chunks = p.out.D / kChunkElems,
                c = lane + static_cast<int64_t>(k) * W;
  const T* __restrict__ x = static_cast<const T*>(p.x) + t * p.x_stride + c * kChunkElems;
  T* __restrict__ res = kResidual ? static_cast<T*>(p.residual) + t * p.r_stride + c * kChunkElems : nullptr;
  const T* __restrict__ weight = static_cast<const T*>(p.weight) + c * kChunkElems;
  // Before waiting for the previous grid: the L2 prefetch of the row's lines and, by row 0's
  // blocks, of the weight's (launch.cuh says why that is safe), one thread per line.
  if (c < chunks && c % kChunksPerLine == 0) {
    if (t < p.T) {
      prefetch_l2(x);
      if constexpr (kResidual) prefetch_l2(res);
    }
    if (t == 0) prefetch_l2(weight);
  }
  wait_for_prior_grid();
  allow_next_grid();
  const RowKind kind = flat_row_kind<int64_t>(t, p.T, p.T_q, p.T_s);
  const bool live = kind == RowKind::kData && c < chunks;
  RawChunk<T> r = load_raw8<T, kVec>(x, live);
  const RawChunk<T> w = load_raw8<T, kVec>(weight, live);
  if constexpr (kResidual) {
    const RawChunk<T> rres = load_raw8<T, kVec>(res, live);
    float v[kChunkElems], rv[kChunkElems];
    raw_to_floats<T>(r, v);
    raw_to_floats<T>(rres, rv);
#pragma unroll
    for (int i = 0; i < kChunkElems; ++i) v[i] = add_rn(v[i], rv[i]);
    r = floats_to_raw<T>(v);  // rounded to T; NaN canonical, as the residual is stored
    if (live) store_raw8<T, kVec>(res, r);
  }
  staged[k][l] = r;
  __syncthreads();
  if (k == 0) {
    float acc = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
      if (kind == RowKind::kData && lane + static_cast<int64_t>(kk) * W < chunks) {
        float v[kChunkElems];
        raw_to_floats<T>(staged[kk][l], v);
        acc = fold_squares(v, acc);
      }
    }
    acc = warp_pair_sums(acc);
    if constexpr (kCluster) {
      if (l == 0) mbarrier_expect_bytes(bar, parts * sizeof(float));
      if (l < parts) send_to_block(acc, shared_addr(part + rank), bar, l);
    } else if ((l & 31) == 0) {
      part[l >> 5] = acc;
    }
  }
  if constexpr (kCluster) {
    mbarrier_wait_first_phase(bar);
  } else {
    __syncthreads();
  }
  const float inv = rms_inverse_fast<false>(pairwise_sum<kMaxParts>(part, parts), p.D_f, p.D_recip, p.norm_eps);
  const RawChunk<T> a[1] = {rms_scaled<T>(r, w, inv)};
  quant_store_chunks<T, 1>(p.out, a, kind, 0, t, static_cast<uint32_t>(c), W, static_cast<uint32_t>(chunks),
                           group_lanes);
}

// ---- rms_norm_quant, slot (small grids; fused_quant_launch.h's rms_slot_blocks): row t of 256
// lanes without the residual goes to `per_row` blocks, one per chunk slot. Each block loads the
// whole row and sums it as the row kernel does (SPEC's order, no exchange between blocks), then
// block j scales and quantizes chunk slot j of every lane (chunks lane + j * 256).
template <typename T, bool kVec, int kMaxChunks>
__global__ void __launch_bounds__(kRowBlockThreads)
    rms_norm_quant_slot_kernel(const RmsNormQuantParams p, const uint32_t per_row) {
  constexpr uint32_t W = kRowBlockThreads;
  constexpr uint32_t kWarps = kRowBlockThreads / 32;
  __shared__ float warp_sums[kWarps];
  const uint32_t lane = threadIdx.x;
  const int64_t t = blockIdx.x / per_row;
  const uint32_t j = blockIdx.x % per_row;
  const uint32_t group_lanes = static_cast<uint32_t>(p.out.group_size) / kChunkElems;
  const uint32_t chunks = static_cast<uint32_t>(p.out.D / kChunkElems);
  const T* __restrict__ x = static_cast<const T*>(p.x) + t * p.x_stride;
  const T* __restrict__ weight = static_cast<const T*>(p.weight);
  // Before waiting for the previous grid: the L2 prefetch of the row's lines by its first block,
  // and of the weight's by row 0's (launch.cuh says why that is safe).
  if (t < p.T && j == 0) prefetch_row_lines<T>(x, 0, lane, W, chunks);
  if (t == 0 && j == 0) prefetch_row_lines<T>(weight, 0, lane, W, chunks);
  wait_for_prior_grid();
  allow_next_grid();
  const RowKind kind = flat_row_kind<int64_t>(t, p.T, p.T_q, p.T_s);
  const bool data = kind == RowKind::kData;
  RawChunk<T> r[kMaxChunks];
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    const uint32_t c = lane + k * W;
    r[k] = load_raw8<T, kVec>(x + static_cast<uint64_t>(c) * kChunkElems, data && c < chunks);
  }
  const uint32_t c = lane + j * W;
  const RawChunk<T> w = load_raw8<T, kVec>(weight + static_cast<uint64_t>(c) * kChunkElems, data && c < chunks);
  // A chunk not loaded is zeros, and fma(0, 0, acc) is acc: every slot is summed.
  float acc = 0.0f;
  RawChunk<T> mine = r[0];
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    if (k == static_cast<int>(j)) mine = r[k];
    float v[kChunkElems];
    raw_to_floats<T>(r[k], v);
    acc = fold_squares(v, acc);
  }
  acc = warp_pair_sums(acc);
  if ((lane & 31) == 0) warp_sums[lane / 32] = acc;
  __syncthreads();
  if ((lane & ~31u) + j * W >= chunks) return;  // the warp holds no chunk of slot j
  const float inv = rms_inverse_fast<false>(pairwise_sum<kWarps>(warp_sums, kWarps), p.D_f, p.D_recip, p.norm_eps);
  const RawChunk<T> a[1] = {rms_scaled<T>(mine, w, inv)};
  quant_store_chunks<T, 1, 1, 0, true>(p.out, a, kind, 0, t, c, W, chunks, group_lanes);
}

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
bool row_vec_ok(const void* base, int64_t stride_a, int64_t stride_b = 0) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (stride_a * int64_t(sizeof(T))) % 16 == 0 &&
         (stride_b * int64_t(sizeof(T))) % 16 == 0;
}

#define FP8OPS_CHUNKS_CASES(LAUNCH) \
  switch (max_chunks) {             \
    case 1: LAUNCH(1);              \
    case 2: LAUNCH(2);              \
    case 4: LAUNCH(4);              \
    case 8: LAUNCH(8);              \
    default: LAUNCH(16);            \
  }

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

// A row kernel's launch, its grid capped at blocks_per_sm blocks a multiprocessor (the pipelined
// kernels' resident blocks; 0 for the others: a block per row slot).
template <auto kKernel>
cudaError_t launch_rms_row(const RmsNormQuantParams& p, const RowShape& s, int blocks_per_sm, int sm_count,
                           cudaStream_t stream, bool pdl) {
  const uint32_t blocks = row_grid_blocks(p.T_s, s.rows_per_block, blocks_per_sm, sm_count);
  if (blocks_per_sm == 0 && int64_t(blocks) * s.rows_per_block < p.T_s) return cudaErrorInvalidValue;
  const uint32_t first_wave = first_wave_blocks<kKernel>(kRowBlockThreads, sm_count);
  const uint32_t lanes_log2 = row_lanes_log2(s);
  return launch_kernel(kKernel, dim3(blocks), dim3(kRowBlockThreads), stream, pdl, p, lanes_log2, first_wave);
}

// The row kernel of kC chunks a lane, pipelined where rms_pipelined says so.
template <typename T, bool kVec, int kC, bool kResidual, bool kWhole>
cudaError_t launch_rms_row_kernel(const RmsNormQuantParams& p, const RowShape& s, int sm_count, cudaStream_t stream,
                                  bool pdl) {
  if constexpr (kVec && !kResidual && sizeof(T) == 2 && kC == 2) {
    constexpr auto kPiped = rms_norm_quant_kernel<T, kVec, kC, kResidual, kWhole, true>;
    const int per_sm = resident_blocks_per_sm<kPiped>(kRowBlockThreads);
    if (rms_pipelined(s, p.out.D / kChunkElems, p.T_s, sizeof(T), kResidual, kVec, int64_t(per_sm) * sm_count)) {
      return launch_rms_row<kPiped>(p, s, per_sm, sm_count, stream, pdl);
    }
  }
  return launch_rms_row<rms_norm_quant_kernel<T, kVec, kC, kResidual, kWhole, false>>(p, s, 0, sm_count, stream, pdl);
}

// More than four chunks a lane imply 256 lanes (row_shape): that kernel always knows W.
template <typename T, bool kVec, bool kResidual>
cudaError_t launch_rms_norm_quant_impl(const RmsNormQuantParams& p, const RowShape& s, int sm_count,
                                       cudaStream_t stream, bool pdl) {
  const uint32_t max_chunks = row_max_chunks(s.chunks_per_lane);
  const bool whole = rms_whole_row(s, kResidual);
#define FP8OPS_RMS_LAUNCH(C)                                                                              \
  {                                                                                                       \
    constexpr int kC = C > 8 ? 8 : C;                                                                     \
    if constexpr (rms_whole_kernel(kC, kResidual)) {                                                      \
      if (whole) return launch_rms_row_kernel<T, kVec, kC, kResidual, true>(p, s, sm_count, stream, pdl); \
    }                                                                                                     \
    if constexpr (kC <= 4) {                                                                              \
      return launch_rms_row_kernel<T, kVec, kC, kResidual, false>(p, s, sm_count, stream, pdl);           \
    } else {                                                                                              \
      return cudaErrorInvalidValue;                                                                       \
    }                                                                                                     \
  }
  FP8OPS_CHUNKS_CASES(FP8OPS_RMS_LAUNCH)
#undef FP8OPS_RMS_LAUNCH
}

template <typename T, bool kVec, bool kResidual>
cudaError_t launch_rms_norm_quant_split(const RmsNormQuantParams& p, const RowShape& s, uint32_t cluster,
                                        cudaStream_t stream, bool pdl) {
  const uint32_t lanes_log2 = row_lanes_log2(s);
  const uint32_t max_chunks = row_max_chunks(s.chunks_per_lane);
  if (cluster == 1) {  // the row's lanes times max_chunks fit one block (rms_split_cluster)
    const dim3 grid(static_cast<uint32_t>(p.T_s)), block(s.lanes * max_chunks);
    return max_chunks == 2 ? launch_kernel(rms_norm_quant_split_kernel<T, kVec, 2, kResidual, false>, grid, block,
                                           stream, pdl, p, lanes_log2)
                           : launch_kernel(rms_norm_quant_split_kernel<T, kVec, 4, kResidual, false>, grid, block,
                                           stream, pdl, p, lanes_log2);
  }
  const dim3 grid(static_cast<uint32_t>(p.T_s * cluster));
#define FP8OPS_RMS_SPLIT_LAUNCH(K)                                                                             \
  return launch_kernel_clustered(rms_norm_quant_split_kernel<T, kVec, K, kResidual, true>, grid, dim3(32 * K), \
                                 cluster, stream, pdl, p, lanes_log2)
  switch (max_chunks) {
    case 2: FP8OPS_RMS_SPLIT_LAUNCH(2);
    case 4: FP8OPS_RMS_SPLIT_LAUNCH(4);
    default: FP8OPS_RMS_SPLIT_LAUNCH(8);
  }
#undef FP8OPS_RMS_SPLIT_LAUNCH
}

// The slot kernel of kC chunk slots a lane (per_row of them hold chunks).
template <typename T, int kC>
cudaError_t launch_rms_norm_quant_slot(const RmsNormQuantParams& p, uint32_t per_row, bool vec, cudaStream_t stream,
                                       bool pdl) {
  const dim3 grid(static_cast<uint32_t>(p.T_s * per_row)), block(kRowBlockThreads);
  return vec ? launch_kernel(rms_norm_quant_slot_kernel<T, true, kC>, grid, block, stream, pdl, p, per_row)
             : launch_kernel(rms_norm_quant_slot_kernel<T, false, kC>, grid, block, stream, pdl, p, per_row);
}

template <typename T>
cudaError_t launch_rms_norm_quant(const RmsNormQuantParams& p, int sm_count, cudaStream_t stream, bool pdl) {
  if (p.T_s == 0 || p.out.D == 0) return cudaSuccess;
  if (p.T == 0) return cudaErrorInvalidValue;  // padding rows come only with data rows
  const RowShape s = row_shape(p.out.D / kChunkElems, kRmsChunksPerLane);
  if (s.chunks_per_lane > kRmsMaxChunksPerLane) return cudaErrorInvalidValue;
  const bool vec = row_vec_ok<T>(p.x, p.x_stride) && row_vec_ok<T>(p.weight, 0) &&
                   (p.residual == nullptr || row_vec_ok<T>(p.residual, p.r_stride));
  if (const uint32_t per_row = rms_slot_blocks(p.T_s, s, p.residual != nullptr, sm_count); per_row != 0) {
    return per_row == 2 ? launch_rms_norm_quant_slot<T, 2>(p, per_row, vec, stream, pdl)
                        : launch_rms_norm_quant_slot<T, 4>(p, per_row, vec, stream, pdl);
  }
  if (const uint32_t cluster = rms_split_cluster(p.T_s, s, sm_count); cluster != 0) {
    if (p.residual != nullptr) {
      return vec ? launch_rms_norm_quant_split<T, true, true>(p, s, cluster, stream, pdl)
                 : launch_rms_norm_quant_split<T, false, true>(p, s, cluster, stream, pdl);
    }
    return vec ? launch_rms_norm_quant_split<T, true, false>(p, s, cluster, stream, pdl)
               : launch_rms_norm_quant_split<T, false, false>(p, s, cluster, stream, pdl);
  }
  if (p.residual != nullptr) {
    return vec ? launch_rms_norm_quant_impl<T, true, true>(p, s, sm_count, stream, pdl)
               : launch_rms_norm_quant_impl<T, false, true>(p, s, sm_count, stream, pdl);
  }
  return vec ? launch_rms_norm_quant_impl<T, true, false>(p, s, sm_count, stream, pdl)
             : launch_rms_norm_quant_impl<T, false, false>(p, s, sm_count, stream, pdl);
}
#undef FP8OPS_CHUNKS_CASES

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
