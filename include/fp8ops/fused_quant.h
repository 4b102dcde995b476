// Parameters of the fused producers + quantization (silu_mul_quant, rms_norm_quant) and of the
// weight block quantization (block_quant). Framework-free, shared by the CUDA kernels and the CPU
// reference. SPEC sections 8, 9 and 10 hold the numerics; the row layout below fixes the order
// of rms_norm_quant's sum of squares, which both sides follow.
#pragma once

#include <cstdint>

#include "fp8ops/numerics.h"

namespace fp8ops {

constexpr int kChunkElems = 8;         // elements of a row per chunk (one 16-byte load of bf16/fp16)
constexpr int kRowBlockThreads = 256;  // threads per block of the row kernels

// How a row of `chunks` 8-element chunks is shared out: lane j of W lanes owns chunks j, j + W,
// j + 2W, ...; a block of 256 threads holds 256 / W rows. W is the largest power of two up to
// chunks / per_lane (so that a lane has about per_lane chunks in flight), at least
// min(16, chunks) rounded down to a power of two (a group's chunks never span rows) and at most
// 256. rms_norm_quant (per_lane kRmsChunksPerLane) sums its squares in that layout: lane j folds
// the squares of its elements, chunk by chunk in that order, into one fused multiply-add chain
// from 0; the W partial sums are then added pairwise, a[j] + a[j ^ o] for
// o = min(W, 32) / 2, ..., 2, 1 (within each 32 lanes), and, when W > 32, the W / 32 warp sums
// likewise for o = W / 64, ..., 1; the sum is entry 0.
struct RowShape {
  uint32_t lanes;            // W
  uint32_t chunks_per_lane;  // ceil(chunks / W)
  uint32_t rows_per_block;   // 256 / W
};

constexpr uint32_t kSiluChunksPerLane = 1;
constexpr uint32_t kRmsChunksPerLane = 2;

// The bf16 magnitudes (bits) kSiluTableLo <= |b| < kSiluTableHi, 2^-9 <= |g| < 128, that
// silu_mul_quant's bf16 SiLU table covers (silu_mul_quant.cuh, silu_table.h).
constexpr uint32_t kSiluTableLo = 0x3B00u, kSiluTableHi = 0x4300u;
constexpr uint32_t kSiluTableSign = kSiluTableHi - kSiluTableLo;  // entries per sign, 0x800
constexpr uint32_t kSiluTableEntries = 2 * kSiluTableSign;        // positive, then negative

inline RowShape row_shape(int64_t chunks, uint32_t per_lane) {
  uint32_t w = 1;
  while (w * 2 <= kRowBlockThreads && static_cast<int64_t>(w) * 2 * per_lane <= chunks) w *= 2;
  while (w < 16 && static_cast<int64_t>(w) * 2 <= chunks) w *= 2;
  return {w, static_cast<uint32_t>((chunks + w - 1) / w), kRowBlockThreads / w};
}

// Where a row kernel writes: q rows of D codes, scales in any layout (SPEC sections 2 and 8).
// Row (e, t) of q is at q + (e * q_rows + t) * D; its scale group s is word
// e * s_stride_e + t * s_stride_t + (packed ? s / 4 : s) * s_stride_s (byte s % 4 when packed).
struct RowQuantOut {
  uint8_t* q;
  int64_t q_rows;  // rows of q per expert
  void* scale;     // fp32, or int32 words of packed UE8M0 bytes
  int64_t s_stride_e, s_stride_t, s_stride_s;
  int64_t D;
  int32_t group_size;
  int32_t S;  // D / group_size
  float eps;
  bool ue8m0;  // implied by packed
  bool packed;
};

// silu_mul_quant. Flat: one expert (E = 1) of T data rows, rows T..T_q-1 zero codes and zero
// scales, rows T_q..T_s-1 zero scales (TMA padding). Masked: E experts of T_q = T_s = Mmax rows,
// rows t < masked_m[e] (clamped into [0, Mmax] on the device) hold data, the others are untouched.
struct SiluMulQuantParams {
  const void* x;  // element (e, t, k) at e * x_stride_e + t * x_stride_t + k; gate k < H, up k >= H
  int64_t x_stride_e, x_stride_t;
  const int32_t* masked_m;  // [E] on the device, or null (flat)
  int64_t E, T, T_q, T_s;
  int64_t H;
  RowQuantOut out;
};

// rms_norm_quant: rows t < T of x (and residual) hold data; rows T..T_q-1 zero codes and zero
// scales; rows T_q..T_s-1 zero scales.
struct RmsNormQuantParams {
  const void* x;
  int64_t x_stride;
  void* residual;  // null when absent; updated in place
  int64_t r_stride;
  const void* weight;  // [D] contiguous
  float norm_eps;
  // D as a float and 1 / D correctly rounded (rms_divisor_reciprocal), as the device's inverse
  // takes them (rms_norm_quant.cuh's rms_inverse_fast).
  float D_f, D_recip;
  int64_t T, T_q, T_s;
  RowQuantOut out;
};

// block_quant: w [E, N, K] (last dim contiguous), q [E, N, K] contiguous, scale [E, NB, KB]
// contiguous with NB = ceil(N / 128), KB = ceil(K / 128).
constexpr int kBlockQuantTile = 128;
struct BlockQuantParams {
  const void* w;
  int64_t w_stride_e, w_stride_n;
  uint8_t* q;
  float* scale;
  int64_t E, N, K, NB, KB;
  float eps;
  bool ue8m0;
};

// The TMA padding of masked mode's MN-major scales (rows Mmax..Ma-1 of every expert, Ma =
// s_stride_s): word i of the E * C * (Ma - Mmax) words, C the scale columns (packed words or
// groups). Zero, as every layout's padding; the rows below Mmax past masked_m stay untouched.
FP8OPS_HD int64_t masked_pad_words(const SiluMulQuantParams& p) {
  if (p.masked_m == nullptr || p.out.s_stride_t != 1) return 0;
  const int64_t C = p.out.packed ? (p.out.S + 3) / 4 : p.out.S;
  return p.E * C * (p.out.s_stride_s - p.T_q);
}

FP8OPS_HD int64_t masked_pad_word_offset(const SiluMulQuantParams& p, int64_t i) {
  const int64_t pad = p.out.s_stride_s - p.T_q, C = p.out.packed ? (p.out.S + 3) / 4 : p.out.S;
  const int64_t e = i / (C * pad), c = i / pad % C, r = i % pad;
  return e * p.out.s_stride_e + c * p.out.s_stride_s + p.T_q + r;
}

// Word offset of row (e, t)'s scales, and of its scale group s from there (for packed scales,
// the word that holds the group's byte; `packed` is o.packed, which a kernel may know at compile
// time).
FP8OPS_HD int64_t row_scale_base(const RowQuantOut& o, int64_t e, int64_t t) {
  return e * o.s_stride_e + t * o.s_stride_t;
}
FP8OPS_HD int64_t scale_group_offset(const RowQuantOut& o, int64_t s, bool packed) {
  return (packed ? s >> 2 : s) * o.s_stride_s;
}
FP8OPS_HD int64_t scale_group_offset(const RowQuantOut& o, int64_t s) { return scale_group_offset(o, s, o.packed); }

// Word offset of scale group s of row (e, t).
FP8OPS_HD int64_t row_scale_word(const RowQuantOut& o, int64_t e, int64_t t, int64_t s) {
  return row_scale_base(o, e, t) + scale_group_offset(o, s);
}

// 1 / D correctly rounded to fp32: the quotient in fp64 rounds to the same fp32 value as the
// exact one (53 >= 2 * 24 + 2 bits make the double rounding innocuous).
inline float rms_divisor_reciprocal(int64_t D) { return static_cast<float>(1.0 / static_cast<double>(D)); }

// The range of sums and of ms + eps in which the device's inverse takes its fast-path steps
// (rms_norm_quant.cuh's rms_inverse_fast); the GPU tests sweep every fp32 value of it.
constexpr float kRmsFastMin = 0x1p-100f, kRmsFastMax = 0x1p100f;

// Step 3 of rms_norm_quant: 1 / sqrt(ms + eps), correctly rounded square root and division.
FP8OPS_HD float rms_inverse(float sum_squares, float D, float norm_eps) {
  return div_rn(1.0f, sqrt_rn(add_rn(div_rn(sum_squares, D), norm_eps)));
}

}  // namespace fp8ops
