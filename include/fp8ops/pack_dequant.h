// Parameters of pack_ue8m0 and dequant. Framework-free, shared by the CUDA kernels and the CPU
// reference.
#pragma once

#include <cstdint>

#include "fp8ops/numerics.h"

namespace fp8ops {

// fp32 scales [B, M, S] (any strides) to int32 words stored [B][P][Ma]: word (b, m, p) holds the
// exponent bytes of groups 4p..4p+3 of row m; rows M..Ma-1 and bytes of groups >= S are zero.
struct PackUe8m0Params {
  const float* in;
  int64_t in_stride_b, in_stride_m, in_stride_s;
  int32_t* out;
  int64_t B, M, S, P, Ma;
};

// The packed byte of a scale: 0 for 0.0 (the padding value), else its exponent rounded up and
// clamped to [1, 254]. Exact for the valid inputs (0 and powers of two in [2^-126, 2^127]).
FP8OPS_HD uint32_t pack_byte(float v) { return v == 0.0f ? 0u : ue8m0_exponent(v); }

FP8OPS_HD bool is_packable_scale(float v) {
  const uint32_t b = float_bits(v);
  if ((b & 0x7FFFFFFFu) == 0u) return true;
  const uint32_t exp = b >> 23;  // the sign bit makes negatives fail the range check
  return (b & 0x7FFFFFu) == 0u && exp >= 1u && exp <= 254u;
}

// q [B, M, K] e4m3 (any strides) times its group scales, to a contiguous [B, M, K] output.
struct DequantParams {
  const uint8_t* q;
  int64_t q_stride_b, q_stride_m, q_stride_k;
  const void* scale;                           // fp32, or int32 packed UE8M0 words
  int64_t s_stride_b, s_stride_m, s_stride_s;  // in 4-byte words; packed: per word
  bool packed;
  int32_t group_size;
  void* out;
  int64_t B, M, K;
};

// Scale of group s of row (b, m); byte 0 of a packed word (padding) reads as 0.0.
FP8OPS_HD float dequant_scale(const DequantParams& p, int64_t b, int64_t m, int64_t s) {
  if (!p.packed) {
    return static_cast<const float*>(p.scale)[b * p.s_stride_b + m * p.s_stride_m + s * p.s_stride_s];
  }
  const int32_t word =
      static_cast<const int32_t*>(p.scale)[b * p.s_stride_b + m * p.s_stride_m + (s >> 2) * p.s_stride_s];
  const uint32_t e = (static_cast<uint32_t>(word) >> (8 * (s & 3))) & 0xFFu;
  return ue8m0_value(e);
}

}  // namespace fp8ops
