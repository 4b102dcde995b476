// Parameters of the group quantization kernels (per_token_group_quant and group_major_quant).
// Framework-free: raw pointers, sizes and strides, shared by the CUDA kernel and the CPU reference.
//
// The work is a grid of (t, g, s): token row t, head/group g (G == 1 for per-token), scale group s.
// Rows t < T hold data; rows T <= t < T_q are q padding (zero codes, zero scales); rows
// T_q <= t < T_s exist only in the scale tensor (TMA padding: zero scales).
#pragma once

#include <cstdint>

#include "fp8ops/numerics.h"

namespace fp8ops {

struct GroupQuantParams {
  const void* x;       // bf16, fp16 or fp32; element (t, g, k) at t*x_stride_t + g*x_stride_g + k
  int64_t x_stride_t;  // elements
  int64_t x_stride_g;  // elements
  uint8_t* q;          // e4m3 codes, row (t*G + g) of D bytes, contiguous
  void* scale;         // fp32 scales, or int32 packed UE8M0 words (bytes addressed individually)
  int64_t s_stride_t;  // in 4-byte words
  int64_t s_stride_g;
  int64_t s_stride_s;  // per scale group (fp32) or per packed word, i.e. per 4 groups (int32)
  int64_t T, G, D;
  int64_t T_q, T_s;
  int32_t group_size;
  int32_t S;  // D / group_size
  float eps;
  bool ue8m0;   // round scales up to powers of two (implied by packed)
  bool packed;  // write UE8M0 exponent bytes instead of fp32 scales
};

// Word offset of scale group s of row (t, g); for packed scales, the word that holds its byte.
FP8OPS_HD int64_t scale_word_offset(const GroupQuantParams& p, int64_t t, int64_t g, int64_t s) {
  return t * p.s_stride_t + g * p.s_stride_g + (p.packed ? s >> 2 : s) * p.s_stride_s;
}

}  // namespace fp8ops
