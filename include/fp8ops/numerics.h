// Scalar numerics shared by every quantizing kernel, on the host (the CPU reference) and on the
// device. Both sides call these functions, so they agree by construction; the tests hold this
// header to an independent torch expression of SPEC section 5.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>
#define FP8OPS_HD __host__ __device__ __forceinline__
#else
#define FP8OPS_HD inline
#endif

namespace fp8ops {

// 1/448 rounded to fp32 (0x3B124925). The scale is amax * kInvE4m3Max, a multiply and not a
// division by 448: the two differ in about half of all cases, and DeepGEMM and SGLang multiply.
constexpr float kE4m3Max = 448.0f;
constexpr uint32_t kInvE4m3MaxBits = 0x3B124925u;

FP8OPS_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

FP8OPS_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

FP8OPS_HD float inv_e4m3_max() { return bits_float(kInvE4m3MaxBits); }

// Single fp32 operations, each rounded once to nearest even on both sides (device intrinsics that
// the compiler never contracts; host code is built with -ffp-contract=off).
FP8OPS_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

FP8OPS_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

FP8OPS_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

FP8OPS_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

FP8OPS_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

FP8OPS_HD float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// exp(x) in fp32, the same steps on host and device (SPEC section 8): k = nearest integer to
// x * log2(e) (by the 1.5 * 2^23 trick), r = x - k * ln2 in two fused steps (ln2 split in a
// 15-bit head and a tail), exp(r) by its degree-7 Taylor polynomial in Horner form with fused
// multiply-adds (truncation error under 0.1 ulp on |r| <= ln2 / 2), then times 2^k exactly (k
// added to the exponent: p is in [0.7, 1.42] and the product stays normal). Within about 1 ulp of
// exp(x) for -86.6 <= x <= 88.72283. exp_fp32_steps is that for any x in that range (outside it
// its value is meaningless but defined); exp_fp32 clamps, then gives 0 below the range, inf above
// it and NaN for NaN, by selects, so that the code has no branches.
// The NaN that an fp32 value written back (rms_norm_quant's residual) takes on both sides: the
// one the GPU's arithmetic gives, whatever NaN went in.
constexpr uint32_t kCanonicalNanF32 = 0x7FFFFFFFu;

constexpr float kExpLow = -86.6f, kExpHigh = 88.72283f;

FP8OPS_HD float clamp_exp_arg(float x) {
#if defined(__CUDA_ARCH__)
  return fminf(fmaxf(x, kExpLow), kExpHigh);  // NaN -> kExpLow
#else
  return std::fmin(std::fmax(x, kExpLow), kExpHigh);
#endif
}

FP8OPS_HD float exp_fp32_steps(float x) {
  constexpr float kLog2e = 1.44269502f, kShifter = 12582912.0f;  // 1.5 * 2^23
  constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860677e-06f;
  const float t = add_rn(mul_rn(x, kLog2e), kShifter);  // 1.5 * 2^23 + k, exactly
  const float kf = sub_rn(t, kShifter);
  float r = fma_rn(-kf, kLn2Hi, x);
  r = fma_rn(-kf, kLn2Lo, r);
  float p = 1.98412698e-04f;          // 1/7!
  p = fma_rn(p, r, 1.38888889e-03f);  // 1/6!
  p = fma_rn(p, r, 8.33333377e-03f);  // 1/5!
  p = fma_rn(p, r, 4.16666679e-02f);  // 1/4!
  p = fma_rn(p, r, 1.66666672e-01f);  // 1/3!
  p = fma_rn(p, r, 0.5f);
  p = fma_rn(p, r, 1.0f);
  p = fma_rn(p, r, 1.0f);
  const uint32_t k = float_bits(t) - float_bits(kShifter);  // two's complement of k in [-125, 128]
  return bits_float(float_bits(p) + (k << 23));
}

FP8OPS_HD float exp_fp32(float x) {
  const float y = exp_fp32_steps(clamp_exp_arg(x));
  const float z = x > kExpHigh ? bits_float(0x7F800000u) : x < kExpLow ? 0.0f : y;
  return x != x ? x : z;
}

// 1 + exp(-g), equal to add_rn(1, exp_fp32(-g)) for every g with fewer selects: below kExpLow
// exp_fp32_steps(kExpLow) (about 2^-125) adds nothing to 1, as the 0 that exp_fp32 gives there,
// and a NaN g gives 1 where exp_fp32 gives NaN, which only g / (1 + exp(-g)) reads, NaN either way.
FP8OPS_HD float one_plus_exp_neg(float g) {
  const float x = -g;
  const float d = add_rn(1.0f, exp_fp32_steps(clamp_exp_arg(x)));
  return x > kExpHigh ? bits_float(0x7F800000u) : d;
}

// SiLU in fp32: g / (1 + exp(-g)), one rounding per step.
FP8OPS_HD float silu_fp32(float g) { return div_rn(g, one_plus_exp_neg(g)); }

// |v| if v is finite, else 0: NaN and +-inf never enter a group's amax.
FP8OPS_HD float finite_abs(float v) {
#if defined(__CUDA_ARCH__)
  const float a = fabsf(v);
#else
  const float a = std::fabs(v);
#endif
  return a <= 3.40282347e38f ? a : 0.0f;  // false for NaN and inf
}

FP8OPS_HD float fmax_nonan(float a, float b) { return a > b ? a : b; }

// UE8M0 rounding: up to the next power of two, biased exponent clamped to [1, 254].
FP8OPS_HD uint32_t ue8m0_exponent(float scale) {
  const uint32_t b = float_bits(scale) & 0x7FFFFFFFu;
  uint32_t e = (b >> 23) + ((b & 0x7FFFFFu) != 0u ? 1u : 0u);
  e = e < 1u ? 1u : e;
  return e > 254u ? 254u : e;
}

FP8OPS_HD float ue8m0_value(uint32_t e) { return bits_float(e << 23); }

// The biased exponent of a scale already rounded to UE8M0 (a power of two, exponent in [1, 254]).
FP8OPS_HD uint32_t ue8m0_exponent_of_power(float scale) { return float_bits(scale) >> 23; }

// 1 / scale for a scale already rounded to UE8M0, exactly what a correctly rounded reciprocal
// gives: 2^(127 - e) has the biased exponent 254 - e, except for e = 254, whose reciprocal
// 2^-127 is subnormal.
FP8OPS_HD float ue8m0_reciprocal(float scale) {
  const uint32_t e = ue8m0_exponent_of_power(scale);
  return bits_float(e == 254u ? 0x00400000u : (254u - e) << 23);
}

// scale = max(amax, eps) * C, optionally rounded up to a power of two.
FP8OPS_HD float group_scale(float amax, float eps, bool ue8m0) {
  const float s = fmax_nonan(amax, eps) * inv_e4m3_max();
  return ue8m0 ? ue8m0_value(ue8m0_exponent(s)) : s;
}

// The value that is converted to e4m3: NaN -> 0, then x * r clamped to [-448, 448]
// (so +-inf -> +-448).
FP8OPS_HD float scaled_clamped(float v, float r) {
  v = v != v ? 0.0f : v;
  float y = v * r;
  y = y < -kE4m3Max ? -kE4m3Max : y;
  return y > kE4m3Max ? kE4m3Max : y;
}

// Round-to-nearest-even conversion of a value already in [-448, 448] (not NaN) to e4m3fn bits.
// The device path uses the hardware conversion; the host path is the same function in integer
// arithmetic, and the GPU tests hold the two equal.
FP8OPS_HD uint8_t e4m3_bits_host(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t b = u & 0x7FFFFFFFu;
  const uint32_t exp = b >> 23;
  if (exp >= 121u) {  // |f| >= 2^-6, the smallest e4m3 normal
    // Round the 23-bit mantissa to 3 bits (ties to even) and rebias 127 -> 7; a mantissa carry
    // moves into the exponent by itself.
    const uint32_t r = (b + 0x7FFFFu + ((b >> 20) & 1u)) >> 20;
    return static_cast<uint8_t>(sign | (r - (120u << 3)));
  }
  // Subnormal e4m3: round |f| * 2^9 to an integer (ties to even); 8 is the smallest normal's code.
  const uint32_t m = exp == 0u ? (b & 0x7FFFFFu) : ((b & 0x7FFFFFu) | 0x800000u);
  const uint32_t e = exp == 0u ? 1u : exp;  // fp32 subnormals share exponent 1's scale
  if (e <= 109u) return sign;               // below 2^-17: rounds to zero
  const uint32_t shift = 141u - e;          // 21..31
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint8_t>(sign | q);
}

#if defined(__CUDACC__)
// ---- Packed device forms of the rules above, for the memory-bound kernels. Each is equal, bit
// for bit, to the scalar rule applied element by element (the GPU tests hold them equal to the
// CPU reference); they only spend fewer instructions per element.

// Two values at once with the sm_89+ conversion instruction (cvt.rn.satfinite.e4m3x2.f32):
// low byte from a, high byte from b.
__device__ __forceinline__ uint32_t e4m3x2_bits_device(float a, float b) {
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

// 1 / s correctly rounded, as __frcp_rn, for 2^-126 <= s < 2^126: the hardware reciprocal and one
// Newton step, the compiler's own steps for __frcp_rn on the path it takes for such s (its check
// is on s's exponent alone; it flushes the error term to zero if subnormal, which it never is:
// s * r - 1 is 0 or a multiple of about 2^-47).
__device__ __forceinline__ float rcp_rn_normal(float s) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
  return __fmaf_rn(r, -__fmaf_rn(s, r, -1.0f), r);
}

// 1 / scale for a group's scale, correctly rounded. The scale, max(amax, eps) * C with amax finite
// and eps in [1e-30, FLT_MAX] (every op checks it, SPEC section 2), lies in [2^-109, 2^120):
// rcp_rn_normal's range, with no branch to a slow path. A UE8M0 scale is a power of two:
// ue8m0_reciprocal.
__device__ __forceinline__ float group_reciprocal(float scale, bool ue8m0) {
  return ue8m0 ? ue8m0_reciprocal(scale) : rcp_rn_normal(scale);
}

// g / d correctly rounded, as div_rn, while 2^-60 <= |g| <= 2^60 and 1 <= d <= 2^60: the
// hardware reciprocal refined by one Newton step, the quotient, its exact remainder and one
// correction, the steps of the compiler's own division on its fast path, taken when no step
// leaves the normal range, as none does here. The GPU tests hold SiLU through it to the CPU's
// over every bf16 and fp16 gate.
// div_rn_by is its second half: the quotient, remainder and correction from r, the refined
// reciprocal of d, which is 1 / d correctly rounded (rcp_rn_normal's steps) and may come from
// elsewhere. rms_norm_quant's inverse also takes it for sums in fused_quant.h's [kRmsFastMin,
// kRmsFastMax] and D in [8, 16384] (rms_norm_quant.cuh's rms_inverse_fast), a range that its GPU
// test sweeps in full.
__device__ __forceinline__ float div_rn_by(float g, float d, float r) {
  const float q = __fmul_rn(g, r);
  return __fmaf_rn(__fmaf_rn(-d, q, g), r, q);
}
__device__ __forceinline__ float div_rn_fast(float g, float d) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  return div_rn_by(g, d, __fmaf_rn(r, __fmaf_rn(-d, r, 1.0f), r));
}

// 1 / sqrt(v), the square root and the reciprocal each correctly rounded, as
// div_rn(1, sqrt_rn(v)), for v in fused_quant.h's [kRmsFastMin, kRmsFastMax]: the compiler's own
// steps for __fsqrt_rn on the path it takes for such v (the hardware's rsqrt, then one correction),
// then rcp_rn_normal, with no range check. The GPU tests sweep every v of that range against the
// two correctly rounded ops.
__device__ __forceinline__ float rsqrt_rn_fast(float v) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(v));
  const float s0 = __fmul_rn(v, y), h = __fmul_rn(y, 0.5f);
  return rcp_rn_normal(__fmaf_rn(__fmaf_rn(-s0, s0, v), h, s0));
}

// silu_fp32(g) for 2^-60 <= |g| <= 40: there the clamp and the select of one_plus_exp_neg do
// nothing (-g is inside [kExpLow, kExpHigh]) and d = 1 + exp(-g) < 2^58, so div_rn_fast is exact.
__device__ __forceinline__ float silu_fp32_in_range(float g) {
  return div_rn_fast(g, __fadd_rn(1.0f, exp_fp32_steps(-g)));
}
constexpr float kSiluFastMin = 0x1p-60f, kSiluFastMax = 40.0f;

// silu_fp32_in_range(g) to within kSiluApproxBits (as fp32 bit patterns) over the same range, in
// fewer instructions: exp(-g) = 2^t * 2^lo with t = fl(-g * log2e), lo the product's exact error
// plus log2e's tail (2^lo ~ 1 + lo * ln2), by the hardware's ex2 and reciprocal (at most 2 and 1
// ulps off). Bound: those and the four roundings, 5.5 * 2^-23 relative, plus silu_fp32's own
// error on the bf16 gates, at most 1.16 * 2^-23 (a CPU test measures it): at most 14 bits.
constexpr uint32_t kSiluApproxBits = 16;

__device__ __forceinline__ float silu_approx(float g) {
  constexpr float kNegLog2e = -1.44269502f, kNegLog2eTail = -1.92596299e-8f, kLn2 = 0.693147182f;
  const float t = __fmul_rn(g, kNegLog2e);
  const float lo = __fmaf_rn(g, kNegLog2eTail, __fmaf_rn(g, kNegLog2e, -t));
  float p, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(p) : "f"(t));
  const float e = __fmaf_rn(p, __fmul_rn(lo, kLn2), p);
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(__fadd_rn(1.0f, e)));
  return __fmul_rn(g, r);
}

// Whether a value within kSiluApproxBits of s (a normal fp32) may round to bf16 otherwise than s
// does: s lies that close to a midpoint of bf16's values, whose fp32 bits end in 0x8000. The low
// half of s's bits moved to the top, offset so that the window around 0x8000 starts at 0: one
// multiply-add and one compare.
__device__ __forceinline__ bool near_bf16_midpoint(float s) {
  constexpr uint32_t kM = kSiluApproxBits;
  return __float_as_uint(s) * 0x10000u + ((kM - 0x8000u) << 16) < (2 * kM + 1) << 16;
}

// finite_abs + fmax_nonan over 8 packed 16-bit floats, returned as the bits of their amax.
// For non-negative floats the order of the bit patterns is the order of the values. Adding
// 0x8000 - kInfBits to each |bits| (no carry leaves a lane: |bits| <= 0x7FFF) makes exactly the
// NaN and inf lanes (|bits| >= kInfBits) negative as int16, so a signed max drops them.
template <uint32_t kInfBits>  // 0x7F80 for bf16, 0x7C00 for fp16
__device__ __forceinline__ uint32_t finite_amax_bits_16x8(const uint4 w) {
  constexpr uint32_t kOff = 0x8000u - kInfBits;
  constexpr uint32_t kOff2 = kOff * 0x10001u;
  uint32_t acc = kOff2;  // the biased form of 0
  acc = __vmaxs2(acc, (w.x & 0x7FFF7FFFu) + kOff2);
  acc = __vmaxs2(acc, (w.y & 0x7FFF7FFFu) + kOff2);
  acc = __vmaxs2(acc, (w.z & 0x7FFF7FFFu) + kOff2);
  acc = __vmaxs2(acc, (w.w & 0x7FFF7FFFu) + kOff2);
  const int32_t lo = static_cast<int16_t>(acc & 0xFFFFu), hi = static_cast<int16_t>(acc >> 16);
  return static_cast<uint32_t>(max(lo, hi)) - kOff;
}

// The same over 4 fp32 values, as the bits of their amax (0x800000 is 0x80000000 - inf's bits).
__device__ __forceinline__ uint32_t finite_amax_bits_f32x4(const uint4 w) {
  constexpr uint32_t kOff = 0x800000u;
  int32_t acc = static_cast<int32_t>(kOff);
  acc = max(acc, static_cast<int32_t>((w.x & 0x7FFFFFFFu) + kOff));
  acc = max(acc, static_cast<int32_t>((w.y & 0x7FFFFFFFu) + kOff));
  acc = max(acc, static_cast<int32_t>((w.z & 0x7FFFFFFFu) + kOff));
  acc = max(acc, static_cast<int32_t>((w.w & 0x7FFFFFFFu) + kOff));
  return static_cast<uint32_t>(acc) - kOff;
}

// The bits of inf in a 16-bit T: a magnitude above them is a NaN.
template <typename T>
constexpr uint32_t kInfBits = std::is_same_v<T, __nv_bfloat16> ? 0x7F80u : 0x7C00u;

// The larger magnitude bits of each half of 8 packed 16-bit floats: lane 0 of the result holds
// the largest |bits| of the words' low halves, lane 1 of their high halves (for non-negative
// floats the order of the bit patterns is the order of the values).
__device__ __forceinline__ uint32_t magnitude_pairs_16x8(const uint4 w) {
  return __vmaxu2(__vmaxu2(w.x & 0x7FFF7FFFu, w.y & 0x7FFF7FFFu), __vmaxu2(w.z & 0x7FFF7FFFu, w.w & 0x7FFF7FFFu));
}

// The larger of a word's two 16-bit lanes.
__device__ __forceinline__ uint32_t max_halves(uint32_t m) { return max(m & 0xFFFFu, m >> 16); }

// The float of T whose magnitude bits m are (fp32 bits, or a 16-bit T's bits in the low half).
template <typename T>
__device__ __forceinline__ float magnitude_bits_float(uint32_t m) {
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(m);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(m << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(m)));
  }
}

// scaled_clamped then e4m3 on the device: for finite x, |x * r| <= amax * r < 464, so the
// satfinite conversion alone rounds exactly as clamp-then-convert does (and sends +-inf to
// +-448); NaN converts to a NaN code (0x7F or 0xFF), which this maps to 0x00, the code of 0.
__device__ __forceinline__ uint32_t zero_nan_codes(uint32_t c) {
  const uint32_t t = ((c & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;  // 0x80 in each NaN byte
  return c & ~(t | (t - (t >> 7)));
}
#endif

// e4m3fn code to fp32, exactly (0x7F and 0xFF are NaN).
FP8OPS_HD float e4m3_to_float(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t exp = (c >> 3) & 0xFu;
  const uint32_t man = c & 0x7u;
  if (exp == 0xFu && man == 0x7u) return bits_float(sign | 0x7FC00000u);
  if (exp != 0u) return bits_float(sign | ((exp + 120u) << 23) | (man << 20));
  // Subnormal: man * 2^-9, exact in fp32.
  return bits_float(sign | float_bits(static_cast<float>(man) * 0.001953125f));
}

}  // namespace fp8ops
