// Device code that the fused row kernels share (silu_mul_quant.cuh, rms_norm_quant.cuh,
// block_quant.cuh): element conversions, raw 8-element chunks and their loads and stores, and the
// per-group quantization of a row's chunks into any scale layout. The arithmetic is numerics.h's,
// step for step, in the order the CPU reference follows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "fp8ops/fused_quant.h"
#include "fp8ops/launch.cuh"
#include "fp8ops/numerics.h"

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
// read once that the L2 need not keep (silu_mul_quant_launch.h's silu_stream).
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

// ---- Launch helpers of the fused kernels.
// Whether rows at base with these strides (elements of T) can be loaded 16 bytes at a time.
template <typename T>
bool row_vec_ok(const void* base, int64_t stride_a, int64_t stride_b = 0) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (stride_a * int64_t(sizeof(T))) % 16 == 0 &&
         (stride_b * int64_t(sizeof(T))) % 16 == 0;
}

// The launch of the kernel compiled for a lane's max_chunks chunks (LAUNCH(C) returns).
#define FP8OPS_CHUNKS_CASES(LAUNCH) \
  switch (max_chunks) {             \
    case 1: LAUNCH(1);              \
    case 2: LAUNCH(2);              \
    case 4: LAUNCH(4);              \
    case 8: LAUNCH(8);              \
    default: LAUNCH(16);            \
  }

}  // namespace fp8ops
