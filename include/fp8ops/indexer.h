// indexer_q_quant (SPEC section 4): RoPE on 64 of 128 dims, an optional 128-point Walsh-Hadamard
// transform, then one e4m3 scale per (token, head). The arithmetic order is fixed here, step by
// step, and the CUDA kernel and the CPU reference both call these functions:
//   1. RoPE, pair (a, b) with (c, s) = (cos[pos, i], sin[pos, i]), one rounded product and one
//      fused multiply-add per output:
//        a' = fma(a, c, -(b * s)),  b' = fma(a, s, b * c)
//   2. Hadamard, natural (Sylvester) order, as seven butterfly stages taken in the order
//      h = 1, 2, 4, 32, 64, 8, 16 (kIndexerHadamardStages; any order gives the same transform in
//      exact arithmetic, and this one lets the CUDA kernel run every stage inside a thread); in
//      stage h every pair (j, j + h) with j & h == 0 becomes (v[j] + v[j+h], v[j] - v[j+h]).
//      The factor 128^-0.5 is not applied to the values here; it is folded into steps 3 and 4.
//   3. amax over the finite values y of step 2 (step 1 when no Hadamard); with the Hadamard,
//      amax = amax(y) * fp32(128^-0.5) (rounded once; the same value as the amax of the rounded
//      products y * fp32(128^-0.5), since rounding is monotonic). scale = max(amax, eps) * C,
//      r = 1 / scale, and the value converted to e4m3 (numerics.h) is y * m with
//      m = r * fp32(128^-0.5) with the Hadamard, m = r without it.
//   4. weights_out = (float(weight) * weight_scale) * scale.
#pragma once

#include <cmath>
#include <cstdint>

#include "fp8ops/numerics.h"

namespace fp8ops {

constexpr int kIndexerHeadDim = 128;
constexpr int kIndexerRopeDim = 64;
constexpr int kIndexerRopePairs = 32;
// Step 2's stage order (the pair distance h of each butterfly stage).
constexpr int kIndexerHadamardStages[7] = {1, 2, 4, 32, 64, 8, 16};
// 128^-0.5 = 2^-3.5 rounded to fp32.
constexpr float kInvSqrt128 = 0.08838834764831845f;

// Step 1: the rotated a and b of one pair.
FP8OPS_HD float rope_first(float a, float b, float c, float s) { return fma_rn(a, c, -mul_rn(b, s)); }
FP8OPS_HD float rope_second(float a, float b, float c, float s) { return fma_rn(a, s, mul_rn(b, c)); }
FP8OPS_HD void rope_pair(float& a, float& b, float c, float s) {
  const float a2 = rope_first(a, b, c, s);
  const float b2 = rope_second(a, b, c, s);
  a = a2;
  b = b2;
}

// Step 2's butterfly: (lower, upper) -> (lower + upper, lower - upper).
FP8OPS_HD float butterfly_lower(float lower, float upper) { return add_rn(lower, upper); }
FP8OPS_HD float butterfly_upper(float lower, float upper) { return sub_rn(lower, upper); }

// Step 3: the amax of the quantized values from the amax of step 2's values, and the factor m
// from r = 1 / scale.
FP8OPS_HD float indexer_amax(float amax_y, bool hadamard) { return hadamard ? mul_rn(amax_y, kInvSqrt128) : amax_y; }
FP8OPS_HD float indexer_multiplier(float r, bool hadamard) { return hadamard ? mul_rn(r, kInvSqrt128) : r; }

// Step 4.
FP8OPS_HD float indexer_weight(float weight, float weight_scale, float scale) {
  return mul_rn(mul_rn(weight, weight_scale), scale);
}

// Framework-free parameters of one call.
struct IndexerParams {
  const void* q;  // [B, H, 128], head stride 128, element stride 1
  int64_t q_stride_b;
  const void* weight;  // [B, H], same dtype as q
  int64_t w_stride_b, w_stride_h;
  float weight_scale;
  const float* cos_sin;  // [max_pos, 64]: cos(32) | sin(32)
  int64_t cs_stride_pos;
  int64_t max_pos;
  const void* positions;  // [B], int32 or int64
  int64_t pos_stride;
  bool pos_int64;
  bool rope_tail, rope_neox, hadamard;
  float eps;
  uint8_t* q_out;  // [B, H, 128] contiguous
  float* w_out;    // [B, H] contiguous
  int64_t B, H;
};

FP8OPS_HD int64_t indexer_position(const IndexerParams& p, int64_t b) {
  return p.pos_int64 ? static_cast<const int64_t*>(p.positions)[b * p.pos_stride]
                     : static_cast<const int32_t*>(p.positions)[b * p.pos_stride];
}

}  // namespace fp8ops
